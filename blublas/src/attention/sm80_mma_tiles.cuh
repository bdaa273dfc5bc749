// sm80_mma_tiles.cuh: the warp-level building blocks of the mma.sync attention kernels: cp.async
// tile loads into XOR-swizzled shared memory, ldmatrix fragment loads, and two warp GEMMs that
// every forward and backward product is made of:
//   warp_gemm_nt:   acc (16*kMT x N)  += A (rows of a [row][kD] tile) * B^T (rows of a [row][kD]
//   tile) warp_gemm_cA_tB acc (16*kMT x kD) += P (an accumulator, reused in registers as the A
//   operand)
//                                        * B (a [k][kD] tile: the n index is contiguous)
// Two element types share the code: bf16 (mma m16n8k16) and fp32 stored, tf32 computed (mma
// m16n8k8 on operands rounded with cvt.rna.tf32).
//
// Note [Swizzled attention tiles]
// Every tile is [rows][kD] with kD in {64, 128}, stored in 16-byte chunks with the chunk index
// XOR-ed with (row % 8). The eight row addresses of one 8x8 ldmatrix (eight rows, one logical
// chunk) then land in eight different bank groups, and cp.async writes whole chunks, so loads and
// fragment reads are conflict-free without padding. The tf32 B-transposed operand has no ldmatrix
// form (ldmatrix.trans moves 16-bit elements) and is read with scalar loads (2-way conflicts).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "common/arch.cuh"

namespace blublas::attn::sm80 {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte cp.async; zero-fills the destination when !valid (src is then never read).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(smem))
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(smem))
               : "memory");
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t to_tf32(uint32_t bits) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(bits)));
  return r;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Note [split-tf32 tag]: tf32x3 is an element *tag*, not a storage type: tiles are fp32 in
// memory (Store<tf32x3> = float) and only the mma differs (three tf32 products per k-step).
struct tf32x3 {};
template <typename E>
struct StoreOf {
  using type = E;
};
template <>
struct StoreOf<tf32x3> {
  using type = float;
};
template <typename E>
using Store = typename StoreOf<E>::type;

// Element offset of (row, 16-byte chunk) in a swizzled [rows][kD] tile of Elem.
template <typename Elem, int kD>
struct Tile {
  static constexpr int kChunkElems = 16 / static_cast<int>(sizeof(Store<Elem>));
  static constexpr int kChunksPerRow = kD / kChunkElems;
  static_assert(kChunksPerRow % 8 == 0, "rows must hold a multiple of 8 chunks");
  __device__ __forceinline__ static int offset(int row, int chunk) {
    return row * kD + ((chunk ^ (row & 7)) * kChunkElems);
  }
};

// Asynchronously copies rows [0, kRows) of a [rows][kD] global tile (row stride in elements) into
// a swizzled shared tile; rows >= rows_valid are zero-filled.
template <typename Elem, int kD, int kRows, int kThreads>
__device__ __forceinline__ void load_tile_async(Store<Elem>* s, const Store<Elem>* g,
                                                int64_t row_stride, int rows_valid, int tid) {
  using T = Tile<Elem, kD>;
  constexpr int kTotal = kRows * T::kChunksPerRow;
#pragma unroll
  for (int c0 = 0; c0 < kTotal; c0 += kThreads) {
    const int c = c0 + tid;
    if (kTotal % kThreads == 0 || c < kTotal) {
      const int r = c / T::kChunksPerRow;
      const int ch = c % T::kChunksPerRow;
      const bool valid = r < rows_valid;
      const Store<Elem>* src =
          valid ? g + static_cast<int64_t>(r) * row_stride + ch * T::kChunkElems : g;
      cp_async16(s + T::offset(r, ch), src, valid);
    }
  }
}

// ---- per-type mma and fragment loads -------------------------------------------------------
template <typename Elem>
struct Mma;

