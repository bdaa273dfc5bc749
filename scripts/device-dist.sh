#!/usr/bin/env bash
# device-dist.sh: the fused engine's data parallelism on a 2-GPU machine (nvidia-h100-x2 /
# nvidia-h200-x2) against PyTorch DDP in the same call (issue 12). Builds what it needs (Ninja,
# sm_90a only), runs the NCCL tests and the fused --dp 2 equivalence test, then for each mode
# (fp32, tf32, bf16; GPT-2 124M, B16 T1024 per GPU, no accumulation, 20 steps of synthetic data,
# the flags of bench/e2e/run_e2e.py): blutrain --engine fused on one GPU, blutrain --dp 2, then
# PyTorch DDP (bench/e2e/torch_gpt2_train.py --ddp under torchrun, 2 ranks, Note [DDP reference]
# there) eager and torch.compile, and with --torch-1gpu the same PyTorch program on one GPU.
# tok/s = global tokens per step / median step after 5 warm-up steps, for every run.
# scripts/dist_report.py turns the runs into dist.ddp.<mode>.{tok_s, scaling_2gpu, torch_ddp_tok_s,
# ratio_vs_torch_ddp, ...}; scripts/make_summary.py writes $OUT/summary.json (suite "dist"), and
# everything else lands in ONE tarball, $OUT/dist-results.tar.gz (logs/results/dist_<modes>.json is
# the raw JSON; scripts/import-device-results.sh <files_at> h100x2 commits both). The table prints
# last.
#
#   scripts/device-dist.sh [--no-build] [--no-tests] [--no-throughput] [--modes fp32,tf32,bf16]
#                          [--steps 20] [--build-dir /tmp/bd-dist] [--no-torch]
#                          [--torch-variants eager,compile] [--torch-1gpu] [--budget 570]
# BLU_DIST_BUCKETS="25 100": extra bf16 --dp 2 runs at these --dp-bucket-mb values (default none).
# BLU_DIST_EXTRA="...": more blutrain flags for every throughput run.
# BLU_DIST_NCCL_CHANNELS="4 8": extra bf16 --dp 2 runs with NCCL_MAX_NCHANNELS at these values (fewer
# NCCL channels = fewer SMs taken from the backward the all-reduces overlap; dist.ddp.bf16.nch<N>.*).
# BLU_DIST_ENV="NCCL_PROTO=Simple NCCL_PROTO=LL128": extra bf16 --dp 2 runs, one per word, each with
# that environment setting (dist.ddp.bf16.env<i>.*; the table names the setting).
# BLU_DIST_ZERO="1 2": fp32 --dp 2 runs on the autograd engine with --zero 0 (baseline) and these
# stages (ZeroAdamW, Note [ZeRO-2]): losses and per-rank memory.
# BLU_DIST_GATHER=1: one more --dp 2 run per mode with --dp-embedding-grad gather (A/B against the
# default all-reduce; Note [Embedding gradient by all-gather]): dist.ddp.<mode>.gather.*.
#
# Time (estimates for 2x H100, 16 cores; the first call will tell): build ~3-4 min, tests ~1-2 min,
# blutrain ~10-15 s a run, PyTorch DDP eager ~35-45 s a mode (startup + NCCL + 20 steps), DDP
# torch.compile ~80-120 s a mode (two ranks compiling at once), PyTorch one GPU eager ~25 s,
# compile ~60 s. All three modes with both PyTorch variants do not fit one 600 s call beside the
# build, so --budget (seconds since the start, default 570) skips a PyTorch run that would not
# end in time (its run dir gets a `skipped` file, the table says so) and bounds the others.
# The race in two calls (~8-9 min each; import both, the summaries merge):
#   run(kind="nvidia-h100-x2", timeout_s=600, command="scripts/device-dist.sh --no-tests --modes fp32,tf32")
#   run(kind="nvidia-h100-x2", timeout_s=600, command="scripts/device-dist.sh --no-tests --modes bf16 --torch-1gpu")
# and the tests alone: scripts/device-dist.sh --no-throughput (~5 min).
set -uo pipefail
cd "$(dirname "$0")/.."
do_build=1; do_tests=1; do_tp=1; modes="fp32,tf32,bf16"; steps=20; build=/tmp/bd-dist
do_torch=1; torch_variants="eager,compile"; torch_1gpu=0; budget=570
while (($#)); do
  case "$1" in
    --no-build) do_build=0; shift ;;
    --no-tests) do_tests=0; shift ;;
    --no-throughput) do_tp=0; shift ;;
    --modes) modes=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --no-torch) do_torch=0; shift ;;
    --torch-variants) torch_variants=$2; shift 2 ;;
    --torch-1gpu) torch_1gpu=1; shift ;;
    --budget) budget=$2; shift 2 ;;
    -h|--help) sed -n 2,31p "$0"; exit 0 ;;
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
  targets="blutrain-cli blurun"
  ((do_tests)) && targets+=" bludist_test_worker bludist_nccl_gpu_test blutrain_fused_dp_gpu_test"
  cmake --build "$build" -j "$(nproc)" --target $targets > "$logs/build.txt" 2>&1
  build_rc=$?
  grep -E "error|FAILED" "$logs/build.txt" | head -20
  stamp "build rc=$build_rc"
  if ((build_rc != 0)); then echo "build: FAILED (see logs/build.txt)" >> "$table"; cat "$table"; exit 1; fi
