// sm90_primitives.cuh (internal, device side): thin wrappers over the sm_90a PTX the wgmma GEMM
// uses: mbarriers (parity wait; init/arrive/expect-tx come from common/sm90_sync.cuh), TMA tiled loads, wgmma fences and
// group waits, the shared-memory matrix descriptor, setmaxnreg. Every body is guarded by
// BLUBLAS_SM90A_ENABLED so the file compiles (to nothing useful) for sm_80 as well.
//
// Note [wgmma shared-memory descriptors with 128-byte swizzle]
// A descriptor is 64 bits: [0,14) start address >> 4, [16,30) leading-dimension byte offset >> 4
// (LBO), [32,46) stride-dimension byte offset >> 4 (SBO), [49,52) base offset (0: every tile we
// describe starts 1024-byte aligned), [62,64) swizzle mode (1 = 128B).
// TMA with CU_TENSOR_MAP_SWIZZLE_128B writes each 128-byte row r of a box with its 16-byte chunks
// permuted: chunk c lands at chunk c ^ (r % 8); 8 rows form a 1024-byte atom. wgmma applies the
// same XOR to the address bits [4,7) ^= [7,10), which is why tiles must be 1024-byte aligned.
//  - K-major operand (rows of 64 bf16 / 32 f32 = 128 bytes along K, row r at r*128): SBO = 1024
//    (next group of 8 rows), LBO unused (1). The k-th 32-byte K slice (k16 for 16-bit, k8 for
//    tf32) starts at base + 32*k: the added offset only lands in address bits [4,7), which the
//    hardware then swizzles exactly as TMA did.
//  - MN-major operand (16-bit only; rows of 64 M/N elements = 128 bytes along M/N, one row per k,
//    a box of 64 x BK elements per 64-wide M/N block): SBO = 1024 (next 8 k-rows), LBO = stride
//    between 64-wide M/N blocks (the box size in bytes). The k16 slice starts at base + 16*128*k.
//    wgmma is told with its transpose immediate (imm-trans-a/b = 1).
#pragma once

#include <cstdint>

#include "common/arch.cuh"
#include "common/sm90_sync.cuh"

namespace blublas::gemm_detail::sm90 {

// Shared with the streamed row kernels (common/sm90_sync.cuh).
using sm90_sync::cluster_cta_rank;
using sm90_sync::fence_proxy_async_smem;
using sm90_sync::ld_acquire_gpu;
using sm90_sync::st_release_gpu;
using sm90_sync::mbar_arrive;
using sm90_sync::mbar_arrive_u32;
using sm90_sync::mbar_arrive_warp;
using sm90_sync::mbar_arrive_expect_tx;
using sm90_sync::mbar_init;
using sm90_sync::smem_u32;

// ---- mbarrier ----------------------------------------------------------------------------------
// Makes initialized barriers visible to the async proxy (TMA) and the other threads' next use.
__device__ __forceinline__ void mbar_fence_init() {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// Blocks until the phase with parity `parity` of *bar has completed. A fresh barrier is in phase
// 0: waiting for parity 1 returns at once (the "previous" phase counts as complete), waiting for
// parity 0 blocks until the first phase completes. (No watchdog/__trap here: a trap in this loop
// made ptxas spill in the 2-consumer kernels.)
// By 32-bit shared address (a warp short of registers keeps these rather than 64-bit pointers).
__device__ __forceinline__ void mbar_wait_u32(uint32_t addr, uint32_t parity) {
#if BLUBLAS_SM90A_ENABLED
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
#endif
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) { mbar_wait_u32(smem_u32(bar), parity); }

// ---- TMA ----------------------------------------------------------------------------------------
__device__ __forceinline__ void tma_prefetch_map(const void* map) {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#endif
}

// Loads the box at coordinates (c0, c1) (innermost first) into smem dst; completes tx bytes on bar.
__device__ __forceinline__ void tma_load_2d(void* dst, const void* map, uint64_t* bar, int c0,
                                            int c1) {
#if BLUBLAS_SM90A_ENABLED
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
      : "memory");
#endif
}

__device__ __forceinline__ void tma_load_3d(void* dst, const void* map, uint64_t* bar, int c0,
                                            int c1, int c2) {
#if BLUBLAS_SM90A_ENABLED
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#endif
}

// TMA store of the box at (c0, c1[, c2]) from smem src (bulk async-group of the issuing thread).
__device__ __forceinline__ void tma_store_2d(const void* map, const void* src, int c0, int c1) {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(smem_u32(src)), "r"(c0), "r"(c1)
               : "memory");
#endif
}
__device__ __forceinline__ void tma_store_3d(const void* map, const void* src, int c0, int c1,
                                             int c2) {
#if BLUBLAS_SM90A_ENABLED
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
          reinterpret_cast<uint64_t>(map)),
      "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#endif
}
__device__ __forceinline__ void bulk_commit() {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#endif
}
// Waits until at most N bulk groups of this thread still read their shared-memory source.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
#endif
}
// Waits until at most N bulk groups of this thread are incomplete (writes done).
template <int N>
__device__ __forceinline__ void bulk_wait() {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// ---- clusters ------------------------------------------------------------------------------------
// All threads of all CTAs of the cluster (release / acquire).
__device__ __forceinline__ void cluster_sync() {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
#endif
}

// Arrives on the mbarrier at the same shared-memory offset as `bar` in cluster CTA `rank`.
// Note [Cluster arrive scope]: the default semantics (release at CTA scope), not
// .release.cluster. The consumers arrive here to free a stage whose reads (wgmma, async proxy)
// wait_group has already completed, so there is nothing for a cluster-scope release to order;
// and .release.cluster made every arrive a cluster-wide memory barrier: ncu of the 128x256
// cluster tile on the GPT-2 qkv forward (H200, session 28) showed 6.2 "membar" stalls per issued
// instruction, the largest reason, and the kernel at 0.63 of cuBLAS (the same tile without
// clusters ~0.9).
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t rank) {
#if BLUBLAS_SM90A_ENABLED
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_u32(bar)), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
#endif
}

