#!/usr/bin/env python3
"""sass-loops.py: instruction counts of the loops in `cuobjdump -sass` output.

For every function (or those whose name contains --match), each backward branch (not the
BRA.U.ANY of a warp-uniform retry) closes a loop [target, branch]; loops of at least --min
instructions are printed with their length and an opcode histogram (predicates and modifiers
stripped: HGMMA.64x64x16.F32.BF16 counts as HGMMA); spans holding an EXIT (the retry branch of
an out-of-line wait block) are skipped. The counts are static: a body with two branch arms
counts both. Used for the per-block instruction budget of the attention kernels
(bench/NOTES.md, Note [sm90 flash backward: instructions per block]).

  scripts/sass-loops.py FILE.sass [--match SUBSTRING] [--min 100] [--top 30]
"""
import argparse
import collections
import re
import sys


def functions(lines):
    name, body = None, []
    for line in lines:
        m = re.search(r"Function : (\S+)", line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m and name:
            body.append((int(m.group(1), 16), m.group(2).strip()))
    if name:
        yield name, body


def opcode(text):
    text = re.sub(r"^@!?U?P[T0-9]+\s+", "", text)
    return text.split()[0].split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sass")
    ap.add_argument("--match", default="")
    ap.add_argument("--min", type=int, default=100)
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    with open(a.sass, errors="replace") as f:
        lines = f.read().splitlines()
    for name, body in functions(lines):
        if a.match not in name:
            continue
        loops = []
        for addr, text in body:
            m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
            if m and "BRA.U.ANY" not in text:
                target = int(m.group(1), 16)
                if target < addr:
                    loops.append((target, addr))
        printed = False
        for target, end in sorted(set(loops)):
            inner = [t for (x, t) in body if target <= x <= end]
            # A retry branch from an out-of-line wait block at the function's end back to its
            # wait spans EXITs: not a loop body.
            if len(inner) < a.min or any(opcode(t) == "EXIT" for t in inner):
                continue
            if not printed:
                print(f"{name} ({len(body)} instructions)")
                printed = True
            hist = collections.Counter(opcode(t) for t in inner)
            top = ", ".join(f"{k}:{v}" for k, v in hist.most_common(a.top))
            print(f"  loop {target:#06x}-{end:#06x}: {len(inner)} instructions: {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
