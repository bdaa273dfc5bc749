#!/usr/bin/env bash
# README command 2: installs what is missing, builds everything and runs all tests (ctest).
# Without a GPU the GPU tests skip with their reason and the CPU tests run; on a GPU machine both run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
build_dir=$(scripts/configure.sh -DBLU_BUILD_TESTS=ON -DBLU_BUILD_BENCH=ON "$@")
jobs=$(nproc)
cmake --build "$build_dir" -j "$jobs"
cd "$build_dir"
ctest --output-on-failure -j "$jobs" --timeout 900
