#!/usr/bin/env bash
# device-fp32-diag.sh: the strict-fp32 race's diagnostics in one device call (issue 10).
# Builds (Ninja, sm_90a only) the profiler, the attention test and the trainer + bludist targets the
# next call (scripts/device-dist.sh --no-build --build-dir <same dir>) needs, then:
#   1. attention_gpu_test's fp32 error profile and 3xTF32 cases (Note [fp32 attention error profile]),
#   2. bench/torch_attn_precision.py (PyTorch's fp32 SDPA backends, the same statistics),
#   3. Nsight Compute (scripts/ncu-hot.sh) on the SIMT GEMMs of the fc layer (fwd, dX, dW) and the
#      3xTF32 attention kernels, plus one full report with per-instruction (SASS) stall samples of
#      the fc fwd SIMT GEMM (BLU_DIAG_SOURCE=0 skips it),
# and packs everything into ONE tarball, $OUT/diag.tar.gz (the device tool returns at most 8 files).
#   scripts/device-fp32-diag.sh [build-dir (default /tmp/bd)]
# BLU_DIAG_STAGES (default "profile,torch_precision,ncu") picks and orders the stages; more:
#   attn_tests   the whole AttentionGpu suite, then its fp32 cases again with BLUBLAS_ATTN_ROLL_K=1
#   attn_ab      blublas-profiler attention f32x3 (GPT-2 shape) default vs BLUBLAS_ATTN_ROLL_K=1,
#                and bench/torch_attention.py (PyTorch's SDPA, same shape) in the same call
#   dist_tests   the NCCL watchdog test and the fused --dp 2 equivalence test (2 GPUs)
#   e2e_ab       blutrain fp32 B16 T1024 (20 steps, synthetic) default vs BLUBLAS_ATTN_ROLL_K=1
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-/tmp/bd}
OUT=${OUT:-/tmp/blu-out}; mkdir -p "$OUT"
work=/tmp/blu-diag; rm -rf "$work"; mkdir -p "$work"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
pack() { tar -C "$work" --exclude=./cache --exclude='*.bin' --exclude='*.safetensors' -czf "$OUT/diag.tar.gz" . 2>/dev/null; }
trap pack EXIT
{ uname -r; nvidia-smi; nvcc --version; } > "$work/env.txt" 2>&1
stamp "gpu $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$(nvidia-smi -L | wc -l); kernel $(uname -r)"

if [ "${BLU_DIAG_BUILD:-1}" = 1 ]; then
  stamp "configure + build into $build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLU_CUDA_ARCHS=90a-real \
    -DBLU_WARNINGS_AS_ERRORS=OFF -DBLU_WITH_MLIR=OFF > "$work/configure.txt" 2>&1 || tail -20 "$work/configure.txt"
  cmake --build "$build" -j "$(nproc)" --target blublas-profiler blublas_attention_gpu_test \
    blutrain-cli blurun bludist_test_worker bludist_nccl_gpu_test blutrain_fused_dp_gpu_test \
    > "$work/build.txt" 2>&1
  rc=$?; grep -E "error|FAILED" "$work/build.txt" | head -20; stamp "build rc=$rc"
  ((rc == 0)) || exit 1
fi

stages=${BLU_DIAG_STAGES:-profile,torch_precision,ncu}
for stage in ${stages//,/ }; do
case $stage in
profile)
stamp "attention error profile"
CUDA_VISIBLE_DEVICES=0 timeout 240 "$build/tests/blublas_attention_gpu_test" \
  --gtest_filter='*ErrorProfile*:*Split3*' > "$work/attn_profile.txt" 2>&1
echo "rc=$?" >> "$work/attn_profile.txt"
grep -E "^\[ +(OK|FAILED) |rms|bias|rc=" "$work/attn_profile.txt" | head -40 ;;
torch_precision)
stamp "PyTorch fp32 SDPA error profile"
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 bench/torch_attn_precision.py "$work" > "$work/torch_attn_precision.txt" 2>&1
tail -12 "$work/torch_attn_precision.txt" ;;
attn_tests)
stamp "AttentionGpu suite"
CUDA_VISIBLE_DEVICES=0 timeout 300 "$build/tests/blublas_attention_gpu_test" > "$work/attn_tests.txt" 2>&1
echo "rc=$?" >> "$work/attn_tests.txt"
grep -E "^\[ +(FAILED|PASSED) |rms|rc=" "$work/attn_tests.txt" | head -30
stamp "AttentionGpu fp32 cases, BLUBLAS_ATTN_ROLL_K=1"
BLUBLAS_ATTN_ROLL_K=1 CUDA_VISIBLE_DEVICES=0 timeout 200 "$build/tests/blublas_attention_gpu_test" \
  --gtest_filter='*F32*' > "$work/attn_tests_roll.txt" 2>&1
