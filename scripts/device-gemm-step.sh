#!/usr/bin/env bash
# device-gemm-step.sh: one device call for GEMM work seen through the training step: the GPU tests of
# the changed kernels, the GEMMs of the GPT-2 step with their epilogues against cuBLASLt with the
# same epilogue (blublas-profiler, one process per shape), Nsight Compute on chosen ones, then the
# engines (scripts/device-engine-memory.sh) in bf16 B16 and fp32 B8.
#   BLU_COMMIT=<sha> scripts/device-gemm-step.sh <tools dir with blu-plan.gz> [build dir]
# BLU_GS_NCU="name ..." (scripts/ncu-hot.sh names; default none) adds Nsight Compute reports;
# BLU_GS_FUSED_AB / BLU_GS_COMPILED_AB ("VAR=value ...": a second fused / compiled run; default
# none / BLU_CAPTURE_SIDE_STREAM=0; BLU_GS_COMPILED_AB2 / AB3: a third / fourth compiled run; BLU_GS_FUSED_AB2: a third fused run); BLU_GS_TESTS overrides the test list (one line);
# BLU_GS_ENGINES=0 skips the engines, BLU_GS_PROFILER=0 the step-GEMM profiler; BLU_GS_MODES
# ("bf16 16,fp32 8,tf32 16" by default) the engine configurations.
# Writes $OUT/gs.tgz (everything) and prints a short table last. ~6-7 minutes on an H100.
set -uo pipefail
cd "$(dirname "$0")/.."
tools=${1:?tools dir}; build=${2:-/tmp/bd-gs}
OUT=${OUT:-/tmp/blu-out}; mkdir -p "$OUT/gs"; W=$OUT/gs
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$W/progress.txt"; }
export PATH=/usr/local/cuda/bin:$PATH BLU_REQUIRE_GPU=1
ulimit -c 0  # a crashed run's core file made gs.tgz too large to come back (session 24)
read -r -a tests <<< "${BLU_GS_TESTS:-blublas_gemm_sm90_gpu_test blublas_gemm_gpu_test blublas_gemm_property_gpu_test blutensor_cuda_kernels_gpu_test blutensor_ops_cpu_vs_cuda_gpu_test blutensor_multi_tensor_gpu_test blutrain_fused_step_gpu_test blutrain_capture_step_gpu_test blutrain_captured_engine_gpu_test}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLU_CUDA_ARCHS=90a-real -DBLU_WITH_MLIR=OFF \
  -DBLU_WARNINGS_AS_ERRORS=OFF -DBLU_BUILD_BENCH=OFF > "$W/configure.txt" 2>&1
timeout ${BLU_BUILD_TIMEOUT:-300} cmake --build "$build" -j "$(nproc)" --target "${tests[@]}" blutrain-cli \
  blublas-profiler -- -k 0 > "$W/build.txt" 2>&1
stamp "build rc=$?"; grep -E "error" "$W/build.txt" | head -5
for t in "${tests[@]}"; do
  timeout 150 "$build/tests/$t" > "$W/test_$t.txt" 2>&1
  stamp "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$W/test_$t.txt" | tr '\n' ' ')"
  grep -E -A3 'Failure$' "$W/test_$t.txt" | head -24 | cut -c1-240
