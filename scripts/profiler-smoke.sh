#!/usr/bin/env bash
# Runs the installed-style blublas-profiler over every command family on the device (GEMM at the
# GPT-2 shapes and odd sizes, each fused kernel, attention) and collects the --json lines into
# <results>/profiler.jsonl; a human-readable run of a few commands goes to stdout. A command that
# fails is reported (and the script's exit code says how many failed) but does not stop the rest.
#   scripts/profiler-smoke.sh <build-dir> <results-dir> [--quick]
# --quick runs one command per family and precision (~20 s) instead of the whole list (~90 s).
set -uo pipefail
bin=$1/blublas/blublas-profiler; res=$2; quick=0; [ "${3:-}" = --quick ] && quick=1
[ -x "$bin" ] || { echo "profiler-smoke: $bin not built"; exit 1; }
mkdir -p "$res"; out=$res/profiler.jsonl; : > "$out"; fails=0
run() {
  local line
  if line=$(timeout 60 "$bin" "$@" --json 2>/tmp/profiler-err.txt); then
    echo "$line" >> "$out"; echo "ok   $*"
  else
    fails=$((fails + 1)); echo "FAIL $* : $(tail -2 /tmp/profiler-err.txt | tr '\n' ' ') $line"
  fi
}
if ((quick)); then
  run gemm --m=16384 --n=3072 --k=768 --dtype=bf16 --op_a=n --op_b=t --epilogue=bias_gelu
  run gemm --m=16383 --n=2305 --k=771 --dtype=tf32
  run gemm --m=1000 --n=17 --k=4099 --dtype=f32 --op_a=t
  run gemm --m=1024 --n=1024 --k=64 --batch=12 --dtype=f16 --path=sm80
  run layernorm --dtype=bf16 --op=bwd
  run gelu --dtype=f32 --op=fwd
  run softmax --rows=1000 --cols=4099 --dtype=f32
  run xent --dtype=bf16
  run embedding --dtype=f32
  run adamw --dtype=f32
  run column_sum --dtype=bf16
  run attention --T=1000 --d=128 --mode=bf16
  echo "profiler-smoke (quick): $(wc -l < "$out") ok, $fails failed"
  exit $((fails > 0))
fi
# GEMM: the GPT-2 fc forward / dX / dW, a square, an odd random shape, a batched one, each precision,
# each forced path, each epilogue.
run gemm --m=16384 --n=3072 --k=768 --dtype=bf16 --op_a=n --op_b=t
run gemm --m=16384 --n=768 --k=3072 --dtype=bf16 --op_a=n --op_b=n
run gemm --m=768 --n=3072 --k=16384 --dtype=bf16 --op_a=t --op_b=n
run gemm --m=4096 --n=4096 --k=4096 --dtype=bf16
run gemm --m=16383 --n=2305 --k=771 --dtype=bf16
run gemm --m=1000 --n=17 --k=4099 --dtype=f16 --out=f32
run gemm --m=1024 --n=1024 --k=64 --batch=12 --dtype=bf16
run gemm --m=16384 --n=3072 --k=768 --dtype=tf32 --op_a=n --op_b=t
run gemm --m=768 --n=3072 --k=16384 --dtype=tf32 --op_a=t --op_b=n
run gemm --m=4096 --n=4096 --k=4096 --dtype=f32 --reps=5
run gemm --m=4096 --n=4096 --k=4096 --dtype=bf16 --path=sm80
run gemm --m=4096 --n=4096 --k=4096 --dtype=bf16 --path=simt --reps=3
run gemm --m=16384 --n=3072 --k=768 --dtype=bf16 --epilogue=bias_gelu
run gemm --m=16384 --n=3072 --k=768 --dtype=bf16 --epilogue=bias
run gemm --m=768 --n=3072 --k=16384 --dtype=bf16 --op_a=t --op_b=n --epilogue=bgradb
run gemm --m=4096 --n=4096 --k=4096 --dtype=bf16 --layout=col
# Memory-bound kernels, both dtypes and directions.
for dt in f32 bf16; do
  for op in fwd bwd; do
    run layernorm --dtype=$dt --op=$op
    run gelu --dtype=$dt --op=$op
    run softmax --dtype=$dt --op=$op
  done
  run softmax --rows=1000 --cols=4099 --dtype=$dt
  run xent --dtype=$dt
  run xent --rows=999 --vocab=50257 --dtype=$dt
  run embedding --dtype=$dt
  run adamw --dtype=$dt
  run column_sum --dtype=$dt
done
# Attention: both head dims, every mode, odd T.
run attention --d=64 --mode=bf16
run attention --d=128 --mode=bf16
run attention --d=64 --mode=tf32
run attention --d=64 --mode=f32 --B=2 --reps=3
run attention --T=1000 --d=64 --mode=bf16 --causal=0
# Human-readable form of one command per family.
"$bin" gemm --m=16384 --n=3072 --k=768 --dtype=bf16 --op_a=n --op_b=t
"$bin" layernorm --dtype=bf16
"$bin" attention --d=64 --mode=bf16
echo "profiler-smoke: $(wc -l < "$out") ok, $fails failed"
exit $((fails > 0))
