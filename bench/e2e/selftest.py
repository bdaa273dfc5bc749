#!/usr/bin/env python3
"""selftest.py: CPU check of the e2e harness without a GPU or torch: a fake blutrain (writes the
summary JSON and metrics.jsonl as the real one does) and a fake PyTorch trainer (writes the
torch_gpt2_train.py JSON; the compile variant fails on bf16 to exercise the error path) run through
run_e2e.py; then the metrics, the table, the shard writer/reader and the kernel classifier are
checked. Exit status 0 = pass.  python3 bench/e2e/selftest.py"""
import json, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

FAKE_BLUTRAIN = r'''#!/usr/bin/env python3
import json, os, sys
a = sys.argv[2:]
opt = {a[i][2:]: (a[i + 1] if i + 1 < len(a) and not a[i + 1].startswith("--") else "1")
       for i in range(len(a)) if a[i].startswith("--")}
mode, steps, out = opt["precision"], int(opt["max-steps"]), opt["out-dir"]
if opt.get("model") == "40x32x4096":  # largest_model.py's ladder: the first rung that does not fit
    sys.exit("blutrain: CUDA out of memory allocating 1.2 GiB")
rate = {"fp32": 40000.0, "tf32": 170000.0, "bf16": 300000.0}[mode]
os.makedirs(out, exist_ok=True)
with open(out + "/metrics.jsonl", "w") as f:
    for s in range(steps):
        slow = s == 0 or s + 1 in (int(opt.get("profile-step", 0)), int(opt.get("profile-step", 0)) + 1)
        ms = 16384 / rate * 1000 * (3 if slow else 1)
        loss = (11 - 0.1 * s) * float(os.environ.get("BLU_FAKE_LOSS_SCALE", "1"))  # fidelity's --self-floor
        f.write(json.dumps({"event": "train", "step": s + 1, "loss": loss, "step_ms": ms}) + "\n")
json.dump({f"e2e.{mode}.tok_s": rate, f"e2e.{mode}.peak_gib": 10.0, f"e2e.{mode}.device_used_gib": 11.0,
           f"e2e.{mode}.launches_per_step": 300, f"e2e.{mode}.fused_engine": 1}, open(opt["summary-json"], "w"))
if "profile-json" in opt:
    json.dump({"engine": "fused", "step": int(opt["profile-step"]), "op_timing": {"x": 1},
               "kernel_trace": {"families": {"gemm": {"ms": 30.0, "count": 100}, "other": {"ms": 1.0, "count": 3}},
                                "busy_ms": 31.0, "host_gap_ms": 0.5, "launches": 103}}, open(opt["profile-json"], "w"))
'''

FAKE_TORCH = r'''#!/usr/bin/env python3
import json, sys
a = sys.argv[1:]
opt = {a[i][2:]: (a[i + 1] if i + 1 < len(a) and not a[i + 1].startswith("--") else "1")
       for i in range(len(a)) if a[i].startswith("--")}
if "save-init" in opt:
    open(opt["save-init"], "w").write("fake")
    sys.exit(0)
if "compile" in opt and opt["mode"] == "bf16":
    sys.exit("torch.compile: simulated failure")
if opt.get("model") == "44x32x4096":
    sys.exit("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
rate = {"fp32": 50000.0, "tf32": 150000.0, "bf16": 330000.0}[opt["mode"]] * (1.1 if "compile" in opt else 1)
ms = 16384 / rate * 1000
json.dump({"framework": "torch_compile" if "compile" in opt else "torch_eager", "mode": opt["mode"],
           "tok_s": rate, "median_step_ms": ms, "peak_gib": 20.0 if "compile" not in opt else 12.5,
           "device_used_gib": 21.0, "warmup_s": 1.0,
           "losses": [(11 - 0.1 * s) * (1 + (2e-5 if opt["mode"] == "fp32" else 3e-2)) for s in range(int(opt["steps"]))]}, open(opt["json"], "w"))
'''


def check(cond, what):
    if not cond:
        raise SystemExit(f"selftest FAILED: {what}")


