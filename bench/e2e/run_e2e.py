#!/usr/bin/env python3
"""run_e2e.py: the end-to-end race, GPT-2 124M (d12) training with blutrain against the project's
PyTorch trainer (torch_gpt2_train.py) in eager mode and under torch.compile, for each precision
mode, every run in its own process, one after another, same configuration (B, T, steps, warm-up,
data, hyperparameters). Writes
  OUT/<mode>.<framework>.json     each run's raw output (blutrain: its --summary-json + losses)
  RESULTS/e2e.json                {"metrics": {e2e.<mode>.tok_s, .ratio_vs_torch_eager, ...}, config, runs}
  RESULTS/e2e.md, RESULTS/e2e.png the table and the bars (tok/s and peak GiB per mode and framework)
  RESULTS/e2e_profile.<mode>.<framework>.json  per-kernel-family breakdowns (--profile-step)
A failed or timed-out run is recorded (e2e.<mode>.<framework>.error = 1 and its log tail) and the
harness goes on. Usage (device):
  python3 bench/e2e/run_e2e.py --blutrain build/blutrain/blutrain --out /tmp/e2e --results RES
"""
import argparse, json, os, shlex, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from e2e_report import derive_metrics, write_md, write_png  # noqa: E402

FRAMEWORKS = ("blutrain", "torch_eager", "torch_compile")


def run_logged(cmd, log_path, timeout):
    """Runs cmd with stdout+stderr to log_path; returns (rc, seconds, tail). rc 124 = timed out."""
    t0 = time.time()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        log.flush()
        try:
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
                p.wait()
                rc = 124
        except OSError as e:
            log.write(f"cannot start: {e}\n")
            rc = 127
    secs = time.time() - t0
    try:
        tail = open(log_path, errors="replace").read()[-1500:]
    except OSError:
        tail = ""
    return rc, secs, tail


def read_train_log(metrics_jsonl):
    """blutrain's metrics.jsonl "train" events: (losses, step_ms) in step order."""
    losses, step_ms = [], []
    try:
        for line in open(metrics_jsonl):
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if d.get("event") == "train" and "loss" in d:
                losses.append(d["loss"])
                step_ms.append(d.get("step_ms"))
    except OSError:
        pass
    return losses, step_ms


def median_after_warmup(step_ms, warmup, skip_steps):
    """The harness's one timing rule for every framework: median of the steps after `warmup`,
    the profiled steps (1-based) left out. blutrain --profile-step K traces step K (CUPTI) and runs
    step K+1 eagerly with an event after every op (Note [Step profile] in trainer.cpp): both are
    left out; PyTorch profiles step K only."""
    t = [ms for i, ms in enumerate(step_ms) if i >= warmup and i + 1 not in skip_steps and ms]
    return statistics.median(t) if t else None


def blutrain_cmd(a, mode, run_dir, summary, profile_json, steps, warmup_steps, profile_step, data, init_from=""):
    cmd = [a.blutrain, "train", "--model", a.model, "--device", "cuda", "--precision", mode,
           "--batch-size", str(a.batch), "--seq-len", str(a.seq), "--data", data,
           "--cache-dir", os.path.join(a.out, "cache"), "--out-dir", run_dir, "--resume", "none",
           "--no-save", "--no-plot", "--sample-tokens", "0", "--val-every", "-1", "--val-batches", "-1",
           "--max-steps", str(steps), "--warmup-steps", str(warmup_steps), "--summary-json", summary]
    if profile_step > 0:
        cmd += ["--profile-step", str(profile_step), "--profile-json", profile_json]
    if a.block_size:
        cmd += ["--block-size", str(a.block_size)]
    if init_from:
        cmd += ["--init-from", init_from]
    return cmd + shlex.split(a.extra_blutrain_args)


