#!/usr/bin/env python3
"""torch_attn_precision.py: PyTorch's side of Note [fp32 attention error profile]
(tests/blublas/attention_gpu_test.cu, F32ErrorProfileGpt2Shape).

On the GPT-2 shape the test uses (B1 T1024, 2 heads of 64, causal; q, k ~ N(0, 1.5^2), v, dO ~
N(0, 1)), every fp32 SDPA backend that runs here (TF32 off) against SDPA's math path in float64:
per output (O, dQ, dK, dV) the relative RMS error and the bias (mean error along sign(ref) over the
mean |ref|; < 0: magnitudes shrunk). Several seeds, so a bias is told from chance.

Usage: python3 bench/torch_attn_precision.py <out_dir>   (writes torch_attn_precision.json)
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def stats(got, ref):
    e = (got.double() - ref).flatten()
    r = ref.flatten()
    rms = (e.square().sum() / r.square().sum()).sqrt().item()
    bias = ((e * torch.sign(r)).sum() / r.abs().sum()).item()
    return rms, bias


def run(backend, q, k, v, do, dtype):
    xs = [t.to(dtype).detach().requires_grad_(True) for t in (q, k, v)]
    with sdpa_kernel(backend):
        o = F.scaled_dot_product_attention(*xs, is_causal=True)
    o.backward(do.to(dtype))
    return [o.detach()] + [x.grad for x in xs]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    B, H, T, d = 1, 2, 1024, 64
    res = {}
    for seed in range(4):
        g = torch.Generator(device="cuda").manual_seed(seed)
        # fp32 inputs (as the kernels see them), the reference computed in float64 from the same bits.
        q, k = (1.5 * torch.randn(B, H, T, d, device="cuda", generator=g) for _ in range(2))
        v, do = (torch.randn(B, H, T, d, device="cuda", generator=g) for _ in range(2))
        ref = run(SDPBackend.MATH, q.double(), k.double(), v.double(), do.double(), torch.float64)
        for name, be in BACKENDS.items():
            try:
                got = run(be, q, k, v, do, torch.float32)
            except RuntimeError as e:  # backend does not take fp32 here
                res.setdefault(name, {"error": str(e).splitlines()[0][:200]})
                continue
            r = res.setdefault(name, {})
            for oname, a, b in zip(("O", "dQ", "dK", "dV"), got, ref):
                rms, bias = stats(a, b)
                r.setdefault(oname, {"rms": [], "bias": []})
                r[oname]["rms"].append(rms)
                r[oname]["bias"].append(bias)
    print(f"fp32 SDPA error vs float64 (B{B} T{T} H{H} d{d} causal, 4 seeds: mean rel rms, bias per seed)")
    for name, r in res.items():
        if "error" in r:
            print(f"  {name:9s} not available for fp32: {r['error']}")
            continue
        for oname, s in r.items():
            print(f"  {name:9s} {oname:2s} rms {sum(s['rms']) / len(s['rms']):.3e}  bias " +
                  " ".join(f"{b:+.2e}" for b in s["bias"]))
    metrics = {}
    for name, r in res.items():
        for oname, s in ({} if "error" in r else r).items():
            metrics[f"torch_sdpa.fp32_error.{name}.{oname}.rel_rms"] = sum(s["rms"]) / len(s["rms"])
            metrics[f"torch_sdpa.fp32_error.{name}.{oname}.bias"] = sum(s["bias"]) / len(s["bias"])
    json.dump({"metrics": metrics, "shape": {"B": B, "T": T, "H": H, "d": d, "causal": True}, "backends": res},
              open(os.path.join(out, "torch_attn_precision.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
