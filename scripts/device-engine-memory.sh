#!/usr/bin/env bash
# device-engine-memory.sh: a short device call for issue 13's memory question: d12 fp32 B8 T1024
# on each engine (compiled with the static blu-plan, autograd, fused, captured) and the autograd
# engine without Note [Linear cross-entropy] (BLU_LINEAR_CROSS_ENTROPY=0), BLU_EM_STEPS (30) steps each: the
# progress lines (tok/s, allocator peak, device memory), the captured engine's arena line, and a
# CUPTI breakdown of step 10 (--profile-step, Note [Step profile]: per kernel family, launches,
# host gaps; the fused engine also times its ops eagerly in step 11).
#   BLU_COMMIT=<sha> scripts/device-engine-memory.sh <tools dir with blu-plan.gz> [build dir]
# Writes $OUT/engine_<name>.txt, $OUT/profile_<name>.json and $OUT/engine_memory.md (median tok/s
# of steps 4..N, the profiled steps 10-11 left out; peak GiB; the breakdown side by side), and
# $OUT/comp_<precision>.json (the comp.<precision>.<engine>.* metrics for scripts/make_summary.py),
# $OUT/overlap.txt (scripts/step_overlap.py on the profiles: Note [Stream overlap]).
# BLU_EM_PRECISION (fp32) and BLU_EM_BATCH (8) change the configuration; BLU_EM_ROWS_AB,
# BLU_EM_FUSED_AB(2), BLU_EM_COMPILED_AB, BLU_EM_COMPILED_AB2 and AB3 add runs; BLU_EM_ONLY keeps the named ones.
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
# BLU_EM_STEPS (30): steps per run; tok/s is the median of steps 4..N without the profiled steps
# 10 and 11 (session 23: 12 steps gave 6 samples, and two compiled runs of one build differed by
# 2.3% on their medians while their per-step times overlapped).
export BLU_EM_STEPS=${BLU_EM_STEPS:-30}
q="$q --model d12 --device cuda --precision ${BLU_EM_PRECISION:-fp32} --batch-size ${BLU_EM_BATCH:-8} --max-steps $BLU_EM_STEPS --profile-step 10"
run() {  # name, env assignments..., -- engine flags...
  local name=$1; shift
  # BLU_EM_ONLY="compiled fused ...": only these runs (a short A/B call).
  [ -n "${BLU_EM_ONLY:-}" ] && [[ " ${BLU_EM_ONLY} " != *" $name "* ]] && return 0
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" BLU_PLAN=/tmp/em-tools/blu-plan timeout 60 "$bin" train $q "$@" --out-dir "/tmp/em_$name" \
    --profile-json "$OUT/profile_$name.json" \
    > "$OUT/engine_$name.txt" 2>&1
  stamp "$name rc=$?"
}
run_as() {  # name, base run (compiled, fused, compiled_ab, fused_ab): that run's variables and flags
  # shellcheck disable=SC2086
  case $2 in
    compiled) run "$1" -- --compile ;;
    fused) run "$1" -- --engine fused ;;
    compiled_ab) run "$1" ${BLU_EM_COMPILED_AB} -- --compile ;;
    fused_ab) run "$1" ${BLU_EM_FUSED_AB} -- --engine fused ;;
  esac
}
run_as compiled compiled
# The compiled run's record (the step's calls and buffers, blu-plan's input), for reading on a
# machine without a GPU (which kernels are which in the profile; what a capture rewrite would see).
[ -f /tmp/em_compiled/captured_step.json ] && gzip -c /tmp/em_compiled/captured_step.json > "$OUT/captured_step.json.gz"
run autograd -- --engine autograd
run_as fused fused
run autograd_logits BLU_LINEAR_CROSS_ENTROPY=0 -- --engine autograd
run captured -- --engine captured
# BLU_EM_ROWS_AB="2048 8192": the autograd engine with linear_cross_entropy in chunks of that many
# rows (BLU_LINEAR_CROSS_ENTROPY_ROWS; the default is 512 MiB of fp32 logits, 2624 rows at d12).
for r in ${BLU_EM_ROWS_AB:-}; do run "autograd_rows$r" BLU_LINEAR_CROSS_ENTROPY_ROWS="$r" -- --engine autograd; done
# BLU_EM_FUSED_AB="VAR=value ...": one more fused-engine run with those variables (fused_ab).
[ -n "${BLU_EM_FUSED_AB:-}" ] && run_as fused_ab fused_ab
# BLU_EM_COMPILED_AB="VAR=value ...": one more compiled run with those variables (compiled_ab).
[ -n "${BLU_EM_COMPILED_AB:-}" ] && run_as compiled_ab compiled_ab
# BLU_EM_COMPILED_AB2: a second one (compiled_ab2).
# shellcheck disable=SC2086
[ -n "${BLU_EM_COMPILED_AB2:-}" ] && run compiled_ab2 ${BLU_EM_COMPILED_AB2} -- --compile
# BLU_EM_COMPILED_AB3 / BLU_EM_FUSED_AB2: one more of each (compiled_ab3, fused_ab2).
# shellcheck disable=SC2086
[ -n "${BLU_EM_COMPILED_AB3:-}" ] && run compiled_ab3 ${BLU_EM_COMPILED_AB3} -- --compile
# shellcheck disable=SC2086
[ -n "${BLU_EM_FUSED_AB2:-}" ] && run fused_ab2 ${BLU_EM_FUSED_AB2} -- --engine fused
# BLU_EM_REPEAT=N (1): N-1 more rounds of the runs made above (compiled, fused, compiled_ab,
# fused_ab; alternating, in that order), named <run>_r<k>; an engine's tok/s is then the median of
# all its rounds' steps (session 25: one run each left run-to-run drift of ~1% in the comparison).
# The repeats' profiles stay on the machine.
for ((k = 2; k <= ${BLU_EM_REPEAT:-1}; k++)); do
  for base in compiled fused compiled_ab fused_ab; do
    [ -f "$OUT/engine_$base.txt" ] || continue
    BLU_EM_ONLY="" run_as "${base}_r$k" "$base"
    mv -f "$OUT/profile_${base}_r$k.json" "/tmp/profile_${base}_r$k.json" 2>/dev/null
  done