def run_blutrain(a, mode, profile_step=None, steps=None, data=None, init_from="", tag="blutrain"):
    """One blutrain run; returns the run record (tok_s, peak_gib, device_used_gib, losses, ...)."""
    steps = steps or a.steps
    data = data or a.data
    profile_step = a.profile_step if profile_step is None else profile_step
    run_dir = os.path.join(a.out, f"{mode}.{tag}")
    os.makedirs(run_dir, exist_ok=True)
    summary = os.path.join(a.out, f"{mode}.{tag}.summary.json")
    profile_json = os.path.join(a.out, f"{mode}.{tag}.profile.json")
    for f in (summary, profile_json, os.path.join(run_dir, "metrics.jsonl")):
        if os.path.exists(f):
            os.remove(f)
    cmd = blutrain_cmd(a, mode, run_dir, summary, profile_json, steps, a.lr_warmup_steps, profile_step, data,
                       init_from)
    log = os.path.join(a.out, f"{mode}.{tag}.log")
    rc, secs, tail = run_logged(cmd, log, a.timeout_blutrain)
    if rc != 0 and profile_step > 0 and rc != 124:
        # The profiled step is the newest code path: measure without it rather than lose the mode.
        cmd = blutrain_cmd(a, mode, run_dir, summary, profile_json, steps, a.lr_warmup_steps, 0, data, init_from)
        rc2, secs2, tail2 = run_logged(cmd, log + ".noprofile", a.timeout_blutrain)
        if rc2 == 0:
            rc, secs, tail = 0, secs2, tail2 + f"\n(the --profile-step run failed rc={rc}; see {log})"
    rec = {"framework": "blutrain", "mode": mode, "rc": rc, "seconds": secs, "cmd": cmd}
    if rc != 0:
        rec["error"] = f"rc={rc}{' (timeout)' if rc == 124 else ''}: {tail[-800:]}"
        return rec
    try:
        s = json.load(open(summary))
    except (OSError, ValueError) as e:
        rec["error"] = f"no summary json: {e}"
        return rec
    get = lambda k: s.get(f"e2e.{mode}.{k}")  # noqa: E731
    rec.update({"tok_s": get("tok_s"), "peak_gib": get("peak_gib"), "device_used_gib": get("device_used_gib"),
                "launches_per_step": get("launches_per_step"), "fused_engine": get("fused_engine"),
                "summary": s})
    # blutrain's own median skips 3 warm-up steps; the race uses the harness's rule for everyone.
    rec["tok_s_blutrain_summary"] = rec["tok_s"]
    rec["losses"], rec["step_ms"] = read_train_log(os.path.join(run_dir, "metrics.jsonl"))
    med = median_after_warmup(rec["step_ms"], a.warmup, {profile_step, profile_step + 1} if profile_step > 0 else set())
    if med:
        rec["median_step_ms"] = med
        rec["tok_s"] = a.batch * a.seq / (med / 1e3)
    rec["warmup_s"] = sum(ms or 0 for ms in rec["step_ms"][: a.warmup]) / 1e3
    if os.path.exists(profile_json):
        try:
            rec["profile"] = json.load(open(profile_json))
        except ValueError as e:
            rec["profile_error"] = str(e)
    return rec


