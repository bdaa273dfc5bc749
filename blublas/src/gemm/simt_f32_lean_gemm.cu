// simt_f32_lean_gemm.cu: the "lean" strict fp32 GEMM on CUDA cores (FFMA only: no TF32 and no
// tensor-core instruction), a family of tile configurations of one kernel template whose main loop
// holds nothing but the outer products, the fragment reads, one float4 global load per operand
// slab quarter and its shared-memory store: no bounds checks. Chosen by simt_f32_gemm.cu (Note
// [SIMT fp32 variant choice]); BLUBLAS_SIMT_VARIANT=l88|l816|l168|l88n64|l816w|l168w forces one.
//
// Note [SIMT fp32 lean kernel]
// Tiles. The CTA tile BM x BN is cut into warp tiles (LM*TM) x (LN*TN); the 32 lanes form an
// LM x LN grid and each lane owns TM x TN accumulators as 4 x 4 blocks (as in Note [SIMT fp32 warp
// tiling]), so per k step a lane issues TM/4 + TN/4 LDS.128, each one shared-memory wavefront
// (LM, LN <= 8 distinct float4 per read, the rest broadcast). Both operands sit in shared memory
// k-outer (as[k][m], bs[k][n], rows padded by 4 floats); a k-contiguous operand is transposed at
// the store (a float4 along k becomes 4 STS.32; pairs of lanes cover one row's 32 bytes, and the
// padding puts the two halves of a warp in different banks: conflict-free).
// Why it is lean. The legacy and warp kernels carry the bounds logic into the main loop (~40 address
// and guard instructions per 8-deep slab for the legacy kernel; the warp kernel's guarded fallback
// keeps registers live). Here the bounds are settled before the loop:
//  - Rows (M of A, N of B) are clamped, not guarded: a row past the operand's end loads row
//    n_rows - 1 (k-major operand) or the aligned float4 that holds the last element (m/n-major
//    operand; needs n_rows % 4 == 0 there, so the float4 never leaves the allocation). Output
//    (i, j) depends on row i of A and column j of B only, and rows/columns >= M/N are never
//    stored, so the clamped values are never seen.
//  - K is cut into whole 8-deep slabs plus one tail slab (K % 8 != 0). Whole slabs take one
//    unguarded LDG.128 per float4; the tail slab, once per CTA after the loop, uses guarded scalar
//    loads with zeros past K in both operands (0 * 0 adds +0: the sums are unchanged and finite).
// The main loop per 8-deep slab per thread: TM*TN*8 FFMA, (TM+TN)/4*8 LDS.128, 2 LDG.128 per 256
// threads' worth of slab (l88: 1 per operand), 4 STS.32 per float4 of a k-major operand (1 STS.128
// otherwise), one barrier, pointer increments and the loop branch.
// Pipelining: the next slab is loaded into registers at the top of the slab, stored to the other
// shared buffer and the barrier taken before the last k step's FFMAs; fragments are double
// buffered in registers (step kk+1 read while step kk's FFMAs issue): Note [Early barrier] in
// simt_f32_warp_gemm.cu, same argument for the single barrier per slab.
// Configurations (BM x BN, threads, per lane, CTAs per SM by __launch_bounds__):
//   l88    128 x 128, 256 threads, 8 x 8  (lanes 4 x 8, warp tiles 32 x 64), 2 per SM (<= 128 regs)
//   l816   128 x 128, 128 threads, 8 x 16 (lanes 8 x 4, warp tiles 64 x 64), 2 per SM (<= 255 regs)
//   l168   128 x 128, 128 threads, 16 x 8 (lanes 4 x 8, warp tiles 64 x 64), 2 per SM (<= 255 regs)
//   l88n64 128 x  64, 128 threads, 8 x 8  (lanes 8 x 4, warp tiles 64 x 32), 4 per SM (<= 128 regs)
// l88 runs 16 warps per SM (4 per scheduler) with 64 FFMA per 4 LDS.128; l816 8 warps per SM with
// 128 FFMA per 6 LDS.128; l88n64 16 warps in 4 CTAs (barriers of 4 warps instead of 8).
// ptxas (CUDA 13, sm_90a): l88 124-128 registers, l88n64 125-128, l816 / l168 228-231, no spills.
// On sm_80 l88 spills 8-16 bytes outside the main loop (tail slab), l88n64 a few inside it.
// SASS main loop (two slabs = 16 k, sm_90a): l88 NT 1024 FFMA, 64 LDS.128, 16 STS, 4 LDG, 2 BAR,
// ~30 others (~90% FFMA); l88 TN ~89%; l816 NT 2048 FFMA of ~2220 (~92%).
#include <cstdint>

