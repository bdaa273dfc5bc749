#!/usr/bin/env bash
# The device workflow: on the GPU machine, build (Ninja, all cores), run the chosen suite's tests
# (cpu + gpu labels; a skipped GPU test is a failure here: BLU_REQUIRE_GPU=1), run its benchmarks,
# check the SASS of the hot kernels, write $OUT/summary.json and one tarball of everything else, and
# print a short table last (with regressions against the committed bench/results/<gpu>/summary.json).
#
#   scripts/device-check.sh [--suite gemm|kernels|tensor|train|e2e|all] [--quick] [--no-build]
#                           [--no-tests] [--no-bench] [--no-sass] [--no-train] [--archs "90a-real;80"]
#                           [--tests REGEX]
# BLU_BENCHES="..." overrides the suite's benchmark list and order.
# BLU_GEMM_FULL=1 runs gemm_bench in full mode even with --quick (the other benches stay quick).
# --suite e2e: builds blutrain only, runs the race bench/e2e/run_e2e.py (blutrain vs PyTorch eager and
# torch.compile, fp32/tf32/bf16) and bench/e2e/fidelity.py (BLU_E2E_STEPS=20, BLU_E2E_PROFILE_STEP=8,
# BLU_FIDELITY_STEPS=200, BLU_FIDELITY_MODES=fp32,bf16 and BLU_E2E_MODES=fp32,tf32,bf16 (empty: skip), BLU_E2E_TIMEOUT=420,
# BLU_FIDELITY_TIMEOUT=360, BLU_BUILD_DIR (default build-device), BLU_FIDELITY_ARGS="more fidelity.py flags, e.g. --floor blas-lt", BLU_E2E_DATA=synthetic, BLU_E2E_EXTRA="blutrain flags", BLU_E2E_REUSE=a directory of
# an earlier call's records (logs/e2e_records/ in its tarball) whose runs are loaded, not re-run).
# Commit provenance comes from git (.git travels with the tree); BLU_COMMIT/BLU_DIRTY override it.
# Warnings are not errors here (CI keeps them errors): a spill or warning in one file must not
# stop every test; spills are listed in the output and local memory is flagged by the SASS check.
set -uo pipefail
cd "$(dirname "$0")/.."
suite=all; quick=0; do_train=1; do_build=1; do_tests=1; do_bench=1; do_sass=1; archs="90a-real;80"; test_regex=""
while (($#)); do
  case "$1" in
    --suite) suite=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --no-build) do_build=0; shift ;;
    --no-tests) do_tests=0; shift ;;
    --no-bench) do_bench=0; shift ;;
    --no-sass) do_sass=0; shift ;;
    --no-train) do_train=0; shift ;;
    --archs) archs=$2; shift 2 ;;
    --tests) test_regex=$2; shift 2 ;;
    -h|--help) sed -n 2,11p "$0"; exit 0 ;;
    *) echo "device-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$suite" in gemm|kernels|tensor|train|e2e|all) ;; *) echo "bad --suite $suite" >&2; exit 2 ;; esac
[ "$suite" = e2e ] && do_sass=0   # the race wants the CPUs (torch.compile) more than the SASS dump

OUT=${OUT:-/tmp/blu-out}; mkdir -p "$OUT"
work=/tmp/blu-device; res=$work/results; logs=$work/logs
rm -rf "$res" "$logs"; mkdir -p "$res" "$logs"
export PATH=/usr/local/cuda/bin:$PATH
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export BLU_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
export BLU_TENSOR_REPORT=$res/tensor_ops.json   # written by the CPU-vs-CUDA op registry test
# Written by tests/blublas/gemm_property_gpu_test (gemm and all suites): problems run / failed per
# precision, which make_summary.py reports as gemm.<fp32|tf32|bf16|f16>.cases_failed.
export BLU_GEMM_PROPERTY_REPORT=$res/gemm_property.json
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
# Packs what exists so far into $OUT: if the call is cut off at its time limit, the finished
# parts still come back (summary.json can be rebuilt from the raw JSON with make_summary.py).
pack() { cp -r "$res" "$logs/" 2>/dev/null; tar -C "$work" -czf "$OUT/device-results.tar.gz" --exclude=sass_hot_sm90a.txt.gz logs; }

gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
gpu_count=$(nvidia-smi -L 2>/dev/null | wc -l)
case "$gpu_name" in *H100*) tag=h100 ;; *H200*) tag=h200 ;; *) tag=$(echo "${gpu_name:-unknown}" | tr 'A-Z ' 'a-z_') ;; esac
((gpu_count > 1)) && tag="${tag}x${gpu_count}"
stamp "gpu: $gpu_name x$gpu_count -> bench/results/$tag"
{ nvidia-smi; nvcc --version; cmake --version; } > "$logs/env.txt" 2>&1

# Suites: the ctest regex (on "<executable>.<Suite>.<Test>") and the benchmarks to run.
case "$suite" in
  gemm)    tests='^(blublas_(gemm|status|device_info)|layering|install)'; benches="gemm_bench" ;;
  kernels) tests='^blublas_(layernorm|gelu|elementwise|softmax|cross_entropy|xent|embedding|reduce|adamw|attention)'
           benches="kernels_bench attention_bench" ;;
  tensor)  tests='^blutensor_'; benches="" ;;
  train)   tests='^blutrain_'; benches="" ;;
  e2e)     tests='^blutrain_kernel_trace'; benches="" ;;
  all)     tests='.'; benches="gemm_bench kernels_bench attention_bench" ;;
esac
[ -n "$test_regex" ] && tests=$test_regex
benches=${BLU_BENCHES:-$benches}   # e.g. the order "kernels_bench attention_bench gemm_bench"

# BLU_BUILD_DIR: the build directory (default build-device in the tree). A directory outside the
# carried tree that git ignores (e.g. ../bd from .snap, /bd/ in .gitignore) survives between the
# calls of one warm machine, so a follow-up call (--no-build, or an incremental build) skips the
# ~200 s compile.
build=${BLU_BUILD_DIR:-build-device}
if ((do_build)); then
  stamp "configure + build (archs $archs)"
  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release "-DBLU_CUDA_ARCHS=$archs" \
    -DBLU_WARNINGS_AS_ERRORS=OFF \
    > "$logs/configure.txt" 2>&1 || { tail -30 "$logs/configure.txt"; }
  targets=""; [ "$suite" = e2e ] && targets="--target blutrain-cli blutrain_kernel_trace_test"
  timeout "${BLU_BUILD_TIMEOUT:-330}" cmake --build $build -j "$(nproc)" $targets -- -k 0 > "$logs/build.txt" 2>&1
  build_rc=$?
  grep -E "error|FAILED" "$logs/build.txt" | head -40 > "$logs/build_errors.txt"
  grep -iE "spill" "$logs/build.txt" | grep -v " 0 bytes spill" | sort -u > "$logs/spills.txt"
  stamp "build rc=$build_rc ($(grep -c FAILED "$logs/build.txt") failed targets, $(wc -l < "$logs/spills.txt") spill lines)"
else
  build_rc=0
fi

# SASS of the hot kernels: instruction counts per kernel and arch, the static checks, and the
# sm_90a SASS text of the GEMM and attention kernels (the whole dump is too large to bring back).
sass_step() {
  cuobjdump --dump-sass $build/blublas/libblublas.a > "$work/sass_blublas.txt" 2>/dev/null
  python3 scripts/sass_check.py "$work/sass_blublas.txt" "$res/sass_check.json" > "$logs/sass_check.txt" 2>&1
  awk '/arch = /{arch=$3} /Function : /{keep = (arch=="sm_90a" && $0 ~ /(sm90_gemm_kernel|flash_attn_(fwd|bwd)|sm80[A-Za-z0-9_]*gemm[A-Za-z0-9_]*kernel)/)} keep' \
    "$work/sass_blublas.txt" | head -c 60000000 | gzip -c > "$logs/sass_hot_sm90a.txt.gz"
  rm -f "$work/sass_blublas.txt"
}
# It runs on the CPU (cuobjdump over the whole library takes minutes) while the GPU runs the tests.
sass_pid=""
if ((do_sass)) && [ -f $build/blublas/libblublas.a ] && command -v cuobjdump >/dev/null; then
  stamp "sass (in the background)"; sass_step & sass_pid=$!
