#!/usr/bin/env bash
# device-sanitize.sh: the GPU tests under NVIDIA compute-sanitizer (issue 14): memcheck, racecheck,
# synccheck and initcheck, each test binary on its small-shape cases (tests/sanitize/cases.txt),
# in one device call. A report is a failure unless tests/sanitize/allowlist.txt names it with a
# reason. Runs on the H100 kind (the sanitizer needs a Firecracker machine; it refuses gVisor).
# Writes $OUT/sanitize.json (per binary and tool: errors/hazards, allowed, seconds, exit status,
# the first lines of each report) and $OUT/sanitize.tar.gz (the full logs); the table prints last.
#   BLU_COMMIT=<sha> BLU_DIRTY=0 scripts/device-sanitize.sh [--no-build] [--build-dir /tmp/bd-san]
#     [--tools memcheck,racecheck,synccheck,initcheck] [--only bin1,bin2] [--budget 540] [--part K/N]
# --budget: seconds from the start (build included) that the runs may use: a run's timeout
# (tests/sanitize/cases.txt) is cut to what is left, a run with under 20 s left is listed as
# skipped. Progress lines go to $OUT/progress.txt as they happen. Keep the device call's command
# free of `| tail` (a pipeline killed at the call's limit returns nothing).
set -uo pipefail
cd "$(dirname "$0")/.."
do_build=1; build=/tmp/bd-san; tools="memcheck,racecheck,synccheck,initcheck"; only=""; budget=540; part=""
while (($#)); do
  case $1 in
    --no-build) do_build=0 ;;
    --build-dir) build=$2; shift ;;
    --tools) tools=$2; shift ;;
    --only) only=$2; shift ;;
    --budget) budget=$2; shift ;;
    --part) part=$2; shift ;;
    *) echo "device-sanitize.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
OUT=${OUT:-/tmp/blu-out}; work=/tmp/blu-sanitize; rm -rf "$work"; mkdir -p "$work/logs" "$OUT"
export PATH=/usr/local/cuda/bin:$PATH BLU_REQUIRE_GPU=1
# The GEMM property test draws 6000 problems by default: 300 under a sanitizer (tests/sanitize/cases.txt).
export BLU_GEMM_PROPERTY_CASES=${BLU_GEMM_PROPERTY_CASES:-300} BLU_GEMM_PROPERTY_SECONDS=${BLU_GEMM_PROPERTY_SECONDS:-150}
# The streamed-row kernels' ring watchdog off: under racecheck a kernel runs far past its 20 s (a
# false hang, session 18); each run's timeout still catches a real one.
export BLUBLAS_ROW_STREAM_WATCHDOG_S=${BLUBLAS_ROW_STREAM_WATCHDOG_S:-0}
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$OUT/progress.txt"; }
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$san" ] || { echo "device-sanitize.sh: no compute-sanitizer" >&2; exit 1; }

gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
multi_gpu_bins="bludist_nccl_gpu_test blutrain_fused_dp_gpu_test"
# Binaries whose GPU work runs in programs they start: the parent runs unwrapped, each program under
# the sanitizer (Note [Sanitized ranks] in tests/common/run_command.h).
wrapped_bins="$multi_gpu_bins blutrain_fused_nonfinite_gpu_test"
((gpus >= 2)) && export BLU_REQUIRE_MULTI_GPU=1
# The cases: "binary  tools|*  timeout_s  gtest-filter" per line (# comments).
mapfile -t cases < <(grep -vE '^\s*(#|$)' tests/sanitize/cases.txt)
bins=()
for line in "${cases[@]}"; do
  read -r bin _ <<< "$line"
  [ -n "$only" ] && [[ ",$only," != *",$bin,"* ]] && continue
  [[ " ${bins[*]} " == *" $bin "* ]] || bins+=("$bin")
done
if ((do_build)); then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLU_CUDA_ARCHS=90a-real \
    -DBLU_WARNINGS_AS_ERRORS=OFF -DBLU_WITH_MLIR=OFF -DBLU_BUILD_BENCH=OFF > "$work/configure.txt" 2>&1
  timeout 330 cmake --build "$build" -j "$(nproc)" --target "${bins[@]}" -- -k 0 > "$work/build.txt" 2>&1
  stamp "build rc=$? (${bins[*]})"; grep -E "error|FAILED" "$work/build.txt" | head -10