fi
bt=$build/blutrain/blutrain; br=$build/bludist/blurun

# ---- tests (each under a bound: a hang must not eat the call)
tests_pass=0; tests_total=0
run_test() {  # name binary timeout
  local name=$1 bin=$2 limit=$3
  stamp "test $name"
  BLU_REQUIRE_MULTI_GPU=1 timeout -k 10 "$limit" "$bin" --gtest_output="json:$logs/$name.json" \
    > "$logs/$name.txt" 2>&1
  local rc=$?
  local verdict
  verdict=$(grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$logs/$name.txt" | tr '\n' ' ')
  ((rc == 124 || rc == 137)) && verdict="TIMED OUT after ${limit}s; $verdict"
  tests_total=$((tests_total + 1)); ((rc == 0)) && tests_pass=$((tests_pass + 1))
  grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|max rel diff|one GPU .* two GPUs" "$logs/$name.txt" | tail -20
  echo "test $name: rc=$rc $verdict" >> "$table"
}
if ((do_tests)); then
  run_test bludist_nccl_gpu_test "$build/tests/bludist_nccl_gpu_test" 240
  run_test blutrain_fused_dp_gpu_test "$build/tests/blutrain_fused_dp_gpu_test" 240
  grep -h "max rel diff" "$logs/blutrain_fused_dp_gpu_test.txt" >> "$table"
fi

# ---- throughput: one GPU vs --dp 2 vs PyTorch DDP (tok/s = global tokens per second, median after 5 steps)
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
# PyTorch: the project's own trainer, the hyperparameters and schedule of blutrain's runs (its
# defaults are blutrain's), B16 T1024 per rank, same steps and warm-up. Budget: a run starts only
# when its estimate fits before $budget s, and its timeout never reaches past the budget.
torch_prog=bench/e2e/torch_gpt2_train.py
torch_run() {  # mode variant(eager|compile) ranks(1|2)
  local mode=$1 variant=$2 ranks=$3 kind=ddp est limit
  ((ranks == 1)) && kind=1gpu
  local tag=$mode.torch_${kind}_$variant
  local dir=$runs/$tag
  mkdir -p "$dir"
  case $kind.$variant in
    ddp.compile) est=100; limit=300 ;;
    1gpu.compile) est=60; limit=300 ;;
    ddp.*) est=40; limit=150 ;;
    *) est=25; limit=150 ;;
  esac
  local left=$((budget - ($(date +%s) - t0)))
  if ((left < est)); then
    echo "skipped: ${left}s of the ${budget}s budget left, ~${est}s needed" > "$dir/skipped"
    stamp "skip $tag (${left}s left)"
    return
  fi
  ((limit > left)) && limit=$left
  local args=(--model d12 --mode "$mode" --batch 16 --seq 1024 --steps "$steps" --warmup 5
              --lr-warmup-steps 5 --data synthetic --json "$dir/torch.json")
  [ "$variant" = compile ] && args+=(--compile)
  stamp "run $tag (limit ${limit}s)"
  if ((ranks == 1)); then
    CUDA_VISIBLE_DEVICES=0 timeout -k 10 "$limit" python3 "$torch_prog" "${args[@]}" > "$dir/log.txt" 2>&1
  else
    timeout -k 10 "$limit" python3 -m torch.distributed.run --standalone --nproc_per_node "$ranks" \
      "$torch_prog" --ddp "${args[@]}" > "$dir/log.txt" 2>&1
  fi
  echo $? > "$dir/rc"
  grep -E '^\{"framework"|Error' "$dir/log.txt" | tail -3
}
if ((do_tp && do_torch)); then
  if python3 -c "import torch, torch.distributed as d; assert torch.cuda.device_count() >= 2, 'fewer than 2 GPUs'; \
assert d.is_nccl_available(), 'no NCCL'; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'nccl', torch.cuda.nccl.version())" > "$logs/torch_env.txt" 2>&1; then
    stamp "$(tail -1 "$logs/torch_env.txt")"
  else
    echo "torch: not usable ($(tail -1 "$logs/torch_env.txt")): PyTorch runs skipped" | tee -a "$table"
    do_torch=0
  fi
