#!/usr/bin/env bash
# fuzz.sh: builds the libFuzzer targets (tests/fuzz, BLU_FUZZ=ON: clang, ASan + UBSan, CPU-only;
# Note [Fuzz build] in cmake/BluFuzz.cmake) and runs each for a bounded time from its seed corpus
# (tests/fuzz/corpus/<target>), then prints executions and findings per target. Exit 1 when any
# target found something (crash, sanitizer report, timeout, or an allocation over the cap);
# libFuzzer leaves the input that did it as <artifacts>/<target>/crash-*|leak-*|timeout-*|oom-*.
#   scripts/fuzz.sh [seconds-per-target] [target...]      default 20 s, every target
# Environment: BLU_FUZZ_BUILD (build dir, default <repo>/build-fuzz), JOBS (default 2),
# BLU_FUZZ_OUT (artifacts and grown corpora, default <build>/fuzz-out; the committed seeds are
# only read), BLU_FUZZ_TESTS=1: the same instrumented build also compiles the CPU test suite and,
# after the fuzzing, runs it (ctest -L cpu) under ASan + UBSan with leak detection: the CI's
# sanitizer leg and its CPU-only configuration in one build (Note [Sanitized CPU leg] in .ci/run).
#
# Note [Fuzz limits]
#   -malloc_limit_mb=256 makes any single allocation above 256 MiB a finding ("out-of-memory
#   (malloc(...))"): no input of a few KB has a reason to ask for that, so it is a length field
#   believed. -rss_limit_mb=1024 bounds the whole process (leaks that accumulate, many medium
#   allocations), -timeout=10 makes a hang (an input that takes > 10 s) a finding. Inputs stay
#   <= 64 KiB (-max_len), which is enough for every format's structure.
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BLU_FUZZ_BUILD:-$SRC/build-fuzz}"
JOBS="${JOBS:-2}"
OUT="${BLU_FUZZ_OUT:-$BUILD/fuzz-out}"
SECONDS_PER_TARGET="${1:-20}"
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  TARGETS=(safetensors_fuzz token_shard_fuzz tokenizer_files_fuzz tokenizer_encode_fuzz config_file_fuzz
           checkpoint_fuzz store_protocol_fuzz)
fi

mkdir -p "$OUT"
command -v clang++ >/dev/null || { echo "fuzz.sh: needs clang++ (Debian: apt-get install clang)"; exit 1; }
t0=$(date +%s)
with_tests=${BLU_FUZZ_TESTS:-0}
tests_flag=OFF; [ "$with_tests" = 1 ] && tests_flag=ON
CC=clang CXX=clang++ cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DBLU_WITH_CUDA=OFF \
  -DBLU_FUZZ=ON -DBLU_WITH_MLIR=OFF -DBLU_BUILD_TESTS=$tests_flag -DBLU_BUILD_BENCH=OFF \
  -DBLU_WARNINGS_AS_ERRORS=ON >"$OUT.configure.log" 2>&1 || { cat "$OUT.configure.log"; exit 1; }
# Warnings are errors here too: this is CI's CPU-only build (BLU_WITH_CUDA=OFF), and a name used
# only with the CUDA backend warns only in it (session 37: two such unused functions broke the
# README's test command with GCC on a machine without the CUDA toolkit, unseen by CI).
if [ "$with_tests" = 1 ]; then
  nice -n 10 ninja -C "$BUILD" -j "$JOBS"   # everything: libraries, fuzz targets, CPU tests
else
  nice -n 10 ninja -C "$BUILD" -j "$JOBS" "${TARGETS[@]}"
fi
t1=$(date +%s)

export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
status=0
summary=()
for t in "${TARGETS[@]}"; do
  work="$OUT/$t"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  log="$work/fuzz.log"
  rc=0
  # The grown corpus goes to $work/corpus; the committed seeds are read-only input.
  nice -n 10 "$BUILD/tests/fuzz/$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=1024 \
    -malloc_limit_mb=256 -max_len=65536 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    "$work/corpus" "$SRC/tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  findings=$(find "$work/artifacts" -type f | wc -l)
  if [ "$rc" -ne 0 ] || [ "$findings" -ne 0 ]; then
    status=1
    echo "---- $t: exit $rc; last lines of $log:"
    grep -E "ERROR|runtime error|SUMMARY|Test unit written|out-of-memory|deadly signal" "$log" | head -8 || true
  fi
  summary+=("$(printf '%-22s %10s execs  %2d findings  (%ss)' "$t" "${execs:-?}" "$findings" "$SECONDS_PER_TARGET")")
done
t2=$(date +%s)
echo "fuzz.sh: build $((t1 - t0)) s, fuzzing $((t2 - t1)) s (ASan+UBSan, malloc cap 256 MiB)"
printf '%s\n' "${summary[@]}"
if [ "$with_tests" = 1 ]; then
  # The CPU tests under the same sanitizers (scripts/sanitize.sh's options): leaks are failures,
  # any UB report stops the test. Four tests are left to the main leg (BLU_SANITIZE_SKIP, a ctest -E
  # regex; empty runs all), CI staying near its 30-minute goal: the ZeRO-3 sharded-checkpoint test
  # is seven gangs of up to 4 ZeRO-3 ranks, 93 s under ASan on 2 cores (session 15), for code the
  # ZeRO-1 sharded test, the damaged-shard and dying-rank tests and bludist's zero3_test already put
  # under the sanitizers; the chunked classifier's d12-shaped test (GPT-2 124M trained twice, 56 s
  # without sanitizers) and its arena test (88 s under ASan, session 15), for code its tiny
  # odd-chunks test (98 s under ASan) and capture_arena_test run under them; and the tensor-parallel
  # trainer's two-rank run with its resumes (77 s under ASan, session 18), for code its 2x2-mesh,
  # nonfinite-skip and bad-flag tests and bludist's tensor_parallel_test run under them.
  ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1" \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
    ctest --test-dir "$BUILD" -L cpu -E "${BLU_SANITIZE_SKIP-ShardedCheckpoints\.Zero3FourRanks|CapturedClassifier\.(D12Shaped|ArenaShrinks)|TensorParallelTrain\.TwoRanksMatchOneProcess}" -j "$JOBS" \
      --output-on-failure --timeout 900 || status=1
  echo "fuzz.sh: CPU tests under ASan+UBSan $(( $(date +%s) - t2 )) s"
fi
exit $status