def main():
    from kernel_families import breakdown, classify
    from shards import ShardLoader, read_shard, write_random_shards
    with tempfile.TemporaryDirectory() as d:
        fb, ft = os.path.join(d, "blutrain"), os.path.join(d, "torch_fake.py")
        open(fb, "w").write(FAKE_BLUTRAIN)
        open(ft, "w").write(FAKE_TORCH)
        os.chmod(fb, 0o755)
        res = os.path.join(d, "res")
        r = subprocess.run([sys.executable, os.path.join(HERE, "run_e2e.py"), "--blutrain", fb, "--out",
                            os.path.join(d, "out"), "--results", res, "--steps", "9", "--profile-step", "7",
                            "--torch-program", ft], capture_output=True, text=True, timeout=120)
        print(r.stdout[-3000:], r.stderr[-2000:])
        check(r.returncode == 0, "run_e2e.py exit status")
        m = json.load(open(os.path.join(res, "e2e.json")))["metrics"]
        # Harness timing: steps 6 and 9 (steps 7-8 profiled, steps 1-5 warm-up) at the fake's rate.
        check(abs(m["e2e.fp32.tok_s"] - 40000) < 1, f"fp32 tok_s {m.get('e2e.fp32.tok_s')}")
        check(abs(m["e2e.fp32.ratio_vs_torch_eager"] - 0.8) < 1e-6, "fp32 ratio vs eager")
        check(abs(m["e2e.fp32.ratio_vs_torch_best"] - 40000 / 55000) < 1e-6, "fp32 ratio vs best")
        check(abs(m["e2e.fp32.peak_ratio_vs_torch_compile"] - 0.8) < 1e-6, "peak ratio vs compile")
        check(m.get("e2e.bf16.torch_compile.error") == 1, "bf16 compile error recorded")
        check("e2e.bf16.ratio_vs_torch_compile" not in m, "no ratio against a failed run")
        check(abs(m["e2e.bf16.ratio_vs_torch_best"] - 300000 / 330000) < 1e-6, "bf16 best = eager")
        check(all(isinstance(v, (int, float)) for v in m.values()), "metrics are numbers")
        md = open(os.path.join(res, "e2e.md")).read()
        if os.environ.get("BLU_SELFTEST_KEEP"):  # look at the PNG (needs matplotlib)
            import shutil
            shutil.copytree(res, os.environ["BLU_SELFTEST_KEEP"], dirs_exist_ok=True)
        check("ERROR" in md and "| fp32 |" in md and "0.800x" in md and "| fp32.blutrain |" in md, "markdown table")
        prof = json.load(open(os.path.join(res, "e2e_profile.fp32.blutrain.json")))
        check(prof["metrics"] == {"e2e.fp32.blutrain.profile.busy_ms": 31.0, "e2e.fp32.blutrain.profile.host_gap_ms": 0.5,
                                  "e2e.fp32.blutrain.profile.launches": 103}, f"profile metrics {prof['metrics']}")
        # make_summary merges e2e.json's metrics.
        out = os.path.join(d, "summary.json")
        r = subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "scripts", "make_summary.py"),
                            "--results", res, "--out", out], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "make_summary: " + r.stderr[-500:])
        sm = json.load(open(out))["metrics"]
        check(abs(sm["e2e.tf32.ratio_vs_torch_compile"] - 170000 / 165000) < 1e-6, "summary has e2e ratios")
        check("launches" not in sm and "busy_ms" not in sm, "no stray profile keys in the summary")
        # fidelity.py: generated init + shards, losses compared (fake: fp32 within 1e-4, bf16 not).
        r = subprocess.run([sys.executable, os.path.join(HERE, "fidelity.py"), "--blutrain", fb, "--out",
                            os.path.join(d, "fid"), "--results", res, "--steps", "6", "--batch", "2", "--seq", "64",
                            "--torch-program", ft], capture_output=True, text=True, timeout=120)
        print(r.stdout[-2000:], r.stderr[-2000:])
        check(r.returncode == 0, "fidelity.py exit status")
        f = json.load(open(os.path.join(res, "fidelity_train.json")))["metrics"]
        check(abs(f["fidelity.fp32.max_rel_loss_diff_6"] - 2e-5) < 1e-9, "fp32 rel diff")
        check(f["fidelity.fp32.train_pass_6"] == 1 and f["fidelity.bf16.train_pass_6"] == 0, "bounds")
        check(os.path.getsize(os.path.join(d, "fid", "shards", "rand_train_000000.bin")) == 1024 + 2 * (6 * 128 + 1),
              "fidelity shard size")
        # --floor sdpa-math: the floor run is eager with --sdpa math (the fake ignores it: floor 0).
        r = subprocess.run([sys.executable, os.path.join(HERE, "fidelity.py"), "--blutrain", fb, "--out",
                            os.path.join(d, "fid2"), "--results", os.path.join(d, "res2"), "--steps", "6",
                            "--batch", "2", "--seq", "64", "--modes", "fp32", "--floor", "sdpa-math",
                            "--torch-program", ft], capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, "fidelity.py --floor sdpa-math: " + r.stdout[-500:] + r.stderr[-500:])
        f2 = json.load(open(os.path.join(d, "res2", "fidelity_train.json")))
        check(f2["metrics"].get("fidelity.fp32.torch_sdpa_math_vs_eager_max_rel_6") == 0.0, "sdpa-math floor metric")
        check("--sdpa math" in open(os.path.join(d, "fid2", "fp32.fidelity_torch_floor.log")).readline(),
              "the floor run asks for SDPA's math backend")
        # --floor blas-lt and --self-floor: the floor run asks for cuBLASLt; blutrain runs again with the
        # environment given (the fake scales its losses by it).
        r = subprocess.run([sys.executable, os.path.join(HERE, "fidelity.py"), "--blutrain", fb, "--out",
                            os.path.join(d, "fid3"), "--results", os.path.join(d, "res3"), "--steps", "6",
                            "--batch", "2", "--seq", "64", "--modes", "fp32", "--floor", "blas-lt",
                            "--self-floor", "BLU_FAKE_LOSS_SCALE=1.001", "--torch-program", ft],
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, "fidelity.py --self-floor: " + r.stdout[-500:] + r.stderr[-500:])
        f3 = json.load(open(os.path.join(d, "res3", "fidelity_train.json")))["metrics"]
        check(abs(f3["fidelity.fp32.blutrain_self_vs_blutrain_max_rel_6"] - 1e-3) < 1e-9, "self-floor metric")
        check("blutrain_self_vs_torch_max_rel_6" in "".join(f3), "self floor vs torch")
        check("BLU_FAKE_LOSS_SCALE" not in os.environ, "the self floor's environment is restored")
        check("--blas cublaslt" in open(os.path.join(d, "fid3", "fp32.fidelity_torch_floor.log")).readline(),
              "the blas-lt floor asks for cuBLASLt")
        # largest_model.py: each framework climbs the ladder and stops at its first failure.
        r = subprocess.run([sys.executable, os.path.join(HERE, "largest_model.py"), "--blutrain", fb, "--out",
                            os.path.join(d, "lm"), "--torch-program", ft, "--steps", "3", "--ladder",
                            "36x20x1280,40x32x4096,44x32x4096,48x32x4096"], capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, "largest_model.py: " + r.stdout[-500:] + r.stderr[-500:])
        lm = json.load(open(os.path.join(d, "lm", "largest_model.json")))
        check(lm["metrics"]["scale.largest_bf16.blutrain.shape"] == "36x20x1280", "blutrain's largest rung")
        check(lm["metrics"]["scale.largest_bf16.torch_eager.shape"] == "40x32x4096", "PyTorch's largest rung")
        check([x["shape"] for x in lm["rungs"]["torch_eager"]] == ["36x20x1280", "40x32x4096", "44x32x4096"],
              "the climb stops at the first failure")
        check(lm["rungs"]["blutrain"][-1]["why"] == "out of memory", "the failure's reason")
        check(abs(lm["metrics"]["scale.largest_bf16.torch_eager.params_b"] - 8.25) < 0.05, "parameter count")
        # Shards: written, read back in blutrain's order.
        sd = os.path.join(d, "shards")
        p = write_random_shards(sd, 10001, seed=5)[0]
        t = read_shard(p)
        check(len(t) == 10001 and max(t) < 50257, "shard round trip")
        L = ShardLoader(sd, "", 2, 1000, 50257)
        for i in range(12):
            x, y = L.next_batch()
            pos = (i % 5) * 2000
            check(list(x[:2]) == list(t[pos:pos + 2]) and y[-1] == t[pos + 2000], f"batch {i} order")
        # Classifier and breakdown.
        check(classify("void blublas::sm90_gemm_kernel<Gelu>(P)") == "gemm", "gemm with gelu epilogue")
        check(classify("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>()")
              == "gelu", "torch gelu")
        b = breakdown([("flash_attn_fwd_kernel", 0.0, 2.0), ("sm90_gemm_kernel", 1.0, 3.0), ("x", 5.0, 6.0)], 7.0)
        check(b["busy_ms"] == 4.0 and b["host_gap_ms"] == 2.0 and b["families"]["attention"]["count"] == 1,
              f"breakdown {b}")
        # The Llama block's side-by-side table (bench/comp/llama_profile_table.py) reads such traces.
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "comp"))
        import llama_profile_table as lpt
        for name in ("llama_block_bf16_compiled_trace.json", "torch_llama_block_bf16_compile_trace.json"):
            with open(os.path.join(d, name), "w") as fh:
                json.dump(b, fh)
        got = lpt.load(d)
        check(set(got.get("bf16", {})) == {"ours compiled", "torch compile"}, f"llama traces {got.keys()}")
        text = lpt.table("bf16", got["bf16"], 3)
        check("| attention | 2.000 (1) | 2.000 (1) |" in text, f"llama profile table:\n{text}")
    print("selftest passed")


if __name__ == "__main__":
    main()
