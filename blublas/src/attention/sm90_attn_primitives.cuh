// sm90_attn_primitives.cuh (internal, device side): the sm_90a instructions the wgmma attention
// kernels need beyond gemm/sm90_primitives.cuh: wgmma with the A operand in registers (P and dS
// stay in registers as the A of O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K), a 4-D TMA load
// (the [B, T, H, d] views are 4-D tensor maps, so rows past T of one (b, h) are zero-filled and
// never read the next head), named barriers and the accumulator -> A-fragment repacking. Bodies
// are guarded by BLUBLAS_SM90A_ENABLED so the file also compiles for sm_80.
//
// Note [wgmma accumulator == register A fragment]
// The fp32 accumulator of an m64nN wgmma gives thread t of the warpgroup rows 16*(t/32) + g and
// +8 (g = (t%32)/4), columns 8*j + 2*(t%4) + {0,1} in registers 4*j + 2*half + {0,1}. The A
// operand of an m64k16 wgmma from registers wants, per warp, the mma.sync m16n8k16 A layout:
// a0 = (row g, cols 2q..2q+1), a1 = (row g+8, same cols), a2 = (row g, cols 2q+8..), a3 = (row
// g+8, cols 2q+8..), q = t%4. So k-slice kk of a bf16 P (columns 16kk..16kk+15) is
// a = {pack(acc[8kk+0..1]), pack(acc[8kk+2..3]), pack(acc[8kk+4..5]), pack(acc[8kk+6..7])}:
// no shuffles, no shared memory.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "common/arch.cuh"

namespace blublas::attn::sm90 {

// Two floats to a bf16x2 register (lo in the low half: the lower column).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Repacks an m64nN fp32 accumulator (N/2 registers) into N/16 k16 A fragments of bf16
// (Note [wgmma accumulator == register A fragment]).
template <int kN>
__device__ __forceinline__ void acc_to_a_frags(const float (&acc)[kN / 2], uint32_t (&a)[kN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kN / 16; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) a[kk][r] = pack_bf16(acc[8 * kk + 2 * r], acc[8 * kk + 2 * r + 1]);
  }
}

// 4-D TMA tiled load of the box at (c0, c1, c2, c3) (innermost first), completing on *bar.
__device__ __forceinline__ void tma_load_4d(void* dst, const void* map, uint64_t* bar, int c0,
                                            int c1, int c2, int c3) {
#if BLUBLAS_SM90A_ENABLED
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(
          static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
      "l"(reinterpret_cast<uint64_t>(map)),
      "r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar))), "r"(c0), "r"(c1), "r"(c2),
      "r"(c3)
      : "memory");
#else
  (void)dst; (void)map; (void)bar; (void)c0; (void)c1; (void)c2; (void)c3;
#endif
}

// Barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32).
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
#if BLUBLAS_SM80_ENABLED
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
#endif
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
#if BLUBLAS_SM80_ENABLED
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
#endif
}

// wgmma m64nNk16, bf16 inputs, fp32 accumulation, A (4 x bf16x2 registers) from registers, B
// from a shared-memory descriptor (kTransB = 1: B is MN-major). scale_d = 0 overwrites d.
template <int N>
struct WgmmaRegA;

template <>
struct WgmmaRegA<64> {
  template <int kTransB>
  static __device__ __forceinline__ void mma(float (&d)[32], const uint32_t (&a)[4],
                                             uint64_t desc_b, int scale_d) {
#if BLUBLAS_SM90A_ENABLED
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB));
#else
    (void)d; (void)a; (void)desc_b; (void)scale_d;
#endif
  }
};

template <>
struct WgmmaRegA<128> {
  template <int kTransB>
  static __device__ __forceinline__ void mma(float (&d)[64], const uint32_t (&a)[4],
                                             uint64_t desc_b, int scale_d) {
#if BLUBLAS_SM90A_ENABLED
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB));
#else
    (void)d; (void)a; (void)desc_b; (void)scale_d;
#endif
  }
};

}  // namespace blublas::attn::sm90
