#!/usr/bin/env python3
"""ddp_check.py: CPU check of torch_gpt2_train.py --ddp (needs torch with Gloo; numpy for the shard
case; no GPU): the tiny model trained by two Gloo ranks under torchrun at --batch B must follow
the one-process run at --batch 2B step for step (same global batch: Note [DDP reference]) within
1e-5 relative in fp32, on synthetic tokens and on llm.c shards (blutrain's rank striding), and one
rank under torchrun must equal the plain run. Also checks what rank 0 writes (world_size, global
tok/s, the DDP settings). Runs where no F.scaled_dot_product_attention exists (old torch) through
a reference shim, as torch_check.py.
  python3 bench/e2e/ddp_check.py      (exit 0 = pass; ~30-60 s on 2 cores)"""
import json, math, os, socket, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RTOL = 1e-5


def worker(argv):
    """One trainer process (plain or a torchrun rank), with the SDPA shim where torch lacks it."""
    import torch
    import torch.nn.functional as F
    if not hasattr(F, "scaled_dot_product_attention"):
        def _sdpa(q, k, v, is_causal=False):
            T = q.shape[-2]
            att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            if is_causal:
                att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
            return att.softmax(-1) @ v
        F.scaled_dot_product_attention = _sdpa
    sys.path.insert(0, HERE)
    import torch_gpt2_train as tg
    sys.argv = ["torch_gpt2_train.py"] + argv
    tg.main()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(d, tag, args, nproc=0):
    """nproc 0: a plain process; else nproc ranks started here with the environment torchrun gives
    its workers (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT): the
    trainer reads only that, and Debian's torch 1.13 torchrun fails on Python 3.11. Returns rank
    0's JSON."""
    out = os.path.join(d, tag + ".json")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--json", out] + args
    env = dict(os.environ, OMP_NUM_THREADS="1")
    envs = [env]
    if nproc:
        port = str(free_port())
        envs = [dict(env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
                     MASTER_ADDR="127.0.0.1", MASTER_PORT=port) for r in range(nproc)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e)
             for e in envs]
    logs, rcs = [], []
    for p in procs:
        try:
            o, _ = p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            o, _ = p.communicate()
        logs.append(o)
        rcs.append(p.returncode)
    if any(rcs):
        raise SystemExit(f"ddp_check FAILED: {tag} exited {rcs}\n$ {' '.join(cmd)}\n" +
                         "\n".join(f"--- rank {r}\n{o[-3000:]}" for r, o in enumerate(logs)))
    return json.load(open(out))


def check(cond, what):
    if not cond:
        raise SystemExit(f"ddp_check FAILED: {what}")
    print(f"ok: {what}")


def max_rel(a, b):
    return max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a, b))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker(sys.argv[2:])
    import torch
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_gloo_available()):
        print("ddp_check skipped: this torch has no Gloo")
        return
    B, T, steps = 2, 32, 6
    base = ["--model", "tiny", "--device", "cpu", "--mode", "fp32", "--seq", str(T), "--steps", str(steps),
            "--warmup", "2", "--lr-warmup-steps", "2"]
    with tempfile.TemporaryDirectory() as d:
        one = run(d, "one", base + ["--batch", str(2 * B)])
        two = run(d, "ddp2", base + ["--batch", str(B), "--ddp"], nproc=2)
        check(two["world_size"] == 2 and two["batch"] == B and two["global_batch"] == 2 * B,
              f"rank 0 writes world_size 2, batch {B} per rank, global batch {2 * B}")
        check(one["world_size"] == 1 and "ddp" not in one, "the plain run writes world_size 1 and no DDP block")
        dd = two["ddp"]
        check(dd["backend"] == "gloo" and dd["bucket_cap_mb"] == 25.0 and dd["gradient_as_bucket_view"]
              and dd["static_graph"] is True and dd["env"]["NCCL_NVLS_ENABLE"] == "0",
              f"DDP settings recorded: {dd}")
        check(len(two["step_ms_per_rank"]) == 2 and all(
            abs(m - max(a, b)) < 1e-9 for m, a, b in zip(two["step_ms"], *two["step_ms_per_rank"])),
            "step time = the slowest rank's")
        timed = sorted(two["step_ms"][2:])
        med = (timed[1] + timed[2]) / 2  # 4 timed steps
        check(abs(two["tok_s"] - 2 * B * T / (med / 1e3)) < 1e-6 * two["tok_s"]
              and abs(two["tok_s_per_gpu"] * 2 - two["tok_s"]) < 1e-6 * two["tok_s"],
              f"tok/s = global tokens / median step ({two['tok_s']:.0f})")
        r = max_rel(two["losses"], one["losses"])
        check(r <= RTOL, f"2 Gloo ranks at B{B} follow one process at B{2 * B} (synthetic): max rel {r:.2e}")
        check(two["losses"][-1] < two["losses"][0], "the loss falls")

        single = run(d, "ddp1", base + ["--batch", str(2 * B), "--ddp"], nproc=1)
        r = max_rel(single["losses"], one["losses"])
        check(r <= 1e-6, f"--ddp on one rank equals the plain run: max rel {r:.2e}")

        try:
            import numpy  # noqa: F401  (ShardLoader's arrays)
        except ImportError:
            print("no numpy: shard case skipped")
            return
        sys.path.insert(0, HERE)
        from shards import write_random_shards
        shard_dir = os.path.join(d, "shards")
        write_random_shards(shard_dir, (steps + 2) * 2 * B * T + 1, seed=7)
        data = ["--data", shard_dir]
        one = run(d, "one_shards", base + data + ["--batch", str(2 * B)])
        two = run(d, "ddp2_shards", base + data + ["--batch", str(B), "--ddp"], nproc=2)
        r = max_rel(two["losses"], one["losses"])
        check(r <= RTOL, f"2 Gloo ranks follow one process on shards (rank striding): max rel {r:.2e}")
    print("ddp_check passed")


if __name__ == "__main__":
    main()
