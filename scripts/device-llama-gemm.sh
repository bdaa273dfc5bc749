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
# sets (gpt2: the GPT-2 124M forward / dX / dW set, B*T = 16384; d24 / d36 / d48: the same at
# C = 1024 / 1280 / 1600; gpt2epi: the trainer's fused-epilogue GEMMs, the dW ones with the bias
# gradient fused and (rows *_sep) through the separate pass; BLU_LG_SWAP=1 adds each
# GPT-2 shape's transposed problem). BLU_LG_TESTS=1 first builds and
# runs the sm90 GEMM GPU tests and the random-problem property test (BLU_GEMM_PROPERTY_CASES).
# BLU_LG_VARIANTS="auto,192x192_3c,...": instead of one process per tile, each shape once with
# every variant and cuBLAS interleaved (Note [Interleaved tile A/B]); cells are ratios to cuBLAS.
# BLU_LG_REPS: timed repetitions per run (default 10; 20 rounds with variants). Per-run profiler outputs go to $OUT/prof.tgz (the device returns a bounded number of files).
#   run(command="cd .snap && scripts/device-llama-gemm.sh", timeout_s=...)
# With binaries built here and carried (scripts/pack-carry.sh build-sm90 blublas/blublas-profiler;
# BLU_LG_BUILD=build-carry/tree after --unpack) nothing is built on the device.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/blu-llama-gemm}; mkdir -p "$out"
build=${BLU_LG_BUILD:-build-lg}
read -r -a tiles <<< "${BLU_LG_TILES:-auto 192x192_3c 128x128_2c}"
tests=OFF; targets=(blublas-profiler)
if [ "${BLU_LG_TESTS:-0}" = 1 ]; then
  tests=ON; targets+=(blublas_gemm_sm90_gpu_test blublas_gemm_property_gpu_test blublas_gemm_property_test)
fi
if [ -f "$build/.carried" ]; then  # binaries built elsewhere (scripts/pack-carry.sh): no build
  echo "carried build $build: not building ${targets[*]}"
else
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLU_CUDA_ARCHS=90a-real -DBLU_WITH_MLIR=OFF \
  -DBLU_WARNINGS_AS_ERRORS=OFF -DBLU_BUILD_BENCH=OFF -DBLU_BUILD_TESTS=$tests \
  -DBLU_TEST_PATTERN="gemm_(sm90_gpu|property_gpu|property)_test" > "$out/configure.txt" 2>&1
timeout "${BLU_LG_BUILD_TIMEOUT:-300}" cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" > "$out/build.txt" 2>&1
echo "build rc=$? at ${SECONDS}s"
fi
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
# GPT-2's forward / dX / dW set at C channels (B*T = 16384); with BLU_LG_SWAP=1 each shape also
# as the transposed problem D^T = op(B)^T op(A)^T (m and n exchanged: is the swap worth doing?).
gpt2_set() {
  local c=$1 sh nm out in
  for sh in "qkv;$((3 * c));$c" "attn_proj;$c;$c" "fc;$((4 * c));$c" "fc_proj;$c;$((4 * c))" "lm_head;50304;$c"; do
    IFS=';' read -r nm out in <<< "$sh"
    shapes+=("${nm}_fwd;--m=16384 --n=$out --k=$in --op_a=n --op_b=t"
             "${nm}_dx;--m=16384 --n=$in --k=$out --op_a=n --op_b=n"
             "${nm}_dw;--m=$out --n=$in --k=16384 --op_a=t --op_b=n")
    if [ "${BLU_LG_SWAP:-0}" = 1 ]; then
      shapes+=("${nm}_fwd_swap;--m=$out --n=16384 --k=$in --op_a=n --op_b=t"
               "${nm}_dx_swap;--m=$in --n=16384 --k=$out --op_a=t --op_b=t"
               "${nm}_dw_swap;--m=$in --n=$out --k=16384 --op_a=t --op_b=n")
    fi
  done
}
shapes=()
for set in ${BLU_LG_SET:-llama}; do
  case $set in
    gpt2) gpt2_set 768 ;;
    d24) gpt2_set 1024 ;;
    d36) gpt2_set 1280 ;;
    d48) gpt2_set 1600 ;;
    gpt2epi)  # the GPT-2 trainer's fused epilogues (bias, bias + GELU with aux, GELU gradient)
      shapes+=("qkv_fwd_bias;--m=16384 --n=2304 --k=768 --op_a=n --op_b=t --epilogue=bias"
               "attn_proj_fwd_bias;--m=16384 --n=768 --k=768 --op_a=n --op_b=t --epilogue=bias"
               "fc_fwd_bias_gelu;--m=16384 --n=3072 --k=768 --op_a=n --op_b=t --epilogue=bias_gelu"
               "fc_proj_fwd_bias;--m=16384 --n=768 --k=3072 --op_a=n --op_b=t --epilogue=bias"
               "fc_proj_dx_gelu_grad;--m=16384 --n=3072 --k=768 --op_a=n --op_b=n --epilogue=gelu_grad")
      # The dW GEMMs with the bias gradient (f32 D, as the trainer), fused in the sm90 kernel and,
      # the "_sep" rows, through the separate pass (Note [sm90 fused bias gradient]).
      for sh in "qkv;2304;768" "attn_proj;768;768" "fc;3072;768" "fc_proj;768;3072"; do
        IFS=';' read -r nm out in <<< "$sh"
        for v in "" _sep; do
          shapes+=("${nm}_dw_bgrad$v;--m=$out --n=$in --k=16384 --op_a=t --op_b=n --out=f32 --epilogue=bgrada")
        done
      done ;;
    *) shapes+=("${llama_shapes[@]}") ;;
  esac
