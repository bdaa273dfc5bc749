#!/usr/bin/env python3
"""step_overlap.py: how a profiled training step's streams overlap (Note [Stream overlap] in
blutrain/src/common/kernel_trace.cpp), from the "timeline" of one or more profile_<engine>.json
files (scripts/device-engine-memory.sh writes them; KernelTrace's breakdown).

For each profile: per stream its launches, kernel and busy time; the main stream (the one with the
most kernel time); the other streams' kernel time split by family into hidden (while the main
stream was busy) and exposed (the main stream idle: on the critical path); the main stream's idle
gaps inside its own span, the largest listed with the kernels before / after and what the other
streams ran meanwhile (a gap that another stream fills is the main stream waiting at a join).

  python3 scripts/step_overlap.py [--gaps 12] [--min-gap-us 5] [--stretches] profile_compiled.json profile_fused.json
"""
import argparse, json, sys
from collections import defaultdict


def intervals_union(iv):
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def intersect_len(a, b, merged):
    """Length of [a, b) covered by the sorted disjoint intervals `merged`."""
    total = 0.0
    for s, e in merged:
        if e <= a:
            continue
        if s >= b:
            break
        total += min(b, e) - max(a, s)
    return total


def analyse(profile):
    kt = profile.get("kernel_trace", profile)
    tl = kt.get("timeline")
    if not tl:
        raise ValueError("no timeline in the profile (a KernelTrace from before Note [Stream overlap])")
    per = defaultdict(lambda: {"launches": 0, "kernel_us": 0.0, "iv": []})
    for start, dur, stream, fam, name in tl:
        p = per[stream]
        p["launches"] += 1
        p["kernel_us"] += dur
        p["iv"].append((start, start + dur))
    main = max(per, key=lambda s: per[s]["kernel_us"])
    main_busy = intervals_union(per[main]["iv"])
    res = {"main": main, "streams": [], "hidden": defaultdict(float), "exposed": defaultdict(float), "gaps": []}
    for s, p in sorted(per.items(), key=lambda kv: -kv[1]["kernel_us"]):
        busy = sum(b - a for a, b in intervals_union(p["iv"]))
        res["streams"].append((s, p["launches"], p["kernel_us"] / 1e3, busy / 1e3))
    for start, dur, stream, fam, name in tl:
        if stream == main:
            continue
        hid = intersect_len(start, start + dur, main_busy)
        res["hidden"][fam] += hid / 1e3
        res["exposed"][fam] += (dur - hid) / 1e3
    main_sorted = sorted((r for r in tl if r[2] == main), key=lambda r: r[0])
    others = [r for r in tl if r[2] != main]
    end_so_far, prev = None, None
    for r in main_sorted:
        if end_so_far is not None and r[0] > end_so_far:
            a, b = end_so_far, r[0]
            during = [o for o in others if o[0] < b and o[0] + o[1] > a]
            filled = sum(min(b, o[0] + o[1]) - max(a, o[0]) for o in during)
            res["gaps"].append({"start_us": a, "us": b - a, "after": prev[4], "before": r[4],
                                "others": [o[4] for o in during], "others_us": filled})
        if end_so_far is None or r[0] + r[1] > end_so_far:
            end_so_far, prev = r[0] + r[1], r
    res["main_idle_ms"] = sum(g["us"] for g in res["gaps"]) / 1e3
    res["overlap_ms"] = kt.get("overlap_ms")
    res["busy_ms"] = kt.get("busy_ms")
    res["kernel_sum_ms"] = kt.get("kernel_sum_ms")
    return res


def busy_in(tl, a, b):
    """Busy time (any stream) inside [a, b), us."""
    merged = intervals_union([(max(s, a), min(s + d, b)) for s, d, *_ in tl if s < b and s + d > a])
    return sum(e - s for s, e in merged)


def stretches(profile):
    """The step cut at its attention kernels (a transformer's landmarks): before the first forward
    attention, the forward layers up to the last one's attention, from there to the first backward
    attention (last layer, head, classifier and loss, the first backward layer's MLP), the backward
    layers up to the last, and the rest (first layer's backward, embeddings, norm, update). Each as
    (name, span us, busy us, layers); empty when the timeline has no attention kernels. Per
    backward layer, span / layers is the layer period (flash-attention backward to the next)."""
    tl = sorted(profile.get("kernel_trace", profile)["timeline"])
    fwd = [r[0] for r in tl if "attn_fwd" in r[4] or "attention_fwd" in r[4]]
    bwd = [r[0] for r in tl if "attn_bwd" in r[4] and "delta" not in r[4] or "attention_bwd" in r[4]]
    if not fwd or not bwd:
        return []
    work = [r for r in tl if not r[4].endswith("HtoD]") and not r[4].endswith("DtoD]")]
    start = work[0][0] if work else tl[0][0]
    end = max(s + d for s, d, *_ in tl)
    cuts = [("before the first layer", start, fwd[0], 0),
            ("forward layers", fwd[0], fwd[-1], len(fwd) - 1),
            ("last layer, head, loss, first backward MLP", fwd[-1], bwd[0], 0),
            ("backward layers", bwd[0], bwd[-1], len(bwd) - 1),
            ("first layer's backward, embeddings, update", bwd[-1], end, 0)]
    return [(n, b - a, busy_in(tl, a, b), k) for n, a, b, k in cuts]


def report(name, res, gaps, min_gap_us, out):
    print(f"== {name}: kernels {res['kernel_sum_ms']:.2f} ms, busy {res['busy_ms']:.2f} ms, "
          f"two streams at once {res['overlap_ms']:.2f} ms; main stream {res['main']} idle "
          f"{res['main_idle_ms']:.2f} ms inside its span", file=out)
    for s, n, k, b in res["streams"]:
        print(f"   stream {s}: {n} launches, kernels {k:.2f} ms, busy {b:.2f} ms", file=out)
    fams = sorted(set(res["hidden"]) | set(res["exposed"]), key=lambda f: -(res["hidden"][f] + res["exposed"][f]))
    if fams:
        print("   other streams by family: hidden / exposed ms", file=out)
        for f in fams:
            print(f"     {f:18s} {res['hidden'][f]:7.3f} / {res['exposed'][f]:7.3f}", file=out)
    big = sorted((g for g in res["gaps"] if g["us"] >= min_gap_us), key=lambda g: -g["us"])[:gaps]
    if big:
        print(f"   largest main-stream gaps (>= {min_gap_us} us):", file=out)
    for g in big:
        others = ", ".join(sorted(set(g["others"])))[:100] or "nothing"
        print(f"     {g['us']:8.1f} us at {g['start_us'] / 1e3:8.3f} ms after {g['after']} before {g['before']}; "
              f"others {g['others_us']:.1f} us: {others}", file=out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profiles", nargs="+")
    ap.add_argument("--gaps", type=int, default=12)
    ap.add_argument("--min-gap-us", type=float, default=5.0)
    ap.add_argument("--stretches", action="store_true",
                    help="also the span and busy time of each stretch between attention kernels")
    a = ap.parse_args(argv)
    for p in a.profiles:
        with open(p) as f:
            prof = json.load(f)
        report(f"{p} ({prof.get('engine', '?')} {prof.get('precision', '')})", analyse(prof), a.gaps,
               a.min_gap_us, sys.stdout)
        if a.stretches:
            for n, span, busy, k in stretches(prof):
                per = f"; {span / k / 1e3:.3f} ms a layer" if k else ""
                print(f"   {n:45s} span {span / 1e3:7.3f} ms, busy {busy / 1e3:7.3f} ms{per}")


if __name__ == "__main__":
    main()
