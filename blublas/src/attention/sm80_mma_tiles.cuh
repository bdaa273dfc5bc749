// sm80_mma_tiles.cuh: the warp-level building blocks of the mma.sync attention kernels: cp.async
// tile loads into XOR-swizzled shared memory, ldmatrix fragment loads, and two warp GEMMs that
// every forward and backward product is made of:
//   warp_gemm_nt:   acc (16*kMT x N)  += A (rows of a [row][kD] tile) * B^T (rows of a [row][kD]
//   tile) warp_gemm_cA_tB acc (16*kMT x kD) += P (an accumulator, reused in registers as the A
//   operand)
//                                        * B (a [k][kD] tile: the n index is contiguous)
// Two element types share the code: bf16 (mma m16n8k16) and fp32 stored, tf32 computed (mma
// m16n8k8 on operands rounded as cvt.rna.tf32 does: Note [tf32 rounding by integer add]).
//
// Note [Swizzled attention tiles]
// Every tile is [rows][kD] with kD in {64, 128}, stored in 16-byte chunks with the chunk index
// XOR-ed with (row % 8). The eight row addresses of one 8x8 ldmatrix (eight rows, one logical
// chunk) then land in eight different bank groups, and cp.async writes whole chunks, so loads and
// fragment reads are conflict-free without padding. The tf32 B-transposed operand has no ldmatrix
// form (ldmatrix.trans moves 16-bit elements) and is read with scalar loads (2-way conflicts).
#pragma once

#include <type_traits>

#include <cuda_bf16.h>

#include <cstdint>
#include <cstdlib>

#include "common/arch.cuh"
#include "common/tf32_round.h"

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

// cvt.rna.tf32.f32 as two instructions (Note [tf32 rounding by integer add]).
__device__ __forceinline__ uint32_t to_tf32(uint32_t bits) { return detail::tf32_rna_bits(bits); }

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

