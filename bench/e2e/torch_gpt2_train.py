#!/usr/bin/env python3
"""torch_gpt2_train.py: the project's own PyTorch GPT-2 trainer, the reference blutrain races.

Stock modules only (nn.Linear, nn.LayerNorm, nn.Embedding, F.scaled_dot_product_attention with
is_causal=True, F.gelu(approximate="tanh"), F.cross_entropy, fused torch.optim.AdamW), GPT-2 init,
weight tying, and blutrain's defaults (blutrain/src/train/config.cpp, optimizer.cpp): lr 6e-4,
min lr 0.1x by cosine after a linear warm-up, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on the
2-D weights only (wte, wpe, linear weights), global grad-norm clip 1.0.

Note [Padded vocabulary, PyTorch side]
As blutrain (blutrain/include/blutrain/gpt2.h), wte has 50304 rows (50257 real), the head is tied
to it and produces 50304 logits. blutrain masks the 47 padded columns to -1e30; here the loss reads
logits[..., :50257] (the same loss; the padded rows get exactly zero gradient either way), so
losses and gradients are those of the 50257-token model in both programs.

--head weight instead multiplies by the first 50257 rows of wte (no padded logits at all, an
unaligned N in the GEMM); measure both when the memory race is close: eager's reshape of the
sliced logits copies them (+B*T*50257 elements), torch.compile fuses the slice into its loss.

Note [Same batches as blutrain]
--data DIR reads llm.c shards exactly as blutrain's DataLoader (world size 1): the *_train_*.bin
files of the one prefix in DIR sorted by path; a cursor starts at token 0 of shard 0; a batch is
tokens [pos, pos + B*T] (inputs [pos, pos+B*T), targets shifted by one); pos += B*T, and when
pos + B*T + 1 exceeds the shard it moves to the next shard (wrapping to the first).

Modes: fp32 (TF32 off for matmul and cuDNN), tf32 (on), bf16 (autocast bf16, fp32 master
weights). --compile wraps the model in torch.compile. Writes --json: per-step losses, median step
time after --warmup steps, tok/s, max_memory_allocated, device memory in use (total - free), and
the warm-up (compile) time kept apart from tok/s. --profile-step K: torch.profiler trace of step
K (1-based, as blutrain's --profile-step) grouped into kernel families (kernel_families.py).

Note [DDP reference]
--ddp runs the same model, optimizer and step under torch.nn.parallel.DistributedDataParallel, one
process per GPU, launched by torchrun (torch.distributed.run), whose environment (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR/PORT) it reads:
  python3 -m torch.distributed.run --standalone --nproc_per_node 2 torch_gpt2_train.py --ddp ...
NCCL on GPUs (Gloo with --device cpu), 25 MB buckets (--ddp-bucket-mb), gradient_as_bucket_view,
static_graph in eager (off under --compile: TorchDynamo's DDPOptimizer splits the graph at bucket
boundaries and static_graph is not reliably supported with it; --ddp-static-graph on|off forces
it). DDP wraps the model first and torch.compile wraps DDP (the order PyTorch documents). --batch
stays per rank: rank r reads sequences [r*B, (r+1)*B) of a global batch of WORLD*B sequences
(synthetic: the same seeded stream cut into WORLD*B*T + 1 tokens; shards: blutrain's DataLoader
striding, its window at cursor + r*B*T), so --ddp on one process equals the run without it. A step
is timed on every rank (synchronize, step, synchronize) and the step time is the slowest rank's;
tok/s = WORLD*B*T / the median of those after --warmup (the rule of the one-GPU run). Losses are
the mean over ranks. Rank 0 writes the JSON, plus world_size, tok_s_per_gpu, the per-rank peaks
(peak_gib is their maximum) and the DDP settings. NVLink multicast stays off (NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 unless the caller set them).
"""
import argparse, glob, inspect, json, math, os, statistics, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_families import breakdown, profile_one_step  # noqa: E402
from shards import ShardLoader  # noqa: E402

VOCAB, PADDED_VOCAB = 50257, 50304
MODELS = {"tiny": (4, 4, 128, 256), "d12": (12, 12, 768, 1024), "d24": (24, 16, 1024, 1024),
          "d36": (36, 20, 1280, 1024), "d48": (48, 25, 1600, 1024)}