done
# The GEMMs of a bf16 GPT-2 d12 B16 T1024 step as the fused engine calls them (B*T = 16384, C = 768;
# weights [out, in] row-major: forward NT, dX NN, dW TN; the residual GEMMs accumulate, beta = 1).
P=$build/blublas/blublas-profiler
shapes=(
  "qkv_fwd_bias;--m=16384 --n=2304 --k=768 --op_a=n --op_b=t --epilogue=bias"
  "attnproj_fwd_bias;--m=16384 --n=768 --k=768 --op_a=n --op_b=t --epilogue=bias"
  "fc_fwd_bias_gelu;--m=16384 --n=3072 --k=768 --op_a=n --op_b=t --epilogue=bias_gelu"
  "fcproj_fwd_bias;--m=16384 --n=768 --k=3072 --op_a=n --op_b=t --epilogue=bias"
  "lmhead_fwd;--m=16384 --n=50304 --k=768 --op_a=n --op_b=t"
  "fcproj_dx;--m=16384 --n=3072 --k=768 --op_a=n --op_b=n"
  "fc_dx;--m=16384 --n=768 --k=3072 --op_a=n --op_b=n"
  "qkv_dx;--m=16384 --n=768 --k=2304 --op_a=n --op_b=n"
  "fc_dw;--m=3072 --n=768 --k=16384 --op_a=t --op_b=n"
  "fcproj_dw;--m=768 --n=3072 --k=16384 --op_a=t --op_b=n"
  "lmhead_dx;--m=16384 --n=768 --k=50304 --op_a=n --op_b=n"
  "xent_dw_beta_f32;--m=50304 --n=768 --k=640 --out=f32 --op_a=t --op_b=n --beta=1"
  "fcproj_dx_beta;--m=16384 --n=768 --k=3072 --op_a=n --op_b=n --beta=1"
  "fcproj_dx_gelugrad;--m=16384 --n=3072 --k=768 --op_a=n --op_b=n --epilogue=gelu_grad"
  "fcproj_dx_gelugrad_noahead;--m=16384 --n=3072 --k=768 --op_a=n --op_b=n --epilogue=gelu_grad;BLUBLAS_SM90_EPI_AHEAD=0"
  "xent_dw_beta_f32_noahead;--m=50304 --n=768 --k=640 --out=f32 --op_a=t --op_b=n --beta=1;BLUBLAS_SM90_EPI_AHEAD=0"
)
printf '| shape | blublas ms | cuBLASLt ms | ratio | max diff |\n|---|---|---|---|---|\n' > "$W/gemm_step.md"
[ "${BLU_GS_PROFILER:-1}" = 1 ] || shapes=()
for s in "${shapes[@]}"; do
  name=${s%%;*}; args=${s#*;}; envs=""
  [[ $args == *";"* ]] && { envs=${args#*;}; args=${args%%;*}; }  # optional third field: VAR=value ...
  # shellcheck disable=SC2086
  env $envs timeout 40 "$P" gemm --dtype=bf16 $args --reps=20 > "$W/prof_$name.txt" 2>&1
  ms=$(awk '$1 == "blublas" {print $3; exit}' "$W/prof_$name.txt")
  cub=$(awk '$1 == "cuBLAS" {print $3; exit}' "$W/prof_$name.txt")
  ratio=$(awk '$1 == "ratio" {print $3; exit}' "$W/prof_$name.txt")
  diff=$(grep -m1 'max |blublas' "$W/prof_$name.txt" | sed 's/.*= //')
  echo "| $name | ${ms:-?} | ${cub:-?} | ${ratio:-?} | ${diff:-?} |" >> "$W/gemm_step.md"
done
stamp "profiler: $(grep -c '^| [a-z]' "$W/gemm_step.md") shapes"
if [ -n "${BLU_GS_NCU:-}" ]; then
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES=0 timeout 240 scripts/ncu-hot.sh "$build" "$W/ncu" ${BLU_GS_NCU} > "$W/ncu.txt" 2>&1
  stamp "ncu rc=$?"
fi
if [ "${BLU_GS_ENGINES:-1}" = 1 ]; then
  # BLU_GS_MODES: the engine configurations ("precision batch" pairs; tf32 B16 as the e2e race runs it).
  IFS=',' read -r -a modes <<< "${BLU_GS_MODES:-bf16 16,fp32 8,tf32 16}"
  for cfg in "${modes[@]}"; do
    read -r prec batch <<< "$cfg"
    OUT=$W/em_$prec BLU_EM_PRECISION=$prec BLU_EM_BATCH=$batch \
      BLU_EM_FUSED_AB="${BLU_GS_FUSED_AB:-}" BLU_EM_COMPILED_AB="${BLU_GS_COMPILED_AB:-BLU_CAPTURE_SIDE_STREAM=0}" \
      BLU_EM_COMPILED_AB2="${BLU_GS_COMPILED_AB2:-}" BLU_EM_COMPILED_AB3="${BLU_GS_COMPILED_AB3:-}" \
      BLU_EM_FUSED_AB2="${BLU_GS_FUSED_AB2:-}" \
      scripts/device-engine-memory.sh "$tools" "$build" > /dev/null 2>&1
    stamp "engines $prec B$batch"
  done
fi
tar -C "$OUT" --exclude='core*' -czf "$OUT/gs.tgz" gs
# Files come back up to 16 MiB: without the profiles if it is larger.
[ "$(stat -c %s "$OUT/gs.tgz")" -gt 15000000 ] && tar -C "$OUT" --exclude='core*' --exclude='profile_*.json' -czf "$OUT/gs.tgz" gs
cat "$W/gemm_step.md"
for prec in bf16 fp32 tf32; do [ -f "$W/em_$prec/engine_memory.md" ] && grep -E '^\| (engine|compiled|fused|autograd|captured)|: host:|step_wall|busy_ms' "$W/em_$prec/engine_memory.md" | cut -c1-160; done
for prec in bf16 fp32 tf32; do [ -f "$W/em_$prec/overlap.txt" ] && grep "^==" "$W/em_$prec/overlap.txt" | cut -c1-200; done
rm -rf "$W"