template <>
struct Mma<bf16> {
  static constexpr int kK = 16;
  __device__ __forceinline__ static void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  // A fragment of rows [r0, r0+16), k-step ks of a row-major tile.
  template <int kD>
  __device__ __forceinline__ static void load_a(uint32_t (&a)[4], const bf16* s, int r0, int ks,
                                                int lane) {
    ldsm_x4(a, s + Tile<bf16, kD>::offset(r0 + (lane & 15), 2 * ks + (lane >> 4)));
  }
  // B fragments of two n-tiles [n0, n0+16) from a tile stored [n][k]; b[0..1]: n-tile 0.
  template <int kD>
  __device__ __forceinline__ static void load_b_pair(uint32_t (&b)[4], const bf16* s, int n0,
                                                     int ks, int lane) {
    ldsm_x4(b, s + Tile<bf16, kD>::offset(n0 + (lane & 7) + ((lane >> 4) << 3),
                                          2 * ks + ((lane >> 3) & 1)));
  }
  // B fragments of two n-tiles (columns [n0, n0+16)) from a tile stored [k][n], k rows from k0.
  template <int kD>
  __device__ __forceinline__ static void load_bt_pair(uint32_t (&b)[4], const bf16* s, int k0,
                                                      int n0, int lane) {
    ldsm_x4_trans(b, s + Tile<bf16, kD>::offset(k0 + (lane & 15), (n0 >> 3) + (lane >> 4)));
  }
  // A fragment for k-step kk from accumulator n-tiles (2kk, 2kk+1), rounded to bf16.
  template <int kPN>
  __device__ __forceinline__ static void c_to_a(uint32_t (&a)[4], const float (&c)[kPN][4], int kk,
                                                int /*lane*/) {
    a[0] = pack_bf16(c[2 * kk][0], c[2 * kk][1]);
    a[1] = pack_bf16(c[2 * kk][2], c[2 * kk][3]);
    a[2] = pack_bf16(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[3] = pack_bf16(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
};

// Note [3xTF32 split]: with kSplit the fragments keep raw fp32 bits and mma() splits each operand
// x = big + small (big = tf32(x), small = tf32(x - big), x - big exact in fp32) and accumulates
// small_a*big_b + big_a*small_b + big_a*big_b (small terms first); the dropped small*small term
// and the tf32 rounding of `small` leave ~2^-21 relative error per product: fp32 level.
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void split_tf32(uint32_t x, uint32_t& big, uint32_t& small) {
  big = to_tf32(x);
  small = to_tf32(__float_as_uint(__uint_as_float(x) - __uint_as_float(big)));
}

template <bool kSplit>
struct MmaF32 {
  static constexpr int kK = 8;
  __device__ __forceinline__ static uint32_t cvt(uint32_t x) { return kSplit ? x : to_tf32(x); }
  __device__ __forceinline__ static void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    if constexpr (kSplit) {
      uint32_t ab[4], as[4], b0b, b0s, b1b, b1s;
#pragma unroll
      for (int i = 0; i < 4; ++i) split_tf32(a[i], ab[i], as[i]);
      split_tf32(b0, b0b, b0s);
      split_tf32(b1, b1b, b1s);
      mma_tf32(c, as, b0b, b1b);
      mma_tf32(c, ab, b0s, b1s);
      mma_tf32(c, ab, b0b, b1b);
    } else {
      mma_tf32(c, a, b0, b1);
    }
  }
  // ldmatrix on 32-bit data: an 8x8 b16 matrix is an 8x4 fp32 block, thread l gets (l/4, l%4),
  // which is exactly the tf32 A/B fragment element.
  template <int kD>
  __device__ __forceinline__ static void load_a(uint32_t (&a)[4], const float* s, int r0, int ks,
                                                int lane) {
    ldsm_x4(a, s + Tile<float, kD>::offset(r0 + (lane & 15), 2 * ks + (lane >> 4)));
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = cvt(a[i]);
  }
  template <int kD>
  __device__ __forceinline__ static void load_b_pair(uint32_t (&b)[4], const float* s, int n0,
                                                     int ks, int lane) {
    ldsm_x4(b, s + Tile<float, kD>::offset(n0 + (lane & 7) + ((lane >> 4) << 3),
                                           2 * ks + ((lane >> 3) & 1)));
#pragma unroll
    for (int i = 0; i < 4; ++i) b[i] = cvt(b[i]);
  }
  // b0 = B[k0 + t][n + g], b1 = B[k0 + t + 4][n + g] for n = n0 and n0 + 8 (scalar loads).
  template <int kD>
  __device__ __forceinline__ static void load_bt_pair(uint32_t (&b)[4], const float* s, int k0,
                                                      int n0, int lane) {
    using T = Tile<float, kD>;
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int n = n0 + 8 * half + g;
      const int ch = n >> 2, w = n & 3;
      b[2 * half + 0] = cvt(__float_as_uint(s[T::offset(k0 + t, ch) + w]));
      b[2 * half + 1] = cvt(__float_as_uint(s[T::offset(k0 + t + 4, ch) + w]));
    }
  }
  // tf32 A (m16n8k8): a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4]; the
  // accumulator holds (g, 2t'), (g, 2t'+1), (g+8, 2t'), (g+8, 2t'+1): re-distributed in the quad.
  template <int kPN>
  __device__ __forceinline__ static void c_to_a(uint32_t (&a)[4], const float (&c)[kPN][4], int kk,
                                                int lane) {
    const int t = lane & 3;
    const int src0 = (lane & ~3) | (t >> 1);
    const int src1 = src0 + 2;
    const bool odd = (t & 1) != 0;
    const float* cc = c[kk];
    const float x0 = __shfl_sync(0xffffffffu, cc[0], src0);
    const float x1 = __shfl_sync(0xffffffffu, cc[1], src0);
    const float y0 = __shfl_sync(0xffffffffu, cc[2], src0);
    const float y1 = __shfl_sync(0xffffffffu, cc[3], src0);
    const float z0 = __shfl_sync(0xffffffffu, cc[0], src1);
    const float z1 = __shfl_sync(0xffffffffu, cc[1], src1);
    const float w0 = __shfl_sync(0xffffffffu, cc[2], src1);
    const float w1 = __shfl_sync(0xffffffffu, cc[3], src1);
    a[0] = cvt(__float_as_uint(odd ? x1 : x0));
    a[1] = cvt(__float_as_uint(odd ? y1 : y0));
    a[2] = cvt(__float_as_uint(odd ? z1 : z0));
    a[3] = cvt(__float_as_uint(odd ? w1 : w0));
  }
};
template <>
struct Mma<float> : MmaF32<false> {};
template <>
struct Mma<tf32x3> : MmaF32<true> {};

// ---- warp GEMMs ------------------------------------------------------------------------------
// acc[mt][nt] += A[a_row0 + 16 mt + (0..15)][:] . B[b_row0 + 8 nt + (0..7)][:]  over k = 0..kD.
template <typename Elem, int kD, int kMT, int kNT>
__device__ __forceinline__ void warp_gemm_nt(float (&acc)[kMT][kNT][4], const Store<Elem>* sA,
                                             int a_row0, const Store<Elem>* sB, int b_row0,
                                             int lane) {
  using M = Mma<Elem>;
  static_assert(kNT % 2 == 0, "n-tiles come in pairs");
#pragma unroll
  for (int ks = 0; ks < kD / M::kK; ++ks) {
    uint32_t a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) M::template load_a<kD>(a[mt], sA, a_row0 + 16 * mt, ks, lane);
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      uint32_t b[4];
      M::template load_b_pair<kD>(b, sB, b_row0 + 16 * np, ks, lane);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        M::mma(acc[mt][2 * np], a[mt], b[0], b[1]);
        M::mma(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// All A fragments of rows [a_row0, a_row0 + 16*kMT) of a [row][kD] tile, for operands that stay
// in registers across many products (Q in the forward, K and V in the dK/dV pass).
template <typename Elem, int kD, int kMT>
__device__ __forceinline__ void load_a_frags(uint32_t (&a)[kMT][kD / Mma<Elem>::kK][4],
                                             const Store<Elem>* sA, int a_row0, int lane) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int ks = 0; ks < kD / Mma<Elem>::kK; ++ks)
      Mma<Elem>::template load_a<kD>(a[mt][ks], sA, a_row0 + 16 * mt, ks, lane);
}

// As warp_gemm_nt with the A operand already in registers (load_a_frags).
template <typename Elem, int kD, int kMT, int kNT>
__device__ __forceinline__ void warp_gemm_nt_ra(float (&acc)[kMT][kNT][4],
                                                const uint32_t (&a)[kMT][kD / Mma<Elem>::kK][4],
                                                const Store<Elem>* sB, int b_row0, int lane) {
  using M = Mma<Elem>;
  static_assert(kNT % 2 == 0, "n-tiles come in pairs");
#pragma unroll
  for (int ks = 0; ks < kD / M::kK; ++ks) {
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      uint32_t b[4];
      M::template load_b_pair<kD>(b, sB, b_row0 + 16 * np, ks, lane);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        M::mma(acc[mt][2 * np], a[mt][ks], b[0], b[1]);
        M::mma(acc[mt][2 * np + 1], a[mt][ks], b[2], b[3]);
      }
    }
  }
}

