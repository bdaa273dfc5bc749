#!/usr/bin/env python3
"""torch_llama_block.py: the PyTorch reference of bench/comp/llama_block_bench.cpp (Note [Llama block
benchmark]): the same Llama-style block in stock PyTorch, on the same weights, batch and rotary tables
(read from the safetensors files llama_block_bench wrote), timed eager and under torch.compile, and
checked against ours.

Usage: python3 bench/torch_llama_block.py <dir> [--modes fp32,bf16] [--profile]
  <dir> holds llama_block.json and llama_block_<mode>.safetensors (llama_block_bench --out-dir).
Writes <dir>/torch_llama_block.json (metrics comp.llama.<mode>.torch_eager_ms, torch_compile_ms,
ratio_vs_torch_compile, max_grad_rel_l2_vs_torch, ...; per-tensor differences) and prints a table.
--profile: one more step of each (after the timing) under torch.profiler, grouped by kernel family
(bench/e2e/kernel_families.py, the table blutrain's CUPTI tracer shares) to
<dir>/torch_llama_block_<mode>_{eager,compile}_trace.json, beside llama_block_bench --profile's.

The block, as Hugging Face's LlamaDecoderLayer writes it: nn.Linear without bias; LlamaRMSNorm
(x in float32: x * rsqrt(mean(x^2) + eps), cast back, times the weight); rotary with rotate_half on
cos/sin tables of [T, D] (ours [T, D/2], repeated: the same angles); F.scaled_dot_product_attention
with is_causal=True; MLP down(silu(gate(x)) * up(x)). One step, as ours: gradients to None,
y = block(x), loss = mean(y.float()^2), loss.backward(); no optimizer.
Settings matched to ours (the mode): fp32 = strict fp32 matmuls (allow_tf32 False for matmul and
cuDNN: PyTorch's default; SDPA picks its fp32 kernel, memory-efficient attention, whose fp32 path is
3xTF32 like ours); tf32 = allow_tf32 True; bf16 = the whole block in bfloat16 (parameters, batch,
activations; the loss reduced in fp32), PyTorch's default bf16 GEMM settings. torch.compile in its
default mode on a function that returns the loss (the backward is AOTAutograd's compiled graph).
Timing as ours: warm-up steps (compilation in torch.compile's first, its time reported apart), then
one CUDA-event pair per step around it on the current stream, no host sync in the loop, the median.
Peak: torch.cuda.max_memory_allocated after reset_peak_memory_stats before the warm-up.

Numerics: per tensor (loss, y, every gradient) ||a - b|| / ||b|| and max |a - b|, for ours (eager
step 1, and the compiled step when it ran) and torch.compile against PyTorch eager, and all of them
against a float64 evaluation of the same block on the same (upcast) inputs. numerics_ok: ours (eager, and each compiled plan
that ran) is no further from float64 than twice PyTorch eager's distance plus a floor per mode (fp32
1e-6, tf32 1e-4, bf16 1e-3), for every tensor.
torch_compile_cg_ms: torch.compile(mode="reduce-overhead") (CUDA graphs), reported beside with
compiled[_env]_ratio_vs_torch_compile_cg; the ratios above use the default mode.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_timing import median_ms  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "e2e"))
from kernel_families import breakdown, profile_one_step  # noqa: E402

try:
    from safetensors.torch import load_file
except ImportError:  # the device's PyTorch had it in sessions 6-14; without it, the format is simple
    def load_file(path):
        """{name: tensor} of a safetensors file: 8-byte little-endian header size, JSON header, data."""
        kinds = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16, "F16": torch.float16,
                 "I32": torch.int32, "I64": torch.int64, "U8": torch.uint8}
        with open(path, "rb") as f:
            blob = f.read()
        n = int.from_bytes(blob[:8], "little")
        header = json.loads(blob[8:8 + n])
        out = {}
        for name, v in header.items():
            if name == "__metadata__":
                continue
            begin, end = v["data_offsets"]
            raw = bytearray(blob[8 + n + begin:8 + n + end])
            out[name] = torch.frombuffer(raw, dtype=kinds[v["dtype"]]).reshape(v["shape"]).clone()
        return out

DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16}
FLOORS = {"fp32": 1e-6, "tf32": 1e-4, "bf16": 1e-3}
PARAMS = ["attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down"]


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, dim, heads, hidden, eps):
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim, eps), RMSNorm(dim, eps)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.w_gate, self.w_up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.w_down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        hd = c // self.heads
        h = self.attn_norm(x)
        q = self.wq(h).view(b, t, self.heads, hd).transpose(1, 2)
        k = self.wk(h).view(b, t, self.heads, hd).transpose(1, 2)
        v = self.wv(h).view(b, t, self.heads, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.wo(a)
        m = self.mlp_norm(x)
        return x + self.w_down(F.silu(self.w_gate(m)) * self.w_up(m))

    def load_ours(self, tensors):
        """Parameters from llama_block_bench's w.<name> tensors (ours [out, in] = nn.Linear's)."""
        mods = {"attn_norm": self.attn_norm, "mlp_norm": self.mlp_norm}
        with torch.no_grad():
            for name in PARAMS:
                dst = mods[name].weight if name in mods else getattr(self, name).weight
                src = tensors["w." + name]
                assert dst.shape == src.shape, (name, dst.shape, src.shape)
                dst.copy_(src)

    def named_grads(self):
        mods = {"attn_norm": self.attn_norm, "mlp_norm": self.mlp_norm}
        return {name: (mods[name].weight if name in mods else getattr(self, name).weight).grad for name in PARAMS}


def diff(a, b):
    """(||a - b|| / ||b||, max |a - b|) in float64."""
    a, b = a.detach().double().flatten().cpu(), b.detach().double().flatten().cpu()
    d = a - b
    n = float(b.norm())
    return (float(d.norm()) / n if n > 0 else float(d.norm())), float(d.abs().max())


def set_mode(mode):
    tf32 = mode == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    return {"matmul.allow_tf32": tf32, "cudnn.allow_tf32": tf32,
            "matmul.allow_bf16_reduced_precision_reduction":
                bool(torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction)}


def write_trace(path, step):
    """One step of `step` under torch.profiler, its kernel-family breakdown to `path`."""
    wall = []
    recs = profile_one_step(step, wall)
    with open(path, "w") as fh:
        json.dump(breakdown(recs, wall[0], top=40), fh, indent=1)


def run_mode(d, mode, cfg, ours, profile=False):
    dev = torch.device("cuda")
    st = load_file(os.path.join(d, f"llama_block_{mode}.safetensors"))
    dtype = DTYPES[mode]
    settings = set_mode(mode)
    torch.manual_seed(0)
    block = LlamaBlock(cfg["dim"], cfg["heads"], cfg["hidden"], 1e-6).to(dev, dtype)
    block.load_ours(st)
    x = st["x"].to(dev)
    cos, sin = (torch.cat([st["rope." + n], st["rope." + n]], -1).to(dev) for n in ("cos", "sin"))
    assert x.dtype == dtype and block.wq.weight.dtype == dtype

    def loss_of(inp):
        return block(inp, cos, sin).float().pow(2).mean()

    compiled = torch.compile(loss_of)

    def make_step(fn):
        def step():
            for p in block.parameters():
                p.grad = None
            loss = fn(x)
            loss.backward()
            return loss
        return step

    def values(step):
        loss = step()
        torch.cuda.synchronize()
        v = {"loss": loss.detach().reshape(1).cpu()}  # on the host: not in the timed steps' peak
        v.update({"grad." + n: g.detach().cpu() for n, g in block.named_grads().items()})
        return v

    m, warm, iters = {}, cfg["warmup"], cfg["iters"]
    eager_step, compile_step = make_step(loss_of), make_step(compiled)
    ref = values(eager_step)
    with torch.no_grad():
        ref["y"] = block(x, cos, sin).cpu()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    m["torch_eager_ms"] = median_ms(eager_step, warm, iters)
    m["torch_eager_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    t0 = time.time()
    got_compile = values(compile_step)  # the compilation
    m["torch_compile_warmup_s"] = time.time() - t0
    torch.cuda.reset_peak_memory_stats()
    m["torch_compile_ms"] = median_ms(compile_step, warm, iters)
    m["torch_compile_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    if profile:
        write_trace(os.path.join(d, f"torch_llama_block_{mode}_eager_trace.json"), eager_step)
        write_trace(os.path.join(d, f"torch_llama_block_{mode}_compile_trace.json"), compile_step)
    for p in block.parameters():
        p.grad = None
    # torch.compile with CUDA graphs (mode="reduce-overhead"): the default mode above launches from
    # the host every step (its host gap shows in --profile), while our compiled step replays without
    # host work; this variant is the fair GPU-bound reference. Reported beside, not in the ratios
    # above (the reference is torch.compile's default); a failure is recorded, not fatal.
    try:
        cg = torch.compile(loss_of, mode="reduce-overhead")
        cg_step = make_step(cg)
        t0 = time.time()
        for _ in range(3):  # cudagraph trees record on a later call than the first
            cg_step()
        torch.cuda.synchronize()
        m["torch_compile_cg_warmup_s"] = time.time() - t0
        torch.cuda.reset_peak_memory_stats()
        m["torch_compile_cg_ms"] = median_ms(cg_step, warm, iters)
        m["torch_compile_cg_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        del cg, cg_step
    except Exception as e:  # noqa: BLE001 (any failure of the optional variant)
        print(f"[{mode}] torch.compile(mode='reduce-overhead') failed: {type(e).__name__}: {e}"[:400], flush=True)
    for p in block.parameters():
        p.grad = None

    # The float64 evaluation of the same block on the same inputs.
    block64 = LlamaBlock(cfg["dim"], cfg["heads"], cfg["hidden"], 1e-6).to(dev, torch.float64)
    block64.load_ours({k: v.double() for k, v in st.items() if k.startswith("w.")})
    c64, s64, x64 = cos.double(), sin.double(), x.double()
    y64 = block64(x64, c64, s64)
    loss64 = y64.pow(2).mean()
    loss64.backward()
    exact = {"loss": loss64.detach().reshape(1).cpu(), "y": y64.detach().cpu()}
    exact.update({"grad." + n: g.cpu() for n, g in block64.named_grads().items()})
    del block64, y64, loss64

    ours_of = lambda tag: {k[len(tag) + 1:]: v for k, v in st.items() if k.startswith(tag + ".")}
    candidates = {"ours": ours_of("eager"), "ours_compiled": ours_of("compiled"),
                  "ours_compiled_env": ours_of("compiled_env"), "torch_compile": got_compile, "torch_eager": ref}
    per_tensor = {}
    for who, vals in candidates.items():
        if not vals:
            continue
        for name in sorted(vals):
            if name not in ref:
                continue
            rel_t, max_t = diff(vals[name], ref[name])
            rel_x, max_x = diff(vals[name], exact[name])
            per_tensor.setdefault(who, {})[name] = {"rel_l2_vs_torch": rel_t, "max_abs_vs_torch": max_t,
                                                    "rel_l2_vs_fp64": rel_x, "max_abs_vs_fp64": max_x}
    grads = lambda who, key: max(v[key] for n, v in per_tensor[who].items() if n.startswith("grad."))
    m["max_grad_rel_l2_vs_torch"] = grads("ours", "rel_l2_vs_torch")
    m["max_grad_abs_vs_torch"] = grads("ours", "max_abs_vs_torch")
    m["loss_rel_diff_vs_torch"] = per_tensor["ours"]["loss"]["rel_l2_vs_torch"]
    m["y_rel_l2_vs_torch"] = per_tensor["ours"]["y"]["rel_l2_vs_torch"]
    m["max_grad_rel_l2_vs_fp64"] = grads("ours", "rel_l2_vs_fp64")
    m["torch_max_grad_rel_l2_vs_fp64"] = grads("torch_eager", "rel_l2_vs_fp64")
    m["torch_compile_max_grad_rel_l2_vs_torch"] = grads("torch_compile", "rel_l2_vs_torch")
    for tag in ("compiled", "compiled_env"):
        if "ours_" + tag in per_tensor:
            for ref_name in ("torch", "fp64"):
                m[f"{tag}_max_grad_rel_l2_vs_{ref_name}"] = grads("ours_" + tag, "rel_l2_vs_" + ref_name)
    floor = FLOORS[mode]
    ok = True
    for who in [w for w in ("ours", "ours_compiled", "ours_compiled_env") if w in per_tensor]:
        for name, v in per_tensor[who].items():
            bound = 2 * per_tensor["torch_eager"][name]["rel_l2_vs_fp64"] + floor
            ok = ok and v["rel_l2_vs_fp64"] <= bound
    m["numerics_ok"] = 1 if ok else 0
    # Ratios: reference time / ours (> 1: ours is faster); ours = the compiled step when it ran.
    p = f"comp.llama.{mode}."
    ours_best = ours.get(p + "compiled_ms", ours.get(p + "captured_ms"))
    if ours_best:
        m["ratio_vs_torch_compile"] = m["torch_compile_ms"] / ours_best
        m["ratio_vs_torch_eager"] = m["torch_eager_ms"] / ours_best
    if ours.get(p + "eager_ms"):
        m["eager_ratio_vs_torch_eager"] = m["torch_eager_ms"] / ours[p + "eager_ms"]
    if ours.get(p + "compiled_env_ms"):  # llama_block_bench --plan-env: the second plan variant
        m["compiled_env_ratio_vs_torch_compile"] = m["torch_compile_ms"] / ours[p + "compiled_env_ms"]
    if "torch_compile_cg_ms" in m:
        for key in ("compiled_ms", "compiled_env_ms"):
            if ours.get(p + key):
                m[key.replace("_ms", "") + "_ratio_vs_torch_compile_cg"] = m["torch_compile_cg_ms"] / ours[p + key]
    torch._dynamo.reset()
    del block, compiled, ref, got_compile, exact, candidates
    torch.cuda.empty_cache()
    return {p + k: v for k, v in m.items()}, per_tensor, settings


def table(metrics, ours, modes):
    rows = [("mode", "ours eager", "captured", "compiled", "torch eager", "torch.compile", "t.compile cg", "vs t.compile",
             "launches", "grad relL2 vs torch", "vs fp64 (torch's)", "ok")]
    f = lambda v, fmt: "-" if v is None else format(v, fmt)
    for mode in modes:
        p = f"comp.llama.{mode}."
        g = lambda k: metrics.get(p + k, ours.get(p + k))
        launches = f"{f(g('launches_before'), 'd')} -> {f(g('launches_after'), 'd')}"
        rows.append((mode, f(g("eager_ms"), ".2f"), f(g("captured_ms"), ".2f"), f(g("compiled_ms"), ".2f"),
                     f(g("torch_eager_ms"), ".2f"), f(g("torch_compile_ms"), ".2f"), f(g("torch_compile_cg_ms"), ".2f"),
                     f(g("ratio_vs_torch_compile"), ".3f"), launches, f(g("max_grad_rel_l2_vs_torch"), ".2e"),
                     f"{f(g('max_grad_rel_l2_vs_fp64'), '.1e')} ({f(g('torch_max_grad_rel_l2_vs_fp64'), '.1e')})",
                     f(g("numerics_ok"), "d")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--modes", default="", help="default: every mode llama_block_bench wrote")
    ap.add_argument("--profile", action="store_true", help="kernel-family traces of one step each")
    a = ap.parse_args()
    with open(os.path.join(a.dir, "llama_block.json")) as fh:
        ours_json = json.load(fh)
    cfg, ours = ours_json["config"], ours_json["metrics"]
    modes = [m for m in (a.modes.split(",") if a.modes else DTYPES)
             if os.path.exists(os.path.join(a.dir, f"llama_block_{m}.safetensors"))]
    if not modes:
        sys.exit(f"torch_llama_block: no llama_block_<mode>.safetensors in {a.dir}")
    metrics, per_tensor, settings = {}, {}, {}
    for mode in modes:
        m, pt, s = run_mode(a.dir, mode, cfg, ours, a.profile)
        metrics.update(m)
        per_tensor[mode], settings[mode] = pt, s
        print(f"[{mode}] " + ", ".join(f"{k.split('.')[-1]}={v:.4g}" for k, v in m.items()), flush=True)
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "config": cfg,
           "settings": settings, "metrics": metrics, "per_tensor": per_tensor}
    with open(os.path.join(a.dir, "torch_llama_block.json"), "w") as fh:
        json.dump(out, fh, indent=1, sort_keys=True)
    print(table(metrics, ours, modes))
    return 0 if all(metrics.get(f"comp.llama.{m}.numerics_ok") == 1 for m in modes) else 1


if __name__ == "__main__":
    sys.exit(main())
