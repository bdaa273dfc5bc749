#!/usr/bin/env bash
# device-epilogue-ab.sh: one device call for session 17's CPU-side work (bench/NOTES.md, session 17,
# "After the device time was spent"): the GPU tests of the changed kernels, then A/B timings.
#   BLU_COMMIT=<sha> scripts/device-epilogue-ab.sh <tools dir with blu-plan.gz> [build dir]
# 1. builds the tests below + blutrain-cli + blublas-profiler (sm_90a, MLIR off);
# 2. runs blublas_gemm_sm90_gpu_test (CThroughTma: C and kGeluGrad's aux through TMA, forced on),
#    blublas_gemm_gpu_test, blublas_gemm_property_gpu_test, blutensor_cuda_kernels_gpu_test
#    (BroadcastFastPath, the bf16 column sum), blutensor_ops_cpu_vs_cuda_gpu_test and the GPT-2
#    step tests (fused_step, capture_step);
# 3. blublas-profiler: the beta = 1 shapes with BLUBLAS_SM90_C_TMA off / on (vs cuBLAS);
# 4. scripts/device-engine-memory.sh in bf16 B16 and fp32 B8, each with BLUBLAS_SM90_C_TMA=0 and 1
#    (with 1, also the fused engine with BLUTRAIN_GELU_GRAD_EPILOGUE=1: the fused_ab row).
# Writes $OUT/ab.tgz (everything) and prints a short table last. ~8-9 minutes on an H100.
set -uo pipefail
cd "$(dirname "$0")/.."
tools=${1:?tools dir}; build=${2:-/tmp/bd-ab}
OUT=${OUT:-/tmp/blu-out}; mkdir -p "$OUT/ab"; W=$OUT/ab
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$W/progress.txt"; }
export PATH=/usr/local/cuda/bin:$PATH BLU_REQUIRE_GPU=1
tests=(blublas_gemm_sm90_gpu_test blublas_gemm_gpu_test blublas_gemm_property_gpu_test
       blutensor_cuda_kernels_gpu_test blutensor_ops_cpu_vs_cuda_gpu_test blutrain_fused_step_gpu_test
       blutrain_capture_step_gpu_test)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLU_CUDA_ARCHS=90a-real -DBLU_WITH_MLIR=OFF \
  -DBLU_WARNINGS_AS_ERRORS=OFF -DBLU_BUILD_BENCH=OFF > "$W/configure.txt" 2>&1
timeout ${BLU_BUILD_TIMEOUT:-300} cmake --build "$build" -j "$(nproc)" --target "${tests[@]}" blutrain-cli \
  blublas-profiler -- -k 0 > "$W/build.txt" 2>&1
stamp "build rc=$?"; grep -E "error" "$W/build.txt" | head -5
for t in "${tests[@]}"; do
  timeout 150 "$build/tests/$t" > "$W/test_$t.txt" 2>&1
  stamp "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$W/test_$t.txt" | tr '\n' ' ')"
done
P=$build/blublas/blublas-profiler
for ctma in 0 1; do
  for shape in "--m=50304 --n=768 --k=640 --dtype=bf16 --out=f32 --op_a=t --op_b=n --beta=1" \
               "--m=16384 --n=768 --k=3072 --dtype=bf16 --op_a=n --op_b=n --beta=1"; do
    BLUBLAS_SM90_C_TMA=$ctma timeout 30 "$P" gemm $shape --reps=20 > "$W/prof.txt.tmp" 2>&1
    { echo "BLUBLAS_SM90_C_TMA=$ctma"; cat "$W/prof.txt.tmp"; } >> "$W/prof.txt"
    stamp "profiler C_TMA=$ctma $shape: $(grep -E 'blublas :|ratio|max' "$W/prof.txt.tmp" | tr -s ' ' | tr '\n' ' ')"
  done
done
rm -f "$W/prof.txt.tmp"
for cfg in "bf16 16" "fp32 8"; do
  read -r prec batch <<< "$cfg"
  for ctma in 0 1; do
    # With C through TMA, the fused engine also with the GELU backward in its dX GEMM's epilogue.
    fab=""; ((ctma)) && fab="BLUTRAIN_GELU_GRAD_EPILOGUE=1"
    OUT=$W/em_${prec}_ctma$ctma BLU_EM_PRECISION=$prec BLU_EM_BATCH=$batch BLUBLAS_SM90_C_TMA=$ctma BLU_EM_FUSED_AB=$fab \
      scripts/device-engine-memory.sh "$tools" "$build" > /dev/null 2>&1
    stamp "engines $prec B$batch C_TMA=$ctma"
    head -7 "$W/em_${prec}_ctma$ctma/engine_memory.md" | cut -c1-100 | tee -a "$W/progress.txt"
  done
done
tar -C "$OUT" -czf "$OUT/ab.tgz" ab && rm -rf "$W"