// Every Mma<E> gives: kK (k per mma), kAW / kBW (32-bit words in an A fragment / in the B
// fragments of a pair of n-tiles), the fragment loads and mma_b<kHalf>(c, a, b), the product with
// n-tile kHalf of a B pair.
template <>
struct Mma<bf16> {
  static constexpr int kK = 16;
  static constexpr int kAW = 4, kBW = 4;
  template <int kHalf>
  __device__ __forceinline__ static void mma_b(float (&c)[4], const uint32_t (&a)[4],
                                               const uint32_t (&b)[4]) {
    mma(c, a, b[2 * kHalf], b[2 * kHalf + 1]);
  }
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
  // load_bt_pair in the k order c_to_a gives (Note [Permuted k8 keys]): for bf16 the natural one.
  template <int kD>
  __device__ __forceinline__ static void load_bt_pair_kperm(uint32_t (&b)[4], const bf16* s, int k0,
                                                            int n0, int lane) {
    load_bt_pair<kD>(b, s, k0, n0, lane);
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

// Note [3xTF32 split]: with kSplit every fragment is split once, where it is loaded, into
// x = big + small (big = tf32(x), small = tf32(x - big), x - big exact in fp32): words [0, 4) of
// an 8-word fragment hold big, [4, 8) small. mma_b() accumulates small_a*big_b + big_a*small_b +
// big_a*big_b (small terms first); the dropped small*small term and the tf32 rounding of `small`
// leave ~2^-21 relative error per product: fp32 level. Splitting at the load, not inside every
// mma (session 6), takes the forward from 1536 cvt + 768 sub per key block (each A fragment
// re-split for each of the 8 n-tiles) to ~640 + 320, and shrinks the loop the instruction cache
// must hold: Nsight Compute (H200) showed the 3xTF32 kernels issuing in 44% of cycles, ~42% of
// the warps' stall cycles waiting for an instruction fetch.
__device__ __forceinline__ void mma_tf32(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void split_tf32(uint32_t x, uint32_t& big, uint32_t& small) {
  big = to_tf32(x);
  small = to_tf32(__float_as_uint(__uint_as_float(x) - __uint_as_float(big)));
}

template <bool kSplit>
struct MmaF32 {
  static constexpr int kK = 8;
  static constexpr int kAW = kSplit ? 8 : 4, kBW = kSplit ? 8 : 4;
  // Raw fp32 words -> a fragment of kW words (tf32, or big/small halves).
  template <int kW>
  __device__ __forceinline__ static void from_raw(uint32_t (&f)[kW], const uint32_t (&raw)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (kSplit) {
        split_tf32(raw[i], f[i], f[4 + i]);
      } else {
        f[i] = to_tf32(raw[i]);
      }
    }
  }
  template <int kHalf>
  __device__ __forceinline__ static void mma_b(float (&c)[4], const uint32_t (&a)[kAW],
                                               const uint32_t (&b)[kBW]) {
    constexpr int j = 2 * kHalf;
    if constexpr (kSplit) {
      mma_tf32(c, a[4], a[5], a[6], a[7], b[j], b[j + 1]);      // small_a * big_b
      mma_tf32(c, a[0], a[1], a[2], a[3], b[4 + j], b[5 + j]);  // big_a * small_b
      mma_tf32(c, a[0], a[1], a[2], a[3], b[j], b[j + 1]);      // big_a * big_b
    } else {
      mma_tf32(c, a[0], a[1], a[2], a[3], b[j], b[j + 1]);
    }
  }
  // ldmatrix on 32-bit data: an 8x8 b16 matrix is an 8x4 fp32 block, thread l gets (l/4, l%4),
  // which is exactly the tf32 A/B fragment element.
  template <int kD>
  __device__ __forceinline__ static void load_a(uint32_t (&a)[kAW], const float* s, int r0, int ks,
                                                int lane) {
    uint32_t raw[4];
    ldsm_x4(raw, s + Tile<float, kD>::offset(r0 + (lane & 15), 2 * ks + (lane >> 4)));
    from_raw(a, raw);
  }
  template <int kD>
  __device__ __forceinline__ static void load_b_pair(uint32_t (&b)[kBW], const float* s, int n0,
                                                     int ks, int lane) {
    uint32_t raw[4];
    ldsm_x4(raw, s + Tile<float, kD>::offset(n0 + (lane & 7) + ((lane >> 4) << 3),
                                             2 * ks + ((lane >> 3) & 1)));
    from_raw(b, raw);
  }
  // raw[2h] = B[k0 + t][n + g], raw[2h+1] = B[k0 + t + 4][n + g] for n = n0 + 8h (scalar loads);
  // with kPerm rows k0 + 2t and k0 + 2t + 1 instead (Note [Permuted k8 keys]).
  template <int kD, bool kPerm = false>
  __device__ __forceinline__ static void load_bt_pair(uint32_t (&b)[kBW], const float* s, int k0,
                                                      int n0, int lane) {
    using T = Tile<float, kD>;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = kPerm ? k0 + 2 * t : k0 + t, row1 = kPerm ? k0 + 2 * t + 1 : k0 + t + 4;
    uint32_t raw[4];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int n = n0 + 8 * half + g;
      const int ch = n >> 2, w = n & 3;
      raw[2 * half + 0] = __float_as_uint(s[T::offset(row0, ch) + w]);
      raw[2 * half + 1] = __float_as_uint(s[T::offset(row1, ch) + w]);
    }
    from_raw(b, raw);
  }
  // Note [Permuted k8 keys]
  // The tf32 A fragment (m16n8k8) is a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 =
  // A[g+8][t+4], while an accumulator n-tile gives thread (g, t) columns 2t and 2t+1 of rows g
  // and g+8. Re-distributing them inside the quad took 8 shuffles and 4 selects per k-step. But
  // the k index of these products (P V, dS K, P^T dO, dS^T Q) is summed over, so its order inside
  // a k-step is free as long as A and B agree: c_to_a takes logical k = t from column 2t and
  // k = t + 4 from column 2t + 1 (no shuffle), and load_bt_pair_kperm reads B's rows k0 + 2t and
  // k0 + 2t + 1 for the same two logical k. The scalar B reads also lose their 2-way bank conflict:
  // rows k0 + {0, 2, 4, 6} (then {1, 3, 5, 7}) XOR-swizzle the two chunks of a lane's pair into
  // eight different bank groups. The products equal the unpermuted ones up to the order of the
  // additions inside one mma.
  template <int kPN>
  __device__ __forceinline__ static void c_to_a(uint32_t (&a)[kAW], const float (&c)[kPN][4],
                                                int kk, int /*lane*/) {
    const float* cc = c[kk];
    const uint32_t raw[4] = {__float_as_uint(cc[0]), __float_as_uint(cc[2]), __float_as_uint(cc[1]),
                             __float_as_uint(cc[3])};
    from_raw(a, raw);
  }
  // The B of c_to_a's k order: rows k0 + 2t and k0 + 2t + 1 (Note [Permuted k8 keys]).
  template <int kD>
  __device__ __forceinline__ static void load_bt_pair_kperm(uint32_t (&b)[kBW], const float* s,
                                                            int k0, int n0, int lane) {
    load_bt_pair<kD, true>(b, s, k0, n0, lane);
  }
  // load_b_pair / load_bt_pair_kperm from a pre-split tile (Note [Pre-split tiles]): s holds the
  // big halves, s + kLo the small ones, at the same swizzled offsets; nothing to split.
  template <int kD, int kLo>
  __device__ __forceinline__ static void load_b_pair_pre(uint32_t (&b)[kBW], const float* s, int n0,
                                                         int ks, int lane) {
    static_assert(kSplit && kLo > 0, "pre-split tiles are 3xTF32 only");
    const float* p = s + Tile<float, kD>::offset(n0 + (lane & 7) + ((lane >> 4) << 3),
                                                 2 * ks + ((lane >> 3) & 1));
    uint32_t big[4], small[4];
    ldsm_x4(big, p);
    ldsm_x4(small, p + kLo);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      b[i] = big[i];
      b[4 + i] = small[i];
    }
  }
  // From a fragment-major pre-split tile (kFragB, Note [Pre-split tiles]): the lane's 4 words
  // of k-step k0 / 8 and n-tile pair n0 / 16 are contiguous (one LDS.128 each for big and small).
  template <int kD, int kLo>
  __device__ __forceinline__ static void load_bt_pair_kperm_frag(uint32_t (&b)[kBW], const float* s,
                                                                 int k0, int n0, int lane) {
    static_assert(kSplit && kLo > 0, "pre-split tiles are 3xTF32 only");
    const int i = (((k0 >> 3) * (kD / 16) + (n0 >> 4)) * 32 + lane) * 4;
    const uint4 big = *reinterpret_cast<const uint4*>(s + i);
    const uint4 small = *reinterpret_cast<const uint4*>(s + i + kLo);
    b[0] = big.x, b[1] = big.y, b[2] = big.z, b[3] = big.w;
    b[4] = small.x, b[5] = small.y, b[6] = small.z, b[7] = small.w;
  }
  template <int kD, int kLo>
  __device__ __forceinline__ static void load_bt_pair_kperm_pre(uint32_t (&b)[kBW], const float* s,
                                                                int k0, int n0, int lane) {
    static_assert(kSplit && kLo > 0, "pre-split tiles are 3xTF32 only");
    using T = Tile<float, kD>;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = k0 + 2 * t, row1 = row0 + 1;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int n = n0 + 8 * half + g;
      const int o0 = T::offset(row0, n >> 2) + (n & 3), o1 = T::offset(row1, n >> 2) + (n & 3);
      b[2 * half + 0] = __float_as_uint(s[o0]);
      b[2 * half + 1] = __float_as_uint(s[o1]);
      b[4 + 2 * half + 0] = __float_as_uint(s[o0 + kLo]);
      b[4 + 2 * half + 1] = __float_as_uint(s[o1 + kLo]);
    }
  }
};
template <>
struct Mma<float> : MmaF32<false> {};
template <>
struct Mma<tf32x3> : MmaF32<true> {};

