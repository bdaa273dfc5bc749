#!/usr/bin/env python3
"""sass_stalls.py: reads an Nsight Compute source-page CSV (ncu --page source --csv --print-source
sass, written by scripts/device-sass-stalls.sh) of a SIMT GEMM kernel, finds its main loop (the
longest backward branch) and relates the stall samples of each FFMA there to the register-bank
pattern of its source operands (Note [SIMT fp32 register banks] in
blublas/src/gemm/simt_f32_lean_kernel.cuh):
  two of the registers the FFMA reads from the register file (operands not served by the reuse
  cache) have the same parity (bank = register % 2)          -> "pair" conflict
  all three do                                                -> "triple" conflict
It prints the loop's stall samples by reason and, for FFMAs with no / pair / triple conflicts, the
mean samples per instruction of each reason, so the bank model the hardware follows shows in the
dispatch-stall column. Usage: sass_stalls.py FILE.source.csv [--columns]
"""
import csv
import re
import sys


def bank_pattern(args, prev):
    """(reads' parities, the reuse slots for the next instruction) of an FFMA's operand list."""
    parities, cur = [], []
    for i, s in enumerate(args[1:4]):
        r = s.replace(".reuse", "").lstrip("-|")
        cur.append(r if s.endswith(".reuse") else None)
        if not re.fullmatch(r"R\d+", r) or prev[i] == r:
            continue
        parities.append(int(r[1:]) % 2)
    return parities, cur


def classify(parities):
    if len(parities) == 3 and len(set(parities)) == 1:
        return "triple"
    if parities.count(0) >= 2 or parities.count(1) >= 2:
        return "pair"
    return "none"


def number(x):
    try:
        return float(str(x).replace(",", ""))
    except ValueError:
        return 0.0


def main():
    path = sys.argv[1]
    with open(path, newline="") as f:
        lines = [l for l in f if l.strip() and not l.startswith("==")]
    rows = list(csv.reader(lines))
    # ncu writes a "Kernel Name" line before the header: the header is the first row naming Source.
    start = next((i for i, r in enumerate(rows) if any(h.strip().lower() == "source" for h in r)), None)
    rows = rows[start:] if start is not None else []
    if not rows:
        print(f"{path}: empty")
        return 1
    header = rows[0]
    if "--columns" in sys.argv:
        print("\n".join(header))
    col = {h: i for i, h in enumerate(header)}
    src = next((i for h, i in col.items() if h.strip().lower() == "source"), None)
    addr = next((i for h, i in col.items() if "address" in h.lower()), None)
    if src is None or addr is None:
        print(f"{path}: no Source/Address column in {header[:8]}")
        return 1
    stall_cols = [(h, i) for h, i in col.items()
                  if ("stall" in h.lower() or "sampl" in h.lower()) and i not in (src, addr)]
    ins = []
    for r in rows[1:]:
        if len(r) <= max(src, addr):
            continue
        m = re.match(r"\s*(@!?U?P\w+\s+)?([A-Z][A-Z0-9._]*)\s*(.*?);?\s*$", r[src])
        if not m:
            continue
        try:
            pc = int(r[addr], 16)
        except ValueError:
            continue
        ins.append((pc, m.group(2), m.group(3), {h: number(r[i]) for h, i in stall_cols}))
    loop = None
    for pc, op, args, _ in ins:
        if op.startswith("BRA"):
            t = re.search(r"0x([0-9a-f]+)", args)
            if t and int(t.group(1), 16) < pc:
                lo = int(t.group(1), 16)
                if loop is None or pc - lo > loop[1] - loop[0]:
                    loop = (lo, pc)
    if loop is None:
        print(f"{path}: no loop found ({len(ins)} instructions)")
        return 1
    body = [x for x in ins if loop[0] <= x[0] <= loop[1]]
    total = {h: sum(x[3][h] for x in ins) for h, _ in stall_cols}
    in_loop = {h: sum(x[3][h] for x in body) for h, _ in stall_cols}
    groups = {"none": [], "pair": [], "triple": []}
    by_op = {}
    prev = [None] * 3
    for pc, op, args, s in body:
        by_op.setdefault(op.split(".")[0], []).append(s)
        if op != "FFMA":
            prev = [None] * 3
            continue
        parities, prev = bank_pattern([a.strip() for a in args.split(",")], prev)
        groups[classify(parities)].append(s)
    print(f"== {path}: loop {loop[0]:#x}-{loop[1]:#x}, {len(body)} instructions "
          f"({len(ins)} in the kernel)")
    keys = [h for h, _ in stall_cols if total[h] > 0]
    print("samples in the loop / kernel by column:")
    for h in sorted(keys, key=lambda h: -in_loop[h])[:14]:
        print(f"  {in_loop[h]:10.0f} / {total[h]:10.0f}  {h}")
    show = sorted(keys, key=lambda h: -in_loop[h])[:8]
    print("mean samples per instruction: group (count) | " + " | ".join(h[:28] for h in show))
    for g, lst in list(groups.items()) + [(k, v) for k, v in sorted(by_op.items()) if k != "FFMA"]:
        if lst:
            print(f"  {g:8s} ({len(lst):4d}) | " +
                  " | ".join(f"{sum(s[h] for s in lst) / len(lst):8.2f}" for h in show))
    return 0


if __name__ == "__main__":
    sys.exit(main())
