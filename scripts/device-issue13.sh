#!/usr/bin/env bash
# device-issue13.sh: issue 13's acceptance in one device call, on binaries built here and carried
# (scripts/pack-carry.sh build-sm90 blutrain/blutrain bench/comp/llama_block_bench
#  bin:$PWD/build-static/blucomp-static/blu-plan <Gloo libs>; then on the device
#  `eval "$(scripts/pack-carry.sh --unpack)"; scripts/device-issue13.sh`). About 7 minutes:
#  1. the race harness twice, GPT-2 d12 B16 T1024, fp32 / tf32 / bf16, 20 steps (5 left out):
#     blutrain --compile beside torch.compile (bench/e2e/run_e2e.py, one process per run), then
#     blutrain's default CUDA step (--engine fused, "eager blutrain" in the issue);
#  2. the compiled fp32 step's per-step loss against the autograd step it was recorded from (20
#     steps, the 1e-5 bar), with launches before / after and the planned arena from its log;
#  3. the Llama block (scripts/device-llama.sh: ours eager / captured / compiled beside PyTorch
#     eager / torch.compile, numerics vs float64);
#  4. $OUT/issue13.md (the table) and $OUT/issue13.json (metrics comp.*), a tarball of the logs.
# BLU_I13_SKIP="race loss llama" skips parts. blutrain and blu-plan: build-carry/tree/blutrain/
# blutrain and build-carry/bin/blu-plan unless BLU_I13_BLUTRAIN / BLU_PLAN say otherwise.
# Written in session 38 after the device budget ran out: not yet run on a device.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/blu-i13}; work=/tmp/blu-i13-work
rm -rf "$work"; mkdir -p "$out" "$work/logs"
bin=${BLU_I13_BLUTRAIN:-$PWD/build-carry/tree/blutrain/blutrain}
export BLU_PLAN=${BLU_PLAN:-$PWD/build-carry/bin/blu-plan}
skip=" ${BLU_I13_SKIP:-} "
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
[ -x "$bin" ] || { echo "device-issue13: no blutrain at $bin" >&2; exit 1; }
[ -x "$BLU_PLAN" ] || { echo "device-issue13: no blu-plan at $BLU_PLAN" >&2; exit 1; }

if [[ $skip != *" race "* ]]; then
  stamp "race: compiled + torch.compile"
  timeout 420 python3 bench/e2e/run_e2e.py --blutrain "$bin" --out "$work/compiled" --results "$work/compiled" \
    --modes fp32,tf32,bf16 --frameworks blutrain,torch_compile --steps 20 --warmup 5 \
    --extra-blutrain-args=--compile > "$work/logs/race_compiled.txt" 2>&1 || echo "race (compiled) rc=$?"
  stamp "race: fused"
  timeout 150 python3 bench/e2e/run_e2e.py --blutrain "$bin" --out "$work/fused" --results "$work/fused" \
    --modes fp32,tf32,bf16 --frameworks blutrain --steps 20 --warmup 5 \
    > "$work/logs/race_fused.txt" 2>&1 || echo "race (fused) rc=$?"
fi

if [[ $skip != *" loss "* ]]; then
  stamp "loss: compiled vs autograd, fp32, 20 steps"
  q="--model d12 --device cuda --data synthetic --seq-len 1024 --val-every -1 --final-val-batches 0"
  q="$q --sample-tokens 0 --no-save --no-plot --precision fp32 --batch-size 8 --max-steps 20"
  for e in compiled autograd; do
    x="--engine autograd"; [ $e = compiled ] && x="--compile"
    # shellcheck disable=SC2086
    timeout 150 "$bin" train $q $x --out-dir "$work/loss_$e" > "$work/logs/loss_$e.txt" 2>&1 || echo "loss $e rc=$?"
  done
fi

if [[ $skip != *" llama "* ]]; then
  stamp "Llama block"
  OUT="$work/llama" BLU_LLAMA_TORCH_TIMEOUT=200 timeout 300 scripts/device-llama.sh --no-build \
    --build-dir build-carry/tree > "$work/logs/llama.txt" 2>&1 || echo "llama rc=$?"
fi

stamp "report"
python3 - "$work" "$out" <<'EOF'
import glob, json, os, re, statistics, sys
work, out = sys.argv[1:3]
m, rows = {}, []

