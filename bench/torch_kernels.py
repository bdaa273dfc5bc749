#!/usr/bin/env python3
"""torch_kernels.py: PyTorch equivalents of bench/kernels_bench.cu at the same GPT-2 124M sizes
(B16 T1024 C768, V50304), timed with CUDA events (median of reps after warm-up), reported as GB/s
over the SAME byte models as kernels_bench.cu (each input read once, each output written once) and
as a fraction of the device-to-device copy bandwidth measured in this process.

Usage: python3 bench/torch_kernels.py [OUT_DIR] [--quick]
Writes OUT_DIR/torch_kernels.json ({"name", "metrics", "rows"}) and prints a markdown table last.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F


def log(*a):
    print(*a, flush=True)


def median_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    ms = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return ms[reps // 2]


def gpt2_param_sizes():
    C, V, T = 768, 50304, 1024
    s = [V * C, T * C]
    for _ in range(12):
        s += [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
    return s + [C, C]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    quick = "--quick" in sys.argv
    out_dir = args[0] if args else "."
    warmup, reps = (2, 7) if quick else (5, 25)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    results = []

    def add(name, dtype, shape, nbytes, ms):
        results.append(dict(kernel=name, dtype=dtype, shape=shape, bytes=nbytes, time_us=ms * 1e3,
                            GBs=nbytes / ms / 1e6))
        log(f"  {name:<22} {dtype:<5} {shape:<22} {nbytes / 1e6:9.1f} MB {ms * 1e3:9.1f} us "
            f"{nbytes / ms / 1e6:8.1f} GB/s")

    log(f"torch_kernels on {torch.cuda.get_device_name()} (torch {torch.__version__})"
        + (" [quick]" if quick else ""))
    nb = (256 << 20) if quick else (1 << 30)
    a = torch.empty(nb, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    copy_ms = median_ms(lambda: b.copy_(a), warmup, reps)
    copy_gbs = 2 * nb / copy_ms / 1e6
    log(f"  device-to-device copy: {copy_gbs:.1f} GB/s")
    del a, b

    B, T, C, V = 16, 1024, 768, 50304
    N = B * T
    for dt, tag, es in ((torch.float32, "f32", 4), (torch.bfloat16, "bf16", 2)):
        x = torch.randn(N, C, device=dev, dtype=dt, requires_grad=True)
        w = (torch.rand(C, device=dev, dtype=dt) + 0.5).requires_grad_()
        bb = torch.randn(C, device=dev, dtype=dt).requires_grad_()
        dy = torch.randn(N, C, device=dev, dtype=dt)
        with torch.no_grad():
            ms = median_ms(lambda: F.layer_norm(x, (C,), w, bb, 1e-5), warmup, reps)
        add("layernorm_fwd", tag, f"{N}x{C}", (2 * N * C + 2 * C) * es + 8 * N, ms)
        y = F.layer_norm(x, (C,), w, bb, 1e-5)
        ms = median_ms(lambda: torch.autograd.grad(y, (x, w, bb), dy, retain_graph=True), warmup, reps)
        add("layernorm_bwd", tag, f"{N}x{C}", (3 * N * C + C) * es + 8 * N + 8 * C, ms)
        del x, w, bb, dy, y

        H = 4 * C
        x = torch.randn(N, H, device=dev, dtype=dt)
        dy = torch.randn(N, H, device=dev, dtype=dt)
        ms = median_ms(lambda: F.gelu(x, approximate="tanh"), warmup, reps)
        add("gelu_fwd", tag, f"{N}x{H}", (2 * N * H + H) * es, ms)
        ms = median_ms(lambda: torch.ops.aten.gelu_backward(dy, x, approximate="tanh"), warmup, reps)
        add("gelu_bwd", tag, f"{N}x{H}", (3 * N * H + H) * es, ms)
        del x, dy

    for dt, tag, es in ((torch.float32, "f32", 4),):
        x = torch.randn(N, V, device=dev, dtype=dt) * 4
        ms = median_ms(lambda: torch.softmax(x, -1), warmup, reps)
        add("softmax_fwd", tag, f"{N}x{V}", 2 * N * V * es, ms)
        y = torch.softmax(x, -1)
        dy = torch.randn_like(y)
        del x
        ms = median_ms(lambda: torch.ops.aten._softmax_backward_data(dy, y, -1, dt), warmup, reps)
        add("softmax_bwd", tag, f"{N}x{V}", 3 * N * V * es, ms)
        del y, dy
        torch.cuda.empty_cache()

    for dt, tag, es in ((torch.float32, "f32", 4), (torch.bfloat16, "bf16", 2)):
        logits = (torch.randn(N, V, device=dev, dtype=dt) * 4).requires_grad_()
        tgt = torch.randint(0, V, (N,), device=dev)

        def eager():
            logits.grad = None
            F.cross_entropy(logits, tgt).backward()

        ms = median_ms(eager, warmup, reps)
        add("xent_fused_eager", tag, f"{N}x{V}", 2 * N * V * es + 8 * N, ms)
        if tag != "f32":  # one compile (tens of seconds) is enough for the anchor
            del logits, tgt
            torch.cuda.empty_cache()
            continue
        try:
            comp = torch.compile(lambda l, t: F.cross_entropy(l, t))

            def compiled():
                logits.grad = None
                comp(logits, tgt).backward()

            ms = median_ms(compiled, warmup, reps)
            add("xent_fused_compile", tag, f"{N}x{V}", 2 * N * V * es + 8 * N, ms)
        except Exception as e:  # noqa: BLE001 -- report and go on
            log(f"  torch.compile cross-entropy failed: {type(e).__name__}: {e}")
        del logits, tgt
        torch.cuda.empty_cache()

    sizes = gpt2_param_sizes()
    params = [torch.nn.Parameter(torch.randn(n, device=dev) * 0.02) for n in sizes]
    for p in params:
        p.grad = torch.randn_like(p) * 0.01
    groups = [dict(params=[p for p in params if p.numel() > 4 * C], weight_decay=0.1),
              dict(params=[p for p in params if p.numel() <= 4 * C], weight_decay=0.0)]
    opt = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), fused=True)
    total = sum(sizes)
    ms = median_ms(opt.step, warmup, reps)
    add("adamw", "f32", f"{total} params/{len(sizes)}", 28 * total, ms)
    ms = median_ms(lambda: torch.nn.utils.get_total_norm([p.grad for p in params])
                   if hasattr(torch.nn.utils, "get_total_norm")
                   else torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad)
                                                              for p in params])), warmup, reps)
    add("grad_norm", "f32", f"{total} params/{len(sizes)}", 4 * total, ms)
    del params, opt, groups
    torch.cuda.empty_cache()

    gen = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, V, (B, T), generator=gen).to(dev)
    unique = int(torch.unique(tokens).numel())
    dout = torch.randn(B, T, C, device=dev)

    def emb_bwd():
        torch.ops.aten.embedding_dense_backward(dout.view(N, C), tokens.view(N), V, -1, False)
        dout.sum(0)

    ms = median_ms(emb_bwd, warmup, reps)
    add("embedding_bwd", "f32", f"B{B}T{T}C{C}V{V}", N * C * 4 + 4 * N + 8 * T * C + 8 * unique * C, ms)
    torch.use_deterministic_algorithms(True)
    ms = median_ms(emb_bwd, warmup, reps)
    add("embedding_bwd_determ", "f32", f"B{B}T{T}C{C}V{V}", N * C * 4 + 4 * N + 8 * T * C + 8 * unique * C, ms)
    torch.use_deterministic_algorithms(False)

    metrics = {"torch.copy_bw_TBs": copy_gbs / 1e3}
    for r in results:
        r["fraction_of_copy_bw"] = r["GBs"] / copy_gbs
        key = f"torch.{r['kernel']}.{r['dtype']}"
        metrics.setdefault(key + ".fraction_of_copy_bw", r["fraction_of_copy_bw"])
        metrics.setdefault(key + ".GBs", r["GBs"])
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "torch_kernels.json"), "w") as f:
        json.dump(dict(name="torch_kernels", gpu=torch.cuda.get_device_name(),
                       torch=torch.__version__, metrics=metrics,
                       rows=results + [dict(kernel="d2d_copy", GBs=copy_gbs,
                                            fraction_of_copy_bw=1.0)]), f, indent=1)
    log(f"\n| kernel (PyTorch) | dtype | shape | MB moved | time (us) | GB/s | of copy ({copy_gbs:.0f} GB/s) |")
    log("|---|---|---|---|---|---|---|")
    for r in results:
        log(f"| {r['kernel']} | {r['dtype']} | {r['shape']} | {r['bytes'] / 1e6:.1f} | "
            f"{r['time_us']:.1f} | {r['GBs']:.0f} | {r['fraction_of_copy_bw']:.2f} |")


if __name__ == "__main__":
    main()
