// cp_async.cuh (internal): the sm_80+ asynchronous global-to-shared copy (cp.async) and its group
// waits, for the kernels that stage operands through shared memory without registers. Bodies are
// empty below sm_80 (BLUBLAS_SM80_ENABLED): a kernel using them must not be launched there.
#pragma once

#include <cstdint>

#include "common/arch.cuh"

namespace blublas::cp_async {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 4 bytes (cached in L1: .cg takes 16-byte copies only); src_bytes 0 zero-fills and reads nothing.
__device__ __forceinline__ void copy4(uint32_t smem, const void* gmem, int src_bytes) {
#if BLUBLAS_SM80_ENABLED
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(src_bytes)
               : "memory");
#endif
}
__device__ __forceinline__ void copy4(uint32_t smem, const void* gmem) {
#if BLUBLAS_SM80_ENABLED
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem), "l"(gmem) : "memory");
#endif
}
// 16 bytes, bypassing L1; src_bytes 0 zero-fills and reads nothing.
__device__ __forceinline__ void copy16(uint32_t smem, const void* gmem, int src_bytes) {
#if BLUBLAS_SM80_ENABLED
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(src_bytes)
               : "memory");
#endif
}
__device__ __forceinline__ void copy16(uint32_t smem, const void* gmem) {
#if BLUBLAS_SM80_ENABLED
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem) : "memory");
#endif
}
__device__ __forceinline__ void commit() {
#if BLUBLAS_SM80_ENABLED
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait() {
#if BLUBLAS_SM80_ENABLED
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

}  // namespace blublas::cp_async
