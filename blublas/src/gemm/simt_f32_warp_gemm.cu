// simt_f32_warp_gemm.cu: the warp-tiled strict fp32 GEMM on CUDA cores (FFMA only, no TF32 and no
// tensor-core instruction), a family of tile configurations of one kernel template, chosen by
// simt_f32_gemm.cu (default or BLUBLAS_SIMT_VARIANT).
//
// Note [SIMT fp32 warp tiling]
// The CTA tile BM x BN is cut into warp tiles (LM*TM) x (LN*TN); the 32 lanes of a warp form an
// LM x LN grid and each lane owns TM x TN accumulators as (TM/4) x (TN/4) blocks of 4 x 4, block
// (i, j) at row i*LM*4 + lm*4 and column j*LN*4 + ln*4 of the warp tile. Per k step a lane reads
// TM/4 + TN/4 float4 from shared memory (both operands are stored k-outer, as[k][m] / bs[k][n]);
// the lanes of a warp read LM (LN) consecutive float4 per read: with LM, LN <= 8 each read is one
// shared-memory wavefront (broadcast), so the FFMA:LDS ratio is TM*TN : (TM+TN)/4.
//   128 x 128 tiles with 8 x 16 (or 16 x 8) per lane (64 x 64 warp tiles, 128 threads, 227-251
// registers, 2 CTAs per SM) issue 128 FFMA per 6 LDS.128 (the legacy 8 x 8 kernel: 64 per 4).
// Global -> shared is register staged as in simt_f32_gemm.cu: the next k slab is loaded into
// registers while the current one is consumed, stored to the other shared buffer, one barrier per
// slab (placed by Note [Early barrier]). A k-contiguous operand is read as float4 along k by pairs
// of lanes (32 bytes of a row) and stored transposed with 4 scalar stores; rows padded by 4 floats
// keep those stores conflict-free. CTAs run in plain row-major grid order (visiting 8-row groups
// measured 4% slower, run3).
#include <cstdint>

#include "blublas/check.h"
#include "gemm/epilogue.cuh"
#include "gemm/simt_gemm_launch.h"
#include "gemm/simt_lane_store.cuh"

namespace blublas::gemm_detail {
namespace {

template <int BM_, int BN_, int BK_, int TM_, int TN_, int LM_, int LN_, int MIN_BLOCKS_>
struct WarpTile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_, LM = LM_, LN = LN_;
  static constexpr int kMinBlocks = MIN_BLOCKS_;
  static constexpr int kWarpM = LM * TM, kWarpN = LN * TN;
  static constexpr int kWarpsM = BM / kWarpM, kWarpsN = BN / kWarpN;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kALoads = BM * BK / 4 / kThreads;  // float4 per thread per slab
  static constexpr int kBLoads = BN * BK / 4 / kThreads;
  static_assert(LM * LN == 32, "lane grid must be one warp");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "lane tiles are 4 x 4 blocks");
  static_assert(BM % kWarpM == 0 && BN % kWarpN == 0, "CTA tile must be whole warp tiles");
  static_assert(BK % 8 == 0, "k slab is a multiple of 8");
  static_assert(kALoads >= 1 && kBLoads >= 1, "every thread loads at least one float4 per slab");
  static_assert(BM * BK / 4 % kThreads == 0 && BN * BK / 4 % kThreads == 0, "even slab split");
  static_assert(BM % 32 == 0 && BN % 32 == 0, "rows per slab a multiple of 32");
};

// 4 consecutive floats of an operand along its contiguous dimension: element (outer, inner + t)
// at x[outer*ld + inner + t]; zero outside [0, n_outer) x [0, n_inner).
template <bool VEC>
__device__ __forceinline__ float4 load4(const float* __restrict__ x, int64_t ld, int outer,
                                        int inner, int n_outer, int n_inner) {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (outer >= n_outer) return v;
  const float* p = x + static_cast<int64_t>(outer) * ld + inner;
  if (VEC && inner + 3 < n_inner) return __ldg(reinterpret_cast<const float4*>(p));
  if (inner + 0 < n_inner) v.x = __ldg(p + 0);
  if (inner + 1 < n_inner) v.y = __ldg(p + 1);
  if (inner + 2 < n_inner) v.z = __ldg(p + 2);
  if (inner + 3 < n_inner) v.w = __ldg(p + 3);
  return v;
}