def run_torch(a, mode, compiled, profile_step=None, steps=None, data=None, init_from="", tag=None):
    fw = "torch_compile" if compiled else "torch_eager"
    tag = tag or fw
    steps = steps or a.steps
    data = data or a.data
    profile_step = a.profile_step if profile_step is None else profile_step
    out_json = os.path.join(a.out, f"{mode}.{tag}.json")
    if os.path.exists(out_json):
        os.remove(out_json)
    cmd = [sys.executable, a.torch_program, "--model", a.model, "--mode", mode,
           "--batch", str(a.batch), "--seq", str(a.seq), "--steps", str(steps), "--warmup", str(a.warmup),
           "--lr-warmup-steps", str(a.lr_warmup_steps), "--data", data, "--json", out_json]
    if compiled:
        cmd.append("--compile")
    if a.block_size:
        cmd += ["--block-size", str(a.block_size)]
    cmd += shlex.split(getattr(a, "extra_torch_args", "") or "")
    if profile_step > 0:
        cmd += ["--profile-step", str(profile_step)]
    if init_from:
        cmd += ["--init-from", init_from]
    log = os.path.join(a.out, f"{mode}.{tag}.log")
    rc, secs, tail = run_logged(cmd, log, a.timeout_compile if compiled else a.timeout_torch)
    rec = {"framework": fw, "mode": mode, "rc": rc, "seconds": secs, "cmd": cmd}
    if rc != 0:
        rec["error"] = f"rc={rc}{' (timeout)' if rc == 124 else ''}: {tail[-800:]}"
        return rec
    try:
        rec.update(json.load(open(out_json)))
    except (OSError, ValueError) as e:
        rec["error"] = f"no json: {e}"
    return rec


def kernel_trace_of(profile):
    """blutrain's profile JSON nests the CUPTI breakdown under "kernel_trace" (next to "op_timing");
    torch_gpt2_train.py's is the breakdown itself."""
    kt = profile.get("kernel_trace") if isinstance(profile, dict) else None
    return kt if isinstance(kt, dict) else profile


def gpu_name():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.strip().splitlines()[0]
    except Exception:
        return "unknown GPU"


