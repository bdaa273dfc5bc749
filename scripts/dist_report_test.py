#!/usr/bin/env python3
"""dist_report_test.py: CPU check (no GPU, no torch) of the device-dist results path: fabricated run
directories (made-up round numbers, in a temporary folder only) through scripts/dist_report.py,
scripts/make_summary.py and scripts/import-device-results.sh (into a temporary BLU_RESULTS_ROOT),
checking every dist.ddp.<mode>.* metric the issue names and the merge over an earlier summary.
  python3 scripts/dist_report_test.py      (exit 0 = pass)"""
import json, os, subprocess, sys, tarfile, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import dist_report  # noqa: E402

B, T, STEPS, WARMUP = 16, 1024, 20, 5


def check(cond, what):
    if not cond:
        raise SystemExit(f"dist_report_test FAILED: {what}")
    print(f"ok: {what}")


def close(a, b, rel=1e-9):
    return a is not None and b is not None and abs(a - b) <= rel * max(abs(a), abs(b))


def blutrain_run(runs, tag, global_tok_s, peak, ranks, rc=0, state=None, loss_scale=1.0, comm=None):
    d = os.path.join(runs, tag)
    os.makedirs(d)
    open(os.path.join(d, "rc"), "w").write(f"{rc}\n")
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"event": "config", "step": 0}) + "\n")
        for s in range(1, STEPS + 1):
            # warm-up steps 3x slower; later steps alternate +-1% around the rate (median = the rate)
            rate = global_tok_s / 3 if s <= WARMUP else global_tok_s * (1.01 if s % 2 else 0.99)
            if s == STEPS:
                rate = global_tok_s
            rec = {"event": "train", "step": s, "loss": (11.0 - 0.01 * s) * loss_scale,
                   "step_ms": ranks * B * T / rate * 1e3, "tokens_per_s": rate, "mem_peak_gib": peak - 1.0}
            if state is not None:
                rec["mem_allocated_gib"] = state + (0.5 if s < STEPS else 0.0)  # the last step's counts
            if ranks > 1:
                rec["rank_mem_gib"] = peak
            if comm is not None:  # (comm_ms, comm_exposed_ms or None): warm-up steps 10x
                rec["comm_ms"] = comm[0] * (10 if s <= WARMUP else 1)
                if comm[1] is not None:
                    rec["comm_exposed_ms"] = comm[1] * (10 if s <= WARMUP else 1)
            f.write(json.dumps(rec) + "\n")


