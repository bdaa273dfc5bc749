#!/usr/bin/env bash
# device-race-ab.sh: the strict-fp32 race of issue 10 with its A/B switches, in one device call.
# Builds (Ninja, sm_90a) the trainer, gemm_bench and the GEMM / attention GPU tests; runs the
# SIMT GEMM test and the attention cases of the sm80 mma tiles (3xTF32, tf32, bf16; the dQ-partials
# ones included); gemm_bench's fp32 GPT-2 set with and without BLUBLAS_SIMT_TRANSPOSE_B (ours and
# cuBLAS in the same process); the
# race (scripts/device-check.sh --suite e2e --no-build: blutrain vs PyTorch eager and torch.compile,
# BLU_E2E_MODES, default fp32, with the per-kernel profile); then blutrain fp32 alone, same flags as
# the race, by default and once per A/B run of BLU_RACE_AB_RUNS ("tag:ENV=1:--flag=value ..."; the
# default runs BLUBLAS_SIMT_WAVE_SPLIT=0, BLUTRAIN_SIDE_STREAM=0 and --logits-chunk 4096; session
# 7's first call ran BLUBLAS_SIMT_TRANSPOSE_B=0, BLUBLAS_ATTN_DQ=twopass, --logits-chunk 8192;
# BLUBLAS_SIMT_SPLIT_MAX=<n> caps the dW split-K, heuristics.cpp), each a one-line tok/s.
# device-check.sh leaves $OUT/summary.json + device-results.tar.gz (import-device-results.sh); the
# rest goes to $OUT/race_ab.tar.gz. BLU_RACE_AB_STAGES (default "tests,gemm,race,ab") picks stages;
# stage attn times the 3xTF32 attention alone under each of BLU_ATTN_AB's settings (blublas-profiler).
# BLU_RACE_AB_TARGETS: the build targets (default: the trainer, gemm_bench, the profiler and the
# tests above); BLU_RACE_AB_PRECISION: the A/B runs' mode (default fp32).
#   BLU_COMMIT=<sha> BLU_DIRTY=0 scripts/device-race-ab.sh [build-dir (default /tmp/bd)]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-/tmp/bd}
OUT=${OUT:-/tmp/blu-out}; mkdir -p "$OUT"
work=/tmp/blu-race-ab; rm -rf "$work"; mkdir -p "$work"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1 BLU_REQUIRE_GPU=1
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
pack() { tar -C "$work" --exclude=./cache -czf "$OUT/race_ab.tar.gz" . 2>/dev/null; }
trap pack EXIT
stamp "gpu $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

