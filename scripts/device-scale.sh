#!/usr/bin/env bash
# device-scale.sh: issue 10's "context and size" races in one device call: blutrain vs PyTorch
# eager and torch.compile (bench/e2e/run_e2e.py, bf16, synthetic data, the same flags as the d12
# race) with a per-kernel profile of one step of every run, for
#   longctx: d12 with a 16384-position table, B2 T16384 (12 steps, 4 warm-up, profile step 6)
#   d48:     GPT-2 d48 (1.56B), B16 T1024 (10 steps, 4 warm-up, profile step 6)
# BLU_SCALE_CASES picks (default "longctx,d48"; none: no race; also d24, d36, and d12side0 / d48side1 ...: blutrain
# alone at B16 T1024 in BLU_SCALE_MODES (default bf16) with its side stream off / on, profiled;
# d12race: the d12 race itself; d12gelugrad0 / d12gelugrad1 ...: blutrain alone with
# BLUTRAIN_GELU_GRAD_EPILOGUE=0 / 1; every race case runs BLU_SCALE_MODES, default bf16; largest:
# bench/e2e/largest_model.py, BLU_LARGEST_ARGS more flags, e.g. --ladder; <race case>@VAR=value[@...]
# such as longctx@BLUBLAS_ATTN_BWD_CFG=3: blutrain alone at that case's shape with those
# environment variables (tokens starting with --: blutrain flags), profiled);
# BLU_SCALE_FRAMEWORKS: the race's frameworks (run_e2e.py --frameworks; default all three).
# BLU_SCALE_TESTS: GPU test binaries built and run first (BLU_SCALE_TEST_FILTER: their
# --gtest_filter; BLU_SCALE_GATE=1: stop when one fails); BLU_SCALE_BENCH="target args...[;target
# args...]": benchmarks built and run after the tests (output <target>.txt, JSON under <target>/;
# BLU_SCALE_TORCH_ATTN=1 runs torch_attention.py --dq_shapes into attention_bench's folder first);
# BLU_SCALE_SASS="build-relative paths": their SASS under sass/; BLU_SCALE_NCU: scripts/ncu-hot.sh
# names profiled last (reports under ncu/). Each case's e2e.json/md/png and
# profiles land in $OUT/scale.tar.gz under <case>/ (bench/results/<gpu>/raw/scale/ on import).
#   BLU_COMMIT=<sha> BLU_DIRTY=0 scripts/device-scale.sh [build-dir (default /tmp/bd)]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-/tmp/bd}
OUT=${OUT:-/tmp/blu-out}; mkdir -p "$OUT"
work=/tmp/blu-scale; rm -rf "$work"; mkdir -p "$work"
. scripts/device-build.sh
export PYTHONUNBUFFERED=1
trap 'tar -C "$work" -czf "$OUT/scale.tar.gz" --exclude="*/cache" . 2>/dev/null' EXIT
stamp "gpu $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
tests=${BLU_SCALE_TESTS:-}  # GPU test binaries to build and run first (comma-separated)
ncu_names=${BLU_SCALE_NCU:-}  # scripts/ncu-hot.sh names, run last (comma-separated)
IFS=';' read -r -a benches <<< "${BLU_SCALE_BENCH:-}"  # "target args...;target args..."
bench_targets=""
for b in "${benches[@]}"; do read -r -a bench <<< "$b"; bench_targets+=" ${bench[0]:-}"; done
blu_device_build "$build" "$work" blutrain-cli ${tests//,/ } ${ncu_names:+blublas-profiler} \
  $bench_targets || exit 1
stamp "build done"
# BLU_SCALE_SASS="path ...": cuobjdump -sass of build outputs (objects, binaries) into sass/, and
# each one's loop instruction counts (<name>.loops.txt, scripts/sass-loops.py).
if [ -n "${BLU_SCALE_SASS:-}" ]; then
  mkdir -p "$work/sass"
  for o in $BLU_SCALE_SASS; do
    cuobjdump -sass "$build/$o" > "$work/sass/$(basename "$o").sass" 2>&1 || echo "cuobjdump $o rc=$?"
    # Loop bodies' instruction counts per function (scripts/sass-loops.py), small enough to commit.
    python3 scripts/sass-loops.py "$work/sass/$(basename "$o").sass" \
      > "$work/sass/$(basename "$o").loops.txt" 2>&1 || echo "sass-loops $o rc=$?"
  done
fi
bin=$build/blutrain/blutrain
for t in ${tests//,/ }; do
  timeout "${BLU_SCALE_TEST_TIMEOUT:-200}" "$build/tests/$t" \
    ${BLU_SCALE_TEST_FILTER:+--gtest_filter=$BLU_SCALE_TEST_FILTER} > "$work/$t.txt" 2>&1
  rc=$?
  echo "$t rc=$rc $(grep -E '^\[  (PASSED|FAILED)' "$work/$t.txt" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \]|Failure|error" "$work/$t.txt" | head -8
  # BLU_SCALE_GATE=1: a failing (or hanging) test stops the call before the races.
  if [ "$rc" != 0 ] && [ "${BLU_SCALE_GATE:-0}" = 1 ]; then tail -20 "$work/$t.txt"; exit 1; fi
done
for b in "${benches[@]}"; do
  read -r -a bench <<< "$b"
  [ -n "${bench[0]:-}" ] || continue
  mkdir -p "$work/${bench[0]}"
  # BLU_SCALE_TORCH_ATTN=1: PyTorch SDPA at attention_bench --dq_only's shapes first (its ratios).
  if [ "${bench[0]}" = attention_bench ] && [ "${BLU_SCALE_TORCH_ATTN:-0}" = 1 ]; then
    timeout 150 python3 bench/torch_attention.py "$work/${bench[0]}" --dq_shapes \
      > "$work/torch_attention.txt" 2>&1
    echo "torch_attention rc=$?"; grep -E "^\|" "$work/torch_attention.txt" | tail -8
  fi
  timeout 200 "$build/bench/${bench[0]}" --blu_out="$work/${bench[0]}" "${bench[@]:1}" \
    > "$work/${bench[0]}.txt" 2>&1
  echo "${bench[0]} rc=$?"; grep -E "^\||vs torch|ex2_fma" "$work/${bench[0]}.txt" | tail -${BLU_SCALE_BENCH_LINES:-12}
  stamp "bench ${bench[0]} done"
done

# A race case's shape and schedule (run_e2e.py flags) into args; false for other names.
race_args() {
  case $1 in
    longctx) args=(--model d12 --batch 2 --seq 16384 --block-size 16384 --steps 12 --warmup 4) ;;
    d24|d36|d48) args=(--model "$1" --batch 16 --seq 1024 --steps 10 --warmup 4) ;;
    d12race) args=(--model d12 --batch 16 --seq 1024 --steps 20 --warmup 5) ;;
    *) return 1 ;;
  esac
}