// TMA load multicast to the CTAs of cta_mask: the box lands at the same offset `dst` in each,
// and completes its bytes on the mbarrier at the same offset `bar` in each.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const void* map, uint64_t* bar,
                                                      int c0, int c1, uint16_t cta_mask) {
#if BLUBLAS_SM90A_ENABLED
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
#endif
}
__device__ __forceinline__ void tma_load_3d_multicast(void* dst, const void* map, uint64_t* bar,
                                                      int c0, int c1, int c2, uint16_t cta_mask) {
#if BLUBLAS_SM90A_ENABLED
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2),
      "h"(cta_mask)
      : "memory");
#endif
}

// ---- wgmma ordering -----------------------------------------------------------------------------
__device__ __forceinline__ void wgmma_fence() {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#endif
}

// Keeps the compiler from moving accumulator reads/writes across wgmma fences and waits.
template <int N>
__device__ __forceinline__ void fence_accumulators(float (&acc)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(acc[i])::"memory");
}

// ---- descriptors -------------------------------------------------------------------------------
// See Note [wgmma shared-memory descriptors with 128-byte swizzle].
// The descriptor of base + off. The address field is (base & 0x3FFFF) >> 4 plus off >> 4 (the
// same as ((base + off) & 0x3FFFF) >> 4: shared memory stays inside the 256 KB the field covers,
// and base and off are multiples of 16), so the compiler computes the tile's word once and each
// k-slice costs one add. Rebuilding every descriptor from base + off (mask, shift, or, and the
// high word) took ~8 uniform-datapath instructions per wgmma, issued by the same schedulers as
// the math (Note [sm90 flash backward: instructions per block]).
__device__ __forceinline__ uint64_t make_desc_sw128(uint32_t base, uint32_t off, uint32_t lbo_bytes,
                                                    uint32_t sbo_bytes) {
  const uint32_t lo = ((base & 0x3FFFF) >> 4) | (((lbo_bytes >> 4) & 0x3FFF) << 16);
  const uint32_t hi = ((sbo_bytes >> 4) & 0x3FFF) | (1u << 30);  // 128-byte swizzle (bit 62)
  return (static_cast<uint64_t>(hi) << 32) | (lo + (off >> 4));
}

// ---- register reallocation ---------------------------------------------------------------------
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
#endif
}

}  // namespace blublas::gemm_detail::sm90
