#!/usr/bin/env bash
# device-dist.sh: the fused engine's data parallelism on a 2-GPU machine (nvidia-h100-x2 /
# nvidia-h200-x2). Builds what it needs (Ninja, sm_90a only), runs the NCCL tests and the fused
# --dp 2 equivalence test, then the throughput runs: blutrain --engine fused on one GPU against
# --dp 2 on two, GPT-2 124M at B16 T1024 per GPU, 20 steps of synthetic data, in fp32, tf32 and
# bf16 (the flags of bench/e2e/run_e2e.py). Everything lands under one work dir, packed into ONE
# tarball in $OUT ($OUT/dist-results.tar.gz; the device tool returns at most 8 files), and a
# short table (tok/s, 2-GPU scaling, test verdicts) is printed last. Aims at ~7-9 minutes.
#
#   scripts/device-dist.sh [--no-build] [--no-tests] [--no-throughput] [--modes fp32,tf32,bf16]
#                          [--steps 20] [--build-dir /tmp/bd-dist]
# BLU_DIST_BUCKETS="25 100": extra bf16 --dp 2 runs at these --dp-bucket-mb values (default none).
# BLU_DIST_EXTRA="...": more blutrain flags for every throughput run.
#
# Device-tool usage (from the repository root on the developer machine):
#   run(kind="nvidia-h100-x2", command="scripts/device-dist.sh", timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/.."
do_build=1; do_tests=1; do_tp=1; modes="fp32,tf32,bf16"; steps=20; build=/tmp/bd-dist
while (($#)); do
  case "$1" in
    --no-build) do_build=0; shift ;;
    --no-tests) do_tests=0; shift ;;
    --no-throughput) do_tp=0; shift ;;
    --modes) modes=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "device-dist: unknown argument $1" >&2; exit 2 ;;
  esac
done

OUT=${OUT:-/tmp/blu-out}; mkdir -p "$OUT"
work=/tmp/blu-dist; logs=$work/logs; runs=$work/runs
rm -rf "$work"; mkdir -p "$logs" "$runs"
export PATH=/usr/local/cuda/bin:$PATH
# NVLink multicast stays off everywhere (KINDS.md), also in the processes blurun starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_HOME=${NCCL_HOME:-/usr} PYTHONUNBUFFERED=1
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
table=$logs/table.txt; : > "$table"
pack() { tar -C "$work" --exclude='*.bin' -czf "$OUT/dist-results.tar.gz" logs runs 2>/dev/null; }
trap pack EXIT

gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
gpu_count=$(nvidia-smi -L 2>/dev/null | wc -l)
stamp "gpu: $gpu_name x$gpu_count; commit $(git rev-parse --short HEAD 2>/dev/null) dirty=$(git status --porcelain 2>/dev/null | grep -qv '^??' && echo 1 || echo 0)"
{ nvidia-smi; nvidia-smi topo -m; nvcc --version; cmake --version; env | grep -E '^(NCCL|NVSHMEM|TORCH_SYMM)'; } \
  > "$logs/env.txt" 2>&1
echo "gpu: $gpu_name x$gpu_count" >> "$table"

if ((do_build)); then
  stamp "configure + build (90a-real, NCCL_HOME=$NCCL_HOME)"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLU_CUDA_ARCHS=90a-real \
    -DBLU_WARNINGS_AS_ERRORS=OFF -DBLU_BUILD_BENCH=OFF -DBLU_WITH_MLIR=OFF \
    "-DBLU_TEST_PATTERN=(nccl_gpu_test|fused_dp_gpu_test)" > "$logs/configure.txt" 2>&1 ||
    tail -30 "$logs/configure.txt"
  grep -E "bludist: (NCCL|Gloo)" "$logs/configure.txt"
  cmake --build "$build" -j "$(nproc)" --target blutrain-cli blurun bludist_test_worker \
    bludist_nccl_gpu_test blutrain_fused_dp_gpu_test > "$logs/build.txt" 2>&1
  rc=$?
  grep -E "error|FAILED" "$logs/build.txt" | head -20
  stamp "build rc=$rc"
  if ((rc != 0)); then echo "build: FAILED (see logs/build.txt)" >> "$table"; cat "$table"; exit 1; fi
fi
bt=$build/blutrain/blutrain; br=$build/bludist/blurun

