#!/usr/bin/env bash
# device-engine-memory.sh: a short device call for issue 13's memory question: d12 fp32 B8 T1024
# on each engine (compiled with the static blu-plan, autograd, fused, captured) and the autograd
# engine without Note [Linear cross-entropy] (BLU_LINEAR_CROSS_ENTROPY=0), 8 steps each: the
# progress lines (tok/s, allocator peak, device memory) and the captured engine's arena line.
#   BLU_COMMIT=<sha> scripts/device-engine-memory.sh <tools dir with blu-plan.gz> [build dir]
# Writes $OUT/engine_<name>.txt and $OUT/engine_memory.md (median tok/s of steps 3-8, peak GiB).
# Keeps to what fits ~200 s: build blutrain-cli only (MLIR off), then the runs in priority order,
# each under a timeout, so what ran comes back even if the call's limit cuts the rest.
set -uo pipefail
cd "$(dirname "$0")/.."
tools=${1:?tools dir}; build=${2:-/tmp/bd-em}
OUT=${OUT:-/tmp/blu-out}; mkdir -p "$OUT"
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$OUT/progress.txt"; }
if [ ! -x "$build/blutrain/blutrain" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLU_CUDA_ARCHS=90a-real -DBLU_WITH_MLIR=OFF \
    -DBLU_WARNINGS_AS_ERRORS=OFF -DBLU_BUILD_TESTS=OFF -DBLU_BUILD_BENCH=OFF > "$OUT/configure.txt" 2>&1
  timeout ${BLU_BUILD_TIMEOUT:-240} cmake --build "$build" -j "$(nproc)" --target blutrain-cli > "$OUT/build.txt" 2>&1
  stamp "build rc=$?"
fi
bin=$build/blutrain/blutrain
mkdir -p /tmp/em-tools && gunzip -c "$tools/blu-plan.gz" > /tmp/em-tools/blu-plan && chmod +x /tmp/em-tools/blu-plan
q="--data synthetic --seq-len 1024 --val-every -1 --final-val-batches 0 --sample-tokens 0 --no-save --no-plot"
q="$q --model d12 --device cuda --precision fp32 --batch-size 8 --max-steps 8"
run() {  # name, env assignments..., -- engine flags...
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" BLU_PLAN=/tmp/em-tools/blu-plan timeout 60 "$bin" train $q "$@" --out-dir "/tmp/em_$name" \
    > "$OUT/engine_$name.txt" 2>&1
  stamp "$name rc=$?"
}
run compiled -- --compile
run autograd -- --engine autograd
run fused -- --engine fused
run autograd_logits BLU_LINEAR_CROSS_ENTROPY=0 -- --engine autograd
run captured -- --engine captured
python3 - "$OUT" <<'EOF'
import re, statistics, sys, os
out = sys.argv[1]
rows = ["| engine | tok/s (median, steps 3-8) | peak GiB | dev GiB | notes |", "|---|---|---|---|---|"]
for name in ["compiled", "autograd", "fused", "autograd_logits", "captured"]:
    p = os.path.join(out, f"engine_{name}.txt")
    if not os.path.exists(p):
        continue
    text = open(p).read()
    tok, peak, dev = [], 0.0, 0.0
    for m in re.finditer(r"step\s+(\d+)/\d+ \| loss \S+ .*?\| ([\d.]+)K tok/s .*?peak ([\d.]+)\) \| dev ([\d.]+) GiB", text):
        if int(m.group(1)) >= 3:
            tok.append(float(m.group(2)))
        peak, dev = max(peak, float(m.group(3))), max(dev, float(m.group(4)))
    notes = "; ".join(l.strip() for l in text.splitlines() if l.startswith(("captured engine:", "compile:", "plan:")))
    rows.append(f"| {name} | {statistics.median(tok) if tok else 'n/a'}K | {peak} | {dev} | {notes[:300]} |")
open(os.path.join(out, "engine_memory.md"), "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
EOF