#include "blublas/check.h"
#include "gemm/epilogue.cuh"
#include "gemm/simt_gemm_launch.h"

namespace blublas::gemm_detail {
namespace {

constexpr int kLeanBK = 8;

template <int BM_, int BN_, int TM_, int TN_, int LM_, int LN_, int MIN_BLOCKS_>
struct LeanTile {
  static constexpr int BM = BM_, BN = BN_, TM = TM_, TN = TN_, LM = LM_, LN = LN_;
  static constexpr int kMinBlocks = MIN_BLOCKS_;
  static constexpr int kWarpM = LM * TM, kWarpN = LN * TN;
  static constexpr int kWarpsM = BM / kWarpM, kWarpsN = BN / kWarpN;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kALoads = BM * kLeanBK / 4 / kThreads;  // float4 per thread per slab
  static constexpr int kBLoads = BN * kLeanBK / 4 / kThreads;
  static_assert(LM * LN == 32, "lane grid must be one warp");
  static_assert(LM <= 8 && LN <= 8, "one wavefront per fragment read");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "lane tiles are 4 x 4 blocks");
  static_assert(BM % kWarpM == 0 && BN % kWarpN == 0, "CTA tile must be whole warp tiles");
  static_assert(kALoads >= 1 && kBLoads >= 1, "every thread loads at least one float4 per slab");
  static_assert(BM * kLeanBK / 4 % kThreads == 0 && BN * kLeanBK / 4 % kThreads == 0,
                "even slab split");
};

// Slab coordinates of float4 number g (= thread + l * THREADS) of an operand slab.
//  k-major (ROWS x 8, k contiguous): pairs of lanes cover the 8 k of one row -> (row, kq)
//  m/n-major (8 x ROWS, rows contiguous): g walks a k row in float4         -> (kq, row)
template <int ROWS, bool KMAJ>
__device__ __forceinline__ void lean_coords(int g, int* row, int* kq) {
  if (KMAJ) {
    *row = g / 2;
    *kq = (g % 2) * 4;
  } else {
    *kq = g / (ROWS / 4);
    *row = (g % (ROWS / 4)) * 4;
  }
}

// One operand's slab loads. ptr[l] points at load l's float4 of the next whole slab; rows are
// clamped at construction (Note [SIMT fp32 lean kernel]).
template <int ROWS, int LOADS, int THREADS, bool KMAJ>
struct LeanLoader {
  const float* ptr[LOADS];
  int64_t step;  // floats from one slab to the next

  __device__ __forceinline__ LeanLoader(const float* x, int64_t ld, int r0, int k_lo, int n_rows) {
    step = KMAJ ? kLeanBK : kLeanBK * ld;
#pragma unroll
    for (int l = 0; l < LOADS; ++l) {
      int row, kq;
      lean_coords<ROWS, KMAJ>(static_cast<int>(threadIdx.x) + l * THREADS, &row, &kq);
      if (KMAJ) {
        const int r = min(r0 + row, n_rows - 1);
        ptr[l] = x + static_cast<int64_t>(r) * ld + (k_lo + kq);
      } else {
        const int r = min(r0 + row, n_rows - 4);  // n_rows % 4 == 0: stays 16-byte aligned
        ptr[l] = x + static_cast<int64_t>(k_lo + kq) * ld + r;
      }
    }
  }

  // A whole slab (every k inside the range): unguarded float4 loads, then advance.
  __device__ __forceinline__ void load(float4 (&reg)[LOADS]) {
#pragma unroll
    for (int l = 0; l < LOADS; ++l) {
      reg[l] = __ldg(reinterpret_cast<const float4*>(ptr[l]));
      ptr[l] += step;
    }
  }

