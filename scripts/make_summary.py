#!/usr/bin/env python3
"""Builds bench/results/<gpu>/summary.json (the results contract of ARCHITECTURE.md) from the JSON
files a device run wrote, derives the ratio metrics that need two files (ours vs PyTorch), compares
with the last committed summary (regressions > 5% flagged) and prints a short table last."""
import argparse, datetime, glob, json, os, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dist_report import derive as derive_dist  # noqa: E402

def git(*args):
    try:
        return subprocess.run(["git", "-c", "safe.directory=*", *args], capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        return None

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--gpu-name", default="unknown")
    ap.add_argument("--tag", default="unknown")
    ap.add_argument("--committed", default="")
    ap.add_argument("--out", required=True)
    ap.add_argument("--build-rc", default="0")
    ap.add_argument("--tests", default="0/0")
    ap.add_argument("--suite", default="all")
    a = ap.parse_args()

    metrics, sources = {}, {}
    for f in sorted(glob.glob(os.path.join(a.results, "*.json"))):
        try:
            d = json.load(open(f))
        except Exception as e:
            print(f"unreadable {f}: {e}")
            continue
        # {"metrics": {...}} (the bench contract) or a flat {"metric": number} object.
        flat = d.get("metrics") if isinstance(d.get("metrics"), dict) else d
        for k, v in flat.items():
            if isinstance(v, (int, float)) and v is not None:
                metrics[k] = v
                sources[k] = os.path.basename(f)

    # Ratios that need ours and PyTorch's numbers from two programs of the same device call.
    def ratio(name, ours, theirs):
        if ours in metrics and theirs in metrics and metrics[theirs]:
            metrics[name] = metrics[ours] / metrics[theirs]
    # torch_attention.py reports the fastest SDPA backend of the same call (named in its rows).
    for d in ("", "d128."):
        ratio(f"attention.bf16.{d}fwdbwd_ratio_vs_torch_sdpa", f"attention.bf16.{d}fwdbwd_tflops",
              f"torch_sdpa.bf16.{d}fwdbwd_tflops")
        ratio(f"attention.bf16.{d}fwd_ratio_vs_torch_sdpa", f"attention.bf16.{d}fwd_tflops",
              f"torch_sdpa.bf16.{d}fwd_tflops")
    # Kernels: ours vs PyTorch's best variant (eager or compiled) at f32, same byte model.
    for k in ["layernorm_fwd", "layernorm_bwd", "gelu_fwd", "gelu_bwd", "softmax_fwd", "softmax_bwd",
              "xent_fused", "adamw", "embedding_bwd"]:
        theirs = [v for n, v in metrics.items()
                  if n.startswith(f"torch.{k}") and n.endswith(".f32.GBs")]
        if f"kernels.{k}.GBs" in metrics and theirs:
            metrics[f"kernels.{k}.ratio_vs_torch"] = metrics[f"kernels.{k}.GBs"] / max(theirs)

    # End to end (bench/e2e/run_e2e.py writes these itself; derived again here when the blutrain
    # and PyTorch numbers came from separate files of the same call).
    for mode in ("fp32", "tf32", "bf16"):
        for fw in ("torch_eager", "torch_compile"):
            ratio(f"e2e.{mode}.ratio_vs_{fw}", f"e2e.{mode}.tok_s", f"e2e.{mode}.{fw}.tok_s")
            ratio(f"e2e.{mode}.peak_ratio_vs_{fw}", f"e2e.{mode}.peak_gib", f"e2e.{mode}.{fw}.peak_gib")

    # Data parallel (scripts/dist_report.py writes these itself; derived again here over the merged
    # files): dist.ddp.<mode>.scaling_2gpu, .torch_ddp_tok_s (the faster PyTorch DDP variant),
    # .ratio_vs_torch_ddp, .peak_ratio_vs_torch_ddp, .meets_goal.
    derive_dist(metrics)

    commit = os.environ.get("BLU_COMMIT") or git("rev-parse", "HEAD") or "unknown"
    dirty_env = os.environ.get("BLU_DIRTY")
    if dirty_env is not None:
        dirty = dirty_env == "1"
    else:
        st = git("status", "--porcelain")
        dirty = bool(st) if st is not None else True
    tp, tt = (a.tests.split("/") + ["0"])[:2]
    metrics["device.tests_passed"] = int(tp or 0)
    metrics["device.tests_total"] = int(tt or 0)
    metrics["device.build_ok"] = 1 if a.build_rc == "0" else 0
    summary = {"gpu": a.gpu_name, "commit": commit, "dirty": dirty,
               "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "suite": a.suite, "metrics": dict(sorted(metrics.items()))}
    json.dump(summary, open(a.out, "w"), indent=1)

    old = {}
    if a.committed and os.path.exists(a.committed):
        try:
            old = json.load(open(a.committed)).get("metrics", {})
        except Exception:
            old = {}
    print(f"summary: {a.gpu_name} @ {commit[:10]}{' (dirty)' if dirty else ''} suite={a.suite} "
          f"build={'ok' if a.build_rc == '0' else 'FAILED'} tests={a.tests}")
    print(f"{'metric':58s} {'now':>10s} {'before':>10s}")
    for k, v in summary["metrics"].items():
        if k.startswith("sass.") and k != "sass.violations":
            continue
        before = old.get(k)
        flag = ""
        higher_better = any(s in k for s in ("ratio", "tflops", "tok_s", "fraction", "GBs", "agree", "scaling")) \
            and not any(s in k for s in ("peak_ratio", "used_ratio", "loss_diff"))
        if before and higher_better and v < 0.95 * before:
            flag = "  REGRESSION"
        if k.endswith(".cases_failed") and v > 0:   # the GEMM property test: any wrong problem
            flag = "  FAILING"
        b = f"{before:10.4g}" if isinstance(before, (int, float)) else f"{'-':>10s}"
        print(f"{k:58s} {v:10.4g} {b}{flag}")

if __name__ == "__main__":
    main()
