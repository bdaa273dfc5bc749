// sm90_sync.cuh (internal, device side): the sm_90 synchronisation PTX shared by every kernel
// family that feeds shared memory through the async proxy (TMA / bulk copies): shared-memory
// addresses, mbarrier init / arrive / arrive-expect-tx, the generic->async proxy fence and the
// cluster CTA rank. These are plain sm_90 instructions (not sm_90a-only), so the bodies are
// guarded by BLUBLAS_SM90_ENABLED (any arch >= 9.0); on older targets they compile to nothing and
// the launchers never run the kernels that use them. Parity waits stay with their users: the GEMM
// spins without a watchdog (a trap there made ptxas spill), the streamed row kernels trap after
// a timeout.
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
#define BLUBLAS_SM90_ENABLED 1
#else
#define BLUBLAS_SM90_ENABLED 0
#endif

namespace blublas::sm90_sync {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
#if BLUBLAS_SM90_ENABLED
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count)
               : "memory");
#endif
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if BLUBLAS_SM90_ENABLED
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
#endif
}

__device__ __forceinline__ void mbar_arrive_u32(uint32_t addr) {
#if BLUBLAS_SM90_ENABLED
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(addr) : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) { mbar_arrive_u32(smem_u32(bar)); }

// One arrival for the whole warp, made by lane 0 after every lane's earlier shared-memory reads
// (Note [Warp arrivals on empty barriers]). Call it warp-uniformly.
// Note [Warp arrivals on empty barriers]: a consumer warp whose lanes read a ring stage with
// ordinary loads (the attention backward's LSE and delta rows) frees the stage with one arrival
// from lane 0. Without the __syncwarp the other lanes' reads are not ordered before that arrival,
// and compute-sanitizer's racecheck reports the producer's next write to the stage as a
// write-after-read hazard (session 8, sm90_flash_attn_bwd.cuh). Lanes of a warp run together in
// practice; the barrier makes it so by the memory model, at one warp-sync per stage.
__device__ __forceinline__ void mbar_arrive_warp(uint64_t* bar, int lane) {
  __syncwarp();
  if (lane == 0) mbar_arrive(bar);
}

// Orders this thread's generic-proxy shared-memory writes before later async-proxy (TMA) reads.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if BLUBLAS_SM90_ENABLED
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// GPU-scope flag handshakes between CTAs (the GEMM's stream-K parts, the attention backward's dQ
// chain): an acquire load and a release store of a 32-bit word in global memory.
__device__ __forceinline__ uint32_t ld_acquire_gpu(const uint32_t* addr) {
  uint32_t v = 0;
#if BLUBLAS_SM90_ENABLED
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(addr) : "memory");
#else
  (void)addr;
#endif
  return v;
}
__device__ __forceinline__ void st_release_gpu(uint32_t* addr, uint32_t v) {
#if BLUBLAS_SM90_ENABLED
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(addr), "r"(v) : "memory");
#else
  (void)addr;
  (void)v;
#endif
}

__device__ __forceinline__ uint32_t cluster_cta_rank() {
  uint32_t r = 0;
#if BLUBLAS_SM90_ENABLED
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
  return r;
}

}  // namespace blublas::sm90_sync