fi

# --part K/N: this call runs the K-th of N groups of binaries, balanced by tests/sanitize/seconds.txt
# (greedy, longest first), so the whole suite fits N device calls (session 16: 1151 s of sanitizer
# time, more than one call's 540 s). The groups depend only on the binaries and the seconds file;
# every call builds all of them (a later part can then run --no-build on the warm machine). With
# session 16's seconds, 3 parts are ~390 s each and the first call's build ~160 s: use --part K/4 on
# fresh machines, or K/3 with the later two --no-build on the warm one.
if [ -n "$part" ]; then
  [[ $part =~ ^[0-9]+/[0-9]+$ ]] || { echo "device-sanitize.sh: --part K/N, got '$part'" >&2; exit 2; }
  mapfile -t bins < <(python3 - "$part" "${bins[@]}" <<'EOF'
import sys
k, n = map(int, sys.argv[1].split("/"))
if not 1 <= k <= n:
    sys.exit(f"device-sanitize.sh: --part {k}/{n}: K must be in 1..N")
bins = sys.argv[2:]
secs = {}
for line in open("tests/sanitize/seconds.txt"):
    if line.strip() and not line.startswith("#"):
        b, s = line.split()
        secs[b] = float(s)
load, part = [0.0] * n, {}
for b in sorted(bins, key=lambda b: (-secs.get(b, 60.0), b)):
    i = min(range(n), key=lambda j: load[j])
    load[i] += secs.get(b, 60.0)
    part[b] = i + 1
print("\n".join(b for b in bins if part[b] == k))
EOF
)
  only=$(IFS=,; echo "${bins[*]}")
  [ -n "$only" ] || only="(none)"
  echo "part $part: ${bins[*]}" | tee -a "$OUT/progress.txt"
