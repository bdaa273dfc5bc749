#!/usr/bin/env python3
"""step_overlap_test.py: CPU check of scripts/step_overlap.py on a made-up two-stream timeline
(main stream 1: [0, 10), [20, 30), [30, 40) us; stream 2: a GEMM [5, 15), an add [15, 20)):
hidden / exposed time per family, the main stream's one gap and what filled it.
  python3 scripts/step_overlap_test.py      (exit 0 = pass)"""
import io, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_overlap  # noqa: E402


def check(cond, what):
    if not cond:
        raise SystemExit(f"step_overlap_test FAILED: {what}")
    print(f"ok: {what}")


prof = {"engine": "test", "precision": "bf16", "kernel_trace": {
    "kernel_sum_ms": 0.05, "busy_ms": 0.04, "overlap_ms": 0.005,
    "timeline": [[0, 10, 1, "gemm", "k0"], [5, 10, 2, "gemm", "dw"], [15, 5, 2, "elementwise/copy", "add"],
                 [20, 10, 1, "attention", "k1"], [30, 10, 1, "layernorm", "k2"]]}}
r = step_overlap.analyse(prof)
check(r["main"] == 1, "the main stream is the one with the most kernel time")
check(abs(r["hidden"]["gemm"] - 0.005) < 1e-12 and abs(r["exposed"]["gemm"] - 0.005) < 1e-12,
      "the side GEMM: 5 us hidden, 5 us exposed")
check(abs(r["exposed"]["elementwise/copy"] - 0.005) < 1e-12 and r["hidden"]["elementwise/copy"] == 0,
      "the side add ran while the main stream was idle")
check(len(r["gaps"]) == 1 and r["gaps"][0]["us"] == 10 and r["gaps"][0]["after"] == "k0"
      and r["gaps"][0]["before"] == "k1", "one main-stream gap of 10 us between k0 and k1")
check(r["gaps"][0]["others_us"] == 10 and sorted(r["gaps"][0]["others"]) == ["add", "dw"],
      "the gap was filled by the side stream's two kernels")
check(abs(r["main_idle_ms"] - 0.010) < 1e-12, "main idle 0.010 ms")
out = io.StringIO()
step_overlap.report("t", r, 5, 5.0, out)
check("largest main-stream gaps" in out.getvalue() and "stream 2: 2 launches" in out.getvalue(), "the report prints")
try:
    step_overlap.analyse({"kernel_trace": {"busy_ms": 1}})
    check(False, "a profile without a timeline is refused")
except ValueError as e:
    check("no timeline" in str(e), "a profile without a timeline is refused")

# stretches: two layers, forward attention at 10 and 30 us, backward at 60 and 90, a copy before.
layers = {"kernel_trace": {"timeline": [
    [0, 2, 1, "elementwise/copy", "[memcpy HtoD]"], [4, 6, 1, "embedding", "emb"],
    [10, 5, 1, "attention", "flash_attn_fwd_sm90_kernel"], [20, 5, 1, "gemm", "g"],
    [30, 5, 1, "attention", "flash_attn_fwd_sm90_kernel"], [40, 10, 1, "gemm", "head"],
    [55, 4, 1, "attention", "attn_bwd_delta_vec_kernel"],
    [60, 10, 1, "attention", "flash_attn_bwd_sm90_kernel"], [75, 5, 2, "gemm", "dw"],
    [90, 10, 1, "attention", "flash_attn_bwd_sm90_kernel"], [100, 20, 1, "adamw", "adamw"]]}}
st = step_overlap.stretches(layers)
check([n for n, *_ in st][0] == "before the first layer" and len(st) == 5, "five stretches")
check(st[0][1] == 6 and st[0][2] == 6, "before the first layer: from the first non-copy kernel, 6 us busy")
check(st[1][1] == 20 and st[1][2] == 10 and st[1][3] == 1, "forward: 20 us span, 10 busy, one layer period")
check(st[2][1] == 30 and st[2][2] == 19, "head: 30 us span, 19 busy (the attention delta is not a landmark)")
check(st[3][1] == 30 and st[3][2] == 15, "backward layers: 30 us span, 15 busy")
check(st[4][1] == 30 and st[4][2] == 30, "the rest: 30 us span and busy")
check(step_overlap.stretches({"kernel_trace": {"timeline": [[0, 1, 1, "gemm", "g"]]}}) == [],
      "no attention kernels: no stretches")

