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
# Note [OpenBLAS core on AVX-512]: Debian's OpenBLAS 0.3.21 (DYNAMIC_ARCH) does not know Zen 4/5
# and runs its AVX2 "Haswell" kernels there; its AVX-512 "SkylakeX" kernels ran the tiny model's
# GEMMs 1.6-1.7x faster on the 2-core Zen 5 developer machine (idle, 2 threads: lm head 280 vs 169
# GFLOP/s) and its training step 1.24x (2179 vs 1752 tok/s; bench/NOTES.md "CPU first run"). The
# library picks its kernels when it loads, before main, so the choice is made here: SkylakeX on a
# CPU with avx512f unless OPENBLAS_CORETYPE is already set.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  export OPENBLAS_CORETYPE=SkylakeX
fi
# Note [OpenBLAS idle workers]: after a GEMM, OpenBLAS's worker threads spin on sched_yield for
# 2^28 cycles (~0.1 s) before they sleep, so between GEMMs they hold the cores the OpenMP ops of
# the step need (perf on the tiny CPU run: 25% of all samples in sched_yield and the kernel's
# return from it). 2^10 cycles: 3021 vs 2090-2179 tok/s (40-s runs, same machine and binary).
export OPENBLAS_THREAD_TIMEOUT=${OPENBLAS_THREAD_TIMEOUT:-10}
exec "$build_dir/blutrain/blutrain" train "$@"