// Slab element mapping of load l of thread t (g = t + l*THREADS).
//  k-major operand (ROWS x BK, k contiguous): pairs of lanes cover 8 k of one row; groups of
//    2*ROWS consecutive g take successive 8-k chunks. -> (row, k4)
//  m/n-major operand (BK x ROWS, rows contiguous): g walks a k row in float4. -> (k, row4)
template <int ROWS, bool KMAJ>
__device__ __forceinline__ void slab_coords(int g, int* row, int* kq) {
  if (KMAJ) {
    *row = (g % (2 * ROWS)) / 2;
    *kq = (g % 2) * 4 + (g / (2 * ROWS)) * 8;
  } else {
    *kq = g / (ROWS / 4);
    *row = (g % (ROWS / 4)) * 4;
  }
}

// Global -> register loads of one operand's slabs. Each load keeps a pointer to its element of the
// current slab, advanced by one slab per call; whole slabs (k0 + BK <= k) of in-range rows take the
// float4 fast path, everything else (k tail, edge rows, unaligned operands) the guarded loads.
template <int ROWS, int BK, int LOADS, int THREADS, bool KMAJ, bool VEC>
struct SlabLoader {
  const float* ptr[LOADS];
  bool full[LOADS];  // the float4 at ptr is inside the operand's rows
  const float* x;
  int64_t ld;
  int r0, n_rows;

  __device__ __forceinline__ SlabLoader(const float* x_, int64_t ld_, int r0_, int k_lo,
                                        int n_rows_)
      : x(x_), ld(ld_), r0(r0_), n_rows(n_rows_) {
#pragma unroll
    for (int l = 0; l < LOADS; ++l) {
      int row, kq;
      slab_coords<ROWS, KMAJ>(static_cast<int>(threadIdx.x) + l * THREADS, &row, &kq);
      if (KMAJ) {
        ptr[l] = x + static_cast<int64_t>(r0 + row) * ld + (k_lo + kq);
        full[l] = r0 + row < n_rows;
      } else {
        ptr[l] = x + static_cast<int64_t>(k_lo + kq) * ld + (r0 + row);
        full[l] = r0 + row + 3 < n_rows;
      }
    }
  }

  // Loads the slab starting at k0 (the one ptr points at) and advances ptr to the next slab.
  __device__ __forceinline__ void load(float4 (&reg)[LOADS], int k0, int n_k) {
    const bool whole = VEC && k0 + BK <= n_k;
#pragma unroll
    for (int l = 0; l < LOADS; ++l) {
      if (whole && full[l]) {
        reg[l] = __ldg(reinterpret_cast<const float4*>(ptr[l]));
      } else {
        int row, kq;
        slab_coords<ROWS, KMAJ>(static_cast<int>(threadIdx.x) + l * THREADS, &row, &kq);
        reg[l] = KMAJ ? load4<VEC>(x, ld, r0 + row, k0 + kq, n_rows, n_k)
                      : load4<VEC>(x, ld, k0 + kq, r0 + row, n_k, n_rows);
      }
      ptr[l] += KMAJ ? static_cast<int64_t>(BK) : BK * ld;
    }
  }
};

