#!/usr/bin/env bash
# device-order-exp.sh (session 29): does a GEMM kernel pay for following a different kernel? The
# same plans in different positions of one interleaved round, with and without the max shared
# carveout (Note [sm90 launch attributes]). Needs ../build-lg from device-llama-gemm.sh.
P=../build-lg/blublas/blublas-profiler
for env in "BLUBLAS_SM90_CARVEOUT=1" "BLUBLAS_SM90_CARVEOUT=0"; do
  for sh in "qkvo_fwd --m=8192 --n=1024 --k=1024" "attn_proj_fwd --m=16384 --n=768 --k=768" "fc_fwd --m=16384 --n=3072 --k=768"; do
    set -- $sh; nm=$1; shift
    echo "== $env $nm"
    env $env $P gemm --dtype=bf16 "$@" --op_a=n --op_b=t --reps=20 --variants=128x256_2c,128x256_2c,64x256_pp,128x256_2c,128x256_2c,192x192_3c,64x256_pp 2>/dev/null | grep variant | awk '{print $2, $3, $9, $20}'
  done
done
