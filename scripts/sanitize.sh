#!/usr/bin/env bash
# sanitize.sh: the CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer (issue 14).
# A separate CPU-only build (BLU_WITH_CUDA=OFF: the sanitizers see host code only; GPU code is
# compute-sanitizer's job on the device) whose flags come from the command line, so the project's
# CMake files stay sanitizer-free. Leaks count (detect_leaks=1), any UB report stops the test
# (halt_on_error=1), so a finding is a failing test. Prints the wall time of the build and of the
# tests.
#   scripts/sanitize.sh [ctest args...]     e.g. scripts/sanitize.sh -R checkpoint
# Environment: BLU_SANITIZE_BUILD (build dir, default <repo>/build-sanitize), JOBS (default nproc),
# BLU_SANITIZE_CMAKE_ARGS (extra configure arguments, e.g. "-DBLU_TEST_PATTERN=checkpoint" to build
# only some tests; sticky in that build directory's cache).
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BLU_SANITIZE_BUILD:-$SRC/build-sanitize}"
JOBS="${JOBS:-$(nproc)}"
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"

t0=$(date +%s)
cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBLU_WITH_CUDA=OFF \
  -DBLU_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="$SAN" -DCMAKE_EXE_LINKER_FLAGS="$SAN" \
  -DCMAKE_SHARED_LINKER_FLAGS="$SAN" ${BLU_SANITIZE_CMAKE_ARGS:-} >"$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log"; exit 1; }
cmake --build "$BUILD" -j "$JOBS"
t1=$(date +%s)

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
status=0
ctest --test-dir "$BUILD" -L cpu -j "$JOBS" --output-on-failure "$@" || status=$?
t2=$(date +%s)
echo "sanitize.sh: build $((t1 - t0)) s, tests $((t2 - t1)) s (ASan+UBSan, leaks on), exit $status"
exit $status