template <int ROWS, int BK, int LOADS, int THREADS, bool KMAJ>
__device__ __forceinline__ void store_slab(float (*s)[ROWS + 4], const float4 (&reg)[LOADS]) {
#pragma unroll
  for (int l = 0; l < LOADS; ++l) {
    int row, kq;
    slab_coords<ROWS, KMAJ>(static_cast<int>(threadIdx.x) + l * THREADS, &row, &kq);
    if (KMAJ) {
      s[kq + 0][row] = reg[l].x;
      s[kq + 1][row] = reg[l].y;
      s[kq + 2][row] = reg[l].z;
      s[kq + 3][row] = reg[l].w;
    } else {
      *reinterpret_cast<float4*>(&s[kq][row]) = reg[l];
    }
  }
}

template <class T, bool A_KMAJ, bool B_KMAJ, bool VEC>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks)
    simt_f32_warp_kernel(const float* __restrict__ a, int64_t lda, int64_t stride_a,
                         const float* __restrict__ b, int64_t ldb, int64_t stride_b, int m, int n,
                         int k_total, SplitArgs split, EpilogueArgs e) {
  constexpr int BM = T::BM, BN = T::BN, BK = T::BK, TM = T::TM, TN = T::TN;
  constexpr int kThreads = T::kThreads;
  __shared__ __align__(16) float as[2][BK][BM + 4];
  __shared__ __align__(16) float bs[2][BK][BN + 4];

  const int batch = blockIdx.z % split.batches;
  const int split_index = blockIdx.z / split.batches;
  a += batch * stride_a;
  b += batch * stride_b;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm0 = (warp / T::kWarpsN) * T::kWarpM, wn0 = (warp % T::kWarpsN) * T::kWarpN;
  const int lm = lane / T::LN, ln = lane % T::LN;
  const int row_base = wm0 + lm * 4, col_base = wn0 + ln * 4;
  const int k_lo = split.k_split > 0 ? split_index * split.k_split : 0;
  const int k = split.k_split > 0 ? min(k_total, k_lo + split.k_split) : k_total;

  float acc[TM][TN];
#pragma unroll
  for (int r = 0; r < TM; ++r) {
#pragma unroll
    for (int c = 0; c < TN; ++c) acc[r][c] = 0.0f;
  }

  SlabLoader<BM, BK, T::kALoads, kThreads, A_KMAJ, VEC> load_a(a, lda, m0, k_lo, m);
  SlabLoader<BN, BK, T::kBLoads, kThreads, B_KMAJ, VEC> load_b(b, ldb, n0, k_lo, n);
  float4 ra[T::kALoads], rb[T::kBLoads];
  load_a.load(ra, k_lo, k);
  load_b.load(rb, k_lo, k);
  store_slab<BM, BK, T::kALoads, kThreads, A_KMAJ>(as[0], ra);
  store_slab<BN, BK, T::kBLoads, kThreads, B_KMAJ>(bs[0], rb);
  __syncthreads();

  // Note [Early barrier]: fragments are double-buffered in registers (step kk+1 is read from shared
  // memory while step kk's FFMAs issue). The next slab is stored and the barrier taken before the
  // last step's FFMAs, so the first reads of the new buffer overlap those FFMAs instead of stalling
  // after the barrier. The stores go to the buffer the previous slab read; its last reads (step
  // BK-1's fragments) were issued before the previous slab's barrier, so one barrier per slab.
  float fa[2][TM], fb[2][TN];
  auto read_frags = [&](int bufi, int kk, float(&ra_)[TM], float(&rb_)[TN]) {
#pragma unroll
    for (int i = 0; i < TM / 4; ++i) {
      const float4 v = *reinterpret_cast<const float4*>(&as[bufi][kk][row_base + i * T::LM * 4]);
      ra_[i * 4 + 0] = v.x; ra_[i * 4 + 1] = v.y; ra_[i * 4 + 2] = v.z; ra_[i * 4 + 3] = v.w;
    }
#pragma unroll
    for (int j = 0; j < TN / 4; ++j) {
      const float4 v = *reinterpret_cast<const float4*>(&bs[bufi][kk][col_base + j * T::LN * 4]);
      rb_[j * 4 + 0] = v.x; rb_[j * 4 + 1] = v.y; rb_[j * 4 + 2] = v.z; rb_[j * 4 + 3] = v.w;
    }
  };
  read_frags(0, 0, fa[0], fb[0]);

  int buf = 0;
  for (int k0 = k_lo; k0 < k; k0 += BK) {
    const bool has_next = k0 + BK < k;
    if (has_next) {
      load_a.load(ra, k0 + BK, k);
      load_b.load(rb, k0 + BK, k);
    }
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      if (kk == BK - 1) {
        if (has_next) {
          store_slab<BM, BK, T::kALoads, kThreads, A_KMAJ>(as[buf ^ 1], ra);
          store_slab<BN, BK, T::kBLoads, kThreads, B_KMAJ>(bs[buf ^ 1], rb);
        }
        __syncthreads();
        buf ^= 1;
      }
      // Step kk+1's fragments (step 0 of the next slab after the barrier; a harmless read of the
      // other buffer after the last slab).
      read_frags(buf, (kk + 1) % BK, fa[(kk + 1) % 2], fb[(kk + 1) % 2]);
#pragma unroll
      for (int r = 0; r < TM; ++r) {
#pragma unroll
        for (int c = 0; c < TN; ++c) acc[r][c] = fmaf(fa[kk % 2][r], fb[kk % 2][c], acc[r][c]);
      }
    }
  }

  simt_store_lane_tile<TM, TN, T::LM, T::LN>(acc, split, split_index, batch, m, n, m0, n0, row_base, col_base,
                                          e);
}