def e2e(sub):
    try:
        return json.load(open(os.path.join(work, sub, "e2e.json"))).get("metrics", {})
    except (OSError, ValueError):
        return {}

comp, fused = e2e("compiled"), e2e("fused")
for mode in ("fp32", "tf32", "bf16"):
    c, f, t = comp.get(f"e2e.{mode}.tok_s"), fused.get(f"e2e.{mode}.tok_s"), comp.get(f"e2e.{mode}.torch_compile.tok_s")
    cp, fp, tp = (d.get(k) for d, k in ((comp, f"e2e.{mode}.peak_gib"), (fused, f"e2e.{mode}.peak_gib"),
                                          (comp, f"e2e.{mode}.torch_compile.peak_gib")))
    if c and f:
        m[f"comp.{mode}.ratio_vs_eager"] = c / f
    if c and t:
        m[f"comp.{mode}.ratio_vs_torch_compile"] = c / t
    for k, v in (("compiled_tok_s", c), ("fused_tok_s", f), ("torch_compile_tok_s", t),
                 ("compiled_peak_gib", cp), ("fused_peak_gib", fp), ("torch_compile_peak_gib", tp)):
        if v is not None:
            m[f"comp.{mode}.{k}"] = v
    rows.append((mode, c, f, t, cp, fp, tp))

def steps(path):
    got = {}
    try:
        for line in open(path):
            d = json.loads(line)
            if "loss" in d and "step" in d:
                got[int(d["step"])] = d["loss"]
    except OSError:
        pass
    return got

lc, la = steps(os.path.join(work, "loss_compiled", "metrics.jsonl")), steps(os.path.join(work, "loss_autograd", "metrics.jsonl"))
common = sorted(set(lc) & set(la))
if common:
    m[f"comp.fp32.max_rel_loss_diff_{len(common)}"] = max(abs(lc[k] - la[k]) / max(abs(la[k]), 1e-30) for k in common)
try:
    log = open(os.path.join(work, "logs", "loss_compiled.txt")).read()
    a = re.search(r"blu-plan's arena ([0-9.]+) GiB", log)
    if a:
        m["comp.fp32.planned_arena_gib"] = float(a.group(1))
    plan = json.load(open(os.path.join(work, "loss_compiled", "compiled_plan.json")))
    m["comp.fp32.launches_before"] = plan.get("launches_before")
    m["comp.fp32.launches_after"] = plan.get("launches_after")
except (OSError, ValueError):
    pass
try:
    m.update({k: v for k, v in json.load(open(os.path.join(work, "llama", "llama.json")))["metrics"].items()
              if isinstance(v, (int, float))})
except (OSError, ValueError, KeyError):
    pass

fmt = lambda v, p=1: "-" if v is None else (f"{v / 1000:.{p}f}K" if v > 1000 else f"{v:.2f}")
lines = ["| mode | compiled tok/s | fused (eager) | torch.compile | vs fused | vs torch.compile | peak GiB c / f / t.c |",
         "|---|---|---|---|---|---|---|"]
for mode, c, f, t, cp, fp, tp in rows:
    r1 = f"{c / f:.3f}" if c and f else "-"
    r2 = f"{c / t:.3f}" if c and t else "-"
    lines.append(f"| {mode} | {fmt(c)} | {fmt(f)} | {fmt(t)} | {r1} | {r2} | {fmt(cp)} / {fmt(fp)} / {fmt(tp)} |")
for k in sorted(m):
    if k.startswith("comp.fp32.max_rel") or k in ("comp.fp32.planned_arena_gib", "comp.fp32.launches_before", "comp.fp32.launches_after"):
        lines.append(f"{k} = {m[k]:.4g}" if isinstance(m[k], float) else f"{k} = {m[k]}")
table = os.path.join(work, "llama", "llama_table.md")
if os.path.exists(table):
    lines += ["", "Llama block (ms):"] + open(table).read().splitlines()
open(os.path.join(out, "issue13.md"), "w").write("\n".join(lines) + "\n")
json.dump({"metrics": m}, open(os.path.join(out, "issue13.json"), "w"), indent=1, sort_keys=True)
print("\n".join(lines))
EOF
tar czf "$out/issue13.tar.gz" -C "$work" --exclude='*.safetensors' --exclude='*_ptx' --exclude='*.bin' logs compiled fused llama 2>/dev/null
stamp "done"
