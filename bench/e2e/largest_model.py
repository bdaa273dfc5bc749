#!/usr/bin/env python3
"""largest_model.py: the largest GPT-2-shaped model (bf16, AdamW) that trains on one GPU, for
blutrain and for the project's PyTorch program (issue 10). Note [Largest model sweep].

Each framework trains a ladder of GPT-2-shaped models (LxHxC: L layers, H heads of 64..128, width
C, context 1024, vocabulary 50304), smallest first, a few steps each at B1 T1024 in bf16 with AdamW
(the race's hyperparameters, synthetic data), and stops at the first one that does not train. A
rung trains when the run exits 0 and reports finite losses for every step. Writes RESULTS/
largest_model.json (every rung's outcome, peak and tok/s; metrics
scale.largest_bf16.<framework>.params_b / .shape / .peak_gib) and largest_model.md.
  python3 bench/e2e/largest_model.py --blutrain build/blutrain/blutrain --out /tmp/lm --results RES
"""
import argparse, json, math, os, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_e2e import run_blutrain, run_torch  # noqa: E402

VOCAB_PADDED = 50304

# Note [Largest model sweep]
# What bounds the size at B1 is the per-parameter state: blutrain keeps fp32 weights, fp32
# gradients, two fp32 moments and a bf16 copy (18 B a parameter), PyTorch's autocast program fp32
# weights, gradients and moments (16 B; its bf16 casts are transient). On a 141 GB H200 that is
# ~7.8B against ~8.8B parameters before activations, so the ladder steps 0.8B at width 4096 near
# that point; the small rungs (d36, d48, 2B, 4B) show the run works at all before the big ones.
# PyTorch runs eager: at B1 its activations are a small part of the peak, and torch.compile's
# minutes of compilation per rung would not change which rung fails (say so next to the result).
# Its weights are built and initialised on the GPU (--init-on-device), as blutrain's are.
LADDER = ["36x20x1280", "48x25x1600", "40x32x2048", "48x32x2560", "32x32x4096", "36x32x4096",
          "40x32x4096", "44x32x4096", "48x32x4096", "56x32x4096", "64x32x4096"]


def params_of(shape, ctx=1024):
    L, H, C = (int(q) for q in shape.split("x"))
    per_layer = 12 * C * C + 13 * C  # qkv, proj, fc, fc proj weights and biases; two LayerNorms
    return L * per_layer + VOCAB_PADDED * C + ctx * C + 2 * C


def trained(rec, steps):
    losses = rec.get("losses") or []
    return "error" not in rec and len(losses) >= steps and all(x is not None and math.isfinite(x) for x in losses)


def why_not(rec):
    e = rec.get("error", "losses missing or not finite")
    for key in ("out of memory", "OutOfMemory", "CUDA_ERROR", "cudaError", "illegal memory access", "timeout"):
        if key.lower() in e.lower():
            return key
    lines = [ln for ln in e.splitlines() if ln.strip()]
    return (lines[-1] if lines else e)[:300]