// Note [Pre-split tiles]
// A 3xTF32 warp GEMM splits every B fragment element it loads (Note [3xTF32 split]), and every
// warp of a CTA loads all of the shared B tile (K and V in the forward; Q and dO in the dK/dV
// pass): the split of one element is repeated by each of the 4 warps, and it was ~half of the
// main loops' instructions (bf325d7's SASS: fwd d64 1780 instructions a key block per thread).
// With kBLo > 0 the B tile is split once per CTA instead: the cp.async copies land in a raw
// tile, then all threads split it (split_tile_tf32x3: LDS.128, two roundings, two STS.128 per 4
// elements, conflict-free) into a big tile and a small tile kBLo elements further, at the same
// swizzled offsets, and the warp GEMMs load big and small fragments (two ldmatrix or two scalar
// loads) with no arithmetic. Per thread per forward key block: 64 splits instead of 256. The
// price: a second __syncthreads per block and the raw tile is single-buffered (the next block's
// copies are issued after the split, still a whole block's compute ahead of their use), so the
// forward d64 takes 112 KiB instead of 80 (two CTAs per SM still fit) and the dK/dV pass 88.5
// instead of 72.5.
template <int kElems, int kThreads>
__device__ __forceinline__ void split_tile_tf32x3(const float* raw, float* big, float* small,
                                                  int tid) {
  static_assert(kElems % (4 * kThreads) == 0, "whole float4s per thread");
#pragma unroll
  for (int k = 0; k < kElems / (4 * kThreads); ++k) {
    const int i = 4 * (tid + k * kThreads);
    const uint4 x = *reinterpret_cast<const uint4*>(raw + i);
    uint4 hi, lo;
    split_tf32(x.x, hi.x, lo.x);
    split_tf32(x.y, hi.y, lo.y);
    split_tf32(x.z, hi.z, lo.z);
    split_tf32(x.w, hi.w, lo.w);
    *reinterpret_cast<uint4*>(big + i) = hi;
    *reinterpret_cast<uint4*>(small + i) = lo;
  }
}

