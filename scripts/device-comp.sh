#!/usr/bin/env bash
# device-comp.sh: issue 13's device checks of the captured / compiled GPT-2 step (Notes [Step capture],
# [Captured engine], [Step runtime]), called by device-check.sh (train and all suites) or alone:
#   scripts/device-comp.sh <blutrain binary> <results dir> <work dir> [static tools dir]
# 1. capture d12 fp32/bf16 B4 T1024 on CUDA, replayed bit for bit (capture_d12_<p>.txt);
# 2. d12 B16 T1024, 12 steps each, one process after another: --engine autograd, captured and fused
#    (the trainer's default on CUDA), tok/s and peak from --summary-json (engine_<e>_d12_<p>.summary:
#    JSON, named so that make_summary.py's *.json glob does not take their e2e.* names for the race's);
# 3. with the static tools folder (scripts/blucomp-static.sh's gz/blu-plan.gz): d12 fp32 B8 T1024,
#    20 steps of `train --compile` (record, blu-plan, bound plan: Note [blutrain --compile]) vs 20
#    steps autograd vs 20 fused from the same seed; scripts/comp_report.py writes comp.json.
set -uo pipefail
bin=$1; res=$2; work=$3; tools=${4:-}
mkdir -p "$res" "$work"
fail() { echo "$*" >> "$res/comp_failures.txt"; echo "device-comp: $*"; }
for p in fp32 bf16; do
  echo "capture d12 $p"
  timeout 180 "$bin" capture --model d12 --device cuda --precision $p --batch-size 4 --seq-len 1024 \
    --out-dir "$work/capture_$p" > "$res/capture_d12_$p.txt" 2>&1 || fail "capture d12 $p rc=$?"
done
quiet="--data synthetic --seq-len 1024 --val-every -1 --final-val-batches 0 --sample-tokens 0 --no-save --no-plot"
for p in bf16 fp32; do
  for e in autograd captured fused; do
    echo "engine $e d12 $p"
    timeout 240 "$bin" train --model d12 --device cuda --engine $e --precision $p $quiet --batch-size 16 \
      --max-steps 12 --out-dir "$work/engine_${e}_$p" --summary-json "$res/engine_${e}_d12_$p.summary" \
      > "$res/engine_${e}_d12_$p.txt" 2>&1 || fail "engine $e d12 $p rc=$?"
  done
done
if [ -n "$tools" ] && [ -f "$tools/blu-plan.gz" ]; then
  mkdir -p "$work/tools" "$res/comp_plan"
  gunzip -c "$tools/blu-plan.gz" > "$work/tools/blu-plan" && chmod +x "$work/tools/blu-plan"
  common="--model d12 --device cuda --precision fp32 $quiet --batch-size 8"
  echo "compiled step d12 fp32 (--compile)"
  # Note [blutrain --compile]: the record, blu-plan on it and the bound plan in one run.
  BLU_PLAN="$work/tools/blu-plan" timeout 300 "$bin" train $common --max-steps 20 --compile \
    --out-dir "$work/comp_compiled" > "$res/compiled_d12_fp32.txt" 2>&1 || fail "compiled d12 fp32 rc=$?"
  grep -q "compile: blu-plan wrote a plan" "$res/compiled_d12_fp32.txt" || fail "compiled d12 fp32: no plan (see compiled_d12_fp32.txt)"
  cp "$work/comp_compiled/compiled_plan.json" "$res/comp_plan/plan_d12_fp32.json" 2>/dev/null
  cp "$work/comp_compiled/compiled_plan.log" "$res/comp_plan/" 2>/dev/null
  for e in autograd fused; do
    timeout 240 "$bin" train $common --max-steps 20 --engine $e --out-dir "$work/comp_$e" \
      > "$res/comp_${e}_d12_fp32.txt" 2>&1 || fail "comp reference $e rc=$?"
  done
  # A/B of the captured step's memory plan (blutensor Notes [Chunked classifier], [In-place reuse]):
  # the compiled step with the classifier as recorded, and without in-place reuse. BLU_COMP_AB=0
  # skips them (~40 s).
  if [ "${BLU_COMP_AB:-1}" = 1 ]; then
    for v in recorded:BLU_CAPTURE_CHUNKED_CLASSIFIER noinplace:BLU_CAPTURE_INPLACE; do
      name=${v%%:*}; var=${v#*:}
      env "$var=0" BLU_PLAN="$work/tools/blu-plan" timeout 300 "$bin" train $common --max-steps 20 --compile \
        --out-dir "$work/comp_compiled_$name" > "$res/compiled_${name}_d12_fp32.txt" 2>&1 ||
        fail "compiled ($var=0) rc=$?"
    done
  fi
  for e in compiled autograd fused compiled_recorded compiled_noinplace; do
    cp "$work/comp_$e/metrics.jsonl" "$res/comp_${e}_d12_fp32_metrics.jsonl" 2>/dev/null || true
  done
  python3 "$(dirname "$0")/comp_report.py" "$res" > "$res/comp_report.txt" 2>&1 || fail "comp_report rc=$?"
  cat "$res/comp_report.txt"
fi
true
