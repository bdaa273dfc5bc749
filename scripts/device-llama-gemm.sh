#!/usr/bin/env bash
# device-llama-gemm.sh: the Llama block's GEMMs (bench/comp/llama_block_bench.cpp's default shape:
# B*T = 8192, C = 1024, hidden 2816; weights [out, in] row-major: forward NT, dX NN, dW TN) through
# blublas-profiler, blublas against cuBLAS(Lt) in one process, for each sm90 tile in $BLU_LG_TILES
# (auto = the heuristic's choice; others forced with BLUBLAS_SM90_TILE): which tile the N = 2816
# shapes want (session 27: 704 tiles of 128x256 are 5.3 waves on 132 SMs). Builds only the
# profiler (about two minutes on the device). Table to stdout and $OUT/llama_gemm.md.
# BLU_LG_DTYPES (default bf16): each dtype's rows; f32 and tf32 rows run the heuristic's choice only
# (the tiles are the sm90 16-bit ones). BLU_LG_NCU="name ..." then runs scripts/ncu-hot.sh on those
# rows of its table (reports under $OUT/ncu). BLU_LG_SET="llama gpt2" (default llama): the shape
# sets (gpt2: the GPT-2 124M forward / dX / dW set, B*T = 16384). BLU_LG_TESTS=1 first builds and
# runs the sm90 GEMM GPU tests and the random-problem property test (BLU_GEMM_PROPERTY_CASES).
# BLU_LG_REPS: timed repetitions per run (default 10). Per-run profiler outputs go to $OUT/prof.tgz (the device returns a bounded number of files).
#   run(command="cd .snap && scripts/device-llama-gemm.sh", timeout_s=...)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/blu-llama-gemm}; mkdir -p "$out"
build=${BLU_LG_BUILD:-build-lg}
read -r -a tiles <<< "${BLU_LG_TILES:-auto 192x192_3c 128x128_2c}"
tests=OFF; targets=(blublas-profiler)
if [ "${BLU_LG_TESTS:-0}" = 1 ]; then
  tests=ON; targets+=(blublas_gemm_sm90_gpu_test blublas_gemm_property_gpu_test blublas_gemm_property_test)
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLU_CUDA_ARCHS=90a-real -DBLU_WITH_MLIR=OFF \
  -DBLU_WARNINGS_AS_ERRORS=OFF -DBLU_BUILD_BENCH=OFF -DBLU_BUILD_TESTS=$tests \
  -DBLU_TEST_PATTERN="gemm_(sm90_gpu|property_gpu|property)_test" > "$out/configure.txt" 2>&1
timeout "${BLU_LG_BUILD_TIMEOUT:-170}" cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" > "$out/build.txt" 2>&1
echo "build rc=$? at ${SECONDS}s"
if [ "$tests" = ON ]; then
  for t in blublas_gemm_property_test blublas_gemm_sm90_gpu_test blublas_gemm_property_gpu_test; do
    timeout 300 "$build/tests/$t" --gtest_brief=1 > "$out/$t.txt" 2>&1
    echo "$t rc=$? at ${SECONDS}s: $(grep -E '^\[  (PASSED|FAILED)' "$out/$t.txt" | tr '\n' ' ')"
    grep -E "Failure|FAILED" "$out/$t.txt" | head -8
  done
fi
P=$build/blublas/blublas-profiler
[ -x "$P" ] || { tail -5 "$out/build.txt"; exit 1; }
llama_shapes=(
  "gate_up_fwd;--m=8192 --n=2816 --k=1024 --op_a=n --op_b=t"
  "down_fwd;--m=8192 --n=1024 --k=2816 --op_a=n --op_b=t"
  "down_dx;--m=8192 --n=2816 --k=1024 --op_a=n --op_b=n"
  "gate_up_dx_beta;--m=8192 --n=1024 --k=2816 --op_a=n --op_b=n --beta=1"
  "gate_up_dw;--m=2816 --n=1024 --k=8192 --op_a=t --op_b=n"
  "down_dw;--m=1024 --n=2816 --k=8192 --op_a=t --op_b=n"
  "qkvo_fwd;--m=8192 --n=1024 --k=1024 --op_a=n --op_b=t"
  "qkvo_dx_beta;--m=8192 --n=1024 --k=1024 --op_a=n --op_b=n --beta=1"
  "qkvo_dw;--m=1024 --n=1024 --k=8192 --op_a=t --op_b=n"
)
gpt2_shapes=()
for sh in "qkv;2304;768" "attn_proj;768;768" "fc;3072;768" "fc_proj;768;3072" "lm_head;50304;768"; do
  IFS=';' read -r nm out in <<< "$sh"
  gpt2_shapes+=("${nm}_fwd;--m=16384 --n=$out --k=$in --op_a=n --op_b=t"
                "${nm}_dx;--m=16384 --n=$in --k=$out --op_a=n --op_b=n"
                "${nm}_dw;--m=$out --n=$in --k=16384 --op_a=t --op_b=n")
done
shapes=()
for set in ${BLU_LG_SET:-llama}; do
  if [ "$set" = gpt2 ]; then shapes+=("${gpt2_shapes[@]}"); else shapes+=("${llama_shapes[@]}"); fi
done
mkdir -p "$out/prof"
{
  printf '| shape | tile | blublas ms | cuBLAS ms | ratio | max abs diff |\n|---|---|---|---|---|---|\n'
  for dt in ${BLU_LG_DTYPES:-bf16}; do
    dtiles=("${tiles[@]}"); [ "$dt" = bf16 ] || [ "$dt" = f16 ] || dtiles=(auto)
    for s in "${shapes[@]}"; do
      name=${s%%;*}; args=${s#*;}
      for t in "${dtiles[@]}"; do
        envs=""; [ "$t" != auto ] && envs="BLUBLAS_SM90_TILE=$t"
        f="$out/prof/${dt}_${name}_$t.txt"
        # shellcheck disable=SC2086
        env $envs timeout 30 "$P" gemm --dtype="$dt" $args --reps="${BLU_LG_REPS:-10}" > "$f" 2>&1
        ms=$(awk '$1 == "blublas" {print $3; exit}' "$f")
        cub=$(awk '$1 == "cuBLAS" {print $3; exit}' "$f")
        ratio=$(awk '$1 == "ratio" {print $3; exit}' "$f")
        diff=$(awk '$1 == "max" {print $6; exit}' "$f")
        echo "| $dt $name | $t | ${ms:-?} | ${cub:-?} | ${ratio:-?} | ${diff:-?} |"
      done
    done
  done
} | tee "$out/llama_gemm.md"
tar -czf "$out/prof.tgz" -C "$out" prof && rm -rf "$out/prof"
if [ -n "${BLU_LG_NCU:-}" ]; then
  # shellcheck disable=SC2086
  scripts/ncu-hot.sh "$build" "$out/ncu" $BLU_LG_NCU
fi
echo "done at ${SECONDS}s"