def torch_run(runs, tag, tok_s, peak, world, compiled, rc=0, write=True, skipped=None):
    d = os.path.join(runs, tag)
    os.makedirs(d)
    if skipped:
        open(os.path.join(d, "skipped"), "w").write(skipped)
        return
    open(os.path.join(d, "rc"), "w").write(f"{rc}\n")
    if not write:
        return
    med = world * B * T / tok_s * 1e3
    j = {"framework": "torch_compile" if compiled else "torch_eager", "mode": tag.split(".")[0], "batch": B,
         "seq": T, "steps": STEPS, "warmup": WARMUP, "losses": [11.0] * STEPS, "step_ms": [med] * STEPS,
         "median_step_ms": med, "tok_s": tok_s, "warmup_s": 30.0 if compiled else 1.0, "peak_gib": peak,
         "device_used_gib": peak + 1, "world_size": world, "gpu": "fabricated"}
    if world > 1:
        j.update({"global_batch": world * B, "tok_s_per_gpu": tok_s / world, "peak_gib_per_rank": [peak, peak - 0.5],
                  "ddp": {"backend": "nccl", "bucket_cap_mb": 25.0, "gradient_as_bucket_view": True,
                          "static_graph": not compiled}})
    json.dump(j, open(os.path.join(d, "torch.json"), "w"))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        runs = os.path.join(tmp, "runs")
        os.makedirs(runs)
        # fp32: both PyTorch variants, eager faster; one-GPU PyTorch runs too.
        blutrain_run(runs, "fp32.1gpu", 50000.0, 10.0, 1)
        blutrain_run(runs, "fp32.2gpu", 99000.0, 10.5, 2, comm=(8.0, None))
        torch_run(runs, "fp32.torch_ddp_eager", 100000.0, 20.0, 2, False)
        torch_run(runs, "fp32.torch_ddp_compile", 90000.0, 14.0, 2, True)
        torch_run(runs, "fp32.torch_1gpu_eager", 52000.0, 19.0, 1, False)
        torch_run(runs, "fp32.torch_1gpu_compile", 50000.0, 13.0, 1, True)
        # bf16: compile faster; our scaling 1.96x and ahead: the goal is met.
        blutrain_run(runs, "bf16.1gpu", 400000.0, 7.0, 1)
        blutrain_run(runs, "bf16.2gpu", 784000.0, 7.5, 2)
        torch_run(runs, "bf16.torch_ddp_eager", 600000.0, 15.0, 2, False)
        torch_run(runs, "bf16.torch_ddp_compile", 700000.0, 10.0, 2, True)
        # tf32: compile skipped by the budget, eager timed out before its JSON.
        blutrain_run(runs, "tf32.1gpu", 150000.0, 11.0, 1)
        blutrain_run(runs, "tf32.2gpu", 290000.0, 11.5, 2)
        torch_run(runs, "tf32.torch_ddp_eager", 0, 0, 2, False, rc=124, write=False)
        torch_run(runs, "tf32.torch_ddp_compile", 0, 0, 2, True, skipped="skipped: 30s of the 570s budget left")
        blutrain_run(runs, "bf16.2gpu.bucket100", 780000.0, 7.6, 2)
        blutrain_run(runs, "bf16.2gpu.gather", 790000.0, 7.7, 2)
        blutrain_run(runs, "bf16.2gpu.nch4", 800000.0, 7.6, 2)
        blutrain_run(runs, "fp32.2gpu.autograd.zero0", 70000.0, 26.0, 2, state=2.0)
        blutrain_run(runs, "fp32.2gpu.autograd.zero2", 69000.0, 25.0, 2, state=1.25, loss_scale=1.000001,
                     comm=(20.0, 5.0))

        res = os.path.join(tmp, "logs", "results")
        out = os.path.join(res, "dist_fp32_tf32_bf16.json")
        p = subprocess.run([sys.executable, os.path.join(HERE, "dist_report.py"), runs, "fp32,tf32,bf16", out,
                            "2x Fabricated GPU", "--config", '{"steps": 20}'], capture_output=True, text=True)
        check(p.returncode == 0, f"dist_report.py runs (rc {p.returncode}: {p.stderr[-500:]})")
        print(p.stdout)
        doc = json.load(open(out))
        m = doc["metrics"]
        check(doc["config"] == {"steps": 20} and doc["gpu"] == "2x Fabricated GPU", "config and gpu kept")
        check(close(m["dist.ddp.fp32.tok_s"], 99000.0) and close(m["dist.ddp.fp32.tok_s_1gpu"], 50000.0),
              "blutrain tok/s = median after the warm-up steps (1 and 2 GPUs)")
        check(close(m["dist.ddp.fp32.scaling_2gpu"], 1.98), "scaling_2gpu = 2-GPU / 1-GPU tok/s")
        check(close(m["dist.ddp.fp32.torch_ddp_tok_s"], 100000.0) and m["dist.ddp.fp32.torch_ddp_is_compile"] == 0,
              "the reference is the faster PyTorch DDP variant (fp32: eager)")
        check(close(m["dist.ddp.fp32.ratio_vs_torch_ddp"], 0.99) and close(m["dist.ddp.fp32.ratio_vs_torch_ddp_compile"], 1.1),
              "ratio_vs_torch_ddp = ours / the faster variant; per-variant ratios too")
        check(close(m["dist.ddp.fp32.peak_gib"], 10.5) and close(m["dist.ddp.fp32.peak_ratio_vs_torch_ddp"], 10.5 / 20.0),
              "peak: the largest rank's, against the reference variant's")
        check(close(m["dist.ddp.fp32.torch_scaling_2gpu_eager"], 100000.0 / 52000.0), "PyTorch's own 2-GPU scaling")
        check(m["dist.ddp.fp32.meets_goal"] == 0 and m["dist.ddp.bf16.meets_goal"] == 1,
              "meets_goal: fp32 behind PyTorch (0), bf16 1.96x and ahead (1)")
        check(close(m["dist.ddp.bf16.torch_ddp_tok_s"], 700000.0) and m["dist.ddp.bf16.torch_ddp_is_compile"] == 1
              and close(m["dist.ddp.bf16.ratio_vs_torch_ddp"], 784000.0 / 700000.0), "bf16: compile is the reference")
        check("dist.ddp.tf32.torch_ddp_tok_s" not in m and "dist.ddp.tf32.ratio_vs_torch_ddp" not in m
              and close(m["dist.ddp.tf32.scaling_2gpu"], 290000.0 / 150000.0),
              "tf32 without a PyTorch number: no ratio, scaling still there")
        check(close(m["dist.ddp.bf16.bucket100.tok_s"], 780000.0), "bucket runs reported")
        check(close(m["dist.ddp.bf16.gather.tok_s"], 790000.0)
              and close(m["dist.ddp.bf16.gather.scaling_2gpu"], 790000.0 / m["dist.ddp.bf16.tok_s_1gpu"])
              and "dist.ddp.bf16.bucket100.scaling_2gpu" not in m, "the gather A/B run and its scaling")
        check("bf16.2gpu.gather: 790000 tok/s" in p.stdout, "the gather run in the table")
        check(close(m["dist.ddp.bf16.nch4.tok_s"], 800000.0)
              and close(m["dist.ddp.bf16.nch4.scaling_2gpu"], 800000.0 / m["dist.ddp.bf16.tok_s_1gpu"])
              and "bf16.2gpu.nch4: 800000 tok/s" in p.stdout, "the NCCL channel A/B runs")
        check(close(m["dist.zero2.fp32.state_gib"], 1.25) and close(m["dist.zero0.fp32.state_gib"], 2.0)
              and close(m["dist.zero2.fp32.peak_gib"], 25.0) and close(m["dist.zero2.fp32.tok_s"], 69000.0),
              "ZeRO runs: tok/s, peak and the last step's allocated memory")
        check(close(m["dist.ddp.fp32.comm_ms"], 8.0) and "dist.ddp.fp32.comm_exposed_ms" not in m
              and "dist.ddp.fp32.comm_hidden" not in m, "comm time without an exposed time: no overlap")
        check(close(m["dist.zero2.fp32.comm_ms"], 20.0) and close(m["dist.zero2.fp32.comm_exposed_ms"], 5.0)
              and close(m["dist.zero2.fp32.comm_hidden"], 0.75), "device-timed comm: medians after warm-up, hidden share")
        check(close(m["dist.zero2.fp32.loss_rel_diff_vs_zero0"], 1e-6, 1e-3) and "dist.zero0.fp32.loss_rel_diff_vs_zero0" not in m,
              "ZeRO runs: losses against the --zero 0 run")
        check("fp32 --zero 2 (autograd engine): 69000 tok/s, peak 25.00 GiB, after the step 1.25 GiB" in p.stdout,
              "the ZeRO runs in the table")
        check(doc["runs"]["tf32.torch_ddp_compile"]["skipped"].startswith("skipped")
              and doc["runs"]["tf32.torch_ddp_eager"]["rc"] == 124, "skipped and timed-out runs recorded")
        check("124/skip" in p.stdout and "bf16 MET" in p.stdout and "fp32 not met" in p.stdout,
              "the table shows rc, skips and the goal verdicts")

        # make_summary.py over the results folder (derive() again), against a committed summary
        committed = os.path.join(tmp, "committed.json")
        json.dump({"metrics": {"dist.ddp.fp32.ratio_vs_torch_ddp": 1.2}}, open(committed, "w"))
        summary = os.path.join(tmp, "files_at", "summary.json")
        os.makedirs(os.path.dirname(summary))
        env = dict(os.environ, BLU_COMMIT="0123456789abcdef", BLU_DIRTY="0")
        p = subprocess.run([sys.executable, os.path.join(HERE, "make_summary.py"), "--results", res, "--gpu-name",
                            "2x Fabricated GPU", "--tag", "fabx2", "--committed", committed, "--out", summary,
                            "--tests", "2/2", "--suite", "dist"], capture_output=True, text=True, env=env)
        check(p.returncode == 0, f"make_summary.py runs (rc {p.returncode}: {p.stderr[-500:]})")
        s = json.load(open(summary))
        sm = s["metrics"]
        for mode in ("fp32", "bf16"):
            for k in ("tok_s", "scaling_2gpu", "ratio_vs_torch_ddp", "torch_ddp_tok_s"):
                check(close(sm[f"dist.ddp.{mode}.{k}"], m[f"dist.ddp.{mode}.{k}"]), f"summary.json has dist.ddp.{mode}.{k}")
        check(s["suite"] == "dist" and s["commit"] == "0123456789abcdef" and s["dirty"] is False, "summary provenance")
        check("REGRESSION" in p.stdout.split("dist.ddp.fp32.ratio_vs_torch_ddp ")[1].splitlines()[0],
              "a ratio 5% below the committed one is flagged")
        # make_summary derives from raw metrics alone (files of separate programs)
        raw = {"dist.ddp.tf32.tok_s_2gpu": 300.0, "dist.ddp.tf32.tok_s_1gpu": 150.0,
               "dist.ddp.tf32.torch_ddp_compile.tok_s": 250.0}
        dist_report.derive(raw)
        check(close(raw["dist.ddp.tf32.tok_s"], 300.0) and close(raw["dist.ddp.tf32.scaling_2gpu"], 2.0)
              and close(raw["dist.ddp.tf32.ratio_vs_torch_ddp_compile"], 1.2)
              and "dist.ddp.tf32.ratio_vs_torch_ddp" not in raw and "dist.ddp.tf32.meets_goal" not in raw,
              "derive() with one PyTorch variant: its own ratio, no reference and no verdict")
        raw["dist.ddp.tf32.torch_ddp_eager.tok_s"] = 200.0
        dist_report.derive(raw)
        check(close(raw["dist.ddp.tf32.ratio_vs_torch_ddp"], 1.2) and raw["dist.ddp.tf32.meets_goal"] == 1
              and raw["dist.ddp.tf32.torch_ddp_is_compile"] == 1, "derive() from raw metrics of separate files")

        # import-device-results.sh: the dist tarball into BLU_RESULTS_ROOT/<tag>, merged over an earlier summary
        with open(os.path.join(tmp, "logs", "summary_table.txt"), "w") as f:
            f.write("fabricated table\n")
        with tarfile.open(os.path.join(tmp, "files_at", "dist-results.tar.gz"), "w:gz") as tf:
            tf.add(os.path.join(tmp, "logs"), arcname="logs")
            tf.add(runs, arcname="runs")
        root = os.path.join(tmp, "results_root")
        os.makedirs(os.path.join(root, "fabx2"))
        json.dump({"gpu": "2x Fabricated GPU", "commit": "oldcommit", "metrics": {"dist.nccl.tests_passed": 3,
                   "dist.ddp.fp32.tok_s": 1.0}}, open(os.path.join(root, "fabx2", "summary.json"), "w"))
        p = subprocess.run(["bash", os.path.join(HERE, "import-device-results.sh"), os.path.join(tmp, "files_at"),
                            "fabx2"], capture_output=True, text=True, env=dict(os.environ, BLU_RESULTS_ROOT=root))
        check(p.returncode == 0, f"import-device-results.sh takes dist-results.tar.gz (rc {p.returncode}: {p.stderr[-500:]})")
        merged = json.load(open(os.path.join(root, "fabx2", "summary.json")))
        check(merged["metrics"]["dist.nccl.tests_passed"] == 3 and merged["metric_commits"]["dist.nccl.tests_passed"] == "oldcommit",
              "earlier metrics carried with their commit")
        check(close(merged["metrics"]["dist.ddp.fp32.tok_s"], 99000.0) and "dist.ddp.fp32.tok_s" not in merged["metric_commits"],
              "new metrics replace the old ones")
        check(os.path.exists(os.path.join(root, "fabx2", "raw", "dist_fp32_tf32_bf16.json")), "raw JSON copied")
        md = open(os.path.join(root, "fabx2", "summary.md")).read()
        check("dist.ddp.bf16.ratio_vs_torch_ddp" in md and "fabricated table" in md, "summary.md written")
    print("dist_report_test passed")


if __name__ == "__main__":
    main()