  // The tail slab: k0 = its first k, n_k = the end of this split's k range; zeros past n_k.
  __device__ __forceinline__ void load_tail(float4 (&reg)[LOADS], int k0, int n_k) {
#pragma unroll
    for (int l = 0; l < LOADS; ++l) {
      int row, kq;
      lean_coords<ROWS, KMAJ>(static_cast<int>(threadIdx.x) + l * THREADS, &row, &kq);
      if (KMAJ) {
        float v[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) v[t] = k0 + kq + t < n_k ? __ldg(ptr[l] + t) : 0.0f;
        reg[l] = make_float4(v[0], v[1], v[2], v[3]);
      } else {
        reg[l] = k0 + kq < n_k ? __ldg(reinterpret_cast<const float4*>(ptr[l]))
                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
  }
};

template <int ROWS, int LOADS, int THREADS, bool KMAJ>
__device__ __forceinline__ void lean_store(float* s, const float4 (&reg)[LOADS]) {
  constexpr int kLd = ROWS + 4;
#pragma unroll
  for (int l = 0; l < LOADS; ++l) {
    int row, kq;
    lean_coords<ROWS, KMAJ>(static_cast<int>(threadIdx.x) + l * THREADS, &row, &kq);
    if (KMAJ) {
      s[(kq + 0) * kLd + row] = reg[l].x;
      s[(kq + 1) * kLd + row] = reg[l].y;
      s[(kq + 2) * kLd + row] = reg[l].z;
      s[(kq + 3) * kLd + row] = reg[l].w;
    } else {
      *reinterpret_cast<float4*>(&s[kq * kLd + row]) = reg[l];
    }
  }
}

// A compile-time shared-memory buffer index (an int where the buffer is known at run time only).
template <int V>
struct LeanBuf {
  __device__ __forceinline__ constexpr operator int() const { return V; }
};

template <class T, bool A_KMAJ, bool B_KMAJ>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks)
    simt_f32_lean_kernel(const float* __restrict__ a, int64_t lda, int64_t stride_a,
                         const float* __restrict__ b, int64_t ldb, int64_t stride_b, int m, int n,
                         int k_total, SplitArgs split, EpilogueArgs e) {
  constexpr int BM = T::BM, BN = T::BN, TM = T::TM, TN = T::TN, BK = kLeanBK;
  constexpr int kThreads = T::kThreads;
  constexpr int kLdA = BM + 4, kLdB = BN + 4;
  constexpr int kStageA = BK * kLdA, kStageB = BK * kLdB;  // floats per buffer
  __shared__ __align__(16) float as[2 * kStageA];
  __shared__ __align__(16) float bs[2 * kStageB];

  const int batch = blockIdx.z % split.batches;
  const int split_index = blockIdx.z / split.batches;
  a += batch * stride_a;
  b += batch * stride_b;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm0 = (warp / T::kWarpsN) * T::kWarpM, wn0 = (warp % T::kWarpsN) * T::kWarpN;
  const int row_base = wm0 + (lane / T::LN) * 4, col_base = wn0 + (lane % T::LN) * 4;
  const int k_lo = split.k_split > 0 ? split_index * split.k_split : 0;
  const int k_hi = split.k_split > 0 ? min(k_total, k_lo + split.k_split) : k_total;
  const int whole = (k_hi - k_lo) / BK;          // unguarded slabs
  const bool tail = (k_hi - k_lo) % BK != 0;     // one guarded slab after them
  const int slabs = whole + (tail ? 1 : 0);

  float acc[TM][TN];
#pragma unroll
  for (int r = 0; r < TM; ++r) {
#pragma unroll
    for (int c = 0; c < TN; ++c) acc[r][c] = 0.0f;
  }

  LeanLoader<BM, T::kALoads, kThreads, A_KMAJ> load_a(a, lda, m0, k_lo, m);
  LeanLoader<BN, T::kBLoads, kThreads, B_KMAJ> load_b(b, ldb, n0, k_lo, n);
  float4 ra[T::kALoads], rb[T::kBLoads];
  if (slabs > 0) {
    if (whole > 0) {
      load_a.load(ra);
      load_b.load(rb);
    } else {
      load_a.load_tail(ra, k_lo, k_hi);
      load_b.load_tail(rb, k_lo, k_hi);
    }
    lean_store<BM, T::kALoads, kThreads, A_KMAJ>(as, ra);
    lean_store<BN, T::kBLoads, kThreads, B_KMAJ>(bs, rb);
  }
  __syncthreads();

  float fa[2][TM], fb[2][TN];
  // Fragments of step kk of the buffer at (sa, sb).
  auto read_frags = [&](const float* sa, const float* sb, int kk, float(&fa_)[TM], float(&fb_)[TN]) {
#pragma unroll
    for (int i = 0; i < TM / 4; ++i) {
      const float4 v = *reinterpret_cast<const float4*>(&sa[kk * kLdA + row_base + i * T::LM * 4]);
      fa_[i * 4 + 0] = v.x; fa_[i * 4 + 1] = v.y; fa_[i * 4 + 2] = v.z; fa_[i * 4 + 3] = v.w;
    }
#pragma unroll
    for (int j = 0; j < TN / 4; ++j) {
      const float4 v = *reinterpret_cast<const float4*>(&sb[kk * kLdB + col_base + j * T::LN * 4]);
      fb_[j * 4 + 0] = v.x; fb_[j * 4 + 1] = v.y; fb_[j * 4 + 2] = v.z; fb_[j * 4 + 3] = v.w;
    }
  };
  auto outer = [&](const float(&fa_)[TM], const float(&fb_)[TN]) {
#pragma unroll
    for (int r = 0; r < TM; ++r) {
#pragma unroll
      for (int c = 0; c < TN; ++c) acc[r][c] = fmaf(fa_[r], fb_[c], acc[r][c]);
    }
  };
  // One slab from the buffer `cur_c` (0 or 1; a LeanBuf in the main loop, so the
  // shared-memory addresses are fixed offsets). With `next`, ra/rb (already loaded) are stored to
  // the other buffer and the barrier taken before step BK-1's FFMAs (Note [Early barrier]).
  auto slab = [&](auto cur_c, bool next) {
    const int cur = cur_c;
    const float* sa = as + cur * kStageA;
    const float* sb = bs + cur * kStageB;
#pragma unroll
    for (int kk = 0; kk < BK - 1; ++kk) {
      read_frags(sa, sb, kk + 1, fa[(kk + 1) % 2], fb[(kk + 1) % 2]);
      outer(fa[kk % 2], fb[kk % 2]);
    }
    if (next) {
      lean_store<BM, T::kALoads, kThreads, A_KMAJ>(as + (cur ^ 1) * kStageA, ra);
      lean_store<BN, T::kBLoads, kThreads, B_KMAJ>(bs + (cur ^ 1) * kStageB, rb);
      __syncthreads();
      read_frags(as + (cur ^ 1) * kStageA, bs + (cur ^ 1) * kStageB, 0, fa[0], fb[0]);
    }
    outer(fa[(BK - 1) % 2], fb[(BK - 1) % 2]);
  };

  if (slabs > 0) read_frags(as, bs, 0, fa[0], fb[0]);
  // Whole slabs followed by another whole slab: the lean main loop, two slabs (one per buffer)
  // per iteration.
  int s = 0;
  for (; s + 2 < whole; s += 2) {
    load_a.load(ra);
    load_b.load(rb);
    slab(LeanBuf<0>{}, true);
    load_a.load(ra);
    load_b.load(rb);
    slab(LeanBuf<1>{}, true);
  }
  if (s + 1 < whole) {
    load_a.load(ra);
    load_b.load(rb);
    slab(LeanBuf<0>{}, true);
    ++s;
  }
  // The last whole slab (its successor, if any, is the tail), then the tail slab.
  if (whole > 0) {
    if (tail) {
      const int k0 = k_lo + whole * BK;
      load_a.load_tail(ra, k0, k_hi);
      load_b.load_tail(rb, k0, k_hi);
    }
    slab(s & 1, tail);
  }
  if (tail) slab(whole & 1, false);

  if (split.partial != nullptr) {
    float* out = split.partial + static_cast<int64_t>(split_index * split.batches + batch) * m * n;
#pragma unroll
    for (int r = 0; r < TM; ++r) {
      const int i = m0 + row_base + (r / 4) * T::LM * 4 + r % 4;
      if (i >= m) continue;
#pragma unroll
      for (int c4 = 0; c4 < TN / 4; ++c4) {
        const int j = n0 + col_base + c4 * T::LN * 4;
        float* o = out + static_cast<int64_t>(i) * n + j;
        if (n % 4 == 0 && j < n) {  // j % 4 == 0 and the workspace is 256-byte aligned
          *reinterpret_cast<float4*>(o) = make_float4(acc[r][c4 * 4 + 0], acc[r][c4 * 4 + 1],
                                                      acc[r][c4 * 4 + 2], acc[r][c4 * 4 + 3]);
        } else {
#pragma unroll
          for (int c = 0; c < 4; ++c)
            if (j + c < n) o[c] = acc[r][c4 * 4 + c];
        }
      }
    }
    return;
  }
#pragma unroll
  for (int r = 0; r < TM; ++r) {
    const int i = m0 + row_base + (r / 4) * T::LM * 4 + r % 4;
    if (i >= m) continue;
#pragma unroll
    for (int c4 = 0; c4 < TN / 4; ++c4) {
      const int j = n0 + col_base + c4 * T::LN * 4;
      epilogue_store2<float>(e, batch, i, j, acc[r][c4 * 4 + 0], acc[r][c4 * 4 + 1]);
      epilogue_store2<float>(e, batch, i, j + 2, acc[r][c4 * 4 + 2], acc[r][c4 * 4 + 3]);
    }
  }
}

template <class T, bool A_KMAJ, bool B_KMAJ>
Status launch_lean_tile(const GemmProblem& p, const SplitArgs& split, int splits,
                        cudaStream_t stream) {
  const dim3 grid((p.n + T::BN - 1) / T::BN, (p.m + T::BM - 1) / T::BM, p.batch * splits);
  simt_f32_lean_kernel<T, A_KMAJ, B_KMAJ><<<grid, T::kThreads, 0, stream>>>(
      static_cast<const float*>(p.a), p.lda, p.stride_a, static_cast<const float*>(p.b), p.ldb,
      p.stride_b, p.m, p.n, p.k, split, make_epilogue_args(p));
  BLUBLAS_KERNEL_LAUNCH_CHECK("simt_f32_lean_kernel");
  return Status::success();
}

template <class T>
Status launch_lean_majors(const GemmProblem& p, const SplitArgs& split, int splits,
                          cudaStream_t stream) {
  if (p.a_k_major) {
    return p.b_k_major ? launch_lean_tile<T, true, true>(p, split, splits, stream)
                       : launch_lean_tile<T, true, false>(p, split, splits, stream);
  }
  return p.b_k_major ? launch_lean_tile<T, false, true>(p, split, splits, stream)
                     : launch_lean_tile<T, false, false>(p, split, splits, stream);
}

//                        BM   BN TM  TN LM LN blocks/SM
using Lean88 = LeanTile<128, 128, 8, 8, 4, 8, 2>;     // 256 thr, warp tiles 32 x 64
using Lean816 = LeanTile<128, 128, 8, 16, 8, 4, 2>;   // 128 thr, warp tiles 64 x 64
using Lean168 = LeanTile<128, 128, 16, 8, 4, 8, 2>;   // 128 thr, warp tiles 64 x 64
using Lean88n64 = LeanTile<128, 64, 8, 8, 8, 4, 4>;   // 128 thr, warp tiles 64 x 32
// Note [SIMT fp32 wide tiles]: cuBLAS's fastest fp32 kernels on the GPT-2 step (H100, session 4
// profile: cutlass_80_simt_sgemm_128x256_8x4 / 256x128_8x4, ~52 TFLOP/s against our 128 x 128
// lean kernels' 42-47) use 256-thread CTAs of 128 x 256 with 8 x 16 per thread, one CTA per SM.
// The same shape in this template: 43 FLOP per staged byte instead of 32 (fewer L2 reads per
// FFMA), 128 FFMA per 6 LDS.128, 8 warps per SM. ptxas (CUDA 13, sm_90a): 221-231 registers, no
// spills, 25088 bytes of shared memory. Measured (2026-11-25 sweep, Note [SIMT fp32 variant
// choice]): 256 x 128 is the default for dW (both operands m/n-major, +2% over l816); with a
// k-major operand both wide tiles lose 10-45% (2 warps per scheduler cannot hide those loads).
using Lean816w = LeanTile<128, 256, 8, 16, 8, 4, 1>;  // 256 thr, warp tiles 64 x 64, 2 x 4 warps
using Lean168w = LeanTile<256, 128, 16, 8, 4, 8, 1>;  // 256 thr, warp tiles 64 x 64, 4 x 2 warps

}  // namespace

bool simt_f32_lean_ok(const GemmProblem& p, bool vec) {
  return vec && p.m > 0 && p.n > 0 && (p.a_k_major || p.m % 4 == 0) &&
         (p.b_k_major || p.n % 4 == 0);
}

Status simt_f32_lean_launch(const GemmProblem& p, SimtLeanVariant v, const SplitArgs& split,
                            int splits, bool vec, cudaStream_t stream) {
  BLUBLAS_CHECK(simt_f32_lean_ok(p, vec), StatusCode::kNotSupported,
                "simt f32 lean kernel: needs 16-byte aligned A, B, lds and batch strides, and M "
                "(N) a multiple of 4 for an m- (n-) contiguous A (B); M=", p.m, " N=", p.n);
  switch (v) {
    case SimtLeanVariant::k88: return launch_lean_majors<Lean88>(p, split, splits, stream);
    case SimtLeanVariant::k816: return launch_lean_majors<Lean816>(p, split, splits, stream);
    case SimtLeanVariant::k168: return launch_lean_majors<Lean168>(p, split, splits, stream);
    case SimtLeanVariant::k88n64: return launch_lean_majors<Lean88n64>(p, split, splits, stream);
    case SimtLeanVariant::k816w: return launch_lean_majors<Lean816w>(p, split, splits, stream);
    case SimtLeanVariant::k168w: return launch_lean_majors<Lean168w>(p, split, splits, stream);
  }
  return Status(StatusCode::kInvalidArgument, "simt f32 lean kernel: unknown variant");
}

}  // namespace blublas::gemm_detail
