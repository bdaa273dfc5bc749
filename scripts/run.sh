#!/usr/bin/env bash
# README command 1: installs what is missing, builds, and runs the main job: `blutrain train`.
# Without a GPU it trains the tiny GPT-2 on the Brown corpus on the CPU for a few minutes (the loss
# falls, a sample is printed, a checkpoint written); with a GPU it trains GPT-2 124M.
# Arguments are passed to `blutrain train` (see `build/blutrain/blutrain --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
BLU_SETUP_MLIR=0 scripts/setup-deps.sh  # blucomp (MLIR) is not part of the training run
# Without a GPU nothing of CUDA can run: the CPU-only configuration (Note [CPU-only build] in
# CMakeLists.txt) compiles no CUDA at all, in its own build directory so that a CUDA build in
# ./build is left as it is. BLU_WITH_CUDA=ON|OFF overrides the choice.
cfg_args=(-DBLU_BUILD_TESTS=OFF -DBLU_BUILD_BENCH=OFF)
with_cuda=${BLU_WITH_CUDA:-}
if [ -z "$with_cuda" ]; then
  if nvidia-smi -L >/dev/null 2>&1; then with_cuda=ON; else with_cuda=OFF; fi
fi
if [ "$with_cuda" = OFF ]; then
  export BLU_BUILD_DIR=${BLU_BUILD_DIR:-build-cpu}
  echo "run.sh: no GPU: CPU-only build in $BLU_BUILD_DIR (set BLU_WITH_CUDA=ON to build the CUDA layers)"
fi
cfg_args+=("-DBLU_WITH_CUDA=$with_cuda")
build_dir=$(scripts/configure.sh "${cfg_args[@]}")
cmake --build "$build_dir" -j "$(nproc)" --target blutrain-cli
# Idle OpenMP threads spin at barriers by default: on a small CPU that costs 1.5-5x per step.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# Note [OpenBLAS core on AVX-512]: OpenBLAS (Debian's 0.3.21, DYNAMIC_ARCH) picks its kernels when
# it loads, before main, from the CPU or from OPENBLAS_CORETYPE. The 2-core Zen 5 developer machine's
# environment sets OPENBLAS_CORETYPE=Haswell for every process (the image's choice, not a user's),
# which forces the AVX2 kernels; left to itself OpenBLAS picks Cooperlake (AVX-512) there, and the
# tiny model's GEMMs run 1.4-1.7x faster (lm head 274-296 vs 169-180 GFLOP/s, 2 threads,
# bench/cpu/openblas_core_probe.c; the 40-s training run 2179 vs 1752 tok/s; bench/NOTES.md "CPU
# first run"). So on a CPU with avx512f a pre-AVX-512 core name is dropped (OpenBLAS detects the
# CPU itself), saying so; BLU_KEEP_OPENBLAS_CORETYPE=1 keeps whatever is set.
case "${OPENBLAS_CORETYPE:-}" in
  Haswell|Zen|Sandybridge|Nehalem|Core2|Penryn|Dunnington|Atom|Prescott|Barcelona|Bulldozer|\
  Piledriver|Steamroller|Excavator|Opteron|Bobcat|Katmai|Coppermine|Northwood)
    if [ "${BLU_KEEP_OPENBLAS_CORETYPE:-0}" != 1 ] && grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
      echo "run.sh: this CPU has AVX-512: unsetting OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE so OpenBLAS picks" \
           "its AVX-512 kernels (BLU_KEEP_OPENBLAS_CORETYPE=1 keeps it)"
      unset OPENBLAS_CORETYPE
    fi ;;
esac
# Note [OpenBLAS idle workers]: after a GEMM, OpenBLAS's worker threads spin on sched_yield for
# 2^28 cycles (~0.1 s) before they sleep, so between GEMMs they hold the cores the OpenMP ops of
# the step need (perf on the tiny CPU run: 25% of all samples in sched_yield and the kernel's
# return from it). 2^10 cycles: 3021 vs 2090-2179 tok/s (40-s runs, same machine and binary).
export OPENBLAS_THREAD_TIMEOUT=${OPENBLAS_THREAD_TIMEOUT:-10}
exec "$build_dir/blutrain/blutrain" train "$@"