fi
ci=0
for line in "${cases[@]}"; do
  ci=$((ci + 1))  # the case's line number: a binary may have several lines (one per filter)
  read -r bin case_tools tmo filter case_env <<< "$line"
  [ -n "$only" ] && [[ ",$only," != *",$bin,"* ]] && continue
  for tool in ${tools//,/ }; do
    [[ $case_tools == "*" || ",$case_tools," == *",$tool,"* ]] || continue
    log="$work/logs/${bin}.${tool}~$(printf %02d $ci).txt"
    # No run outlives the budget: its timeout is cut to what is left (session 9: a 240 s run
    # started at 500 s took the whole device call, and its results, past the call's limit).
    # Two-GPU binaries (tests/sanitize/cases.txt marks them) run only where two GPUs are, and
    # there a skip would be a failure (BLU_REQUIRE_MULTI_GPU=1 below).
    if [[ " $multi_gpu_bins " == *" $bin "* ]] && (( gpus < 2 )); then
      echo "skipped (needs 2 GPUs, this machine has $gpus)" > "$log"; continue
    fi
    left=$(( budget - ($(date +%s) - t0) ))
    if (( left < 20 )); then echo "skipped (budget)" > "$log"; continue; fi
    (( tmo > left )) && tmo=$left
    extra=()
    # Note [initcheck and TMA stores]: initcheck does not count a bulk-tensor (TMA) store as
    # initialising global memory, so a buffer the sm90 GEMM's TMA-store epilogue wrote reads as
    # uninitialised in the next kernel that loads it. Session 13 (H100, 8332ca2, the same binary
    # and test, fused_step MatchesAutogradTf32): 68,051 reports at blutensor's elementwise add
    # reading GEMM outputs with the TMA-store epilogue, 0 with BLUBLAS_SM90_GENERIC_EPILOGUE=1 (plain
    # st.global stores of the same values). So initcheck runs with the generic epilogue; the
    # TMA-store epilogue is covered by the other three tools and by every GEMM test's results.
    envs=()
    # The case's own settings (tests/sanitize/cases.txt: VAR=value words after the filter).
    read -r -a case_envs <<< "${case_env:-}"
    envs+=("${case_envs[@]}")
    [ "$tool" = initcheck ] && envs+=(BLUBLAS_SM90_GENERIC_EPILOGUE=1)
    # racecheck: every hazard printed (the allow-list is checked against all of them, not the first
    # 40), without host backtraces (the Read/Write lines name the source).
    [ "$tool" = racecheck ] && extra+=(--racecheck-report all --show-backtrace no)
    limit=40; [ "$tool" = racecheck ] && limit=100000
    s0=$(date +%s)
    if [[ " $wrapped_bins " == *" $bin "* ]]; then
      # Note [Sanitized ranks] (tests/common/run_command.h): the gtest parent runs unwrapped and
      # each rank blurun starts runs under its own sanitizer, writing per-process logs that are
      # appended to this case's log (the parse below sums every ERROR SUMMARY in it).
      rdir="$work/ranks/${bin}.${tool}~$(printf %02d $ci)"; mkdir -p "$rdir"
      # synccheck stops NCCL's own kernels (session 15, 2x H200: "Barrier error detected. Divergent
      # thread(s) in block" at ncclDevFunc_AllReduce_*_RING_SIMPLE / Broadcast_RING_SIMPLE, thousands
      # per run, and the collective then fails): NCCL syncs subsets of a block with counted named
      # barriers, which the tool reports as divergence. Our kernels stay checked; NCCL's are skipped.
      rextra=()
      [ "$tool" = synccheck ] && rextra+=(--kernel-name-exclude kns=ncclDev)
      # racecheck skips the streamed-row kernels (softmax_*_stream_kernel, xent_stream_kernel) in
      # the programs: their ring's false WAW hazard (tests/sanitize/allowlist.txt) was 2.4 million
      # printed reports in the nonfinite test's trainer, which ran past its 360 s (sessions 17-18);
      # blublas_softmax_gpu_test and blublas_cross_entropy_gpu_test race-check those kernels.
      [ "$tool" = racecheck ] && rextra+=(--kernel-name-exclude kns=_stream_kernel)
      env "${envs[@]}" BLU_RANK_WRAPPER="$san --tool $tool --print-limit $limit ${extra[*]} ${rextra[*]} --log-file $rdir/rank.%p.txt" \
        timeout -k 5 "$tmo" "$build/tests/$bin" --gtest_filter="$filter" > "$log" 2>&1
      rc=$?
      for f in "$rdir"/rank.*.txt; do [ -f "$f" ] && { echo "--- sanitizer log $(basename "$f")"; cat "$f"; } >> "$log"; done
      grep -q "SUMMARY" "$log" || echo "no rank sanitizer log (was BLU_RANK_WRAPPER used?)" >> "$log"
    else
      # --target-processes all: a test that starts programs has them checked too.
      env "${envs[@]}" timeout -k 5 "$tmo" "$san" --target-processes all --tool "$tool" --error-exitcode 99 --print-limit "$limit" "${extra[@]}" \
        "$build/tests/$bin" --gtest_filter="$filter" > "$log" 2>&1
      rc=$?
    fi
    echo "rc=$rc seconds=$(( $(date +%s) - s0 )) filter=$filter" >> "$log"
    stamp "$bin $tool rc=$rc $(grep -E '(ERROR|RACECHECK) SUMMARY' "$log" | tail -1)"
  done
done

python3 - "$work" tests/sanitize/allowlist.txt "$OUT/sanitize.json" "${COMMIT:-${BLU_COMMIT:-}}" <<'PY'
import json, os, re, sys, fnmatch
work, allow_path, out, commit = sys.argv[1:5]
allow = []  # (tool, binary glob, report regex, reason)
for line in open(allow_path):
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    tool, binary, pattern, reason = [x.strip() for x in line.split("|", 3)]
    allow.append((tool, binary, re.compile(pattern), reason))
runs, failed = [], 0
for name in sorted(os.listdir(os.path.join(work, "logs"))):
    binary, tool_case, _ = name.rsplit(".", 2)
    tool, _, case = tool_case.partition("~")  # case: the line of tests/sanitize/cases.txt
    text = open(os.path.join(work, "logs", name), errors="replace").read()
    r = {"binary": binary, "tool": tool, "case": case}
    fm = re.search(r"filter=(\S*)", text)
    if fm:
        r["filter"] = fm.group(1)
    if text.startswith("skipped"):
        r["status"] = "skipped"; runs.append(r); continue
    m = re.search(r"rc=(-?\d+) seconds=(\d+)", text)
    r["rc"], r["seconds"] = (int(m.group(1)), int(m.group(2))) if m else (None, None)
    # Every summary counts: a two-GPU case's log holds one per rank (Note [Sanitized ranks]).
    sums = re.findall(r"(?:ERROR|RACECHECK) SUMMARY: (\d+) (?:error|hazard)", text)
    r["reports"] = sum(int(x) for x in sums) if sums else None
    if "no rank sanitizer log" in text:
        r["reports"] = None
    # Report headers: memcheck/initcheck/synccheck "========= <kind>", racecheck "Error/Warning: Race ..."
    # A racecheck hazard's header is followed by its two sides ("Read Thread ... at f+0x.. in
    # file:line", "Write Thread ..."): they are joined to it, so an allow-list entry can name the
    # exact pair of source lines rather than every hazard of a kind.
    lines = text.splitlines()
    heads = []
    for i, l in enumerate(lines):
        if not re.match(r"=+ (Invalid|Uninitialized|Barrier|Race|Error|Warning|Program hit|Malloc|Out-of-range|Misaligned|Address)", l):
            continue
        h = l.strip("= ").strip()
        if h.startswith("Program hit"):  # an API error: the named frames say whose call it was
            frames = []
            for x in lines[i + 1:i + 24]:
                fm2 = re.search(r"Host Frame:\s*([A-Za-z_][^\s(\[]*)", x)
                if fm2:
                    frames.append(fm2.group(1))
                elif frames and not re.search(r"Host Frame|Saved host backtrace|in lib|^\S*=+\s*$", x):
                    break
            h = h + " ; frames: " + " < ".join(frames[:8])
        elif re.match(r"(Invalid|Uninitialized|Misaligned|Out-of-range|Address)", h):
            for x in lines[i + 1:i + 3]:  # the kernel the access was in: "at f(...)+0x.."
                am = re.match(r"=+\s+at (\S+?)(?:\(|\+0x|$)", x)
                if am:
                    h = h + " ; at " + am.group(1)
                    break
        elif "hazard" in h:
            sides = [x.strip("= ").strip() for x in lines[i + 1:i + 3]
                     if re.match(r"=+ +(Read|Write) Thread", x)]
            h = " ; ".join([h] + sides)
        elif "Race reported" in h:  # the summary form: "... and Read access at ..." lines follow
            sides = []
            for x in lines[i + 1:]:
                if not re.match(r"=+ +and (Read|Write) access", x):
                    break
                sides.append(x.strip("= ").strip())
            h = " ; ".join([h] + sides)
        heads.append(h)
    r["first_reports"] = heads[:8]
    allowed = []
    for (t, b, pat, reason) in allow:
        if t == tool and fnmatch.fnmatch(binary, b) and any(pat.search(h) for h in heads):
            allowed.append(reason)
    r["allowed_reasons"] = sorted(set(allowed))
    unexplained = [h for h in heads if not any(t == tool and fnmatch.fnmatch(binary, b) and pat.search(h)
                                               for (t, b, pat, _) in allow)]
    r["unexplained"] = len(unexplained)
    gtest_ok = "[  PASSED  ]" in text and "[  FAILED  ]" not in text
    r["tests_passed"] = gtest_ok
    if r["rc"] == 124 or r["rc"] == 137:
        r["status"] = "timeout"
    elif not gtest_ok:
        r["status"] = "test failed"
    elif (r["reports"] or 0) > 0 and unexplained:
        r["status"] = "reports"
    elif (r["reports"] or 0) > 0:
        r["status"] = "allowed"
    else:
        r["status"] = "clean"
    failed += r["status"] not in ("clean", "allowed")
    runs.append(r)
json.dump({"commit": commit, "runs": runs, "failed": failed}, open(out, "w"), indent=1)
print("| binary | tool | case | status | reports | seconds |")
print("|---|---|---|---|---|---|")
for r in runs:
    print(f"| {r['binary']} | {r['tool']} | {r.get('case')} | {r['status']} | {r.get('reports')} | {r.get('seconds')} |")
print(f"failed runs: {failed}")
sys.exit(1 if failed else 0)
PY
status=$?
tar -C "$work" -czf "$OUT/sanitize.tar.gz" logs build.txt 2>/dev/null
stamp "done (exit $status: 1 when a run has an unexplained report, a failed test or a timeout)"
exit $status