# ---- tests (each under a bound: a hang must not eat the call)
run_test() {  # name binary timeout
  local name=$1 bin=$2 limit=$3
  stamp "test $name"
  BLU_REQUIRE_MULTI_GPU=1 timeout -k 10 "$limit" "$bin" --gtest_output="json:$logs/$name.json" \
    > "$logs/$name.txt" 2>&1
  local rc=$?
  local verdict
  verdict=$(grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$logs/$name.txt" | tr '\n' ' ')
  ((rc == 124 || rc == 137)) && verdict="TIMED OUT after ${limit}s; $verdict"
  grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|max rel diff|one GPU .* two GPUs" "$logs/$name.txt" | tail -20
  echo "test $name: rc=$rc $verdict" >> "$table"
}
if ((do_tests)); then
  run_test bludist_nccl_gpu_test "$build/tests/bludist_nccl_gpu_test" 240
  run_test blutrain_fused_dp_gpu_test "$build/tests/blutrain_fused_dp_gpu_test" 240
  grep -h "max rel diff" "$logs/blutrain_fused_dp_gpu_test.txt" >> "$table"
fi

# ---- throughput: one GPU vs --dp 2 (tok/s = global tokens per second, median after 5 steps)
common() {  # mode run_dir
  echo "train --model d12 --device cuda --precision $1 --batch-size 16 --seq-len 1024 --data synthetic" \
       "--cache-dir $work/cache --out-dir $2 --resume none --no-save --no-plot --sample-tokens 0" \
       "--val-every -1 --val-batches -1 --max-steps $steps --warmup-steps 5 --summary-json $2/summary.json" \
       "${BLU_DIST_EXTRA:-}"
}
tp_run() {  # tag mode ranks [extra flags]
  local tag=$1 mode=$2 ranks=$3 extra=${4:-}
  local dir=$runs/$tag
  mkdir -p "$dir"
  stamp "run $tag"
  if ((ranks == 1)); then
    CUDA_VISIBLE_DEVICES=0 timeout -k 10 150 "$bt" $(common "$mode" "$dir") $extra > "$dir/log.txt" 2>&1
  else
    timeout -k 10 180 "$br" --nproc-per-node "$ranks" -- "$bt" $(common "$mode" "$dir") --dp "$ranks" $extra \
      > "$dir/log.txt" 2>&1
  fi
  echo $? > "$dir/rc"
  grep -E "fused step:|data parallel|Error|error" "$dir/log.txt" | head -4
  tail -2 "$dir/log.txt"
}
if ((do_tp)); then
  for mode in ${modes//,/ }; do
    tp_run "$mode.1gpu" "$mode" 1
    tp_run "$mode.2gpu" "$mode" 2
  done
  for mb in ${BLU_DIST_BUCKETS:-}; do tp_run "bf16.2gpu.bucket$mb" bf16 2 "--dp-bucket-mb $mb"; done
  python3 - "$runs" "$modes" "$logs/dist_summary.json" "$gpu_name" >> "$table" <<'EOF'
import json, os, statistics, sys
runs, modes, out, gpu = sys.argv[1], sys.argv[2].split(","), sys.argv[3], sys.argv[4]
def rec(tag):
    d = os.path.join(runs, tag)
    r = {"rc": None, "tok_s": None, "peak_gib": None, "losses": []}
    try:
        r["rc"] = int(open(os.path.join(d, "rc")).read())
    except Exception:
        pass
    rates, peak = [], None
    try:
        for line in open(os.path.join(d, "metrics.jsonl")):
            j = json.loads(line)
            if j.get("event") != "train":
                continue
            r["losses"].append(j["loss"])
            peak = max(peak or 0, j.get("rank_mem_gib") or j.get("mem_peak_gib") or 0)
            if j["step"] > 5:
                rates.append(j["tokens_per_s"])
    except Exception:
        pass
    if rates:
        r["tok_s"] = statistics.median(rates)
    r["peak_gib"] = peak
    return r
metrics, lines = {}, []
lines.append(f"{'mode':<6} {'1 GPU tok/s':>12} {'2 GPU tok/s':>12} {'scaling':>8} {'peak GiB 1/2':>14} {'loss@end 1/2':>16}")
for m in modes:
    a, b = rec(m + ".1gpu"), rec(m + ".2gpu")
    sc = b["tok_s"] / a["tok_s"] if a["tok_s"] and b["tok_s"] else None
    f = lambda x, fmt: (fmt % x) if x is not None else "n/a"
    la = a["losses"][-1] if a["losses"] else None
    lb = b["losses"][-1] if b["losses"] else None
    lines.append(f"{m:<6} {f(a['tok_s'], '%.0f'):>12} {f(b['tok_s'], '%.0f'):>12} {f(sc, '%.3fx'):>8} "
                 f"{f(a['peak_gib'], '%.2f') + '/' + f(b['peak_gib'], '%.2f'):>14} "
                 f"{f(la, '%.4f') + '/' + f(lb, '%.4f'):>16}  rc {a['rc']}/{b['rc']}")
    metrics[f"dist.ddp.{m}.tok_s_1gpu"] = a["tok_s"]
    metrics[f"dist.ddp.{m}.tok_s_2gpu"] = b["tok_s"]
    metrics[f"dist.ddp.{m}.scaling_2gpu"] = sc
    metrics[f"dist.ddp.{m}.peak_gib"] = b["peak_gib"]
for tag in sorted(os.listdir(runs)):
    if ".bucket" in tag:
        r = rec(tag)
        lines.append(f"{tag}: {r['tok_s']} tok/s (rc {r['rc']})")
json.dump({"gpu": gpu, "engine": "fused", "metrics": metrics}, open(out, "w"), indent=1)
print("\n".join(lines))
print("(scaling goal: >= 1.95x; PyTorch DDP anchors on 2x H200: fp32 108.5K, tf32 311.2K, bf16 713.4K tok/s)")
EOF
fi

pack
trap - EXIT
stamp "done: $OUT/dist-results.tar.gz"
echo "================ device-dist summary"
cat "$table"