// split_tile_tf32x3 into a fragment-major layout for products that read the tile as a [k][n]
// B operand in the permuted k order (load_bt_pair_kperm_frag): thread `lane` of every warp
// gathers the words its fragments need (the scalar reads of load_bt_pair<kD, true>, conflict-free),
// so each consumer warp then loads a fragment pair with two LDS.128 instead of eight scalar loads.
template <int kRows, int kD, int kThreads>
__device__ __forceinline__ void split_tile_tf32x3_bt_frags(const float* raw, float* big,
                                                           float* small, int tid) {
  using T = Tile<float, kD>;
  constexpr int kNP = kD / 16, kPairs = kRows / 8 * kNP, kWarps = kThreads / 32;
  static_assert(kPairs % kWarps == 0 && (kPairs / kWarps) % kNP == 0, "whole k-steps per warp");
  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int k = 0; k < kPairs / kWarps; ++k) {
    const int pair = warp * (kPairs / kWarps) + k;
    const int row0 = 8 * (pair / kNP) + 2 * t;
    uint32_t raw4[4];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int n = 16 * (pair % kNP) + 8 * half + g;
      raw4[2 * half + 0] = __float_as_uint(raw[T::offset(row0, n >> 2) + (n & 3)]);
      raw4[2 * half + 1] = __float_as_uint(raw[T::offset(row0 + 1, n >> 2) + (n & 3)]);
    }
    uint4 hi, lo;
    split_tf32(raw4[0], hi.x, lo.x);
    split_tf32(raw4[1], hi.y, lo.y);
    split_tf32(raw4[2], hi.z, lo.z);
    split_tf32(raw4[3], hi.w, lo.w);
    const int i = (pair * 32 + lane) * 4;
    *reinterpret_cast<uint4*>(big + i) = hi;
    *reinterpret_cast<uint4*>(small + i) = lo;
  }
}

