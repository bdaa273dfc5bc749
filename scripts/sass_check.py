#!/usr/bin/env python3
"""Static SASS checks of blublas kernels from `cuobjdump --dump-sass libblublas.a` output.

Counts, per kernel and per architecture, the instructions that say which path a kernel is on
(HGMMA/HMMA tensor cores, FFMA, LDGSTS cp.async, UTMALDG TMA, LDSM ldmatrix, LDL/STL local memory)
and applies the project's rules:
  - sm80 kernels in the sm_80 cubin: HMMA and LDGSTS present, no local memory;
  - strict-fp32 kernels (names with 'simt' and 'f32'/'fp32'): no HMMA/HGMMA anywhere;
  - sm90 kernels in the sm_90a cubin: HGMMA present;
  - no kernel uses local memory (LDL/STL) on the hot paths (reported, not fatal for others).
Usage: sass_check.py <sass.txt> <out.json>
"""
import json, re, sys
from collections import defaultdict

OPS = ["HGMMA", "HMMA", "FFMA", "LDGSTS", "UTMALDG", "UTMASTG", "LDSM", "STSM", "LDL", "STL",
       "LDG.E.128", "STG.E.128", "SYNCS", "WARPGROUP"]

OPCODE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")

def parse(path):
    """One pass; one regex per line: the opcode (with its modifiers) after the address comment."""
    kernels = defaultdict(lambda: defaultdict(int))  # (arch, name) -> op -> count
    arch, name = "?", None
    wanted_exact = {"LDG.E.128", "STG.E.128"}
    with open(path, errors="replace") as f:
        for line in f:
            if "arch = " in line:
                m = re.search(r"arch = (sm_\w+)", line)
                if m:
                    arch = m.group(1)
                continue
            if "Function : " in line:
                name = line.split("Function : ", 1)[1].strip()
                kernels[(arch, name)]["_seen"] = 1
                continue
            if name is None:
                continue
            m = OPCODE.match(line)
            if not m:
                continue
            full = m.group(1)
            base = full.split(".", 1)[0]
            c = kernels[(arch, name)]
            if base in OPS_SET:
                c[base] += 1
            if full in wanted_exact or full.startswith("LDG.E.128") or full.startswith("STG.E.128"):
                c[full[:9]] += 1
    return kernels

def demangle_hint(name):
    return name if len(name) < 120 else name[:117] + "..."

OPS_SET = set(o for o in OPS if "." not in o)

def main():
    src, out = sys.argv[1], sys.argv[2]
    kernels = parse(src)
    violations, rows = [], []
    counted = defaultdict(int)
    for (arch, name), c in sorted(kernels.items()):
        low = name.lower()
        row = {"arch": arch, "kernel": name, **{k: v for k, v in c.items() if k != "_seen"}}
        rows.append(row)
        if "sm80" in low and arch == "sm_80":
            counted["sm80_kernels"] += 1
            if c["HMMA"] == 0 and "attn" not in low and "gemm" in low:
                violations.append(f"{arch} {demangle_hint(name)}: sm80 GEMM kernel without HMMA")
            if c["LDGSTS"] == 0 and "gemm" in low:
                violations.append(f"{arch} {demangle_hint(name)}: sm80 GEMM kernel without LDGSTS")
        if "simt" in low and ("f32" in low or "fp32" in low):
            counted["strict_f32_kernels"] += 1
            if c["HMMA"] or c["HGMMA"]:
                violations.append(f"{arch} {demangle_hint(name)}: strict fp32 kernel uses tensor cores")
        helper = any(w in low for w in ("reduce", "probe", "transpose", "convert", "bias_grad"))
        if "sm90" in low and arch == "sm_90a" and "gemm" in low and not helper:
            counted["sm90_gemm_kernels"] += 1
            if c["HGMMA"] == 0:
                violations.append(f"{arch} {demangle_hint(name)}: sm90 GEMM kernel without HGMMA")
        if c["LDL"] or c["STL"]:
            violations.append(f"{arch} {demangle_hint(name)}: local memory (LDL {c['LDL']}, STL {c['STL']})")
    metrics = {"sass.kernels": len(kernels), "sass.violations": len(violations),
               **{f"sass.{k}": v for k, v in counted.items()}}
    json.dump({"name": "sass_check", "metrics": metrics, "violations": violations, "rows": rows},
              open(out, "w"), indent=1)
    print(f"{len(kernels)} kernels; " + ", ".join(f"{k}={v}" for k, v in counted.items()))
    for v in violations[:40]:
        print("VIOLATION", v)
    print("sass check:", "ok" if not violations else f"{len(violations)} violations")

if __name__ == "__main__":
    main()