IFS=, read -r -a cases <<< "${BLU_SCALE_CASES:-longctx,d48}"
for c in "${cases[@]}"; do
  case $c in
    d[0-9]*side[01])  # blutrain alone, its side stream off / on: kernel times without overlap
      mkdir -p "$work/$c"
      BLUTRAIN_SIDE_STREAM=${c: -1} CUDA_VISIBLE_DEVICES=0 timeout 120 python3 bench/e2e/run_e2e.py \
        --blutrain "$bin" --out "$work/$c" --modes "${BLU_SCALE_MODES:-bf16}" --frameworks blutrain \
        --model "${c%side*}" \
        --profile-step 8 --steps 16 --warmup 5 --data synthetic > "$work/$c/log.txt" 2>&1
      echo "$c rc=$? $(grep -E 'tok/s' "$work/$c/log.txt" | tail -3 | tr '\n' ' ')"
      continue ;;
    d[0-9]*gelugrad[01])  # blutrain alone with the GELU backward as the dX GEMM's epilogue off / on
      mkdir -p "$work/$c"
      BLUTRAIN_GELU_GRAD_EPILOGUE=${c: -1} CUDA_VISIBLE_DEVICES=0 timeout 120 python3 bench/e2e/run_e2e.py \
        --blutrain "$bin" --out "$work/$c" --modes "${BLU_SCALE_MODES:-bf16}" --frameworks blutrain \
        --model "${c%gelugrad*}" --steps 16 --warmup 5 --data synthetic > "$work/$c/log.txt" 2>&1
      echo "$c rc=$? $(grep -E 'tok/s' "$work/$c/log.txt" | tail -3 | tr '\n' ' ')"
      continue ;;
    largest)  # bench/e2e/largest_model.py: the largest GPT-2-shaped model each framework trains
      mkdir -p "$work/$c"
      CUDA_VISIBLE_DEVICES=0 timeout -k 10 "${BLU_SCALE_TIMEOUT:-540}" python3 bench/e2e/largest_model.py \
        --blutrain "$bin" --out "$work/$c" ${BLU_LARGEST_ARGS:-} > "$work/$c/log.txt" 2>&1
      echo "largest rc=$?"; grep -E "^\| (blutrain|torch)" "$work/$c/log.txt"
      continue ;;
    *@*)  # blutrain alone at a race case's shape with VAR=value[@VAR=value...] set
      # (tokens starting with -- are blutrain flags instead: d12race@--logits-chunk=16384)
      race_args "${c%%@*}" || { echo "device-scale.sh: unknown case $c" >&2; continue; }
      IFS=@ read -r -a toks <<< "${c#*@}"
      kv=(); flags=""
      for t in "${toks[@]}"; do if [ "${t:0:2}" = -- ]; then flags+="${flags:+ }$t"; else kv+=("$t"); fi; done
      dir=$(echo "$c" | tr -c 'A-Za-z0-9_.\n-' '_')
      mkdir -p "$work/$dir"
      env "${kv[@]}" CUDA_VISIBLE_DEVICES=0 timeout 150 python3 bench/e2e/run_e2e.py --blutrain "$bin" \
        --out "$work/$dir" --modes "${BLU_SCALE_MODES:-bf16}" --frameworks blutrain --profile-step 6 \
        --data synthetic --extra-blutrain-args="$flags" "${args[@]}" > "$work/$dir/log.txt" 2>&1
      echo "$c rc=$? $(grep -E '^\| (bf16|fp32|tf32) ' "$work/$dir/log.txt" | head -3 | tr '\n' ' ')"
      continue ;;
    none) continue ;;  # tests, bench or ncu only
    *) race_args "$c" || { echo "device-scale.sh: unknown case $c" >&2; continue; } ;;  # a race
  esac
  stamp "$c: ${args[*]}"
  mkdir -p "$work/$c"
  CUDA_VISIBLE_DEVICES=0 timeout -k 10 "${BLU_SCALE_TIMEOUT:-270}" python3 bench/e2e/run_e2e.py \
    --blutrain "$bin" --out "$work/$c" --modes "${BLU_SCALE_MODES:-bf16}" --profile-step 6 --data synthetic \
    ${BLU_SCALE_FRAMEWORKS:+--frameworks "$BLU_SCALE_FRAMEWORKS"} "${args[@]}" \
    > "$work/$c/log.txt" 2>&1
  echo "rc=$?" >> "$work/$c/log.txt"
  grep -E "^\| (bf16|fp32|tf32)" "$work/$c/log.txt" | head -8
  tar -C "$work" -czf "$OUT/scale.tar.gz" --exclude="*/cache" . 2>/dev/null  # kept if the call is cut
done
if [ -n "$ncu_names" ]; then
  stamp "ncu: $ncu_names"
  scripts/ncu-hot.sh "$build" "$work/ncu" ${ncu_names//,/ } > "$work/ncu.txt" 2>&1
  grep -E "^==|Duration|Throughput|Issued Warp|No Eligible|stalled_(barrier|long|short|math|mio|wait|no_inst|not_sel|dispatch)" "$work/ncu.txt" | head -60
fi
stamp "done"