// B fragment loads of the warp GEMMs: split where loaded (kBLo == 0) or read pre-split, for
// [k][n] operands from the swizzled tile or (kFragB) the fragment-major one.
template <typename Elem, int kD, int kBLo>
__device__ __forceinline__ void load_b_frag(uint32_t (&b)[Mma<Elem>::kBW], const Store<Elem>* s,
                                            int n0, int ks, int lane) {
  if constexpr (kBLo == 0) {
    Mma<Elem>::template load_b_pair<kD>(b, s, n0, ks, lane);
  } else {
    Mma<Elem>::template load_b_pair_pre<kD, kBLo>(b, s, n0, ks, lane);
  }
}
template <typename Elem, int kD, int kBLo, bool kFragB = false>
__device__ __forceinline__ void load_bt_frag_kperm(uint32_t (&b)[Mma<Elem>::kBW],
                                                   const Store<Elem>* s, int k0, int n0, int lane) {
  if constexpr (kBLo == 0) {
    Mma<Elem>::template load_bt_pair_kperm<kD>(b, s, k0, n0, lane);
  } else if constexpr (kFragB) {
    Mma<Elem>::template load_bt_pair_kperm_frag<kD, kBLo>(b, s, k0, n0, lane);
  } else {
    Mma<Elem>::template load_bt_pair_kperm_pre<kD, kBLo>(b, s, k0, n0, lane);
  }
}

// ---- warp GEMMs ------------------------------------------------------------------------------
// acc[mt][nt] += A[a_row0 + 16 mt + (0..15)][:] . B[b_row0 + 8 nt + (0..7)][:]  over k = 0..kD.
// kRoll keeps the k loop rolled (Note [Rolled k loop]); kBLo > 0: B is pre-split (Note [Pre-split
// tiles]).
template <typename Elem, int kD, int kMT, int kNT, bool kRoll = false, int kBLo = 0>
__device__ __forceinline__ void warp_gemm_nt(float (&acc)[kMT][kNT][4], const Store<Elem>* sA,
                                             int a_row0, const Store<Elem>* sB, int b_row0,
                                             int lane) {
  using M = Mma<Elem>;
  static_assert(kNT % 2 == 0, "n-tiles come in pairs");
  auto k_step = [&](int ks) {
    uint32_t a[kMT][M::kAW];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) M::template load_a<kD>(a[mt], sA, a_row0 + 16 * mt, ks, lane);
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      uint32_t b[M::kBW];
      load_b_frag<Elem, kD, kBLo>(b, sB, b_row0 + 16 * np, ks, lane);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        M::template mma_b<0>(acc[mt][2 * np], a[mt], b);
        M::template mma_b<1>(acc[mt][2 * np + 1], a[mt], b);
      }
    }
  };
  if constexpr (kRoll) {
#pragma unroll 1
    for (int ks = 0; ks < kD / M::kK; ++ks) k_step(ks);
  } else {
#pragma unroll
    for (int ks = 0; ks < kD / M::kK; ++ks) k_step(ks);
  }
}

// All A fragments of rows [a_row0, a_row0 + 16*kMT) of a [row][kD] tile, for operands that stay
// in registers across many products (Q in the forward, K and V in the dK/dV pass).
template <typename Elem, int kD, int kMT>
__device__ __forceinline__ void load_a_frags(uint32_t (&a)[kMT][kD / Mma<Elem>::kK][Mma<Elem>::kAW],
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
                                                const uint32_t (&a)[kMT][kD / Mma<Elem>::kK][Mma<Elem>::kAW],
                                                const Store<Elem>* sB, int b_row0, int lane) {
  using M = Mma<Elem>;
  static_assert(kNT % 2 == 0, "n-tiles come in pairs");
#pragma unroll
  for (int ks = 0; ks < kD / M::kK; ++ks) {
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      uint32_t b[M::kBW];
      M::template load_b_pair<kD>(b, sB, b_row0 + 16 * np, ks, lane);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        M::template mma_b<0>(acc[mt][2 * np], a[mt][ks], b);
        M::template mma_b<1>(acc[mt][2 * np + 1], a[mt][ks], b);
      }
    }
  }
}