echo "rc=$?" >> "$work/attn_tests_roll.txt"
grep -E "^\[ +(FAILED|PASSED) |rms|rc=" "$work/attn_tests_roll.txt" | head -30 ;;
attn_ab)
for v in 0 1 0 1; do
  stamp "profiler attention f32x3, BLUBLAS_ATTN_ROLL_K=$v"
  BLUBLAS_ATTN_ROLL_K=$v CUDA_VISIBLE_DEVICES=0 timeout 60 "$build/blublas/blublas-profiler" attention \
    --B=16 --T=1024 --H=12 --d=64 --mode=f32x3 --reps=30 2>&1 | tee -a "$work/attn_ab_roll$v.txt" | grep -E "ms|err"
done
stamp "PyTorch SDPA (same shapes)"
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 bench/torch_attention.py "$work" > "$work/torch_attention.txt" 2>&1
grep -iE "fp32|3xtf32|efficient" "$work/torch_attention.txt" | head -12 ;;
dist_tests)
stamp "NCCL watchdog test"
BLU_REQUIRE_MULTI_GPU=1 timeout -k 10 120 "$build/tests/bludist_nccl_gpu_test" --gtest_filter='*Watchdog*' \
  > "$work/nccl_watchdog.txt" 2>&1
echo "rc=$?" >> "$work/nccl_watchdog.txt"; grep -vE "^\[(-|=)" "$work/nccl_watchdog.txt" | head -30
stamp "fused --dp 2 equivalence"
BLU_REQUIRE_MULTI_GPU=1 timeout -k 10 240 "$build/tests/blutrain_fused_dp_gpu_test" > "$work/fused_dp.txt" 2>&1
echo "rc=$?" >> "$work/fused_dp.txt"; grep -E "^\[ +(OK|FAILED|PASSED) |max rel|Failure|rc=" "$work/fused_dp.txt" | head -20 ;;
e2e_ab)
for v in 0 1; do
  stamp "blutrain fp32, BLUBLAS_ATTN_ROLL_K=$v"
  mkdir -p "$work/e2e_roll$v"
  BLUBLAS_ATTN_ROLL_K=$v CUDA_VISIBLE_DEVICES=0 timeout 150 "$build/blutrain/blutrain" train --model d12 --device cuda \
    --precision fp32 --batch-size 16 --seq-len 1024 --data synthetic --cache-dir "$work/cache" \
    --out-dir "$work/e2e_roll$v" --resume none --no-save --no-plot --sample-tokens 0 --val-every -1 \
    --val-batches -1 --max-steps 20 --warmup-steps 5 > "$work/e2e_roll$v/log.txt" 2>&1
  grep -E "fused step:|step 20/20" "$work/e2e_roll$v/log.txt" | cut -c1-200
done ;;
ncu)
stamp "ncu"
CUDA_VISIBLE_DEVICES=0 timeout 300 scripts/ncu-hot.sh "$build" "$work/ncu" gemm_simt_f32_fc_fwd \
  gemm_simt_f32_fc_dx gemm_simt_f32_fc_dw attn_fwd_f32x3 attn_bwd_dkdv_f32x3 attn_bwd_dq_f32x3
ncu_rc=$?
if ((ncu_rc == 0)) && [ "${BLU_DIAG_SOURCE:-1}" = 1 ]; then
  stamp "ncu full + SASS source of the fc fwd SIMT GEMM"
  CUDA_VISIBLE_DEVICES=0 timeout 120 ncu --clock-control none -k regex:simt --launch-skip 2 --launch-count 1 \
    --set full -o "$work/ncu/simt_fc_fwd_full" "$build/blublas/blublas-profiler" gemm --m=16384 --n=3072 \
    --k=768 --dtype=f32 --op_a=n --op_b=t --reps=2 > "$work/ncu/simt_fc_fwd_full.log" 2>&1
  timeout 60 ncu --import "$work/ncu/simt_fc_fwd_full.ncu-rep" --page source --print-source sass --csv \
    > "$work/ncu/simt_fc_fwd_sass.csv" 2> "$work/ncu/simt_fc_fwd_sass.err"
  wc -l "$work/ncu/simt_fc_fwd_sass.csv"; head -3 "$work/ncu/simt_fc_fwd_sass.err"
fi
 ;;
*) echo "unknown stage $stage" ;;
esac
done
stamp "done"
