// reduce_primitives.cuh: fixed-order warp and block reductions shared by the memory-bound kernel
// families. Note [Bitwise-deterministic reductions]: a butterfly (xor) shuffle tree gives every
// lane the bit-identical result (IEEE + is commutative, and each level pairs the same partial
// sums on every lane), and the cross-warp step reads the per-warp partials in warp order, so a
// reduction depends only on the data and the block shape, never on timing. No float atomics.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace blublas::fused {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum; every thread receives the same bits. blockDim.x must be a multiple of 32 and
// at most 1024; `scratch` is >= 32 floats of shared memory, reusable right after the call returns.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = static_cast<int>(blockDim.x >> 5);
  v = warp_sum(v);
  __syncthreads();  // the previous user of scratch is done
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? scratch[lane] : 0.0f);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = static_cast<int>(blockDim.x >> 5);
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? scratch[lane] : -INFINITY);
}

// Online-softmax state (running max m, sum s of exp(x - m)) and its fixed-order combine.
struct MaxSum {
  float m;
  float s;
};

__device__ __forceinline__ MaxSum maxsum_combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

__device__ __forceinline__ MaxSum warp_maxsum(MaxSum v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    // Combine in lane order (lower lane first) so both partners compute the same bits.
    v = (threadIdx.x & o) ? maxsum_combine(other, v) : maxsum_combine(v, other);
  }
  return v;
}

__device__ __forceinline__ MaxSum block_maxsum(MaxSum v, MaxSum* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = static_cast<int>(blockDim.x >> 5);
  v = warp_maxsum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_maxsum(lane < warps ? scratch[lane] : MaxSum{-INFINITY, 0.0f});
}

}  // namespace blublas::fused