// acc[mt][nt] (16 x kD per mt) += P[mt] (16 x 8*kPN, accumulator layout) . B[b_row0 + k][:]
// where B is a [k][kD] tile (the output column index is B's contiguous index). The _cols form
// computes only output columns [16*np0, 16*(np0 + kNP)) into acc[mt][0 .. 2*kNP).
template <typename Elem, int kD, int kMT, int kPN, int kNP, int kBLo = 0, bool kFragB = false>
__device__ __forceinline__ void warp_gemm_cA_tB_cols(float (&acc)[kMT][2 * kNP][4],
                                                     const float (&pc)[kMT][kPN][4],
                                                     const Store<Elem>* sB, int b_row0, int np0,
                                                     int lane) {
  using M = Mma<Elem>;
  constexpr int kKSteps = kPN * 8 / M::kK;
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    uint32_t a[kMT][M::kAW];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) M::template c_to_a<kPN>(a[mt], pc[mt], kk, lane);
#pragma unroll
    for (int np = 0; np < kNP; ++np) {
      uint32_t b[M::kBW];
      load_bt_frag_kperm<Elem, kD, kBLo, kFragB>(b, sB, b_row0 + kk * M::kK, 16 * (np0 + np), lane);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        M::template mma_b<0>(acc[mt][2 * np], a[mt], b);
        M::template mma_b<1>(acc[mt][2 * np + 1], a[mt], b);
      }
    }
  }
}
template <typename Elem, int kD, int kMT, int kPN, int kBLo = 0, bool kFragB = false>
__device__ __forceinline__ void warp_gemm_cA_tB(float (&acc)[kMT][kD / 8][4],
                                                const float (&pc)[kMT][kPN][4],
                                                const Store<Elem>* sB, int b_row0, int lane) {
  warp_gemm_cA_tB_cols<Elem, kD, kMT, kPN, kD / 16, kBLo, kFragB>(acc, pc, sB, b_row0, 0, lane);
}

// acc[mt][2 np + j] += A[a_row0 + 16 mt + (0..15)][k] . B[k][16 (np0 + np) + 8 j + (0..7)] over
// k in [kK ks0, kK (ks0 + kKSteps)), with A a [row][kKA] tile in shared memory and B a [k][kDB]
// tile (the output column index is B's contiguous index), for products whose A operand is not an
// accumulator (the dQ partials).
template <typename Elem, int kKA, int kDB, int kMT, int kNP, int kKSteps, bool kRoll = false>
__device__ __forceinline__ void warp_gemm_tB_cols(float (&acc)[kMT][2 * kNP][4],
                                                  const Store<Elem>* sA, int a_row0,
                                                  const Store<Elem>* sB, int np0, int ks0,
                                                  int lane) {
  using M = Mma<Elem>;
  static_assert(kKSteps * M::kK <= kKA, "k range inside the A tile");
  auto k_step = [&](int ks) {
    uint32_t a[kMT][M::kAW];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) M::template load_a<kKA>(a[mt], sA, a_row0 + 16 * mt, ks, lane);
#pragma unroll
    for (int np = 0; np < kNP; ++np) {
      uint32_t b[M::kBW];
      M::template load_bt_pair<kDB>(b, sB, ks * M::kK, 16 * (np0 + np), lane);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        M::template mma_b<0>(acc[mt][2 * np], a[mt], b);
        M::template mma_b<1>(acc[mt][2 * np + 1], a[mt], b);
      }
    }
  };
  if constexpr (kRoll) {
#pragma unroll 1
    for (int ks = ks0; ks < ks0 + kKSteps; ++ks) k_step(ks);
  } else {
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) k_step(ks0 + ks);
  }
}

// Note [Rolled k loop]
// The 3xTF32 kernels are large (d64 forward ~4.6K SASS instructions, ~73 KB, the key-block loop
// fully unrolled) and run 2 warps per scheduler (~180-240 registers): Nsight Compute (H200,
// 2026-11-26) put ~42% of their stall cycles on instruction fetch ("no instruction") at ~45%
// issue-slot use. With the A operand read from shared memory, S = Q K^T (and dP) can keep its
// k loop rolled: one copy of a k-step instead of kD/8, the accumulators indexed only by unrolled
// n-tiles. FwdTiles / DkDvTiles / DqTiles::kRollK selects it. Measured (H200, 2026-11-26, B16
// T1024 H12 d64, same binary): SASS fwd 4584 -> 3352 instructions, dQ 3680 -> 2248, dK/dV 4768 ->
// 3376; forward 0.919 -> 0.715 ms, backward 3.131 -> 2.713 ms (PyTorch's fp32 efficient SDPA in
// the same call: 0.891 / ~2.33 ms); GPT-2 fp32 step 325.7 -> 318.4 ms. So the 3xTF32 launchers
// take the rolled tiles by default; BLUBLAS_ATTN_ROLL_K=0 restores the unrolled ones (A/B).

