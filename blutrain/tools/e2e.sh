#!/usr/bin/env bash
# e2e.sh: GPT-2 124M (d12) end-to-end training throughput at B16 T1024 in fp32, tf32 and bf16 on
# synthetic tokens (no corpus needed on the device). Each mode runs STEPS optimizer steps; the
# trainer reports the median tok/s after 3 warm-up steps and the peak allocated memory. Prints
# the progress lines, then one JSON object with e2e.<mode>.tok_s and e2e.<mode>.peak_gib.
# The race against PyTorch (eager, torch.compile) is bench/e2e/run_e2e.py (device-check --suite e2e);
# this script stays as the blutrain-only quick look.
# Usage: blutrain/tools/e2e.sh [path/to/blutrain] [out_dir]   (env: STEPS=20, MODES="fp32 tf32 bf16")
set -euo pipefail
bin="${1:-build/blutrain/blutrain}"
out="${2:-out/e2e}"
steps="${STEPS:-20}"
modes="${MODES:-fp32 tf32 bf16}"
mkdir -p "$out"
for mode in $modes; do
  echo "=== d12 B16 T1024 $mode ==="
  "$bin" train --model d12 --device cuda --precision "$mode" --batch-size 16 --seq-len 1024 \
    --data synthetic --cache-dir "$out/cache" --out-dir "$out/$mode" --resume none --no-save --no-plot \
    --sample-tokens 0 --val-every -1 --val-batches -1 --max-steps "$steps" --warmup-steps 5 \
    --summary-json "$out/$mode.json" || echo "{\"e2e.$mode.error\": 1}" > "$out/$mode.json"
done
python3 - "$out" $modes <<'PY'
import json, sys
out, modes = sys.argv[1], sys.argv[2:]
merged = {}
for m in modes:
    try:
        merged.update(json.load(open(f"{out}/{m}.json")))
    except Exception as e:
        merged[f"e2e.{m}.error"] = str(e)
json.dump(merged, open(f"{out}/e2e_summary.json", "w"), indent=1)
print(json.dumps(merged))
PY
