#!/usr/bin/env python3
"""comp_report.py <results dir>: issue 13's metrics from scripts/device-comp.sh's files: per-step
loss of the compiled d12 fp32 step against the autograd engine (the step it was recorded from) and
the fused engine (blutrain's default eager step on CUDA), and tok/s (median step after 3 warm-up
steps) and allocator peak of each, the A/B runs of the compiled step included (comp.fp32.
compiled_recorded.* with the classifier as recorded, compiled_noinplace.* without in-place reuse).
Writes <results>/comp.json ({"metrics": {...}}) and prints a table."""
import json, os, statistics, sys


def steps(path):
    out = {}
    try:
        for line in open(path):
            d = json.loads(line)
            if d.get("event") == "step" or ("loss" in d and "tokens_per_s" in d):
                out[int(d["step"])] = d
    except FileNotFoundError:
        pass
    return out


def main():
    res = sys.argv[1]
    # compiled_recorded / compiled_noinplace: device-comp.sh's A/B runs of the compiled step with the
    # classifier as recorded (BLU_CAPTURE_CHUNKED_CLASSIFIER=0) and without in-place reuse
    # (BLU_CAPTURE_INPLACE=0); absent when not run.
    runs = {e: steps(os.path.join(res, f"comp_{e}_d12_fp32_metrics.jsonl"))
            for e in ("compiled", "autograd", "fused", "compiled_recorded", "compiled_noinplace")}
    m = {}
    print("| engine | steps | median tok/s (after 3) | peak GiB | final loss |")
    print("|---|---|---|---|---|")
    tok = {}
    for e, r in runs.items():
        if not r:
            if not e.startswith("compiled_"):
                print(f"| {e} | 0 | - | - | - |")
            continue
        ks = sorted(r)
        tail = [r[k]["tokens_per_s"] for k in ks if k > 3 and r[k].get("tokens_per_s")]
        tok[e] = statistics.median(tail) if tail else float("nan")
        peak = max(r[k].get("mem_peak_gib", 0.0) for k in ks)
        print(f"| {e} | {len(ks)} | {tok[e]:.0f} | {peak:.2f} | {r[ks[-1]]['loss']:.6f} |")
        m[f"comp.fp32.{e}.tok_s"] = tok[e]
        m[f"comp.fp32.{e}.peak_gib"] = peak
    c = runs["compiled"]
    for ref in ("autograd", "fused"):
        r = runs[ref]
        common = sorted(set(c) & set(r))
        if not common:
            continue
        diff = max(abs(c[k]["loss"] - r[k]["loss"]) / max(abs(r[k]["loss"]), 1e-30) for k in common)
        suffix = "" if ref == "autograd" else "_vs_fused"
        m[f"comp.fp32.max_rel_loss_diff_{len(common)}{suffix}"] = diff
        if len(common) >= 20 and ref == "autograd":
            m["comp.fp32.max_rel_loss_diff_20"] = diff
        print(f"max rel loss diff, compiled vs {ref}, {len(common)} steps: {diff:.3e}")
    if "compiled" in tok and "autograd" in tok:
        m["comp.fp32.ratio_vs_autograd"] = tok["compiled"] / tok["autograd"]
    if "compiled" in tok and "fused" in tok:
        # The "eager blutrain": the trainer's default CUDA step (--engine fused).
        m["comp.fp32.ratio_vs_eager"] = tok["compiled"] / tok["fused"]
    json.dump({"metrics": m}, open(os.path.join(res, "comp.json"), "w"), indent=1)
    for k in sorted(m):
        print(f"{k} = {m[k]:.6g}")


if __name__ == "__main__":
    main()
