#!/usr/bin/env bash
# device-llama.sh: issue 13's Llama block on the GPU (Note [Llama block benchmark] in
# bench/comp/llama_block_bench.cpp): builds llama_block_bench (sm_90a, scripts/device-build.sh),
# unpacks the static blu-plan, runs our step eager / captured / compiled (blu-plan's plan bound) and
# bench/torch_llama_block.py (PyTorch eager and torch.compile on the same weights and batch, the
# gradients compared with ours and with float64), then prints a short table last.
#
#   scripts/device-llama.sh [--modes fp32,bf16] [--no-build] [--build-dir DIR] [--profile] [-- bench flags...]
# The lead's device call, the working tree copied into .snap and scripts/blucomp-static.sh's
# gz/blu-plan.gz in .snap/.tools (about 4-5 minutes on an H100, most of it the build):
#   run(command="cd .snap && scripts/device-llama.sh", timeout_s=600)
# Bench flags after `--` go to llama_block_bench (default shape B8 T1024 C1024, 16 heads, hidden
# 2816, 5 warm-up + 20 timed steps; e.g. `-- --batch 4 --iters 10`, or `-- --plan-env
# "BLU_PLAN_MULTI_OUTPUT=1 BLU_PLAN_BROADCAST=1"` for a second plan in the same process); the PyTorch side reads the
# shape from its JSON. blu-plan: $BLU_PLAN, else $BLU_STATIC_TOOLS/blu-plan.gz, else
# .tools/blu-plan.gz; none: the compiled leg is skipped (the table says so).
# --profile: both programs trace one step of each variant (CUPTI / torch.profiler, one kernel-family
# table) and bench/comp/llama_profile_table.py prints them side by side (llama_profile.md).
# Writes to $OUT (default /tmp/blu-llama-out): llama.json (our metrics and PyTorch's, merged, with
# gpu/commit/dirty/date as in the results contract), llama_table.md, llama.tar.gz (both programs'
# JSON, the capture, the plans and blu-plan's logs, the build and run logs; not the safetensors).
# Timeouts (s): BLU_BUILD_TIMEOUT (330), BLU_LLAMA_OURS_TIMEOUT (150), BLU_LLAMA_TORCH_TIMEOUT (240).
set -uo pipefail
cd "$(dirname "$0")/.."
modes=fp32,bf16; build=build-device; do_build=1; bench_args=(); profile=()
while (($#)); do
  case "$1" in
    --modes) modes=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --profile) profile=(--profile); shift ;;
    --build-dir) build=$2; shift 2 ;;
    --) shift; bench_args=("$@"); break ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    *) echo "device-llama: unknown argument $1" >&2; exit 2 ;;
  esac
done
source scripts/device-build.sh
out=${OUT:-/tmp/blu-llama-out}; work=/tmp/blu-llama; res=$work/results; logs=$work/logs
rm -rf "$work"; mkdir -p "$out" "$res" "$logs" "$work/tools"
failures=()

if ((do_build)); then
  stamp "build llama_block_bench ($build)"
  BLU_BUILD_TIMEOUT=${BLU_BUILD_TIMEOUT:-330} blu_device_build "$build" "$logs" llama_block_bench || failures+=("build")
fi
bench=$build/bench/comp/llama_block_bench

plan=${BLU_PLAN:-}
if [ -z "$plan" ]; then
  for gz in "${BLU_STATIC_TOOLS:-/nonexistent}/blu-plan.gz" .tools/blu-plan.gz; do
    if [ -f "$gz" ]; then
      gunzip -c "$gz" > "$work/tools/blu-plan" && chmod +x "$work/tools/blu-plan" && plan=$work/tools/blu-plan
      break
    fi
  done
fi
[ -n "$plan" ] && plan_args=(--blu-plan "$plan") || { plan_args=(); failures+=("no blu-plan: compiled leg skipped"); }

stamp "ours: eager / captured / compiled ($modes)"
if [ -x "$bench" ]; then
  timeout "${BLU_LLAMA_OURS_TIMEOUT:-150}" "$bench" --device cuda --modes "$modes" --out-dir "$res" \
    "${plan_args[@]}" "${profile[@]}" "${bench_args[@]}" > "$logs/ours.txt" 2>&1 || failures+=("llama_block_bench rc=$?")
  tail -n 30 "$logs/ours.txt"
else
  failures+=("no $bench")
fi

stamp "PyTorch eager / torch.compile"
if [ -f "$res/llama_block.json" ]; then
  timeout "${BLU_LLAMA_TORCH_TIMEOUT:-240}" python3 bench/torch_llama_block.py "$res" --modes "$modes" "${profile[@]}" \
    > "$logs/torch.txt" 2>&1 || failures+=("torch_llama_block.py rc=$? (1: numerics_ok 0 in some mode)")
  grep -v '^|' "$logs/torch.txt" | tail -n 20
fi

stamp "report"
commit=${BLU_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
dirty=${BLU_DIRTY:-$([ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && echo true || echo false)}
python3 - "$res" "$out/llama.json" "$commit" "$dirty" <<'EOF'
import datetime, json, os, sys
res, dst, commit, dirty = sys.argv[1:5]
merged = {"commit": commit, "dirty": dirty == "true",
          "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "metrics": {}}
for name in ("llama_block.json", "torch_llama_block.json"):
    path = os.path.join(res, name)
    if os.path.exists(path):
        with open(path) as fh:
            d = json.load(fh)
        merged["metrics"].update(d.get("metrics", {}))
        merged.setdefault("gpu", d.get("gpu", d.get("device")))
        merged.setdefault("config", d.get("config"))
with open(dst, "w") as fh:
    json.dump(merged, fh, indent=1, sort_keys=True)
EOF
grep '^|' "$logs/torch.txt" > "$out/llama_table.md" 2>/dev/null
if ((${#profile[@]})); then
  python3 bench/comp/llama_profile_table.py "$res" > "$out/llama_profile.md" 2>&1
  cut -c1-150 "$out/llama_profile.md" | head -n 150
fi
tar czf "$out/llama.tar.gz" -C "$work" --exclude='*.safetensors' --exclude='*_ptx' results logs

echo
echo "== Llama block (B/T/C from llama.json's config): ms per step (forward + mean(y^2) + backward), medians"
if [ -s "$out/llama_table.md" ]; then cat "$out/llama_table.md"; else grep '^\[' "$logs/ours.txt" 2>/dev/null; fi
for f in "${failures[@]}"; do echo "FAILED: $f"; done
stamp "done"
((${#failures[@]} == 0))