fi

tests_pass=0; tests_fail=0; tests_total=0
if ((do_tests)) && [ -f "$build/.carried" ]; then
  # A carried tree (scripts/pack-carry.sh) has the test executables but no CTest files: run each
  # executable under $build/tests whose name matches the regex's executable part, as ctest would
  # (gtest's own XML per executable; a test counts as failed when its executable fails).
  stamp "tests (carried executables): $tests"
  exe_re=$(echo "$tests" | sed -E 's/\\\..*$//')
  for t in "$build"/tests/*; do
    [ -x "$t" ] && [ -f "$t" ] || continue
    name=$(basename "$t"); echo "$name" | grep -qE "$exe_re" || continue
    timeout "${BLU_TEST_TIMEOUT:-240}" "$t" --gtest_output="xml:$res/gtest_$name.xml" > "$logs/test_$name.txt" 2>&1
    rc=$?
    n=$(grep -oE '^\[==========\] [0-9]+ tests? from' "$logs/test_$name.txt" | tail -1 | grep -oE '[0-9]+' || echo 1)
    p=$(grep -oE '^\[  PASSED  \] [0-9]+' "$logs/test_$name.txt" | grep -oE '[0-9]+$' || echo 0)
    f=$(( ${n:-1} - ${p:-0} ))
    ((rc != 0 && f == 0)) && f=1
    tests_total=$((tests_total + ${n:-1})); tests_fail=$((tests_fail + f))
    echo "$name: rc=$rc tests=${n:-?} failed=$f" | tee -a "$logs/ctest.txt"
    ((f > 0)) && { echo "$name rc=$rc"; grep -E '^\[  FAILED  \]' "$logs/test_$name.txt" | head -20; } >> "$logs/test_failures.txt"
  done
  tests_pass=$((tests_total - tests_fail))
  stamp "tests: $tests_pass passed, $tests_fail failed of $tests_total"
  pack
elif ((do_tests)); then
  stamp "tests: $tests"
  (cd $build && timeout "${BLU_TEST_TIMEOUT:-240}" ctest -R "$tests" --output-on-failure --timeout 120 -j "${BLU_TEST_JOBS:-4}" \
     --output-junit "$res/ctest_junit.xml") > "$logs/ctest.txt" 2>&1
  tests_total=$(grep -oE "out of [0-9]+" "$logs/ctest.txt" | tail -1 | grep -oE "[0-9]+" || echo 0)
  tests_fail=$(grep -oE "[0-9]+ tests failed" "$logs/ctest.txt" | grep -oE "^[0-9]+" || echo 0)
  [ -z "$tests_fail" ] && tests_fail=0
  tests_pass=$(( ${tests_total:-0} - tests_fail ))
  grep -E "\(Failed\)|\(SEGFAULT\)|\(Timeout\)|\(Subprocess aborted\)|\(Not Run\)|Skipped" "$logs/ctest.txt" | head -40 > "$logs/test_failures.txt"
  stamp "tests: $tests_pass passed, $tests_fail failed of $tests_total"
  pack
fi

if ((do_bench)); then
  qflag=""; ((quick)) && qflag="--blu_quick"
  # PyTorch references first: the attention bench prints its ratio from torch_attention.json.
  pys=""; { [ "$suite" = kernels ] || [ "$suite" = all ]; } && pys="torch_kernels torch_attention torch_attn_precision"
  for py in $pys; do
    if [ -f bench/$py.py ]; then
      stamp "python $py"
      timeout "${BLU_BENCH_TIMEOUT:-240}" python3 bench/$py.py "$res" > "$logs/$py.txt" 2>&1 \
        || echo "$py failed rc=$?" >> "$logs/bench_failures.txt"
      pack
    fi
  done
  for b in $benches; do
    if [ -x $build/bench/$b ]; then
      stamp "bench $b"
      bq=$qflag; [ "$b" = gemm_bench ] && [ "${BLU_GEMM_FULL:-0}" = 1 ] && bq=""
      timeout "${BLU_BENCH_TIMEOUT:-240}" $build/bench/$b --blu_out="$res" $bq > "$logs/$b.txt" 2>&1 \
        || echo "bench $b failed rc=$?" >> "$logs/bench_failures.txt"
      pack
    else
      echo "bench $b not built" >> "$logs/bench_failures.txt"
    fi
  done
fi

# The profiler command (users' tool) over every family: each command must run and agree with its
# reference; the JSON lines land in profiler.jsonl.
if ((do_bench)) && [ "$suite" != tensor ] && [ "$suite" != train ]; then
  stamp "blublas-profiler smoke"
  scripts/profiler-smoke.sh $build "$res" $( ((quick)) && echo --quick) > "$logs/profiler.txt" 2>&1 \
    || echo "profiler: $(tail -1 "$logs/profiler.txt")" >> "$logs/bench_failures.txt"
  pack
fi

# The trainer: GPT-2 124M end to end (tok/s, peak memory per precision) and fidelity against
# Hugging Face transformers' GPT2LMHeadModel from the same safetensors weights.
if ((do_bench)) && ((do_train)) && { [ "$suite" = train ] || [ "$suite" = all ]; }; then
  bin=$build/blutrain/blutrain
  if [ -x "$bin" ]; then
    stamp "fidelity vs Hugging Face GPT2LMHeadModel"
    timeout "${BLU_BENCH_TIMEOUT:-240}" python3 blutrain/tools/hf_fidelity.py --blutrain "$bin" \
      --out "$work/fidelity" --json "$res/fidelity.json" > "$logs/fidelity.txt" 2>&1 \
      || echo "fidelity failed rc=$?" >> "$logs/bench_failures.txt"
    if [ -x $build/tests/safetensors_roundtrip_tool ]; then
      stamp "safetensors round trip with PyTorch"
      timeout 120 python3 tests/interop/torch_safetensors_roundtrip.py $build/tests/safetensors_roundtrip_tool \
        "$work/interop" "$res/interop.json" > "$logs/interop.txt" 2>&1 \
        || echo "safetensors round trip with PyTorch failed" >> "$logs/bench_failures.txt"
    fi
    # Issue 13 (blucomp): capture + replay, the engines, the compiled step (scripts/device-comp.sh).
    stamp "captured / compiled step (device-comp.sh)"
    scripts/device-comp.sh "$bin" "$res" "$work/comp" "${BLU_STATIC_TOOLS:-}" > "$logs/comp.txt" 2>&1 \
      || echo "device-comp failed rc=$?" >> "$logs/bench_failures.txt"
    pack
    if [ "$suite" = train ]; then   # blutrain alone (the race with PyTorch is --suite e2e / all)
      stamp "e2e GPT-2 124M (blutrain only)"
      timeout "${BLU_E2E_TIMEOUT:-300}" python3 bench/e2e/run_e2e.py --blutrain "$bin" --out "$work/e2e" \
        --results "$res" --frameworks blutrain --steps "${BLU_E2E_STEPS:-12}" \
        > "$logs/e2e.txt" 2>&1 || echo "e2e failed rc=$?" >> "$logs/bench_failures.txt"
    fi
  else
    echo "blutrain not built" >> "$logs/bench_failures.txt"
  fi
fi

# The race: GPT-2 124M with blutrain vs PyTorch eager and torch.compile in every precision mode
# (tok/s, allocator peak, device memory in use, per-kernel-family breakdown of one step), then the
# per-step loss fidelity from identical weights and shards. e2e.json / fidelity_train.json carry
# the metrics for make_summary.py; e2e.md/png and fidelity_train.md go into the tarball.
if ((do_bench)) && ((do_train)) && { [ "$suite" = e2e ] || [ "$suite" = all ]; }; then
  bin=$build/blutrain/blutrain
  if [ -n "${BLU_E2E_MODES-fp32,tf32,bf16}" ]; then
  stamp "e2e race: blutrain vs PyTorch (${BLU_E2E_MODES-fp32,tf32,bf16}, steps ${BLU_E2E_STEPS:-20})"
  timeout -k 10 "${BLU_E2E_TIMEOUT:-420}" python3 bench/e2e/run_e2e.py --blutrain "$bin" --out "$work/e2e" \
    --results "$res" --modes "${BLU_E2E_MODES-fp32,tf32,bf16}" --steps "${BLU_E2E_STEPS:-20}" --warmup 5 --profile-step "${BLU_E2E_PROFILE_STEP:-8}" \
    --data "${BLU_E2E_DATA:-synthetic}" --extra-blutrain-args="${BLU_E2E_EXTRA:-}" \
    --reuse-from "${BLU_E2E_REUSE:-}" > "$logs/e2e.txt" 2>&1 || echo "e2e race failed rc=$?" >> "$logs/bench_failures.txt"
  mkdir -p "$logs/e2e_records" && cp "$work"/e2e/*.record.json "$logs/e2e_records/" 2>/dev/null
  pack
  fi
  if [ -n "${BLU_FIDELITY_MODES-fp32,bf16}" ]; then
    stamp "fidelity: ${BLU_FIDELITY_STEPS:-200} steps, ${BLU_FIDELITY_MODES-fp32,bf16}"
    timeout -k 10 "${BLU_FIDELITY_TIMEOUT:-360}" python3 bench/e2e/fidelity.py --blutrain "$bin" --out "$work/fidelity_train" \
      --results "$res" --steps "${BLU_FIDELITY_STEPS:-200}" --modes "${BLU_FIDELITY_MODES-fp32,bf16}" \
      --extra-blutrain-args="${BLU_E2E_EXTRA:-}" ${BLU_FIDELITY_ARGS:-} > "$logs/fidelity_train.txt" 2>&1 \
      || echo "fidelity (training) failed rc=$?" >> "$logs/bench_failures.txt"
    pack
  fi
fi

[ -n "$sass_pid" ] && { wait "$sass_pid"; stamp "sass done"; }
python3 scripts/make_summary.py --results "$res" --gpu-name "$gpu_name" --tag "$tag" \
  --committed "bench/results/$tag/summary.json" --out "$OUT/summary.json" \
  --build-rc "$build_rc" --tests "$tests_pass/$tests_total" --suite "$suite" \
  > "$logs/summary_table.txt" 2>&1
pack
cp "$logs/sass_hot_sm90a.txt.gz" "$OUT/" 2>/dev/null
gzip -c "$logs/ctest.txt" > "$OUT/ctest.txt.gz" 2>/dev/null
for f in build_errors spills test_failures bench_failures; do
  if [ -s "$logs/$f.txt" ]; then echo "== $f"; head -25 "$logs/$f.txt"; fi
done
for b in $benches torch_kernels torch_attention torch_attn_precision profiler fidelity interop e2e fidelity_train; do
  [ -f "$logs/$b.txt" ] && { echo "== $b (tail)"; tail -25 "$logs/$b.txt"; }
done
[ -f "$logs/sass_check.txt" ] && { echo "== sass"; tail -15 "$logs/sass_check.txt"; }
stamp "done"
cat "$logs/summary_table.txt"
for f in e2e.md fidelity_train.md; do [ -f "$res/$f" ] && { echo; cat "$res/$f"; }; done
