// sm90_attn_primitives.cuh (internal, device side): the sm_90a instructions the wgmma attention
// kernels need beyond gemm/sm90_primitives.cuh and gemm/sm90_wgmma_ops.cuh (whose WgmmaRegA takes
// P and dS from registers as the A of O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K): a 4-D TMA load
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
#include "gemm/sm90_wgmma_ops.cuh"

namespace blublas::attn::sm90 {

// Two floats to a bf16x2 register (lo in the low half: the lower column).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// 2^x on the MUFU (flushes results under 2^-126 to 0).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Note [sm90 forward: exponentials on two pipes]
// At d = 64 a key block costs the tensor cores 2 * 2 * 64 * kBc * 64 FLOPs per warpgroup, 4096 a
// clock per SM: 512 clocks for two warpgroups and 64 keys; its 8192 exponentials take the MUFU
// (16 a clock per SM) the same 512 clocks. Only a perfect overlap of the two pipes reaches the
// tensor peak, and the MUFU has no slack for anything else. The FMA pipe (128 lanes a clock)
// carries ~2.5 FP32 operations per score (scale, row sum, rescale), a quarter of its time. So one
// column pair in kFmaExpEvery computes 2^x there (FlashAttention-4 does the same on Blackwell):
// x = j + f with j = floor(x) from a round-down add of 1.5 * 2^23 (j lands in the low mantissa
// bits), 2^f by a degree-3 polynomial (relative error <= 8.6e-5, far under bf16's 2^-9 rounding
// of P; p(0) = 1 exactly, as the MUFU gives on the diagonal), 2^j assembled in an exponent field
// and applied by one multiply: NaN stays NaN (max.NaN), x < -126 gives 0 as ex2.approx.ftz does.
// Seven FMA-pipe operations replace one MUFU one; at 1 in 4 the MUFU does 3/4 of its work and the
// FMA pipe gains 2048 * 7 / 128 = 112 clocks a block.
// Measured (session 33, H200, bench/exp2_bench.cu): the MUFU gives 16 results a clock per SM,
// this function alone 13.2 (9 instructions: issue-bound), mixes 1/4 .. 1/2 about 21. The packed
// ex2.approx.f16x2 / .ftz.bf16x2 give 16 results a clock: two MUFU slots each, no gain. In the
// forward (tile sweep at GPT-2, d48 and T = 16384 shapes) 1 in 4 or 1 in 3 made it 9-13% slower
// and 1 in 8 (bc128) equal at T = 1024 and +2.8% at T = 16384: the kernel is not MUFU-bound
// (ncu: issue 0.5 per scheduler, stalls on wgmma waits and barriers); 1 in 8 is the default.
__device__ __forceinline__ float ex2_fma(float x) {
  float xc;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(xc) : "f"(x), "f"(-127.0f));
  const float t = __fadd_rd(xc, 12582912.0f);  // 1.5 * 2^23 + floor(xc), exact
  const float f = xc - (t - 12582912.0f);       // [0, 1)
  const float p = fmaf(fmaf(fmaf(0.07706717f, f, 0.22764485f), f, 0.69511682f), f, 1.0f);
  // bits(t) = bits(1.5 * 2^23) + j and bits(1.5 * 2^23) << 23 == 0 (mod 2^32): (bits(t) << 23)
  // is j << 23; + 127 << 23 makes 2^j (+0 for j = -127).
  const uint32_t j_bits = static_cast<uint32_t>(__float_as_int(t)) << 23;
  return p * __int_as_float(static_cast<int>(j_bits + 0x3f800000u));
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

// A fragments of rows [r0, r0 + 64) of a panel-major, 128B-swizzled tile of kRowsTile rows (K-major
// over kD): fragment (ks, r) of this thread holds row r0 + 16 warp + g + 8 (r & 1), columns
// 16 ks + 8 (r >> 1) + 2 quad + {0, 1} (the layout acc_to_a_frags produces).
template <int kD, int kRowsTile>
__device__ __forceinline__ void load_a_frags_sw128(uint32_t (&f)[kD / 16][4], const uint8_t* tile,
                                             int r0, int warp, int lane) {
  const int g = lane / 4, quad = lane % 4;
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = r0 + 16 * warp + g + 8 * (r & 1);
      const int col = 16 * ks + 8 * (r >> 1) + 2 * quad;
      f[ks][r] = *reinterpret_cast<const uint32_t*>(tile + (col / 64) * kRowsTile * 128 + row * 128 +
                                                    ((((col % 64) >> 3) ^ (row & 7)) << 4) +
                                                    (col & 7) * 2);
    }
}

// Register A fragments that wgmmas of every loop iteration read (load_a_frags_sw128's resident
// operands, kept across iterations): ptxas (CUDA 13.0) treats such a fragment as dead once the
// wgmma that read it has retired, when nothing but wgmmas reads it, and gives its registers to
// other values inside the loop. Session 34's SASS of the backward: S = Q K^T read R136.. (the Q
// fragments, loaded once before the loop), then the dS fragments were packed into R136.. for dQ
// += dS K, with no reload, so from the second block on S used dS: wrong dQ / dK / dV. Empty asm
// fences (CUTLASS's fence_operand) emit no PTX and did not change that. refresh_frags adds an
// opaque zero (a value ptxas cannot fold; the callers pass uint32_t(T) >> 31) to every register
// at the bottom of each iteration: an ordinary ALU use that keeps the fragments alive through the
// iteration and redefines them for the next one (kN * 4 IADDs an iteration).
template <int kN>
__device__ __forceinline__ void refresh_frags(uint32_t (&f)[kN][4], uint32_t zero) {
#pragma unroll
  for (int i = 0; i < kN; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r) asm volatile("add.u32 %0, %0, %1;" : "+r"(f[i][r]) : "r"(zero));
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

// wgmma with A from registers: generated with the other wgmma wrappers (gemm/sm90_wgmma_ops.cuh).
using gemm_detail::sm90::WgmmaRegA;

}  // namespace blublas::attn::sm90
