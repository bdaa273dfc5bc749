#!/usr/bin/env bash
# Nsight Compute on the hot kernels, one launch each, through blublas-profiler commands (clocks left
# alone: --clock-control none, as the device notes ask). Text reports land in <out-dir>/<name>.txt.
#   scripts/ncu-hot.sh <build-dir> <out-dir> [name ...]     (names: see the table below; default all)
set -uo pipefail
bin=$1/blublas/blublas-profiler; out=$2; shift 2
mkdir -p "$out"
command -v ncu >/dev/null || { echo "ncu-hot: no ncu on this machine"; exit 1; }
sections="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
--section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis"
# The stall reasons as numbers (warps stalled per issued instruction, by reason): WarpStateStats
# prints only their sum in text mode. Session 8 had no breakdown for l88k16 without them.
stalls=""
for r in barrier branch_resolving dispatch_stall drain imc_miss lg_throttle long_scoreboard \
  math_pipe_throttle membar mio_throttle misc no_instruction not_selected selected short_scoreboard \
  sleeping tex_throttle wait; do
  stalls+="${stalls:+,}smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
done
sections+=" --metrics $stalls"
# name ; kernel regex ; profiler command [; environment assignments for it]
table=(
  "gemm_bf16_fc_fwd;regex:sm90_gemm;gemm --m=16384 --n=3072 --k=768 --dtype=bf16 --op_a=n --op_b=t --reps=2"
  "gemm_bf16_fc_fwd_gelu;regex:sm90_gemm;gemm --m=16384 --n=3072 --k=768 --dtype=bf16 --op_a=n --op_b=t --epilogue=bias_gelu --reps=2"
  "gemm_bf16_qkv_fwd_bias;regex:sm90_gemm;gemm --m=16384 --n=2304 --k=768 --dtype=bf16 --op_a=n --op_b=t --epilogue=bias --reps=2"
  "gemm_bf16_attnproj_fwd;regex:sm90_gemm;gemm --m=16384 --n=768 --k=768 --dtype=bf16 --op_a=n --op_b=t --reps=2"
  "gemm_bf16_fcproj_dx_gelugrad;regex:sm90_gemm;gemm --m=16384 --n=3072 --k=768 --dtype=bf16 --op_a=n --op_b=n --epilogue=gelu_grad --reps=2"
  "gemm_bf16_fcproj_dx;regex:sm90_gemm;gemm --m=16384 --n=3072 --k=768 --dtype=bf16 --op_a=n --op_b=n --reps=2"
  "gemm_bf16_fc_dw;regex:sm90_gemm;gemm --m=768 --n=3072 --k=16384 --dtype=bf16 --op_a=t --op_b=n --reps=2"
  # The qkv dW GEMM with its bias gradient fused (Note [sm90 fused bias gradient]) beside the plain
  # one: session 31 measured 0.0931 -> 0.1234 ms for the sums on otherwise idle producer warps.
  "gemm_bf16_qkv_dw;regex:sm90_gemm;gemm --m=2304 --n=768 --k=16384 --dtype=bf16 --op_a=t --op_b=n --out=f32 --reps=2"
  "gemm_bf16_qkv_dw_bgrad;regex:sm90_gemm;gemm --m=2304 --n=768 --k=16384 --dtype=bf16 --op_a=t --op_b=n --out=f32 --epilogue=bgrada --reps=2"
  "gemm_bf16_xent_dw_beta;regex:sm90_gemm;gemm --m=50304 --n=768 --k=640 --dtype=bf16 --out=f32 --op_a=t --op_b=n --beta=1 --reps=2"
  # The cuBLAS kernel of the same problem beside ours (its tile, cluster, registers, stalls).
  "cublas_bf16_fc_dw;regex:nvjet|xmma|cutlass;gemm --m=768 --n=3072 --k=16384 --dtype=bf16 --op_a=t --op_b=n --reps=2"
  "gemm_bf16_qkv_fwd;regex:sm90_gemm;gemm --m=16384 --n=2304 --k=768 --dtype=bf16 --op_a=n --op_b=t --reps=2"
  "cublas_bf16_qkv_fwd;regex:nvjet|xmma|cutlass;gemm --m=16384 --n=2304 --k=768 --dtype=bf16 --op_a=n --op_b=t --reps=2"
  "gemm_bf16_lmhead_fwd;regex:sm90_gemm;gemm --m=16384 --n=50304 --k=768 --dtype=bf16 --op_a=n --op_b=t --reps=2"
  "cublas_bf16_lmhead_fwd;regex:nvjet|xmma|cutlass;gemm --m=16384 --n=50304 --k=768 --dtype=bf16 --op_a=n --op_b=t --reps=2"
  "gemm_bf16_llama_gateup_fwd;regex:sm90_gemm;gemm --m=8192 --n=2816 --k=1024 --dtype=bf16 --op_a=n --op_b=t --reps=2"
  "cublas_bf16_llama_gateup_fwd;regex:nvjet|xmma|cutlass;gemm --m=8192 --n=2816 --k=1024 --dtype=bf16 --op_a=n --op_b=t --reps=2"
  "gemm_sm80_bf16;regex:sm80;gemm --m=4096 --n=4096 --k=4096 --dtype=bf16 --path=sm80 --reps=2"
  "gemm_simt_f32;regex:simt;gemm --m=4096 --n=4096 --k=4096 --dtype=f32 --reps=2"
  "gemm_simt_f32_fc_fwd;regex:simt;gemm --m=16384 --n=3072 --k=768 --dtype=f32 --op_a=n --op_b=t --reps=2"
  "gemm_simt_f32_fc_dx;regex:simt;gemm --m=16384 --n=768 --k=3072 --dtype=f32 --op_a=n --op_b=n --reps=2"
  "gemm_simt_f32_fc_dw;regex:simt;gemm --m=768 --n=3072 --k=16384 --dtype=f32 --op_a=t --op_b=n --reps=2"
  "layernorm_bwd_bf16;regex:layernorm;layernorm --dtype=bf16 --op=bwd --reps=2"
  "softmax_fwd_f32;regex:softmax;softmax --dtype=f32 --op=fwd --reps=2"
  "xent_bf16;regex:xent|cross|classif;xent --dtype=bf16 --reps=2"
  "embedding_bwd_f32;regex:embed|wte|wpe;embedding --dtype=f32 --reps=2"
  "attn_fwd_bf16;regex:flash_attn_fwd;attention --d=64 --mode=bf16 --reps=2"
  "attn_bwd_bf16;regex:flash_attn_bwd;attention --d=64 --mode=bf16 --reps=2"
  "attn_fwd_bf16_t16k;regex:flash_attn_fwd;attention --B=2 --T=16384 --H=12 --d=64 --mode=bf16 --reps=1"
  "attn_fwd_bf16_t16k_2wg;regex:flash_attn_fwd;attention --B=2 --T=16384 --H=12 --d=64 --mode=bf16 --reps=1;BLUBLAS_ATTN_FWD_CFG=0"
  "attn_bwd_bf16_t16k;regex:flash_attn_bwd;attention --B=2 --T=16384 --H=12 --d=64 --mode=bf16 --reps=1"
  "attn_bwd_bf16_t16k_rega;regex:flash_attn_bwd;attention --B=2 --T=16384 --H=12 --d=64 --mode=bf16 --reps=1;BLUBLAS_ATTN_BWD_CFG=2"
  # The dQ-accumulate backward (Note [sm90 flash backward: dQ accumulated in order]) beside them.
  "attn_bwd_bf16_acc;regex:flash_attn_bwd;attention --d=64 --mode=bf16 --dq=accumulate --reps=2"
  "attn_bwd_bf16_t16k_acc;regex:flash_attn_bwd;attention --B=2 --T=16384 --H=12 --d=64 --mode=bf16 --dq=accumulate --reps=1"
  "attn_fwd_f32x3;regex:flash_attn_fwd;attention --d=64 --mode=f32x3 --reps=2"
  "attn_bwd_dkdv_f32x3;regex:flash_attn_bwd_dkdv|flash_attn_bwd_merged;attention --d=64 --mode=f32x3 --reps=2"
  "attn_bwd_dq_f32x3;regex:flash_attn_bwd_dq;attention --d=64 --mode=f32x3 --reps=2"
)
# Probe first: a tiny command with one metric, so a machine whose ncu cannot read counters (or
# hangs) costs 45 s, not the whole call.
echo "== probe (uname -r: $(uname -r))"
timeout 45 ncu --clock-control none --metrics gpu__time_duration.sum -k regex:"ln_|layernorm" --launch-count 1 \
  "$bin" layernorm --rows=1024 --reps=1 > "$out/probe.txt" 2>&1
