#!/usr/bin/env python3
"""sass_stalls.py: reads an Nsight Compute source-page CSV (ncu --page source --csv --print-source
sass, written by scripts/device-sass-stalls.sh) of a SIMT GEMM kernel, finds its main loop (the
longest backward branch) and relates the stall samples of each instruction there to its kind and,
for FFMAs, to the register-bank pattern of the operands read from the register file (Note [SIMT
fp32 register banks] in blublas/src/gemm/simt_f32_lean_kernel.cuh):
  two of them share a bank (register % 2)  -> "pair";  all three -> "triple";  else "none".
ncu's SASS text has no reuse flags, so without them every FFMA reads three fresh registers and
two always share a bank: pass --sass with cuobjdump -sass of the object holding the kernel; the
function whose instructions match the CSV's (offsets from the kernel's first address) lends its
reuse flags.
Usage: sass_stalls.py FILE.source.csv [--sass FILE.sass] [--columns]
"""
import csv
import re
import sys
from collections import defaultdict

INS = re.compile(r"(@!?U?P\w+\s+)?([A-Z][A-Z0-9._]*)\s*(.*?);?\s*$")
REASONS = ["stall_dispatch", "stall_not_selected", "stall_selected", "stall_short_sb", "stall_barrier",
           "stall_wait", "stall_no_inst", "stall_long_sb", "stall_mio", "stall_math"]


def bank_pattern(args, prev):
    """(parities of the registers read from the file, reuse slots for the next instruction)."""
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


def read_csv(path):
    """[(address, sass text, {column: value})] and the column names."""
    with open(path, newline="") as f:
        rows = list(csv.reader(l for l in f if l.strip() and not l.startswith("==")))
    # ncu writes a "Kernel Name" line before the header: the header is the first row naming Source.
    start = next((i for i, r in enumerate(rows) if any(h.strip().lower() == "source" for h in r)), None)
    if start is None:
        return [], []
    header = rows[start]
    col = {h: i for i, h in enumerate(header)}
    src = next(i for h, i in col.items() if h.strip().lower() == "source")
    addr = next((i for h, i in col.items() if "address" in h.lower()), None)
    out = []
    for r in rows[start + 1:]:
        if addr is None or len(r) <= max(src, addr):
            continue
        try:
            a = int(r[addr], 16)
        except ValueError:
            continue
        out.append((a, r[src].strip(), {h: number(r[i]) for h, i in col.items() if i not in (src, addr)}))
    return out, header


def read_sass(path):
    """{function name: {offset: instruction text}} of cuobjdump -sass output."""
    funcs = {}
    for block in open(path).read().split("Function : ")[1:]:
        name = block.split("\n", 1)[0].strip()
        ins = {}
        for l in block.splitlines():
            m = re.search(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", l)
            if m:
                ins[int(m.group(1), 16)] = m.group(2)
        funcs[name] = ins
    return funcs


def longest_loop(instructions):
    """(first, last) offsets of the longest backward branch's body in [(offset, opcode, operands)],
    or None: the main loop of a kernel."""
    loop = None
    for off, op, rest in instructions:
        if op.startswith("BRA"):
            tgt = re.search(r"0x([0-9a-f]+)", rest)
            if tgt and int(tgt.group(1), 16) < off:
                lo = int(tgt.group(1), 16)
                if loop is None or off - lo > loop[1] - loop[0]:
                    loop = (lo, off)
    return loop


def main():
    args = sys.argv[1:]
    path = args[0]
    rows, header = read_csv(path)
    if "--columns" in args:
        print("\n".join(header))
    if not rows:
        print(f"{path}: no SASS rows")
        return 1
    base = rows[0][0]
    text = {a - base: t.rstrip(";").strip() for a, t, _ in rows}
    if "--sass" in args:
        funcs = read_sass(args[args.index("--sass") + 1])
        score = lambda ins: sum(1 for o, t in text.items() if ins.get(o, "").replace(".reuse", "") == t)
        name, ins = max(funcs.items(), key=lambda kv: score(kv[1]))
        print(f"reuse flags from {name[-70:]}: {score(ins)} of {len(text)} instructions match")
        text = {o: ins.get(o, t) for o, t in text.items()}
    parsed = [(o, m.group(2), m.group(3)) for o, m in ((o, INS.match(t)) for o, t in text.items()) if m]
    loop = longest_loop(parsed)
    if loop is None:
        print(f"{path}: no loop found ({len(rows)} instructions)")
        return 1
    body = [(a - base, s) for a, _, s in rows if loop[0] <= a - base <= loop[1]]
    reasons = [r for r in REASONS if r in header]
    total = {r: sum(s[r] for _, s in body) for r in reasons}
    issued = max(total.get("stall_selected", 0.0), 1.0)
    print(f"== {path}: loop {loop[0]:#x}-{loop[1]:#x}, {len(body)} instructions; stall samples "
          "per issued instruction: " + ", ".join(f"{r[6:]} {total[r] / issued:.2f}" for r in reasons))
    groups = defaultdict(list)
    prev = [None] * 3
    after_lds = 99
    for o, s in body:
        m = INS.match(text[o])
        op = m.group(2) if m else "?"
        if op == "FFMA":
            parities, prev = bank_pattern([x.strip() for x in m.group(3).split(",")], prev)
            groups["FFMA " + classify(parities)].append(s)
            groups[f"FFMA {min(after_lds, 3)} after LDS" if after_lds < 3 else "FFMA later"].append(s)
        else:
            prev = [None] * 3
            groups[op.split(".")[0]].append(s)
        after_lds = 0 if op.startswith("LDS") else after_lds + 1
    show = [r for r in ("stall_dispatch", "stall_short_sb", "stall_barrier", "stall_wait") if r in reasons]
    print("per issue (samples / selected samples) by group: " + " | ".join(r[6:] for r in show))
    for g, lst in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        sel = max(sum(s.get("stall_selected", 0.0) for s in lst), 1.0)
        print(f"  {g:18s} {len(lst):5d} | " + " | ".join(f"{sum(s[r] for s in lst) / sel:6.2f}" for r in show))
    return 0


if __name__ == "__main__":
    sys.exit(main())
