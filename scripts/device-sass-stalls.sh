#!/usr/bin/env bash
# device-sass-stalls.sh: per-instruction stall sampling of the strict fp32 SIMT GEMM (issue 10's
# fp32 gap; Note [SIMT fp32 register banks] in simt_f32_lean_kernel.cuh). Builds blublas-profiler
# (sm_90a), runs Nsight Compute with PC sampling (SourceCounters, WarpStateStats) on the fc fwd and
# fc dW shapes for each BLUBLAS_SIMT_VARIANT given, and exports the source page (SASS, one row per
# instruction with its stall samples by reason) as CSV, and cuobjdump's SASS of the lean kernels
# (lean.sass: the reuse flags). scripts/sass_stalls.py reads both, here or on the developer machine,
# and groups the main loop's stall samples by instruction kind and FFMA register-bank pattern.
#   BLU_COMMIT=<sha> BLU_DIRTY=0 scripts/device-sass-stalls.sh [build-dir] [variants (default: "default l88")]
# BLU_SASS_SET=epi (session 30): instead, the sm90 bf16 GEMM's fused epilogues (the trainer's fc
# forward with bias + GELU + aux, the fc_proj dX with the GELU gradient, the plain fc forward) and
# cuBLASLt's kernel for the first, the attn_proj forward with and without its bias; variants ignored
# (the SIMT SASS listing is skipped).
# Everything but the .ncu-rep files lands in $OUT/sass_stalls.tar.xz (the device tool brings back at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-/tmp/bd}
variants=${2:-"default l88"}
OUT=${OUT:-/tmp/blu-out}; out=/tmp/blu-sass/sass_stalls; rm -rf "$out"; mkdir -p "$out" "$OUT"
. scripts/device-build.sh
# shellcheck disable=SC2086
if [ -z "${BLU_SASS_PREBUILT:-}" ]; then  # BLU_SASS_PREBUILT=1: the profiler in build-dir is current
  blu_device_build "$build" "$out" blublas-profiler ${BLU_SASS_EXTRA_TARGETS:-}
  stamp "build rc=$?"
fi
bin=$build/blublas/blublas-profiler
command -v ncu >/dev/null || { echo "device-sass-stalls: no ncu"; exit 1; }
# name ; profiler command (the GPT-2 fc shapes, fp32, as in ncu-hot.sh)
# (name ; kernel regex ; profiler command)
shapes=(
  "fc_fwd;regex:simt;gemm --m=16384 --n=3072 --k=768 --dtype=f32 --op_a=n --op_b=t --reps=2"
  "fc_dw;regex:simt;gemm --m=768 --n=3072 --k=16384 --dtype=f32 --op_a=t --op_b=n --reps=2"
)
if [ "${BLU_SASS_SET:-simt}" = epi ]; then
  variants=default
  fc="gemm --m=16384 --n=3072 --k=768 --dtype=bf16 --op_b=t --reps=2"
  shapes=("fc_fwd_gelu;regex:sm90_gemm;$fc --epilogue=bias_gelu"
          "fcproj_dx_gelugrad;regex:sm90_gemm;gemm --m=16384 --n=3072 --k=768 --dtype=bf16 --op_b=n --epilogue=gelu_grad --reps=2"
          "fc_fwd_plain;regex:sm90_gemm;$fc"
          "cublaslt_fc_fwd_gelu;regex:nvjet|xmma|cutlass|sm90_xmma;$fc --epilogue=bias_gelu"
          "attnproj_fwd_bias;regex:sm90_gemm;gemm --m=16384 --n=768 --k=768 --dtype=bf16 --op_b=t --epilogue=bias --reps=2"
          "attnproj_fwd_plain;regex:sm90_gemm;gemm --m=16384 --n=768 --k=768 --dtype=bf16 --op_b=t --reps=2")
fi
for v in $variants; do
  if [ "$v" = default ]; then unset BLUBLAS_SIMT_VARIANT; else export BLUBLAS_SIMT_VARIANT=$v; fi
  for row in "${shapes[@]}"; do
    IFS=';' read -r name kre cmd <<< "$row"
    rep="$out/${v}_${name}"
    # shellcheck disable=SC2086
    timeout 120 ncu --clock-control none -k "$kre" --launch-skip 2 --launch-count 1 \
      --section SourceCounters --section WarpStateStats --section SchedulerStats \
      --import-source no -f -o "$rep" "$bin" $cmd > "$rep.log" 2>&1
    stamp "ncu $v $name rc=$?"
    ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$rep.source.csv" 2> "$rep.export.err"
    ncu -i "$rep.ncu-rep" --page details > "$rep.details.txt" 2>&1
    stamp "export $v $name: $(wc -l < "$rep.source.csv") rows"
  done
done
unset BLUBLAS_SIMT_VARIANT
# The SASS with reuse flags (ncu's listing has none; sass_stalls.py takes them from here).
if [ "${BLU_SASS_SET:-simt}" = simt ]; then
for o in "$build"/blublas/CMakeFiles/blublas.dir/src/gemm/simt_f32_lean*_gemm.cu.o; do
  cuobjdump -sass "$o"
done > "$out/lean.sass" 2> "$out/lean.sass.err"
fi
[ "${BLU_SASS_SET:-simt}" = simt ] && for f in "$out"/*.source.csv; do
  python3 scripts/sass_stalls.py "$f" --sass "$out/lean.sass" 2>&1 | head -12
done
# The reports themselves (~4 MB each) stay behind: the CSVs and details carry what is read here.
tar -C /tmp/blu-sass --exclude='*.ncu-rep' -cJf "$OUT/sass_stalls.tar.xz" sass_stalls
stamp "packed $OUT/sass_stalls.tar.xz ($(du -h "$OUT/sass_stalls.tar.xz" | cut -f1))"
