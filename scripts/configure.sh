#!/usr/bin/env bash
# Configures the build directory (default ./build) with Ninja and the CUDA toolkit. Extra
# arguments go to cmake. BLU_CUDA_ARCHS overrides the GPU targets (default: 90a-real;80).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BLU_BUILD_DIR:-build}
export PATH=/usr/local/cuda/bin:$PATH
args=(-S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release)
[ -n "${BLU_CUDA_ARCHS:-}" ] && args+=("-DBLU_CUDA_ARCHS=${BLU_CUDA_ARCHS}")
cmake "${args[@]}" "$@" >/dev/null
echo "$build_dir"