def main():
    ap = argparse.ArgumentParser(description="largest GPT-2-shaped model that trains on one GPU")
    ap.add_argument("--blutrain", default="build/blutrain/blutrain")
    ap.add_argument("--out", default="/tmp/blu-largest")
    ap.add_argument("--results", default="")
    ap.add_argument("--frameworks", default="blutrain,torch_eager")
    ap.add_argument("--ladder", default=",".join(LADDER))
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--mode", default="bf16")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per run")
    ap.add_argument("--torch-program", default=os.path.join(HERE, "torch_gpt2_train.py"))
    ap.add_argument("--blutrain-variant", action="append", default=[], metavar="NAME=ARGS",
                    help="one more framework: blutrain with these flags, e.g. "
                         "'blutrain_recompute=--recompute block' (metrics scale.largest_<mode>.NAME.*)")
    a = ap.parse_args()
    variants = {}
    for v in a.blutrain_variant:
        name, sep, args = v.partition("=")
        if not sep or not name.startswith("blutrain_"):
            ap.error(f"--blutrain-variant {v!r}: expected blutrain_NAME=ARGS")
        variants[name] = args
    a.results = a.results or a.out
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.results, exist_ok=True)
    # run_e2e's runners read these.
    a.seq, a.block_size, a.data, a.warmup, a.lr_warmup_steps, a.profile_step = 1024, 0, "synthetic", 1, 1, 0
    a.extra_blutrain_args, a.extra_torch_args = "", "--init-on-device"
    a.timeout_blutrain = a.timeout_torch = a.timeout_compile = a.timeout
    ladder = [s for s in a.ladder.split(",") if s]
    t0 = time.time()
    rungs, metrics = {}, {}
    for fw in [f for f in a.frameworks.split(",") if f] + list(variants):
        rungs[fw] = []
        a.extra_blutrain_args = variants.get(fw, "")
        for shape in ladder:
            a.model = shape
            print(f"[{time.time() - t0:5.0f}s] {fw} {shape} ({params_of(shape) / 1e9:.2f}B) ...", flush=True)
            if fw.startswith("blutrain"):
                rec = run_blutrain(a, a.mode, profile_step=0, steps=a.steps, tag=f"largest_{fw}_{shape}")
            else:
                rec = run_torch(a, a.mode, fw == "torch_compile", profile_step=0, steps=a.steps, tag=f"largest_{fw}_{shape}")
            ok = trained(rec, a.steps)
            row = {"shape": shape, "params": params_of(shape), "trained": ok, "seconds": round(rec.get("seconds", 0), 1),
                   "peak_gib": rec.get("peak_gib"), "device_used_gib": rec.get("device_used_gib"),
                   "tok_s": rec.get("tok_s"), "why": None if ok else why_not(rec)}
            rungs[fw].append(row)
            print(f"    {'trained' if ok else 'did not train: ' + str(row['why'])}, peak {row['peak_gib']} GiB", flush=True)
            if not ok:
                break
        best = [r for r in rungs[fw] if r["trained"]]
        if best:
            b = best[-1]
            metrics.update({f"scale.largest_{a.mode}.{fw}.params_b": b["params"] / 1e9,
                            f"scale.largest_{a.mode}.{fw}.peak_gib": b["peak_gib"]})
            metrics[f"scale.largest_{a.mode}.{fw}.shape"] = b["shape"]
        failed = [r for r in rungs[fw] if not r["trained"]]
        metrics[f"scale.largest_{a.mode}.{fw}.ladder_top_reached"] = int(not failed)
    cfg = {"mode": a.mode, "batch": a.batch, "seq": 1024, "steps": a.steps, "data": "synthetic",
           "optimizer": "AdamW (fused on the PyTorch side)", "torch": "eager, weights built on the GPU",
           "ladder": ladder, "blutrain_variants": variants}
    json.dump({"metrics": metrics, "config": cfg, "rungs": rungs, "seconds": time.time() - t0},
              open(os.path.join(a.results, "largest_model.json"), "w"), indent=1)
    md = [f"# Largest GPT-2-shaped model that trains on one GPU ({a.mode}, AdamW, B{a.batch} T1024, {a.steps} steps)",
          "", "| framework | shape | params | trained | peak GiB | tok/s | why not |", "|---|---|---|---|---|---|---|"]
    for fw, rows in rungs.items():
        for r in rows:
            md.append(f"| {fw} | {r['shape']} | {r['params'] / 1e9:.2f}B | {'yes' if r['trained'] else 'no'} | "
                      f"{r['peak_gib'] if r['peak_gib'] is not None else '-'} | "
                      f"{round(r['tok_s']) if r['tok_s'] else '-'} | {r['why'] or ''} |")
    open(os.path.join(a.results, "largest_model.md"), "w").write("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
