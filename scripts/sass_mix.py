#!/usr/bin/env python3
"""sass_mix.py: the instruction mix of each kernel's main loop in an object file or cubin, from
cuobjdump -sass (the developer machine has a copy of the device's cuobjdump since session 9).
For each function whose name contains every --filter substring: its instruction count, its longest
backward-branch loop and that loop's most frequent opcodes. What the session-9 SASS reading of the
SIMT GEMM and the 3xTF32 attention used (bench/NOTES.md, "Session 9").
Usage: sass_mix.py FILE.o|FILE.cubin|FILE.sass [--filter SUBSTR ...] [--top N]
"""
import subprocess
import sys
from collections import Counter

from sass_stalls import INS, longest_loop, read_sass


def main():
    args = sys.argv[1:]
    path = args[0]
    filters = [args[i + 1] for i, a in enumerate(args) if a == "--filter"]
    top = int(args[args.index("--top") + 1]) if "--top" in args else 12
    if path.endswith(".sass"):
        funcs = read_sass(path)
    else:
        text = subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True, check=True).stdout
        tmp = "/tmp/sass_mix.sass"
        open(tmp, "w").write(text)
        funcs = read_sass(tmp)
    for name, ins in funcs.items():
        if not all(f in name for f in filters):
            continue
        parsed = [(off, m.group(2), m.group(3)) for off, m in ((o, INS.match(t)) for o, t in ins.items()) if m]
        loop = longest_loop(parsed)
        print(f"{name[:110]}\n  {len(parsed)} instructions", end="")
        if loop is None:
            print(", no loop")
            continue
        body = [op for off, op, _ in parsed if loop[0] <= off <= loop[1]]
        mix = Counter(op.split(".")[0] for op in body).most_common(top)
        print(f"; main loop {loop[0]:#x}-{loop[1]:#x}: {len(body)}: " + ", ".join(f"{k} {v}" for k, v in mix))
    return 0


if __name__ == "__main__":
    sys.exit(main())
