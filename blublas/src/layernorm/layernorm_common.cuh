// layernorm_common.cuh: what the LayerNorm forward and backward files share: raw 16-byte pack
// loads (kept packed in registers while a row is prefetched, converted to f32 when used), the
// programmatic-dependent-launch helpers, the pack-count dispatch and the alignment check.
//
// Note [Programmatic dependent launch] On sm_90 a kernel launched with the
// ProgrammaticStreamSerialization attribute may start while the previous kernel in the stream is
// still running; it must execute griddepcontrol.wait (pdl_wait) before it reads anything the
// previous kernel writes, and the previous kernel may call griddepcontrol.launch_dependents
// (pdl_trigger) once its remaining work no longer needs the SMs' full attention. The wait returns
// only after the whole previous grid has completed and its memory is visible, so the result is
// the same as with ordinary stream order; only launch latency is hidden. Without the attribute
// (or below sm_90) both instructions are no-ops. Only kernels that wait before their first global
// read are launched with the attribute: they may overlap whatever the caller launched before.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "elementwise/vector_io.cuh"

namespace blublas::lnorm {

using fused::Pack;
using fused::to_f32;

inline bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

// 16-byte pack load / store, kept packed in registers (converted to f32 by pack_elem when used).
template <typename T, int W>
__device__ __forceinline__ Pack<T, W> load_pack(const T* p) {
  static_assert(sizeof(Pack<T, W>) == 16, "raw pack loads are 16-byte");
  return *reinterpret_cast<const Pack<T, W>*>(p);
}

template <typename T, int W>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, W>& pk) {
  *reinterpret_cast<Pack<T, W>*>(p) = pk;
}

template <typename T, int W>
__device__ __forceinline__ float pack_elem(const Pack<T, W>& pk, int i) {
  return to_f32(pk.v[i]);
}

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launches `kernel` with the programmatic-serialization attribute when `pdl` (sm_90+ devices).
template <typename... KArgs, typename... Args>
cudaError_t launch_kernel(bool pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                          std::size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// Calls f(std::integral_constant<int, kPacks>) for the smallest supported kPacks >= need with
// kPacks * W <= kMaxElems; false when none fits.
template <int kMaxElems, int W, typename F>
bool with_packs(int need, F&& f) {
  bool done = false;
  auto try_one = [&](auto kp) {
    constexpr int k = decltype(kp)::value;
    if constexpr (k * W <= kMaxElems) {
      if (!done && need <= k) {
        f(kp);
        done = true;
      }
    }
  };
  try_one(std::integral_constant<int, 1>{});
  try_one(std::integral_constant<int, 2>{});
  try_one(std::integral_constant<int, 3>{});
  try_one(std::integral_constant<int, 4>{});
  try_one(std::integral_constant<int, 6>{});
  try_one(std::integral_constant<int, 8>{});
  try_one(std::integral_constant<int, 12>{});
  try_one(std::integral_constant<int, 16>{});
  return done;
}

}  // namespace blublas::lnorm
