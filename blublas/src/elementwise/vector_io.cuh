// vector_io.cuh: element conversion (f32 / bf16 <-> f32 registers) and W-wide packed loads and
// stores for the memory-bound kernels (layernorm, elementwise, softmax, cross-entropy, embedding,
// reduce). W * sizeof(T) == 16 gives one 16-byte LDG/STG per pack; W == 1 is the scalar fallback
// used when a row length or a pointer is not 16-byte aligned. All arithmetic is done in f32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace blublas::fused {

template <typename T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Elements per 16-byte pack.
template <typename T>
constexpr int kPack16 = 16 / static_cast<int>(sizeof(T));

template <typename T, int W>
struct alignas(sizeof(T) * W) Pack {
  T v[W];
};

// Loads W consecutive elements at p (aligned to W * sizeof(T)) as floats.
template <typename T, int W>
__device__ __forceinline__ void load_f32(const T* p, float (&out)[W]) {
  const Pack<T, W> pk = *reinterpret_cast<const Pack<T, W>*>(p);
#pragma unroll
  for (int i = 0; i < W; ++i) out[i] = to_f32(pk.v[i]);
}

// Streaming variant (evict-first): for data read exactly once.
template <typename T, int W>
__device__ __forceinline__ void load_f32_stream(const T* p, float (&out)[W]) {
  Pack<T, W> pk;
  if constexpr (sizeof(Pack<T, W>) == 16) {
    const uint4 u = __ldcs(reinterpret_cast<const uint4*>(p));
    pk = *reinterpret_cast<const Pack<T, W>*>(&u);
  } else {
    pk = *reinterpret_cast<const Pack<T, W>*>(p);
  }
#pragma unroll
  for (int i = 0; i < W; ++i) out[i] = to_f32(pk.v[i]);
}

template <typename T, int W>
__device__ __forceinline__ void store_f32(T* p, const float (&in)[W]) {
  Pack<T, W> pk;
#pragma unroll
  for (int i = 0; i < W; ++i) pk.v[i] = from_f32<T>(in[i]);
  *reinterpret_cast<Pack<T, W>*>(p) = pk;
}

// Streaming store (evict-first): for outputs not read again soon.
template <typename T, int W>
__device__ __forceinline__ void store_f32_stream(T* p, const float (&in)[W]) {
  Pack<T, W> pk;
#pragma unroll
  for (int i = 0; i < W; ++i) pk.v[i] = from_f32<T>(in[i]);
  if constexpr (sizeof(Pack<T, W>) == 16) {
    __stcs(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(&pk));
  } else {
    *reinterpret_cast<Pack<T, W>*>(p) = pk;
  }
}

}  // namespace blublas::fused