done
python3 - "$OUT" <<'EOF'
import json, re, statistics, sys, os
out = sys.argv[1]
names = ["compiled", "compiled_ab", "compiled_ab2", "compiled_ab3", "autograd", "fused", "fused_ab", "fused_ab2", "autograd_logits", "captured"]
names += sorted(f[len("engine_"):-4] for f in os.listdir(out) if f.startswith("engine_autograd_rows") and f.endswith(".txt"))
# Per engine from its progress lines: median K tok/s of steps 4..N but 10-11 (None without them), peaks, notes.
runs, hosts = {}, {}
for name in names:
    p = os.path.join(out, f"engine_{name}.txt")
    if not os.path.exists(p):
        continue
    text = open(p).read()
    rounds = sorted(f for f in os.listdir(out) if re.fullmatch(rf"engine_{name}_r\d+\.txt", f))
    for f in rounds:  # BLU_EM_REPEAT: the same engine's later rounds, pooled
        text += open(os.path.join(out, f)).read()
    tok, peak, dev = [], 0.0, 0.0
    for m in re.finditer(r"step\s+(\d+)/\d+ \| loss \S+ .*?\| ([\d.]+)K tok/s .*?peak ([\d.]+)\) \| dev ([\d.]+) GiB", text):
        if int(m.group(1)) >= 4 and int(m.group(1)) not in (10, 11):
            tok.append(float(m.group(2)))
        peak, dev = max(peak, float(m.group(3))), max(dev, float(m.group(4)))
    notes = "; ".join(dict.fromkeys(l.strip() for l in text.splitlines()
                                    if l.startswith(("captured engine: arena", "compile:", "plan:"))))
    hosts[name] = [l.strip() for l in text.splitlines() if l.startswith("host:")]
    if rounds:
        notes = f"{len(rounds) + 1} rounds pooled; " + notes
    losses = re.findall(r"step\s+\d+/\d+ \| loss (\S+)", text)
    runs[name] = (statistics.median(tok) if tok else None, peak, dev, notes, losses)
