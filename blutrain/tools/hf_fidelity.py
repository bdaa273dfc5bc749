#!/usr/bin/env python3
"""hf_fidelity.py: BluTrain's GPT-2 against Hugging Face transformers' GPT2LMHeadModel.

Runs `blutrain fidelity-dump` (our model, initialised from a seed or a checkpoint, one seeded
batch: weights in Hugging Face layout + our logits, loss and gradients in fp32), loads
GPT2LMHeadModel from the very same model.safetensors/config.json, runs the same batch in fp32
(TF32 off, eager attention), and compares logits, loss and every parameter gradient.

Usage (on the GPU machine, from the repository root, after building):
  python3 blutrain/tools/hf_fidelity.py --blutrain build/blutrain/blutrain [--model d12]
      [--device cuda] [--batch-size 4] [--seq-len 64] [--out out/fidelity] [--json fidelity.json]
Prints a table and a JSON line of metrics (fidelity.fp32.*); exits 1 when a tolerance is exceeded.
"""
import argparse
import json
import subprocess
import sys

# fp32 tolerances. Both sides compute in fp32 with different summation orders; errors grow with
# depth and with the reduction lengths (K = 768..3072, T for attention, B*T for weight grads).
LOSS_REL_TOL = 1e-5
LOGITS_ABS_TOL = 2e-3      # logits are O(1..10)
GRAD_REL_L2_TOL = 2e-3     # ||g_ours - g_hf|| / ||g_hf|| per parameter tensor


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blutrain", default="build/blutrain/blutrain", help="the blutrain program")
    ap.add_argument("--model", default="d12")
    ap.add_argument("--device", default="cuda", help="device for both our run and the HF run")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--checkpoint", default="", help="compare from a blutrain checkpoint instead of a fresh init")
    ap.add_argument("--out", default="out/fidelity")
    ap.add_argument("--json", default="", help="also write the metrics JSON here")
    ap.add_argument("--skip-dump", action="store_true", help="reuse an existing dump in --out")
    args = ap.parse_args()

    if not args.skip_dump:
        cmd = [args.blutrain, "fidelity-dump", "--model", args.model, "--device", args.device, "--precision", "fp32",
               "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len), "--seed", str(args.seed),
               "--out-dir", args.out]
        if args.checkpoint:
            cmd += ["--checkpoint", args.checkpoint]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)

    import torch
    import torch.nn.functional as F
    from safetensors.torch import load_file
    from transformers import GPT2LMHeadModel

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(args.device if args.device != "cpu" else "cpu")
    try:
        model = GPT2LMHeadModel.from_pretrained(args.out, torch_dtype=torch.float32, attn_implementation="eager")
    except TypeError:  # older transformers
        model = GPT2LMHeadModel.from_pretrained(args.out, torch_dtype=torch.float32)
    model.to(dev).eval()  # eval: no dropout (the config has none anyway); gradients still flow
    batch = load_file(f"{args.out}/batch.safetensors")
    ours = load_file(f"{args.out}/ours.safetensors")
    idx = batch["idx"].to(dev)
    targets = batch["targets"].to(dev)
    logits = model(input_ids=idx).logits.float()
    V = logits.shape[-1]
    # Our targets are already the next tokens (no shift), so the loss is computed here, not by HF.
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    loss.backward()

    rows = []
    ok = True
    our_loss = ours["loss"].item()
    loss_rel = abs(our_loss - loss.item()) / abs(loss.item())
    ok &= loss_rel <= LOSS_REL_TOL
    rows.append(("loss", f"{our_loss:.7f} vs {loss.item():.7f}", f"rel {loss_rel:.2e}", loss_rel <= LOSS_REL_TOL))
    our_logits = ours["logits"].to(dev)
    logits_diff = (our_logits - logits.detach()).abs().max().item()
    ok &= logits_diff <= LOGITS_ABS_TOL
    rows.append(("logits", f"{tuple(our_logits.shape)}", f"max abs {logits_diff:.2e}", logits_diff <= LOGITS_ABS_TOL))

    worst_grad = 0.0
    for name, p in model.transformer.named_parameters():
        key = "grad." + name
        if key not in ours:
            print(f"missing gradient {key} in our dump", file=sys.stderr)
            ok = False
            continue
        g_hf = p.grad.detach().float()
        g_ours = ours[key].to(dev)
        if g_ours.shape != g_hf.shape:
            print(f"{key}: shape {tuple(g_ours.shape)} vs HF {tuple(g_hf.shape)}", file=sys.stderr)
            ok = False
            continue
        denom = g_hf.norm().item()
        rel = (g_ours - g_hf).norm().item() / denom if denom > 0 else (g_ours.norm().item())
        worst_grad = max(worst_grad, rel)
        good = rel <= GRAD_REL_L2_TOL
        ok &= good
        if not good or name.startswith(("wte", "wpe", "h.0.", "ln_f")):
            rows.append((key, f"|g| {denom:.3e}", f"rel L2 {rel:.2e}, max abs {(g_ours - g_hf).abs().max().item():.2e}", good))

    print(f"\n| quantity | value | difference | ok |\n|---|---|---|---|")
    for name, val, diff, good in rows:
        print(f"| {name} | {val} | {diff} | {'yes' if good else 'NO'} |")
    metrics = {
        "fidelity.fp32.loss_rel_diff": loss_rel,
        "fidelity.fp32.logits_max_abs_diff": logits_diff,
        "fidelity.fp32.grad_max_rel_l2": worst_grad,
        "fidelity.fp32.pass": 1 if ok else 0,
    }
    print(json.dumps(metrics))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(metrics, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
