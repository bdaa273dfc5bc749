#!/usr/bin/env bash
# README command 1: installs what is missing, builds, and runs the main job: `blutrain train`.
# Without a GPU it trains the tiny GPT-2 on the Brown corpus on the CPU for a few minutes (the loss
# falls, a sample is printed, a checkpoint written); with a GPU it trains GPT-2 124M.
# Arguments are passed to `blutrain train` (see `build/blutrain/blutrain --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
# Without a GPU the kernels only need to link: build one GPU target to halve the compile time.
if [ -z "${BLU_CUDA_ARCHS:-}" ] && ! nvidia-smi -L >/dev/null 2>&1; then
  export BLU_CUDA_ARCHS=90a
fi
build_dir=$(scripts/configure.sh -DBLU_BUILD_TESTS=OFF -DBLU_BUILD_BENCH=OFF)
cmake --build "$build_dir" -j "$(nproc)" --target blutrain-cli
# Idle OpenMP threads spin at barriers by default: on a small CPU that costs 1.5-5x per step.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
exec "$build_dir/blutrain/blutrain" train "$@"