steps = int(os.environ.get("BLU_EM_STEPS", "12"))
rows = [f"| engine | tok/s (median, steps 4-{steps} but 10-11) | peak GiB | dev GiB | notes |", "|---|---|---|---|---|"]
for name, (tok, peak, dev, notes, _) in runs.items():
    rows.append(f"| {name} | {f'{tok:.2f}' if tok is not None else 'n/a'}K | {peak} | {dev} | {notes[:300]} |")
# Note [Host issue time] (blutrain/host_marks.h): each round's host line.
rows += [""] + [f"{name}: {h}" for name, hs in hosts.items() for h in hs]
# The profiled step, per kernel family (ms and launches), side by side.
prof = {}
for name in names:
    p = os.path.join(out, f"profile_{name}.json")
    if os.path.exists(p):
        d = json.load(open(p))
        prof[name] = d.get("kernel_trace") or d.get("profile") or {}
if prof:
    fams = sorted({f for d in prof.values() for f in d.get("families", {})})
    rows += ["", "| step 10 | " + " | ".join(prof) + " |", "|---|" + "---|" * len(prof)]
    for key in ["step_wall_ms", "busy_ms", "host_gap_ms", "launches"]:
        rows.append(f"| {key} | " + " | ".join(str(round(d.get(key, 0), 2)) for d in prof.values()) + " |")
    for f in fams:
        cells = [d.get("families", {}).get(f, {}) for d in prof.values()]
        rows.append(f"| {f} ms (launches) | " + " | ".join(f"{c.get('ms', 0):.2f} ({c.get('count', 0)})" for c in cells) + " |")
# An A/B run of the same engine (compiled_ab, fused_ab) should train the same: its printed losses
# (4 decimals) step by step against the plain run's (a race on a second stream shows here).
for base in ["compiled", "fused"]:
    la, lb = (runs[n][4] if n in runs else [] for n in (base, base + "_ab"))
    if la and lb:
        same = la == lb
        rows.append(f"\n{base}_ab vs {base}: losses {'equal' if same else 'DIFFER'} over {min(len(la), len(lb))} steps"
                    + ("" if same else f" ({la} vs {lb})"))
open(os.path.join(out, "engine_memory.md"), "w").write("\n".join(rows) + "\n")
# The results contract's comp.<precision>.* metrics (scripts/make_summary.py reads this file).
prec, batch = os.environ.get("BLU_EM_PRECISION", "fp32"), os.environ.get("BLU_EM_BATCH", "8")
m = {}
for name, (tok, peak, dev, _, _) in runs.items():
    if tok is not None:
        m[f"comp.{prec}.{name}.tok_s"] = round(tok * 1000, 1)
        m[f"comp.{prec}.{name}.peak_gib"], m[f"comp.{prec}.{name}.device_gib"] = peak, dev
def r(name, a, b):
    if a in m and b in m and m[b]:
        m[name] = m[a] / m[b]
r(f"comp.{prec}.ratio_vs_eager", f"comp.{prec}.compiled.tok_s", f"comp.{prec}.fused.tok_s")
r(f"comp.{prec}.ratio_vs_autograd", f"comp.{prec}.compiled.tok_s", f"comp.{prec}.autograd.tok_s")
r(f"comp.{prec}.compiled.peak_ratio_vs_eager", f"comp.{prec}.compiled.peak_gib", f"comp.{prec}.fused.peak_gib")
cfg = (f"d12 {prec} B{batch} T1024, synthetic data, {steps} steps, tok/s median of steps 4-{steps} but the profiled 10-11 from the progress "
       f"lines, allocator peak and device memory over the run; scripts/device-engine-memory.sh")
json.dump({"metrics": m, "config": cfg}, open(os.path.join(out, f"comp_{prec}.json"), "w"), indent=1)
print("\n".join(rows))
EOF
# Note [Stream overlap]: how each engine's streams overlap in its profiled step (the compiled step
# against the fused engine first).
profiles=()
for name in compiled fused captured compiled_ab compiled_ab2 compiled_ab3 fused_ab fused_ab2; do
  [ -f "$OUT/profile_$name.json" ] && profiles+=("$OUT/profile_$name.json")
done
[ ${#profiles[@]} -gt 0 ] && python3 scripts/step_overlap.py --stretches "${profiles[@]}" > "$OUT/overlap.txt" 2>&1
