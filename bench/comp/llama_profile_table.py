#!/usr/bin/env python3
"""llama_profile_table.py: the Llama block's kernel-family breakdowns side by side (ours eager,
captured and each compiled plan from llama_block_bench --profile; PyTorch eager and torch.compile from
torch_llama_block.py --profile), per mode, then each variant's heaviest kernels.

Usage: python3 bench/comp/llama_profile_table.py <results dir> [--top 12]
Reads llama_block_<mode>_<variant>_trace.json and torch_llama_block_<mode>_<variant>_trace.json;
prints markdown (ms per family and launches; busy = union of kernel intervals, gap = span - busy)."""
import argparse
import glob
import json
import os
import re


def load(d):
    traces = {}
    for path in sorted(glob.glob(os.path.join(d, "*_trace.json"))):
        m = re.match(r"(torch_)?llama_block_(\w+?)_(eager|captured|compiled_env|compiled|compile)_trace\.json$",
                     os.path.basename(path))
        if not m:
            continue
        who = ("torch " if m.group(1) else "ours ") + m.group(3)
        with open(path) as fh:
            traces.setdefault(m.group(2), {})[who] = json.load(fh)
    return traces


def table(mode, variants, top):
    names = list(variants)
    fams = []
    for t in variants.values():
        fams += [f for f in t.get("families", {}) if f not in fams]
    cell = lambda t, f: "{:.3f} ({})".format(t["families"][f]["ms"], t["families"][f]["count"]) \
        if f in t.get("families", {}) and t["families"][f]["count"] else "-"
    lines = [f"### {mode}: ms (launches) per family, one step", "",
             "| family | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for f in fams:
        lines.append(f"| {f} | " + " | ".join(cell(variants[n], f) for n in names) + " |")
    for key in ("kernel_sum_ms", "busy_ms", "host_gap_ms", "launches"):
        lines.append(f"| {key} | " + " | ".join(
            str(round(variants[n].get(key, float('nan')), 3)) for n in names) + " |")
    for n in names:
        lines += ["", f"{mode} {n}: top kernels (ms, count, family)"]
        for k in variants[n].get("top", [])[:top]:
            lines.append(f"  {k['ms']:8.3f} {k['count']:4d}  {k.get('family', '?'):16s} {k['name'][:110]}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    traces = load(a.dir)
    if not traces:
        print(f"no *_trace.json in {a.dir}")
        return 0
    for mode in sorted(traces):
        print(table(mode, traces[mode], a.top))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