// acc[mt][nt] (16 x kD per mt) += P[mt] (16 x 8*kPN, accumulator layout) . B[b_row0 + k][:]
// where B is a [k][kD] tile (the output column index is B's contiguous index).
template <typename Elem, int kD, int kMT, int kPN>
__device__ __forceinline__ void warp_gemm_cA_tB(float (&acc)[kMT][kD / 8][4],
                                                const float (&pc)[kMT][kPN][4],
                                                const Store<Elem>* sB, int b_row0, int lane) {
  using M = Mma<Elem>;
  constexpr int kKSteps = kPN * 8 / M::kK;
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    uint32_t a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) M::template c_to_a<kPN>(a[mt], pc[mt], kk, lane);
#pragma unroll
    for (int np = 0; np < kD / 16; ++np) {
      uint32_t b[4];
      M::template load_bt_pair<kD>(b, sB, b_row0 + kk * M::kK, 16 * np, lane);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        M::mma(acc[mt][2 * np], a[mt], b[0], b[1]);
        M::mma(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// Stores accumulator rows (warp rows row0 + 16 mt + {g, g+8}) of a kNT*8-wide tile to a global
// [rows][...] view with row stride `row_stride`, multiplied by `mul`; rows >= rows_valid skipped.
template <typename Elem, int kMT, int kNT>
__device__ __forceinline__ void store_acc(const float (&acc)[kMT][kNT][4], Store<Elem>* g,
                                          int64_t row_stride, int row0, int rows_valid, float mul,
                                          int lane) {
  const int gr = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = row0 + 16 * mt + gr + 8 * hr;
      if (r >= rows_valid) continue;
      Store<Elem>* dst = g + static_cast<int64_t>(r) * row_stride + 2 * t;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const float x = acc[mt][nt][2 * hr] * mul, y = acc[mt][nt][2 * hr + 1] * mul;
        if constexpr (sizeof(Store<Elem>) == 2) {
          *reinterpret_cast<__nv_bfloat162*>(dst + 8 * nt) = __floats2bfloat162_rn(x, y);
        } else {
          *reinterpret_cast<float2*>(dst + 8 * nt) = make_float2(x, y);
        }
      }
    }
  }
}

template <int kMT, int kNT>
__device__ __forceinline__ void zero_acc(float (&acc)[kMT][kNT][4]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
}

}  // namespace blublas::attn::sm80