// The 3xTF32 launchers take the kRollK tiles unless BLUBLAS_ATTN_ROLL_K=0 (read once per process).
inline bool roll_k_requested() {
  static const bool on = [] {
    const char* v = std::getenv("BLUBLAS_ATTN_ROLL_K");
    return v == nullptr || v[0] != '0';
  }();
  return on;
}

// The 3xTF32 d64 launchers take pre-split tiles (Note [Pre-split tiles]) unless
// BLUBLAS_ATTN_PRESPLIT=0 (read once per process; for A/B runs).
inline bool presplit_requested() {
  static const bool on = [] {
    const char* v = std::getenv("BLUBLAS_ATTN_PRESPLIT");
    return v == nullptr || v[0] != '0';
  }();
  return on;
}

// Note [3xTF32 accumulation bias]
// The tensor cores add each mma's products into the fp32 accumulator C with truncation (toward
// zero), not round-to-nearest. A flash kernel that chains every key (or query) block's products
// into one running accumulator truncates ~3 x T/8 times per output, each time at the running sum's
// ulp: a systematic shrink. Measured on the GPT-2 shape (B1 T1024 H2 d64 causal, attention_gpu_test
// F32ErrorProfileGpt2Shape, H200, 2026-11-26): 3xTF32 O / dQ / dK / dV rel bias -3.2e-6 / -3.8e-6 /
// -6.9e-6 / -6.9e-6 at rel RMS 3.8e-6 .. 9.2e-6 (strict SIMT: bias ~+1e-8, RMS 6e-7 .. 9e-7;
// PyTorch's fp32 efficient SDPA: bias -5e-7 .. -7e-7, RMS 7e-7 .. 1e-6). Over a 200-step GPT-2
// run that drift was ~30x PyTorch's own compile-vs-eager floor. So with 3xTF32 the block product
// goes into a fresh zeroed accumulator (its truncations are at the one block's scale) which is
// then added to the running sum with round-to-nearest FADDs. Cost: up to kMT x 32 registers
// (measured ptxas, sm_90a, d64: fwd 177 -> 227, dK/dV 190 -> 238, dQ 163 -> 187; no spills).
template <typename Elem>
inline constexpr bool kFreshBlockAcc = std::is_same_v<Elem, tf32x3>;

// acc += P . B as warp_gemm_cA_tB, through a fresh accumulator for 3xTF32 (Note above), in
// chunks of 64 output columns (d64) or 32 (d128). kFresh = false keeps the running accumulator:
// the d128 dK/dV pass (two 16 x 128 accumulators) spills with even a 32-column fresh one.
template <typename Elem, int kD, int kMT, int kPN, bool kFresh = kFreshBlockAcc<Elem>, int kBLo = 0,
          bool kFragB = false>
__device__ __forceinline__ void warp_gemm_cA_tB_add(float (&acc)[kMT][kD / 8][4],
                                                    const float (&pc)[kMT][kPN][4],
                                                    const Store<Elem>* sB, int b_row0, int lane) {
  if constexpr (kFresh) {
    constexpr int kNP = kD >= 128 ? 2 : kD / 16;  // n-tile pairs per chunk (d128: 32 columns)
    static_assert((kD / 16) % kNP == 0, "head dim splits into whole chunks");
#pragma unroll
    for (int c = 0; c < kD / 16 / kNP; ++c) {
      float part[kMT][2 * kNP][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < 2 * kNP; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) part[mt][nt][e] = 0.0f;
      warp_gemm_cA_tB_cols<Elem, kD, kMT, kPN, kNP, kBLo, kFragB>(part, pc, sB, b_row0, c * kNP,
                                                                 lane);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < 2 * kNP; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            acc[mt][2 * c * kNP + nt][e] = __fadd_rn(acc[mt][2 * c * kNP + nt][e], part[mt][nt][e]);
    }
  } else {
    warp_gemm_cA_tB<Elem, kD, kMT, kPN, kBLo, kFragB>(acc, pc, sB, b_row0, lane);
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