fi
res=$logs/results; mkdir -p "$res"
if ((do_tp)); then
  for mode in ${modes//,/ }; do
    tp_run "$mode.1gpu" "$mode" 1
    tp_run "$mode.2gpu" "$mode" 2
    [ "${BLU_DIST_GATHER:-0}" = 1 ] && tp_run "$mode.2gpu.gather" "$mode" 2 "--dp-embedding-grad gather"
    if ((do_torch)); then
      for v in ${torch_variants//,/ }; do torch_run "$mode" "$v" 2; done
      if ((torch_1gpu)); then
        for v in ${torch_variants//,/ }; do torch_run "$mode" "$v" 1; done
      fi
    fi
    pack
  done
  for mb in ${BLU_DIST_BUCKETS:-}; do tp_run "bf16.2gpu.bucket$mb" bf16 2 "--dp-bucket-mb $mb"; done
  # ZeRO on the autograd engine (--zero needs it): --zero 0 (DDP) first as its baseline, then each
  # stage; the same losses (log) and per-rank memory (progress line) are the check.
  if [ -n "${BLU_DIST_ZERO:-}" ]; then
    for z in 0 ${BLU_DIST_ZERO}; do
      tp_run "fp32.2gpu.autograd.zero$z" fp32 2 "--engine autograd --zero $z"
    done
  fi
  i=0
  for kv in ${BLU_DIST_ENV:-}; do
    i=$((i + 1))
    mkdir -p "$runs/bf16.2gpu.env$i" && echo "$kv" > "$runs/bf16.2gpu.env$i/env"
    (export "$kv"; tp_run "bf16.2gpu.env$i" bf16 2)
  done
  for ch in ${BLU_DIST_NCCL_CHANNELS:-}; do
    NCCL_MIN_NCHANNELS=1 NCCL_MAX_NCHANNELS=$ch tp_run "bf16.2gpu.nch$ch" bf16 2
  done
  config=$(printf '{"model": "d12", "batch_per_gpu": 16, "seq": 1024, "steps": %s, "timed_after_warmup": 5, "data": "synthetic", "torch_variants": "%s", "torch_1gpu": %s, "budget_s": %s, "blutrain_extra": "%s"}' \
    "$steps" "$torch_variants" "$torch_1gpu" "$budget" "${BLU_DIST_EXTRA:-}")
  python3 scripts/dist_report.py "$runs" "$modes" "$res/dist_${modes//,/_}.json" "${gpu_count}x $gpu_name" \
    --config "$config" >> "$table" 2>&1
fi

case "$gpu_name" in *H100*) tag=h100 ;; *H200*) tag=h200 ;; *) tag=$(echo "${gpu_name:-unknown}" | tr 'A-Z ' 'a-z_') ;; esac
((gpu_count > 1)) && tag="${tag}x${gpu_count}"
python3 scripts/make_summary.py --results "$res" --gpu-name "${gpu_count}x $gpu_name" --tag "$tag" \
  --committed "bench/results/$tag/summary.json" --out "$OUT/summary.json" \
  --build-rc "${build_rc:-0}" --tests "$tests_pass/$tests_total" --suite "dist" > "$logs/make_summary.txt" 2>&1 ||
  tail -5 "$logs/make_summary.txt"
{ cat "$table"; echo; cat "$logs/make_summary.txt"; } > "$logs/summary_table.txt"
pack
trap - EXIT
stamp "done: $OUT/dist-results.tar.gz, $OUT/summary.json"
grep -E "REGRESSION|^summary:" "$logs/make_summary.txt"
echo "================ device-dist summary"
cat "$table"
