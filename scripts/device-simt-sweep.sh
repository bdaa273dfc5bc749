#!/usr/bin/env bash
# The strict fp32 SIMT GEMM study in one device call (issue 10's fp32 gap, Note [SIMT fp32 wide
# tiles]): builds the SIMT GPU test, gemm_bench and blublas-profiler (sm_90a), runs the test (every
# variant against float64), sweeps gemm_bench's fp32 GPT-2 set per BLUBLAS_SIMT_VARIANT (ours and
# cuBLAS in the same process: ratio_vs_cublas per shape), then Nsight Compute on the fc fwd / dX / dW
# shapes for the default choice and each wide tile. Everything lands under $OUT/simt_sweep/.
# From the sweep it writes <build-dir>/simt_choice.env: BLUBLAS_SIMT_VARIANT as a per-majors list
# (kk = forward, kn = dX, mn = dW) naming the variant with the least GPT-2 step time per pass
# (layer shapes x 12 + lm head), so a later call on the same warm machine can race with it.
#   BLU_COMMIT=<sha> BLU_DIRTY=0 scripts/device-simt-sweep.sh [build-dir (default /tmp/bd)] [variants]
# The default variants: the default choice and the lean tiles l88, l88k16, l816w, l168w, l88n64k16,
# (a VAR=value token runs the default kernels under that environment variable),
# one gemm_bench each.
# BLU_SWEEP_EXTRA_TARGETS: more targets for the same build (e.g. blutrain-cli for the race);
# BLU_SWEEP_NCU: the variants profiled (default "default l816w l168w"; empty: none).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-/tmp/bd}
variants=${2:-"default l88 l88k16 l816w l168w l88n64k16"}
# The device tool brings back at most 8 files: everything is written under /tmp/blu-sweep and
# packed into $OUT/simt_sweep.tar.gz at the end (choice.json and the ncu probe also alone).
OUT=${OUT:-/tmp/blu-out}; out=/tmp/blu-sweep/simt_sweep; rm -rf "$out"; mkdir -p "$out" "$OUT"
. scripts/device-build.sh
# shellcheck disable=SC2086
blu_device_build "$build" "$out" blublas_gemm_simt_gpu_test gemm_bench blublas-profiler \
  ${BLU_SWEEP_EXTRA_TARGETS:-}
stamp "build rc=$?"
# SASS of the default kernel (l88k16, all four operand majors) for reading offline: this machine
# has cuobjdump (the developer machine has a copy since session 9). sass_l88k16_ops.txt counts
# opcodes per kernel.
obj="$build/blublas/CMakeFiles/blublas.dir/src/gemm/simt_f32_lean_k16_gemm.cu.o"
if command -v cuobjdump >/dev/null && [ -f "$obj" ]; then
  cuobjdump -sass "$obj" | awk '/Function : /{keep = ($0 ~ /LeanTileILi128ELi128ELi8ELi8ELi4ELi8ELi2ELi16ELi8E/)} keep' \
    > "$out/sass_l88k16.txt"
  awk '/Function : /{f=$3} /\/\*[0-9a-f]+\*\/ /{for(i=1;i<=NF;i++) if($i ~ /^[A-Z][A-Z0-9.]+$/ && $i !~ /^R[0-9]/){split($i,o,"."); n[f" "o[1]]++; break}}
       END{for(k in n) print n[k], k}' "$out/sass_l88k16.txt" | sort -k2,2 -k1,1nr > "$out/sass_l88k16_ops.txt"
  stamp "sass: $(wc -l < "$out/sass_l88k16.txt") lines"
fi
timeout 240 "$build/tests/blublas_gemm_simt_gpu_test" > "$out/gemm_simt_gpu_test.txt" 2>&1
stamp "gemm_simt_gpu_test rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" "$out/gemm_simt_gpu_test.txt" | head -12
# A variant is a BLUBLAS_SIMT_VARIANT value, "default", or VAR=value (the default kernels with
# that environment variable, e.g. BLUBLAS_SIMT_SPLIT_FILL=0.97); its name in the tables is itself.
for v in $variants; do
  mkdir -p "$out/bench_$v"
  envs=()
  if [ "$v" = default ]; then unset BLUBLAS_SIMT_VARIANT
  elif [[ "$v" == *=* ]]; then unset BLUBLAS_SIMT_VARIANT; envs=("$v")
  else export BLUBLAS_SIMT_VARIANT=$v; fi
  env "${envs[@]}" BLU_GEMM_BENCH_SWEEP=fp32 timeout 120 "$build/bench/gemm_bench" --blu_out="$out/bench_$v" > "$out/bench_$v.txt" 2>&1
  stamp "gemm_bench fp32 $v rc=$?"