done
mkdir -p "$out/prof"
if [ -n "${BLU_LG_VARIANTS:-}" ]; then
  # Note [Interleaved tile A/B] (blublas/tools/profile_gemm.cu): every variant and cuBLAS in one
  # process, one call each per round; the cells are ratios to cuBLAS (its median from the same rounds).
  IFS=, read -r -a vnames <<< "$BLU_LG_VARIANTS"
  {
    printf '| shape | cuBLAS ms |'; printf ' %s |' "${vnames[@]}"; printf ' best | first variant plan | bits | host us/call first / cuBLAS |\n'
    printf '|---|---|'; printf -- '---|%.0s' "${vnames[@]}"; printf -- '---|---|---|---|\n'
    for dt in ${BLU_LG_DTYPES:-bf16}; do
      for s in "${shapes[@]}"; do
        name=${s%%;*}; args=${s#*;}
        f="$out/prof/${dt}_${name}_variants.txt"
        envs=(BLUBLAS_SM90_LOG=1); [[ $name == *_sep ]] && envs+=(BLUBLAS_SM90_FUSED_BGRAD=0)
        # shellcheck disable=SC2086
        env "${envs[@]}" timeout 60 "$P" gemm --dtype="$dt" $args --reps="${BLU_LG_REPS:-20}" \
          --variants="$BLU_LG_VARIANTS" > "$f" 2>&1
        awk -v shape="$dt $name" '
          $1 == "blublas" && $2 == "sm90" && plan == "" { plan = $10 " " $11 }
          $1 == "variant" { n++; v[n] = $2; r[n] = $9; cub = $6; if (n == 1) { hu = $20; hc = $22; sub(/\)/, "", hc) } if ($17 != "nan" && $17 + 0 != 0) bits = bits " " $2 "!=" }
          END {
            best = 1; for (i = 2; i <= n; i++) if (r[i] + 0 > r[best] + 0) best = i
            printf "| %s | %s |", shape, (cub == "" ? "?" : cub)
            for (i = 1; i <= n; i++) printf " %s |", r[i]
            printf " %s | %s | %s | %s / %s |\n", (n ? v[best] : "?"), (plan == "" ? "-" : plan), (bits == "" ? "same" : bits), hu, hc
          }' "$f"
      done
    done
  } | tee "$out/llama_gemm.md"
  tar -czf "$out/prof.tgz" -C "$out" prof && rm -rf "$out/prof"
  echo "done at ${SECONDS}s"
  exit 0
fi
{
  printf '| shape | tile | blublas ms | cuBLAS ms | ratio | max abs diff | plan |\n|---|---|---|---|---|---|---|\n'
  for dt in ${BLU_LG_DTYPES:-bf16}; do
    dtiles=("${tiles[@]}"); [ "$dt" = bf16 ] || [ "$dt" = f16 ] || dtiles=(auto)
    for s in "${shapes[@]}"; do
      name=${s%%;*}; args=${s#*;}
      for t in "${dtiles[@]}"; do
        envs=""; [ "$t" != auto ] && envs="BLUBLAS_SM90_TILE=$t"
        [[ $name == *_sep ]] && envs="$envs BLUBLAS_SM90_FUSED_BGRAD=0"
        f="$out/prof/${dt}_${name}_$t.txt"
        # shellcheck disable=SC2086
        env BLUBLAS_SM90_LOG=1 $envs timeout 30 "$P" gemm --dtype="$dt" $args --reps="${BLU_LG_REPS:-10}" > "$f" 2>&1
        ms=$(awk '$1 == "blublas" && $2 == ":" {print $3; exit}' "$f")
        cub=$(awk '$1 == "cuBLAS" {print $3; exit}' "$f")
        ratio=$(awk '$1 == "ratio" {print $3; exit}' "$f")
        diff=$(awk '$1 == "max" {print $6; exit}' "$f")
        plan=$(awk '$1 == "blublas" && $2 == "sm90" {print $10, $11; exit}' "$f")
        echo "| $dt $name | $t | ${ms:-?} | ${cub:-?} | ${ratio:-?} | ${diff:-?} | ${plan:--} |"
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