if [ "${BLU_RACE_AB_BUILD:-1}" = 1 ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLU_CUDA_ARCHS=90a-real \
    -DBLU_WARNINGS_AS_ERRORS=OFF -DBLU_WITH_MLIR=OFF > "$work/configure.txt" 2>&1 || tail -20 "$work/configure.txt"
  # shellcheck disable=SC2086
  timeout "${BLU_BUILD_TIMEOUT:-330}" cmake --build "$build" -j "$(nproc)" --target ${BLU_RACE_AB_TARGETS:-blutrain-cli \
    gemm_bench blublas_gemm_simt_gpu_test blublas_attention_gpu_test \
    blublas_attention_args_test blublas_gemm_property_test blublas-profiler} > "$work/build.txt" 2>&1
  rc=$?; grep -E "error|FAILED" "$work/build.txt" | head -20; stamp "build rc=$rc"
  ((rc == 0)) || exit 1
fi

ab_run() {  # tag, then env assignments / extra flags: blutrain B16 T1024 in BLU_RACE_AB_PRECISION
  # (default fp32), 20 steps, synthetic
  local tag=$1; shift
  local envs=() flags=()
  for a in "$@"; do [[ $a == *=* && $a != --* ]] && envs+=("$a") || flags+=("$a"); done
  mkdir -p "$work/ab_$tag"
  env "${envs[@]}" CUDA_VISIBLE_DEVICES=0 timeout 150 "$build/blutrain/blutrain" train --model d12 \
    --device cuda --precision "${BLU_RACE_AB_PRECISION:-fp32}" --batch-size 16 --seq-len 1024 --data synthetic \
    --cache-dir "$work/cache" --out-dir "$work/ab_$tag" --resume none --no-save --no-plot \
    --sample-tokens 0 --val-every -1 --val-batches -1 --max-steps 20 --warmup-steps 5 \
    --summary-json "$work/ab_$tag/summary.json" "${flags[@]}" > "$work/ab_$tag/log.txt" 2>&1
  echo "ab $tag: $(grep -E 'step 20/20' "$work/ab_$tag/log.txt" | grep -oE '[0-9.]+ ms \| [0-9.]+K tok/s|peak [0-9.]+' | tr '\n' ' ')"
}

IFS=, read -r -a stages <<< "${BLU_RACE_AB_STAGES:-tests,gemm,race,ab}"
for stage in "${stages[@]}"; do
  case $stage in
  tests)
    stamp "tests"
    for t in blublas_attention_args_test blublas_gemm_property_test; do
      timeout 60 "$build/tests/$t" > "$work/$t.txt" 2>&1; echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$work/$t.txt" | tr '\n' ' ')"
    done
    # Every case of the sm80 mma tiles (Note [Permuted k8 keys]): 3xTF32, tf32 and bf16.
    timeout 200 "$build/tests/blublas_attention_gpu_test" \
      --gtest_filter='*F32*:*Dq*:*Split3*:*Tf32*:*Sm80*:*Bf16EveryTileConfig*:*Bf16LongCausal*' \
      > "$work/attention_gpu_test.txt" 2>&1
    echo "attention_gpu_test (sm80 mma and fp32 cases) rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$work/attention_gpu_test.txt" | tr '\n' ' ')"
    grep -E "^\[  FAILED  \]" "$work/attention_gpu_test.txt" | head -5
    # The 3xTF32 cases again on the split-where-loaded kernels (Note [Pre-split tiles]).
    BLUBLAS_ATTN_PRESPLIT=0 timeout 150 "$build/tests/blublas_attention_gpu_test" \
      --gtest_filter='*F32*:*Dq*:*Split3*' > "$work/attention_gpu_test_presplit0.txt" 2>&1
    echo "attention_gpu_test 3xTF32 cases, BLUBLAS_ATTN_PRESPLIT=0 rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$work/attention_gpu_test_presplit0.txt" | tr '\n' ' ')"
    timeout 150 "$build/tests/blublas_gemm_simt_gpu_test" > "$work/gemm_simt_gpu_test.txt" 2>&1
    echo "gemm_simt_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$work/gemm_simt_gpu_test.txt" | tr '\n' ' ')"
    grep -E "^\[  FAILED  \]" "$work/gemm_simt_gpu_test.txt" | head -5 ;;
  gemm)
    for v in 1 0; do
      stamp "gemm_bench fp32, BLUBLAS_SIMT_TRANSPOSE_B=$v"
      mkdir -p "$work/gemm_tb$v"
      BLUBLAS_SIMT_TRANSPOSE_B=$v BLU_GEMM_BENCH_SWEEP=fp32 timeout 120 "$build/bench/gemm_bench" \
        --blu_out="$work/gemm_tb$v" > "$work/gemm_tb$v.txt" 2>&1
      grep -E "^fp32 .*(fwd|square)" "$work/gemm_tb$v.txt" | awk '{print "  " $2, $4, "ours", $7, "cuBLAS", $9, "ratio", $12}'
    done ;;
  attn)  # the 3xTF32 attention alone (blublas-profiler, B16 T1024 H12 d64), each BLU_ATTN_AB env
    for v in ${BLU_ATTN_AB:-BLUBLAS_ATTN_PRESPLIT=1 BLUBLAS_ATTN_PRESPLIT=0 BLUBLAS_ATTN_PRESPLIT=1 BLUBLAS_ATTN_PRESPLIT=0}; do
      stamp "profiler attention f32x3, $v"
      env "$v" CUDA_VISIBLE_DEVICES=0 timeout 60 "$build/blublas/blublas-profiler" attention \
        --B=16 --T=1024 --H=12 --d=64 --mode=f32x3 --reps=30 >> "$work/attn_ab_${v##*=}.txt" 2>&1
      tail -n 4 "$work/attn_ab_${v##*=}.txt" | grep -E "ms|err"
    done ;;
  race)
    stamp "race (device-check.sh --suite e2e, modes ${BLU_E2E_MODES:-fp32})"
    ln -sfn "$build" build-device
    BLU_E2E_MODES=${BLU_E2E_MODES:-fp32} BLU_FIDELITY_MODES=${BLU_FIDELITY_MODES-} \
      scripts/device-check.sh --suite e2e --no-build --no-tests > "$work/race.txt" 2>&1
    grep -E "^\| (fp32|tf32|bf16) " "$work/race.txt" | head -3
    grep -E "^\| (fp32|tf32|bf16)\.blutrain" "$work/race.txt" | head -3 ;;
  ab)
    stamp "blutrain alone: default and each A/B switch"
    ab_run default
    for spec in ${BLU_RACE_AB_RUNS:-wave_split0:BLUBLAS_SIMT_WAVE_SPLIT=0 side_stream0:BLUTRAIN_SIDE_STREAM=0 chunk4096:--logits-chunk=4096}; do
      # tag:arg[:arg...]; an arg "--flag=value" is passed as "--flag value"; "@" in an arg stands
      # for ":" (BLUBLAS_SIMT_VARIANT=kn@a816w,mn@a168w)
      IFS=: read -r -a parts <<< "$spec"
      args=()
      for a in "${parts[@]:1}"; do
        a=${a//@/:}
        if [[ $a == --*=* ]]; then args+=("${a%%=*}" "${a#*=}"); else args+=("$a"); fi
      done
      ab_run "${parts[0]}" "${args[@]}"
    done ;;
  *) echo "unknown stage $stage" ;;
  esac
done
stamp "done"