done
unset BLUBLAS_SIMT_VARIANT
python3 - "$out" $variants <<'PY'
import json, os, sys
out, variants = sys.argv[1], sys.argv[2:]
benches = {}
for v in variants:
    try:
        benches[v] = json.load(open(os.path.join(out, f"bench_{v}", "gemm_bench.json")))
    except (OSError, ValueError):
        pass
rows = {}
for v, d in benches.items():
    for r in d.get("rows", []):
        if r.get("dtype") == "fp32" and isinstance(r.get("ratio"), (int, float)):
            rows.setdefault(f"{r['case']} {r['shape']} {r['op']}", {})[v] = r["ratio"]
    for k, x in d.get("metrics", {}).items():
        if k.startswith("gemm.fp32.") and k.endswith("ratio_vs_cublas"):
            rows.setdefault(k, {})[v] = x
print("fp32 ratio to cuBLAS (same process):", " | ".join(variants))
for k in sorted(rows):
    print(f"{k:48s}", "  ".join(f"{rows[k].get(v, float('nan')):.3f}" for v in variants))
json.dump(rows, open(os.path.join(out, "sweep.json"), "w"), indent=1)
# Per pass (operand majors), the variant with the least GPT-2 step time: layer shapes count 12
# times, the lm head once; a variant missing a verified shape of the pass is not a candidate.
majors = {"fwd": "kk", "dX": "kn", "dW": "mn"}
step = {}
for v, d in benches.items():
    for r in d.get("rows", []):
        if r.get("dtype") != "fp32" or r.get("set") != "gpt2" or "+" in r.get("case", ""):
            continue
        layer, _, pas = r["case"].partition(".")
        ms = r.get("ours_ms")
        cell = step.setdefault(pas, {}).setdefault(v, [0.0, 0])
        if isinstance(ms, (int, float)) and ms == ms and "error" not in r:
            cell[0] += ms * (1 if layer == "lm_head" else 12); cell[1] += 1
        else:
            cell[1] -= 1000
choice, lines = [], []
for pas, per in sorted(step.items()):
    n = max(c[1] for c in per.values())
    ok = {v: c[0] for v, c in per.items() if c[1] == n and n > 0}
    if not ok:
        continue
    best = min(ok, key=ok.get)
    lines.append(f"{pas}: " + ", ".join(f"{v} {t:.1f} ms" for v, t in sorted(ok.items(), key=lambda x: x[1])))
    if best != "default" and "=" not in best and pas in majors:  # VAR=value rows: reported, not chosen
        choice.append(f"{majors[pas]}:{best}")
print("GPT-2 step time per pass (ms, layer shapes x 12 + lm head):"); print("\n".join(lines))
spec = ",".join(choice)
print("choice: BLUBLAS_SIMT_VARIANT=" + (spec or "(default)"))
json.dump({"step_ms": step, "choice": spec}, open(os.path.join(out, "choice.json"), "w"), indent=1)
with open(os.path.join(sys.argv[1], "..", "simt_choice.env"), "w") as f:
    f.write(f"export BLUBLAS_SIMT_VARIANT={spec}\n" if spec else "unset BLUBLAS_SIMT_VARIANT\n")
PY
cp "$out/../simt_choice.env" "$build/simt_choice.env" 2>/dev/null
for v in ${BLU_SWEEP_NCU-default l816w l168w}; do
  [[ " $variants " == *" $v "* ]] || continue
  if [ "$v" = default ]; then unset BLUBLAS_SIMT_VARIANT; else export BLUBLAS_SIMT_VARIANT=$v; fi
  timeout 200 scripts/ncu-hot.sh "$build" "$out/ncu_$v" gemm_simt_f32_fc_fwd gemm_simt_f32_fc_dx gemm_simt_f32_fc_dw \
    > "$out/ncu_$v.txt" 2>&1
  stamp "ncu $v rc=$?"
done
tar -C /tmp/blu-sweep -czf "$OUT/simt_sweep.tar.gz" simt_sweep
cp "$out/choice.json" "$out/../simt_choice.env" "$OUT/" 2>/dev/null
[ -f "$out/ncu_default/probe.txt" ] && tail -5 "$out/ncu_default/probe.txt"
stamp "packed $OUT/simt_sweep.tar.gz"