template <class T, bool A_KMAJ, bool B_KMAJ, bool VEC>
Status launch_warp_tile(const GemmProblem& p, const SplitArgs& split, int splits,
                        cudaStream_t stream) {
  const dim3 grid((p.n + T::BN - 1) / T::BN, (p.m + T::BM - 1) / T::BM, p.batch * splits);
  simt_f32_warp_kernel<T, A_KMAJ, B_KMAJ, VEC><<<grid, T::kThreads, 0, stream>>>(
      static_cast<const float*>(p.a), p.lda, p.stride_a, static_cast<const float*>(p.b), p.ldb,
      p.stride_b, p.m, p.n, p.k, split, make_epilogue_args(p));
  BLUBLAS_KERNEL_LAUNCH_CHECK("simt_f32_warp_kernel");
  return Status::success();
}

// Float4-able operands only (vec4_ok): other problems take the legacy kernel.
template <class T>
Status launch_warp_majors(const GemmProblem& p, const SplitArgs& split, int splits,
                          cudaStream_t stream) {
  return with_majors(p, [&]<bool A_KMAJ, bool B_KMAJ>() {
    return launch_warp_tile<T, A_KMAJ, B_KMAJ, true>(p, split, splits, stream);
  });
}

//                        BM   BN BK TM  TN LM LN blocks/SM
using Tile816 = WarpTile<128, 128, 8, 8, 16, 8, 4, 2>;  // 128 thr, 64x64 warp tiles, 8 x 16 / lane
using Tile168 = WarpTile<128, 128, 8, 16, 8, 4, 8, 2>;  // 128 thr, 64x64 warp tiles, 16 x 8 / lane

}  // namespace

Status simt_f32_warp_launch(const GemmProblem& p, SimtWarpVariant v, const SplitArgs& split,
                            int splits, bool vec, cudaStream_t stream) {
  BLUBLAS_CHECK(vec, StatusCode::kNotSupported,
                "simt f32 warp kernel: needs 16-byte aligned A, B, lds and batch strides");
  switch (v) {
    case SimtWarpVariant::k816: return launch_warp_majors<Tile816>(p, split, splits, stream);
    case SimtWarpVariant::k168: return launch_warp_majors<Tile168>(p, split, splits, stream);
  }
  return Status(StatusCode::kInvalidArgument, "simt f32 warp kernel: unknown variant");
}

}  // namespace blublas::gemm_detail