def model_shape(name, ap):
    """(layers, heads, width, context) of a named model or of "LxHxC" (context 1024)."""
    if name in MODELS:
        return MODELS[name]
    parts = name.split("x")
    if len(parts) == 3 and all(q.isdigit() and int(q) > 0 for q in parts):
        L, H, C = (int(q) for q in parts)
        if C % H == 0:
            return L, H, C, 1024
    ap.error(f"--model {name}: not one of {', '.join(sorted(MODELS))} nor LxHxC with H dividing C")


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, n_layer, n_head, C, block_size):
        super().__init__()
        self.wte = nn.Embedding(PADDED_VOCAB, C)
        self.wpe = nn.Embedding(block_size, C)
        self.h = nn.ModuleList(Block(C, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        self.lm_head = nn.Linear(C, PADDED_VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        self.register_buffer("pos", torch.arange(block_size), persistent=False)
        self.n_layer = n_layer
        self.head = "slice"

    def init_gpt2(self, seed, device="cpu"):
        # blutrain's GPT2::init_weights: N(0, 0.02); the c_proj weights N(0, 0.02/sqrt(2L)); biases 0,
        # LayerNorm weights 1; the padded embedding rows exactly 0.
        g = torch.Generator(device=device).manual_seed(seed)
        std_res = 0.02 / math.sqrt(2.0 * self.n_layer)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "ln_" in name and name.endswith(".weight"):
                    p.fill_(1.0)
                elif p.dim() == 1:
                    p.zero_()
                else:
                    std = std_res if name.endswith(("attn_proj.weight", "mlp_proj.weight")) else 0.02
                    p.copy_(torch.randn(p.shape, generator=g, device=device) * std)
            self.wte.weight[VOCAB:].zero_()

    def load_hf(self, path):
        """Hugging Face GPT-2 names (optionally 'transformer.'-prefixed); Conv1D weights [in, out]."""
        from safetensors.torch import load_file
        sd = load_file(path)
        get = lambda n: (sd[n] if n in sd else sd["transformer." + n]).float()  # noqa: E731
        hf = {"attn.c_attn": "c_attn", "attn.c_proj": "attn_proj", "mlp.c_fc": "c_fc", "mlp.c_proj": "mlp_proj"}
        with torch.no_grad():
            self.wte.weight.zero_()
            self.wte.weight[:VOCAB].copy_(get("wte.weight"))
            self.wpe.weight.copy_(get("wpe.weight")[: self.wpe.weight.shape[0]])
            for i, b in enumerate(self.h):
                p = f"h.{i}."
                for ln in ("ln_1", "ln_2"):
                    getattr(b, ln).weight.copy_(get(p + ln + ".weight"))
                    getattr(b, ln).bias.copy_(get(p + ln + ".bias"))
                for hn, ours in hf.items():
                    lin = getattr(b, ours)
                    lin.weight.copy_(get(p + hn + ".weight").t())
                    lin.bias.copy_(get(p + hn + ".bias"))
            self.ln_f.weight.copy_(get("ln_f.weight"))
            self.ln_f.bias.copy_(get("ln_f.bias"))

    def save_hf(self, path):
        """The inverse of load_hf: Hugging Face names, Conv1D [in, out], the 50257 real wte rows."""
        from safetensors.torch import save_file
        hf = {"c_attn": "attn.c_attn", "attn_proj": "attn.c_proj", "c_fc": "mlp.c_fc", "mlp_proj": "mlp.c_proj"}
        out = {"wte.weight": self.wte.weight[:VOCAB], "wpe.weight": self.wpe.weight,
               "ln_f.weight": self.ln_f.weight, "ln_f.bias": self.ln_f.bias}
        for i, b in enumerate(self.h):
            p = f"h.{i}."
            for ln in ("ln_1", "ln_2"):
                out[p + ln + ".weight"] = getattr(b, ln).weight
                out[p + ln + ".bias"] = getattr(b, ln).bias
            for ours, hn in hf.items():
                out[p + hn + ".weight"] = getattr(b, ours).weight.t()
                out[p + hn + ".bias"] = getattr(b, ours).bias
        save_file({k: v.detach().float().contiguous().cpu() for k, v in out.items()}, path, metadata={"format": "pt"})

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(self.pos[:T])
        for b in self.h:
            x = b(x)
        x = self.ln_f(x)
        if self.head == "weight":
            logits = F.linear(x, self.wte.weight[:VOCAB])  # [B, T, 50257]: unaligned N, no logits copy
        else:
            logits = self.lm_head(x)[..., :VOCAB]          # aligned GEMM, a strided view of the logits
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def learning_rate(step, max_lr, min_lr, warmup, max_steps):
    """blutrain/src/train/optimizer.cpp learning_rate(), step 0-based."""
    if step < warmup:
        return max_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    ratio = (step - warmup) / max(1, max_steps - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (max_lr - min_lr)


def dump_grads(model, path):
    """The raw (unclipped) gradients under blutrain's names: "grad." + the Hugging Face GPT-2 name,
    linear weights [out, in] and wte with its 50304 padded rows, as blutrain's fused engine dumps
    them (--dump 'grad.*'), so fidelity.py compares step-1 gradients tensor by tensor."""
    from safetensors.torch import save_file
    hf = {"c_attn": "attn.c_attn", "attn_proj": "attn.c_proj", "c_fc": "mlp.c_fc", "mlp_proj": "mlp.c_proj"}
    out = {}
    for name, p in model.named_parameters():
        if p.grad is None:
            continue
        parts = name.split(".")
        if parts[0] == "h" and parts[2] in hf:
            parts = parts[:2] + hf[parts[2]].split(".") + parts[3:]
        out["grad." + ".".join(parts)] = p.grad.detach().float().cpu().contiguous()
    save_file(out, path)


NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def ddp_setup(a, ap):
    """torchrun's environment -> (rank, world, device); joins the process group (Note [DDP reference])."""
    missing = [k for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        ap.error(f"--ddp needs torchrun's environment ({', '.join(missing)} unset): python3 -m torch.distributed.run "
                 "--standalone --nproc_per_node N torch_gpt2_train.py --ddp ...")
    for k, v in NO_MULTICAST.items():
        os.environ.setdefault(k, v)
    import torch.distributed as dist
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    if a.device == "cuda":
        dev = torch.device("cuda", local)
        torch.cuda.set_device(dev)
    else:
        dev = torch.device(a.device)
    kw = {}
    if dev.type == "cuda" and "device_id" in inspect.signature(dist.init_process_group).parameters:
        kw["device_id"] = dev  # torch >= 2.3: the communicator is bound to this rank's GPU at once
    dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo", **kw)
    assert dist.get_world_size() == world and dist.get_rank() == rank
    return rank, world, dev


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="d12", help=f"{', '.join(sorted(MODELS))} or LxHxC (L layers, H heads, "
                    "width C, context 1024: blutrain's Note [Model shapes])")
    ap.add_argument("--init-on-device", action="store_true",
                    help="build and initialise the weights on --device (its own random stream: not blutrain's "
                         "init values; for the size sweep, where a CPU init of billions of weights is minutes)")
    ap.add_argument("--mode", default="bf16", choices=["fp32", "tf32", "bf16"])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--block-size", type=int, default=0,
                    help="context (position table rows); 0 = the model's own (as blutrain --block-size)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of the timing (compile included)")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--lr-warmup-steps", type=int, default=5, help="as blutrain --warmup-steps")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--data", default="synthetic", help="'synthetic' or a directory of llm.c shards")
    ap.add_argument("--data-name", default="")
    ap.add_argument("--init-from", default="", help="Hugging Face GPT-2 safetensors")
    ap.add_argument("--save-init", default="", help="write the GPT-2 init (HF names and layout) here and exit")
    ap.add_argument("--profile-step", type=int, default=0)
    ap.add_argument("--profile-json", default="")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--head", default="slice", choices=["slice", "weight"], help="Note [Padded vocabulary, PyTorch side]")
    ap.add_argument("--dump-grads", default="", help="write the gradients of --dump-step (before clipping) to this "
                    "safetensors file, as blutrain --dump 'grad.*' names and lays them out")
    ap.add_argument("--dump-step", type=int, default=1)
    ap.add_argument("--sdpa", default="auto", choices=["auto", "math"],
                    help="math: SDPA's strict composite (T x T scores in the compute dtype) instead of the "
                         "backend PyTorch picks (fp32 on sm80+: the 3xTF32 memory-efficient kernel)")
    ap.add_argument("--blas", default="default", choices=["default", "cublas", "cublaslt"],
                    help="torch.backends.cuda.preferred_blas_library: another faithful GEMM library (other "
                         "kernels, other k-sum orders) for the fidelity floor (Note [Fidelity noise floor])")
    ap.add_argument("--json", default="")
    ap.add_argument("--ddp", action="store_true", help="DistributedDataParallel under torchrun (Note [DDP reference])")
    ap.add_argument("--ddp-bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb (PyTorch's default 25)")
    ap.add_argument("--ddp-static-graph", default="auto", choices=["auto", "on", "off"],
                    help="auto: on in eager, off under --compile")
    a = ap.parse_args()

    rank, world = 0, 1
    if a.ddp:
        if a.save_init:
            ap.error("--save-init writes one file: run it without --ddp")
        rank, world, dev = ddp_setup(a, ap)
    else:
        dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    lead = rank == 0  # the rank that prints, writes the JSON and dumps
    tf32 = a.mode == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    # Only the allow_tf32 switches (PyTorch >= 2.9 refuses a mix of these and the fp32_precision API).
    if a.blas != "default" and cuda:
        torch.backends.cuda.preferred_blas_library(a.blas)
    torch.manual_seed(a.seed)
    if a.sdpa == "math":  # held for the whole run (main's lifetime)
        from torch.nn.attention import SDPBackend, sdpa_kernel
        sdpa_ctx = sdpa_kernel(SDPBackend.MATH)
        sdpa_ctx.__enter__()

    L, H, C, ctx = model_shape(a.model, ap)
    if a.block_size:
        ctx = a.block_size
    assert a.save_init or a.seq <= ctx, f"--seq {a.seq} exceeds the {a.model} context {ctx}"
    init_dev = dev if a.init_on_device else torch.device("cpu")
    with init_dev:
        model = GPT2(L, H, C, ctx)
    model.init_gpt2(a.seed, init_dev)
    model.head = a.head
    if a.init_from:
        model.load_hf(a.init_from)
    if a.save_init:
        model.save_hf(a.save_init)
        print(f"wrote {a.save_init}")
        return
    model.to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps, **({"fused": True} if cuda else {}))
    net = model
    static_graph = None
    if a.ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP
        static_graph = a.ddp_static_graph == "on" or (a.ddp_static_graph == "auto" and not a.compile)
        net = DDP(model, device_ids=[dev.index] if cuda else None, bucket_cap_mb=a.ddp_bucket_mb,
                  gradient_as_bucket_view=True, static_graph=static_graph)
    fwd = torch.compile(net) if a.compile else net
    min_lr = a.lr * a.min_lr_ratio

    B, T = a.batch, a.seq
    lo, hi = rank * B * T, (rank + 1) * B * T  # this rank's part of the global batch
    if a.data == "synthetic":
        gen = torch.Generator(device=dev).manual_seed(a.seed)
        def next_batch():
            t = torch.randint(0, VOCAB, (world * B * T + 1,), device=dev, generator=gen)
            return t[lo:hi].view(B, T), t[lo + 1:hi + 1].view(B, T)
    else:
        loader = ShardLoader(a.data, a.data_name, world * B, T, VOCAB)
        def next_batch():
            x, y = loader.next_batch()
            return (torch.from_numpy(x[lo:hi]).view(B, T).to(dev, non_blocking=True),
                    torch.from_numpy(y[lo:hi]).view(B, T).to(dev, non_blocking=True))

    amp = torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=a.mode == "bf16")
    state = {"loss": None}

    def run_step(step):
        lr = learning_rate(step, a.lr, min_lr, a.lr_warmup_steps, a.steps)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = next_batch()
        with amp:
            loss = fwd(x.long(), y.long())
        loss.backward()
        if a.dump_grads and step + 1 == a.dump_step and lead:  # DDP: the averaged (global) gradients
            dump_grads(model, a.dump_grads)
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        state["loss"] = loss.detach()

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    losses, step_ms, used_max, profile = [], [], 0, None
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t_start = time.perf_counter()
    for step in range(a.steps):
        if a.profile_step > 0 and step + 1 == a.profile_step and cuda and lead:
            wall = []
            recs = profile_one_step(lambda: run_step(step), wall)
            profile = breakdown(recs, wall[0])
            ms = wall[0]
        else:
            sync()
            t0 = time.perf_counter()
            run_step(step)
            sync()
            ms = (time.perf_counter() - t0) * 1e3
        loss = state["loss"]
        if world > 1:  # outside the timed window: the global loss, the mean over ranks
            loss = loss.float().clone()
            torch.distributed.all_reduce(loss)
            loss = loss / world
        losses.append(float(loss.item()))
        step_ms.append(ms)
        if cuda:
            free, total = torch.cuda.mem_get_info(dev)
            used_max = max(used_max, total - free)
        if lead:
            print(f"step {step + 1}/{a.steps} loss {losses[-1]:.6f} {ms:.1f} ms", flush=True)
    total_s = time.perf_counter() - t_start

    gib = 1024.0 ** 3
    peak = torch.cuda.max_memory_allocated(dev) / gib if cuda else None
    used = used_max / gib if cuda else None
    own_step_ms = step_ms
    per_rank = [per_rank_record(peak, used, step_ms)]
    if world > 1:
        # A step ends when its slowest rank does; the per-rank peaks go to rank 0.
        t = torch.tensor(step_ms, dtype=torch.float64, device=dev)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        step_ms = [float(v) for v in t.tolist()]
        per_rank = [None] * world
        torch.distributed.all_gather_object(per_rank, per_rank_record(peak, used, own_step_ms))
    timed = [ms for i, ms in enumerate(step_ms) if i >= a.warmup and i + 1 != a.profile_step]
    med = statistics.median(timed) if timed else float("nan")
    fw = "torch_compile" if a.compile else "torch_eager"
    out = {
        "framework": fw, "mode": a.mode, "model": a.model, "batch": B, "seq": T, "steps": a.steps,
        "warmup": a.warmup, "data": a.data, "init_from": a.init_from, "head": a.head,
        "hyper": {"lr": a.lr, "min_lr_ratio": a.min_lr_ratio, "lr_warmup_steps": a.lr_warmup_steps,
                  "weight_decay": a.weight_decay, "betas": [a.beta1, a.beta2], "eps": a.eps,
                  "grad_clip": a.grad_clip, "seed": a.seed},
        "losses": losses, "step_ms": step_ms, "median_step_ms": med,
        "tok_s": world * B * T / (med / 1e3) if timed else None,
        "warmup_s": sum(step_ms[: a.warmup]) / 1e3, "total_s": total_s,
        "peak_gib": max_or_none(r["peak_gib"] for r in per_rank),
        "device_used_gib": max_or_none(r["device_used_gib"] for r in per_rank),
        "torch": torch.__version__, "gpu": torch.cuda.get_device_name(dev) if cuda else "cpu",
        "world_size": world,
    }
    if a.ddp:
        out.update({
            "global_batch": world * B, "tok_s_per_gpu": out["tok_s"] / world if out["tok_s"] else None,
            "step_ms_rule": "max over ranks of each step's time (synchronize, step, synchronize)",
            "peak_gib_per_rank": [r["peak_gib"] for r in per_rank],
            "device_used_gib_per_rank": [r["device_used_gib"] for r in per_rank],
            "step_ms_per_rank": [r["step_ms"] for r in per_rank],
            "ddp": {"backend": torch.distributed.get_backend(), "bucket_cap_mb": a.ddp_bucket_mb,
                    "gradient_as_bucket_view": True, "static_graph": static_graph,
                    "compile_wraps_ddp": bool(a.compile),
                    "optimize_ddp": str(getattr(torch._dynamo.config, "optimize_ddp", None)) if a.compile else None,
                    "env": {k: os.environ.get(k) for k in NO_MULTICAST}},
        })
    if profile is not None:
        profile.update({"framework": fw, "mode": a.mode, "step": a.profile_step})
        out["profile"] = profile
        if a.profile_json:
            json.dump(profile, open(a.profile_json, "w"), indent=1)
    if a.json and lead:
        json.dump(out, open(a.json, "w"), indent=1)
    if lead:
        print(json.dumps({k: out[k] for k in ("framework", "mode", "tok_s", "median_step_ms", "peak_gib",
                                              "device_used_gib", "warmup_s", "world_size")}))
    if a.ddp:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def per_rank_record(peak, used, step_ms):
    return {"peak_gib": peak, "device_used_gib": used, "step_ms": step_ms}


def max_or_none(values):
    v = [x for x in values if x is not None]
    return max(v) if v else None


if __name__ == "__main__":
    main()
