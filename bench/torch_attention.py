#!/usr/bin/env python3
"""torch_attention.py: the PyTorch reference for bench/attention_bench.cu.

Times F.scaled_dot_product_attention (causal, bf16) forward and forward+backward at the GPT-2 shape
(B16 T1024, 12 heads of 64; and 6 heads of 128) for each SDPA backend that runs here (flash,
efficient, cudnn), with q/k/v as views of a fused [B, T, 3*C] activation (as GPT-2 does), CUDA
events, warm-up and the median of the reps. The fastest backend is named in the metrics.
Also fp32 inputs (efficient/math backends) with tf32 allowed (B16) and not (B4): the references
of blublas's tf32 and strict-fp32 modes; and strict fp32 settings at B16 (torch_sdpa.fp32_b16.*,
every backend that takes fp32: on sm80+ that is the memory-efficient kernel, whose fp32 path is
3xTF32 on tensor cores): the reference of blublas's f32_3xtf32 mode.
FLOPs counted as attention_bench.cu counts them: forward 4*B*H*T*T*d/2, backward 2.5x forward.

Usage: python3 bench/torch_attention.py <out_dir> [--quick] [--dq_shapes]
--dq_shapes: only bf16 d64 at attention_bench --dq_only's shapes (GPT-2 B16 T1024 H12, d48 B16
T1024 H25, long context B2 T16384 H12), metrics torch_sdpa.bf16[.d48|.t16384].*.
Writes <out_dir>/torch_attention.json (metrics torch_sdpa.bf16.fwd_tflops, .fwdbwd_tflops, ...)
and prints a markdown table. Also checks, on one small odd case, that every backend agrees with
the math backend in float64 (a cheap sanity check of the reference itself).
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_timing import median_ms  # noqa: E402

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}


def make_inputs(B, T, H, d, dtype=torch.bfloat16, requires_grad=True):
    qkv = torch.randn(B, T, 3 * H * d, device="cuda", dtype=dtype) * 1.5
    qkv.requires_grad_(requires_grad)
    q, k, v = qkv.split(H * d, dim=2)
    q = q.view(B, T, H, d).transpose(1, 2)
    k = k.view(B, T, H, d).transpose(1, 2)
    v = v.view(B, T, H, d).transpose(1, 2)
    return qkv, q, k, v


def bench_backend(backend, B, T, H, d, quick, dtype=torch.bfloat16):
    warmup, reps = (3, 10) if quick else (10, 40)
    if dtype == torch.float32:
        warmup, reps = (2, 5) if quick else (3, 10)
    qkv, q, k, v = make_inputs(B, T, H, d, dtype)
    dout = torch.randn(B, H, T, d, device="cuda", dtype=dtype)
    with sdpa_kernel([backend]):
        def fwd():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def fwdbwd():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            out.backward(dout)
            qkv.grad = None

        fwd_ms = median_ms(fwd, warmup, reps)
        fwdbwd_ms = median_ms(fwdbwd, warmup, reps)
    flop = 4.0 * B * H * T * T * d / 2.0
    return {
        "fwd_ms": fwd_ms,
        "fwdbwd_ms": fwdbwd_ms,
        "fwd_tflops": flop / (fwd_ms * 1e-3) / 1e12,
        "fwdbwd_tflops": 3.5 * flop / (fwdbwd_ms * 1e-3) / 1e12,
        "bwd_tflops": 2.5 * flop / ((fwdbwd_ms - fwd_ms) * 1e-3) / 1e12,
    }


def sanity_check(backend):
    """Max |diff| of out and grads vs the math backend in float64 on B2 T100 H3 d64, causal."""
    torch.manual_seed(0)
    qkv, q, k, v = make_inputs(2, 100, 3, 64)
    dout = torch.randn(2, 3, 100, 64, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(dout)
    g = qkv.grad.double()
    ref_qkv = qkv.detach().double().requires_grad_(True)
    rq, rk, rv = [t.view(2, 100, 3, 64).transpose(1, 2) for t in ref_qkv.split(192, dim=2)]
    with sdpa_kernel([SDPBackend.MATH]):
        ref = F.scaled_dot_product_attention(rq, rk, rv, is_causal=True)
        ref.backward(dout.double())
    return max((out.double() - ref).abs().max().item(), (g - ref_qkv.grad).abs().max().item())


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    out_dir = sys.argv[1]
    quick = "--quick" in sys.argv[2:]
    os.makedirs(out_dir, exist_ok=True)
    dq_shapes = "--dq_shapes" in sys.argv[2:]
    if dq_shapes:
        shapes = [(16, 1024, 12, 64, ""), (16, 1024, 25, 64, ".d48"), (2, 16384, 12, 64, ".t16384")]
    else:
        shapes = [(16, 1024, 12, 64, ""), (16, 1024, 6, 128, ".d128")]
    rows, metrics = [], {}
    for (B, T, H, d, tag) in shapes:
        best = None
        for name, backend in BACKENDS.items():
            try:
                r = bench_backend(backend, B, T, H, d, quick)
                err = sanity_check(backend) if d == 64 else float("nan")
            except RuntimeError as e:  # backend not available for this shape/device
                print(f"# {name} B{B} T{T} H{H} d{d}: unavailable ({str(e).splitlines()[0][:100]})")
                continue
            row = {"backend": name, "B": B, "T": T, "H": H, "d": d, "max_abs_err_vs_f64": err, **r}
            rows.append(row)
            if best is None or r["fwdbwd_tflops"] > best[1]["fwdbwd_tflops"]:
                best = (name, r)
        if best is None:
            continue
        prefix = "torch_sdpa.bf16" + tag
        metrics[prefix + ".fwd_tflops"] = best[1]["fwd_tflops"]
        metrics[prefix + ".bwd_tflops"] = best[1]["bwd_tflops"]
        metrics[prefix + ".fwdbwd_tflops"] = best[1]["fwdbwd_tflops"]
        # Numeric code of the fastest backend (JSON metrics are numbers): 0 flash, 1 efficient,
        # 2 cudnn; the name is in "best_backend".
        metrics[prefix + ".best_backend_id"] = list(BACKENDS).index(best[0])
        for row in rows:
            if (row["d"], row["H"], row["T"]) == (d, H, T) and row["backend"] == best[0]:
                row["fastest"] = True
    # fp32 inputs (the strict-fp32 and tf32 modes of blublas): only the efficient and math
    # backends take fp32; tf32 on/off via the matmul flag. Shapes as attention_bench.cu.
    fp32_modes = () if dq_shapes else (("tf32", 16, True), ("fp32", 4, False), ("fp32_b16", 16, False))
    for mode, B, allow in fp32_modes:
        torch.backends.cuda.matmul.allow_tf32 = allow
        torch.backends.cudnn.allow_tf32 = allow
        torch.set_float32_matmul_precision("high" if allow else "highest")
        best = None
        for name in ("flash", "efficient", "cudnn", "math"):
            if name == "math" and B > 4:
                continue  # the math backend materializes B*H*T*T scores: slow and large
            if name in ("flash", "cudnn") and mode != "fp32_b16":
                continue  # they refuse fp32 (tried, and reported, once in the fp32_b16 pass)
            backend = SDPBackend.MATH if name == "math" else BACKENDS[name]
            try:
                r = bench_backend(backend, B, 1024, 12, 64, quick, torch.float32)
            except RuntimeError as e:
                print(f"# {name} {mode}: unavailable ({str(e).splitlines()[0][:100]})")
                continue
            row = {"backend": name, "mode": mode, "B": B, "T": 1024, "H": 12, "d": 64,
                   "max_abs_err_vs_f64": float("nan"), **r}
            rows.append(row)
            if best is None or r["fwdbwd_tflops"] > best[1]["fwdbwd_tflops"]:
                best = (name, r)
        if best is not None:
            metrics[f"torch_sdpa.{mode}.fwd_tflops"] = best[1]["fwd_tflops"]
            metrics[f"torch_sdpa.{mode}.fwdbwd_tflops"] = best[1]["fwdbwd_tflops"]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("highest")

    result = {"name": "torch_attention", "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "metrics": metrics, "rows": rows,
              "best_backend": {(str(r["d"]) if not dq_shapes else f"B{r['B']} T{r['T']} H{r['H']} d{r['d']}"):
                               r["backend"] for r in rows if r.get("fastest")}}
    with open(os.path.join(out_dir, "torch_attention.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("\n| backend | B | T | H | d | fwd ms | fwd TFLOP/s | bwd TFLOP/s | fwd+bwd TFLOP/s | "
          "max err vs f64 | fastest |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['backend']}{' ' + r['mode'] if 'mode' in r else ''} | {r['B']} | {r['T']} | {r['H']} | {r['d']} | {r['fwd_ms']:.3f} | "
              f"{r['fwd_tflops']:.1f} | {r['bwd_tflops']:.1f} | {r['fwdbwd_tflops']:.1f} | "
              f"{r['max_abs_err_vs_f64']:.2e} | {'yes' if r.get('fastest') else ''} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