probe_rc=$?; tail -15 "$out/probe.txt"
if [ $probe_rc -ne 0 ] || ! grep -q "gpu__time_duration" "$out/probe.txt"; then
  echo "ncu-hot: the probe failed (rc $probe_rc): no reports on this machine"; exit 1
fi
# NCU_PIPES=1: the pipe metrics this ncu knows for the GPU, for naming them directly next time.
if [ "${NCU_PIPES:-0}" = 1 ]; then
  timeout 30 ncu --query-metrics 2>&1 | grep -iE "pipe|inst_executed" > "$out/pipe_metric_names.txt"
  echo "pipe metric names: $(wc -l < "$out/pipe_metric_names.txt") lines"; head -5 "$out/pipe_metric_names.txt"
fi
for row in "${table[@]}"; do
  IFS=';' read -r name kre cmd envs <<< "$row"
  [ $# -gt 0 ] && [[ " $* " != *" $name "* ]] && continue
  echo "== $name: $cmd ($kre)"
  # shellcheck disable=SC2086
  timeout 60 env $envs ncu --clock-control none -k "$kre" --launch-skip 2 --launch-count 1 $sections \
    "$bin" $cmd > "$out/$name.txt" 2>&1 || echo "ncu $name rc=$?"
  if grep -qE "Failed to initialize|LibraryNotLoaded|ERR_NVGPUCTRPERM|not supported" "$out/$name.txt"; then
    echo "ncu-hot: ncu cannot read counters here:"; grep -E "==ERROR==|Failed|not supported" "$out/$name.txt" | head -3
    exit 1
  fi
  grep -E "^\s+[a-z_0-9]+.*\(|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issued Warp|No Eligible|Grid Size|Block Size|Cluster Size|Dynamic Shared" "$out/$name.txt" | head -20
  # The three largest stall reasons.
  grep -E "smsp__average_warps_issue_stalled_" "$out/$name.txt" | awk '{print $NF, $1}' | sort -g -r | head -3 |
    sed -E 's/smsp__average_warps_issue_stalled_|_per_issue_active.ratio//g; s/^/  stall /'
  # NCU_PIPES=1: per-pipe utilization (MUFU = xu, fma, alu, tensor, shared) in a second, short
  # pass: the sections' bodies with their pipe tables (--print-details all). (A regex: metric list
  # is refused by this ncu: "Failed to find metric regex:...", session 33.)
  if [ "${NCU_PIPES:-0}" = 1 ]; then
    # shellcheck disable=SC2086
    timeout 60 env $envs ncu --clock-control none -k "$kre" --launch-skip 2 --launch-count 1 \
      --section ComputeWorkloadAnalysis --section InstructionStats --print-details all \
      "$bin" $cmd > "$out/${name}_pipes.txt" 2>&1 || echo "ncu $name pipes rc=$?"
    grep -iE "pipe|xu|mufu|tensor|shared|ERROR" "$out/${name}_pipes.txt" | grep -vE "^==PROF==" | head -40
  fi
done
