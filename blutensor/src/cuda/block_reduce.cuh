// blutensor/src/cuda/block_reduce.cuh: deterministic block-wide sum and max for the row kernels
// (softmax, layernorm, cross-entropy): a fixed shuffle tree within each warp, then warp 0 combines
// the warp results in a fixed tree. Same inputs, same bits, on any GPU. Block size kThreads.
#pragma once

#include "cuda/kernel_utils.cuh"

namespace blu::cuda_ops::detail {

template <typename C>
__device__ __forceinline__ C warp_sum(C v) {
#pragma unroll
  for (int m = 16; m >= 1; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

template <typename C>
__device__ __forceinline__ C warp_max(C v) {
#pragma unroll
  for (int m = 16; m >= 1; m /= 2) {
    C o = __shfl_xor_sync(0xffffffffu, v, m);
    v = o > v ? o : v;
  }
  return v;
}

// Every thread of the block gets the result. `scratch` holds kThreads / 32 values; the function
// synchronises before reusing it, so back-to-back calls may share one scratch array.
template <typename C>
__device__ __forceinline__ C block_sum(C v, C* scratch) {
  constexpr int kWarps = kThreads / 32;
  v = warp_sum(v);
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  C w = threadIdx.x < kWarps ? scratch[threadIdx.x] : C(0);
  if (threadIdx.x < 32) {
    w = warp_sum(w);
    if (threadIdx.x == 0) scratch[0] = w;
  }
  __syncthreads();
  return scratch[0];
}

template <typename C>
__device__ __forceinline__ C block_max(C v, C* scratch) {
  constexpr int kWarps = kThreads / 32;
  v = warp_max(v);
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  C w = threadIdx.x < kWarps ? scratch[threadIdx.x] : C(-INFINITY);
  if (threadIdx.x < 32) {
    w = warp_max(w);
    if (threadIdx.x == 0) scratch[0] = w;
  }
  __syncthreads();
  return scratch[0];
}

}  // namespace blu::cuda_ops::detail