def main():
    ap = argparse.ArgumentParser(description="blutrain vs PyTorch GPT-2 end-to-end race")
    ap.add_argument("--blutrain", default="build/blutrain/blutrain")
    ap.add_argument("--out", default="/tmp/blu-e2e", help="raw JSON and logs")
    ap.add_argument("--results", default="", help="e2e.json/md/png go here (default: --out)")
    ap.add_argument("--modes", default="fp32,tf32,bf16")
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    ap.add_argument("--model", default="d12")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--block-size", type=int, default=0, help="context of both models (0: the model's own)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of the timing")
    ap.add_argument("--lr-warmup-steps", type=int, default=5, help="blutrain --warmup-steps (lr schedule)")
    ap.add_argument("--data", default="synthetic", help="synthetic | a directory of llm.c shards")
    ap.add_argument("--profile-step", type=int, default=0,
                    help="kernel breakdown of this step (1-based) in every run; 0 = none; left out of tok/s")
    ap.add_argument("--extra-blutrain-args", default="")
    ap.add_argument("--extra-torch-args", default="", help='e.g. "--head weight"')
    ap.add_argument("--torch-program", default=os.path.join(HERE, "torch_gpt2_train.py"),
                    help="the PyTorch trainer (selftest.py substitutes a fake)")
    ap.add_argument("--reuse-from", default="",
                    help="a directory of an earlier call's <mode>.<fw>.record.json: runs found there without an "
                         "error are loaded, not re-run (one e2e.json over several device calls)")
    ap.add_argument("--timeout-blutrain", type=int, default=150)
    ap.add_argument("--timeout-torch", type=int, default=150)
    ap.add_argument("--timeout-compile", type=int, default=300)
    a = ap.parse_args()
    a.results = a.results or a.out
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.results, exist_ok=True)
    modes = [m for m in a.modes.split(",") if m]
    fws = [f for f in a.frameworks.split(",") if f]
    for f in fws:
        if f not in FRAMEWORKS:
            ap.error(f"unknown framework {f} (one of {', '.join(FRAMEWORKS)})")
    if "blutrain" in fws and not os.access(a.blutrain, os.X_OK):
        print(f"run_e2e: {a.blutrain} is not an executable; blutrain runs will fail", flush=True)

    gpu = gpu_name()
    config = {"gpu": gpu, "model": a.model, "batch": a.batch, "seq": a.seq, "steps": a.steps,
              "timed_after_warmup": a.warmup, "lr_warmup_steps": a.lr_warmup_steps, "data": a.data,
              "block_size": a.block_size or "model's own", "profile_step": a.profile_step, "extra_blutrain_args": a.extra_blutrain_args,
              "extra_torch_args": a.extra_torch_args,
              "hyper": {"lr": 6e-4, "min_lr_ratio": 0.1, "betas": [0.9, 0.95], "eps": 1e-8,
                        "weight_decay": 0.1, "grad_clip": 1.0},
              "tok_s": "B*T / median step time after the warm-up steps (compile time excluded)",
              "peak_gib": "allocator peak (blutrain CachingAllocator / torch.cuda.max_memory_allocated)",
              "device_used_gib": "max over steps of total - free (cudaMemGetInfo): context + workspaces + cache"}
    runs = {}
    t0 = time.time()
    for mode in modes:
        for fw in fws:
            print(f"[{time.time() - t0:5.0f}s] {mode} {fw} ...", flush=True)
            old = reused_record(a.reuse_from, mode, fw)
            if old is not None:
                rec = old
                rec["reused_from_earlier_call"] = True
            elif fw == "blutrain":
                rec = run_blutrain(a, mode)
            else:
                rec = run_torch(a, mode, fw == "torch_compile")
            runs[f"{mode}.{fw}"] = rec
            json.dump(rec, open(os.path.join(a.out, f"{mode}.{fw}.record.json"), "w"), indent=1)
            msg = rec.get("error", "")[:200].replace("\n", " ") if "error" in rec else \
                f"{rec.get('tok_s') or 0:,.0f} tok/s, peak {rec.get('peak_gib') or 0:.2f} GiB, " \
                f"used {rec.get('device_used_gib') or 0:.2f} GiB"
            print(f"[{time.time() - t0:5.0f}s] {mode} {fw}: {msg}", flush=True)
            if isinstance(rec.get("profile"), dict):
                # make_summary.py merges "metrics" only: the step's totals, not every family.
                p = kernel_trace_of(rec["profile"])
                pm = {f"e2e.{mode}.{fw}.profile.{k}": p[k] for k in ("busy_ms", "host_gap_ms", "launches")
                      if isinstance(p.get(k), (int, float)) and not isinstance(p.get(k), bool)}
                json.dump({"metrics": pm, "profile": p},
                          open(os.path.join(a.results, f"e2e_profile.{mode}.{fw}.json"), "w"), indent=1)
            # After every run: a harness killed by its caller's timeout still leaves what it measured.
            md = write_results(a, runs, modes, config, time.time() - t0, png=False)
    md = write_results(a, runs, modes, config, time.time() - t0, png=True)
    print(md)


def reused_record(d, mode, fw):
    """The record of an earlier device call (same script, same config), when it holds a measurement."""
    if not d:
        return None
    path = os.path.join(d, f"{mode}.{fw}.record.json")
    try:
        rec = json.load(open(path))
    except (OSError, ValueError):
        return None
    return rec if "error" not in rec and rec.get("tok_s") else None


def write_results(a, runs, modes, config, seconds, png):
    metrics = derive_metrics(runs, modes)
    slim = {k: {kk: vv for kk, vv in r.items() if kk not in ("profile", "summary")} for k, r in runs.items()}
    doc = {"metrics": metrics, "config": config, "runs": slim, "seconds": seconds}
    tmp = os.path.join(a.results, "e2e.json.tmp")
    json.dump(doc, open(tmp, "w"), indent=1)
    os.replace(tmp, os.path.join(a.results, "e2e.json"))
    md = write_md(os.path.join(a.results, "e2e.md"), runs, modes, config)
    if png:
        try:
            write_png(os.path.join(a.results, "e2e.png"), runs, modes, config)
        except Exception as e:  # matplotlib missing: the numbers matter more
            print(f"run_e2e: no png: {e}")
    return md


if __name__ == "__main__":
    main()
