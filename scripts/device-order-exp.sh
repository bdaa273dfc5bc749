#!/usr/bin/env bash
# device-order-exp.sh (session 29): what does a GEMM kernel pay for following a different kernel?
# One interleaved round (Note [Interleaved tile A/B]) places the same plan after itself, after a
# one-thread kernel (noop), after cuBLAS and after another tile, and cuBLAS after ours and after
# itself. Needs the profiler built by device-llama-gemm.sh (BLU_LG_BUILD, default ../build-lg).
P=${BLU_LG_BUILD:-../build-lg}/blublas/blublas-profiler
seq=128x256_2c,128x256_2c,noop,128x256_2c,cublas,128x256_2c,64x256_pp,128x256_2c,cublas,cublas
for sh in "qkvo_fwd --m=8192 --n=1024 --k=1024" "attn_proj_fwd --m=16384 --n=768 --k=768" "fc_fwd --m=16384 --n=3072 --k=768"; do
  set -- $sh; nm=$1; shift
  echo "== $nm (position: variant ms ratio-to-cuBLAS)"
  $P gemm --dtype=bf16 "$@" --op_a=n --op_b=t --reps=30 --variants=$seq 2>/dev/null | grep variant | awk '{printf "%d: %s %s %s\n", NR, $2, $3, $9}'
done
