// simt_f32_lean_kernel.cuh (internal): the lean strict fp32 GEMM kernel template and its
// launchers (Note [SIMT fp32 lean kernel], Note [Deep slabs] in simt_f32_lean_gemm.cu). Included by
// simt_f32_lean_gemm.cu (the 8-deep tiles) and simt_f32_lean_k16_gemm.cu (the 16-deep ones: a
// translation unit of its own, so the two compile in parallel); everything here has internal
// linkage, each file instantiates its own tiles.
#pragma once

#include <cstdint>
#include <type_traits>

#include "blublas/check.h"
#include "gemm/epilogue.cuh"
#include "gemm/simt_gemm_launch.h"
#include "gemm/simt_lane_store.cuh"

// Note [SIMT fp32 register banks] (session 9, H100; raw data bench/results/h100/raw/session9)
// Where l88k16's issue slots go, read per instruction: scripts/device-sass-stalls.sh samples the
// stalls of every SASS instruction with Nsight Compute (fc fwd / fc dW), scripts/sass_stalls.py
// joins them with cuobjdump's SASS (reuse flags) and groups the main loop's FFMAs by the register
// bank pattern of the operands they read from the register file (bank = register % 2).
//  - The loop is 2227 instructions per 32 k: 2048 FFMA, 128 LDS.128, 8 STS.128, 8 LDG.128, 2 BAR,
//    ~33 others. fc dW: issue slots 75.7%, no eligible warp 16.7%, stalls per issue: dispatch
//    0.54, barrier 0.28, short scoreboard 0.18, wait 0.12 (not_selected 2.26 is the other warps).
//  - Dispatch stalls: ~42% of them sit on the LDS.128 (3.8 samples per issue; ptxas clusters up
//    to 8 fragment loads back to back), ~45% on FFMAs (0.2 per issue, 0.8 on the FFMA right after
//    an LDS).
//  - Register banks: l88k16's allocation is already good: 28% of the FFMAs read two registers of
//    one bank (the start of each reuse chain: three fresh operands cannot avoid it), 0.5% all three
//    (11 of 2048). Every source-level reordering tried gives ptxas a worse allocation: serpentine
//    or column-major outer products, B fragments first, A/B interleaved, one fragment buffer,
//    __maxnreg__ 120-124 (112 spills): 58-81% pair and 6-12% triple conflicts. l88 (8-deep slabs)
//    has 77% / 10%. The one A/B measured, l88k16v (08a3068: the fragment reads as
//    ld.volatile.shared.v4, which spreads ptxas's LDS: 46 instead of 62 within 3 instructions of
//    another), moved the conflicts with the majors: mn (dW) 31% / 1% -> 84.5 vs 84.7 ms a GPT-2
//    step (a tie; ncu fc dW issue 76.8%, dispatch stalls unchanged at 0.56), kk / kn (forward,
//    dX) 64-69% / 8-9% -> 93.5 vs 88.5 and 90.2 vs 85.4 ms (5-6% slower). So triple-bank
//    conflicts cost about what they add in cycles, spreading the LDS does not remove the
//    dispatch stalls, and this loop as ptxas compiles it has no bank slack left; removed.
// What is left against cuBLAS (~7%): the dispatch stalls that are not bank conflicts, the barrier
// per 16 k at 4 warps per scheduler, the K = 768 tiles' fill and wave tail. cuBLAS's kernel
// (128 x 256, 8 x 16 per thread, 2 warps per scheduler) needs an instruction schedule ptxas did
// not give our 8 x 16 tiles (session 8: 0.74-0.82 of cuBLAS).

namespace blublas::gemm_detail {
namespace {

// BK_: the slab depth (k per shared-memory buffer, one barrier per slab); KC_: the register
// staging depth (k per chunk of the next slab held in registers at once, BK_ % KC_ == 0; Note
// [Deep slabs]). Defaults 8 / 8: the kernel as it was before deep slabs (same SASS).
template <int BM_, int BN_, int TM_, int TN_, int LM_, int LN_, int MIN_BLOCKS_, int BK_ = 8,
          int KC_ = BK_>
struct LeanTile {
  static constexpr int BM = BM_, BN = BN_, TM = TM_, TN = TN_, LM = LM_, LN = LN_;
  static constexpr int kMinBlocks = MIN_BLOCKS_;
  static constexpr int BK = BK_, KC = KC_, kChunks = BK_ / KC_;
  static constexpr int kWarpM = LM * TM, kWarpN = LN * TN;
  static constexpr int kWarpsM = BM / kWarpM, kWarpsN = BN / kWarpN;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kALoads = BM * KC / 4 / kThreads;  // float4 per thread per chunk
  static constexpr int kBLoads = BN * KC / 4 / kThreads;
  // Two buffers of both operands, rows padded by 4 floats. Over the 48 KiB a static allocation may
  // take, the kernel uses dynamic shared memory (the launcher raises the limit).
  static constexpr int kSmemBytes = 2 * BK * (BM + 4 + BN + 4) * static_cast<int>(sizeof(float));
  static constexpr bool kDynSmem = kSmemBytes > 48 * 1024;
  static_assert(LM * LN == 32, "lane grid must be one warp");
  static_assert(LM <= 8 && LN <= 8, "one wavefront per fragment read");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "lane tiles are 4 x 4 blocks");
  static_assert(BM % kWarpM == 0 && BN % kWarpN == 0, "CTA tile must be whole warp tiles");
  static_assert(KC % 8 == 0 && BK % KC == 0, "whole 8-deep sub-chunks, whole chunks per slab");
  static_assert(kALoads >= 1 && kBLoads >= 1, "every thread loads at least one float4 per chunk");
  static_assert(BM * KC / 4 % kThreads == 0 && BN * KC / 4 % kThreads == 0, "even chunk split");
};

// Chunk coordinates of float4 number g (= thread + l * THREADS) of an operand chunk (KC deep).
//  k-major (ROWS x KC, k contiguous): pairs of lanes cover 8 k of one row; a deeper chunk is
//    KC / 8 such 8-deep sub-chunks one after the other in g (so a warp's 32 float4 are 16 rows x
//    8 k of one sub-chunk: the transposed stores stay conflict-free)                -> (row, kq)
//  m/n-major (KC x ROWS, rows contiguous): g walks a k row in float4                -> (kq, row)
template <int ROWS, int KC, bool KMAJ>
__device__ __forceinline__ void lean_coords(int g, int* row, int* kq) {
  if constexpr (KMAJ && KC == 8) {
    *row = g / 2;
    *kq = (g % 2) * 4;
  } else if constexpr (KMAJ) {
    const int r = g % (2 * ROWS);
    *row = r / 2;
    *kq = g / (2 * ROWS) * 8 + (r % 2) * 4;
  } else {
    *kq = g / (ROWS / 4);
    *row = (g % (ROWS / 4)) * 4;
  }
}

// One operand's chunk loads. ptr[l] points at load l's float4 of the next whole chunk; rows are
// clamped at construction (Note [SIMT fp32 lean kernel]).
template <int ROWS, int LOADS, int THREADS, bool KMAJ, int KC>
struct LeanLoader {
  const float* ptr[LOADS];
  int64_t step;  // floats from one chunk to the next

  __device__ __forceinline__ LeanLoader(const float* x, int64_t ld, int r0, int k_lo, int n_rows) {
    step = KMAJ ? KC : KC * ld;
#pragma unroll
    for (int l = 0; l < LOADS; ++l) {
      int row, kq;
      lean_coords<ROWS, KC, KMAJ>(static_cast<int>(threadIdx.x) + l * THREADS, &row, &kq);
      if (KMAJ) {
        const int r = min(r0 + row, n_rows - 1);
        ptr[l] = x + static_cast<int64_t>(r) * ld + (k_lo + kq);
      } else {
        const int r = min(r0 + row, n_rows - 4);  // n_rows % 4 == 0: stays 16-byte aligned
        ptr[l] = x + static_cast<int64_t>(k_lo + kq) * ld + r;
      }
    }
  }

  // A whole chunk (every k inside the range): unguarded float4 loads, then advance.
  __device__ __forceinline__ void load(float4 (&reg)[LOADS]) {
#pragma unroll
    for (int l = 0; l < LOADS; ++l) {
      reg[l] = __ldg(reinterpret_cast<const float4*>(ptr[l]));
      ptr[l] += step;
    }
  }

  // A chunk of the tail slab: k0 = its first k, n_k = the end of this split's k range; zeros past
  // n_k. ADVANCE: move on to the next chunk (a tail slab of several chunks).
  template <bool ADVANCE>
  __device__ __forceinline__ void load_tail(float4 (&reg)[LOADS], int k0, int n_k) {
#pragma unroll
    for (int l = 0; l < LOADS; ++l) {
      int row, kq;
      lean_coords<ROWS, KC, KMAJ>(static_cast<int>(threadIdx.x) + l * THREADS, &row, &kq);
      if (KMAJ) {
        float v[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) v[t] = k0 + kq + t < n_k ? __ldg(ptr[l] + t) : 0.0f;
        reg[l] = make_float4(v[0], v[1], v[2], v[3]);
      } else {
        reg[l] = k0 + kq < n_k ? __ldg(reinterpret_cast<const float4*>(ptr[l]))
                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
      if constexpr (ADVANCE) ptr[l] += step;
    }
  }
};

// Stores one chunk; s points at the chunk's first k row of the buffer.
template <int ROWS, int LOADS, int THREADS, bool KMAJ, int KC>
__device__ __forceinline__ void lean_store(float* s, const float4 (&reg)[LOADS]) {
  constexpr int kLd = ROWS + 4;
#pragma unroll
  for (int l = 0; l < LOADS; ++l) {
    int row, kq;
    lean_coords<ROWS, KC, KMAJ>(static_cast<int>(threadIdx.x) + l * THREADS, &row, &kq);
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

// The dynamic shared memory of the kernels over the static limit (LeanTile::kDynSmem). Declared
// here, not in the kernel: an extern declaration inside the kernel body, even unused, changed the
// register allocation of the static-memory kernels.
extern __shared__ __align__(16) float lean_dyn_smem[];

template <class T, bool A_KMAJ, bool B_KMAJ>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks)
    simt_f32_lean_kernel(const float* __restrict__ a, int64_t lda, int64_t stride_a,
                         const float* __restrict__ b, int64_t ldb, int64_t stride_b, int m, int n,
                         int k_total, SplitArgs split, EpilogueArgs e) {
  constexpr int BM = T::BM, BN = T::BN, TM = T::TM, TN = T::TN, BK = T::BK, KC = T::KC;
  constexpr int kThreads = T::kThreads;
  constexpr int kLdA = BM + 4, kLdB = BN + 4;
  constexpr int kStageA = BK * kLdA, kStageB = BK * kLdB;  // floats per buffer
  __shared__ __align__(16) float as_static[T::kDynSmem ? 4 : 2 * kStageA];
  __shared__ __align__(16) float bs_static[T::kDynSmem ? 4 : 2 * kStageB];
  float* const as = T::kDynSmem ? lean_dyn_smem : as_static;
  float* const bs = T::kDynSmem ? lean_dyn_smem + 2 * kStageA : bs_static;

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

  LeanLoader<BM, T::kALoads, kThreads, A_KMAJ, KC> load_a(a, lda, m0, k_lo, m);
  LeanLoader<BN, T::kBLoads, kThreads, B_KMAJ, KC> load_b(b, ldb, n0, k_lo, n);
  float4 ra[T::kALoads], rb[T::kBLoads];
  if (slabs > 0) {
#pragma unroll
    for (int c = 0; c < T::kChunks; ++c) {
      if (whole > 0) {
        load_a.load(ra);
        load_b.load(rb);
      } else {
        load_a.template load_tail<(T::kChunks > 1)>(ra, k_lo + c * KC, k_hi);
        load_b.template load_tail<(T::kChunks > 1)>(rb, k_lo + c * KC, k_hi);
      }
      lean_store<BM, T::kALoads, kThreads, A_KMAJ, KC>(as + c * KC * kLdA, ra);
      lean_store<BN, T::kBLoads, kThreads, B_KMAJ, KC>(bs + c * KC * kLdB, rb);
    }
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
  // shared-memory addresses are fixed offsets). With `next`, ra/rb hold chunk 0 of the next slab
  // (loaded by the caller), stored to the other buffer before step BK-1's FFMAs and the barrier
  // taken there (Note [Early barrier]). A slab of several chunks (Note [Deep slabs]) stores chunk
  // c - 1 and loads chunk c at the top of chunk c (k step c * KC): whole chunks, or tail-slab
  // chunks where cur_c is an int (the last whole slab, whose successor may be the tail slab).
  auto slab = [&](auto cur_c, bool next) {
    const int cur = cur_c;
    const float* sa = as + cur * kStageA;
    const float* sb = bs + cur * kStageB;
#pragma unroll
    for (int kk = 0; kk < BK - 1; ++kk) {
      if constexpr (T::kChunks > 1) {
        if (next && kk > 0 && kk % KC == 0) {
          const int c = kk / KC;
          lean_store<BM, T::kALoads, kThreads, A_KMAJ, KC>(
              as + (cur ^ 1) * kStageA + (c - 1) * KC * kLdA, ra);
          lean_store<BN, T::kBLoads, kThreads, B_KMAJ, KC>(
              bs + (cur ^ 1) * kStageB + (c - 1) * KC * kLdB, rb);
          if constexpr (std::is_same_v<decltype(cur_c), int>) {
            const int k0 = k_lo + whole * BK + c * KC;
            load_a.template load_tail<true>(ra, k0, k_hi);
            load_b.template load_tail<true>(rb, k0, k_hi);
          } else {
            load_a.load(ra);
            load_b.load(rb);
          }
        }
      }
      read_frags(sa, sb, kk + 1, fa[(kk + 1) % 2], fb[(kk + 1) % 2]);
      outer(fa[kk % 2], fb[kk % 2]);
    }
    if (next) {
      constexpr int kLast = (T::kChunks - 1) * KC;  // the last chunk's first k
      lean_store<BM, T::kALoads, kThreads, A_KMAJ, KC>(as + (cur ^ 1) * kStageA + kLast * kLdA, ra);
      lean_store<BN, T::kBLoads, kThreads, B_KMAJ, KC>(bs + (cur ^ 1) * kStageB + kLast * kLdB, rb);
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
      load_a.template load_tail<(T::kChunks > 1)>(ra, k0, k_hi);
      load_b.template load_tail<(T::kChunks > 1)>(rb, k0, k_hi);
    }
    slab(s & 1, tail);
  }
  if (tail) slab(whole & 1, false);

  simt_store_lane_tile<TM, TN, T::LM, T::LN>(acc, split, split_index, batch, m, n, m0, n0, row_base, col_base,
                                          e);
}

template <class T, bool A_KMAJ, bool B_KMAJ>
Status launch_lean_tile(const GemmProblem& p, const SplitArgs& split, int splits,
                        cudaStream_t stream) {
  const dim3 grid((p.n + T::BN - 1) / T::BN, (p.m + T::BM - 1) / T::BM, p.batch * splits);
  const auto kernel = simt_f32_lean_kernel<T, A_KMAJ, B_KMAJ>;
  const int smem = T::kDynSmem ? T::kSmemBytes : 0;
  if constexpr (T::kDynSmem) {
    BLUBLAS_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  }
  kernel<<<grid, T::kThreads, smem, stream>>>(
      static_cast<const float*>(p.a), p.lda, p.stride_a, static_cast<const float*>(p.b), p.ldb,
      p.stride_b, p.m, p.n, p.k, split, make_epilogue_args(p));
  BLUBLAS_KERNEL_LAUNCH_CHECK("simt_f32_lean_kernel");
  return Status::success();
}

template <class T>
Status launch_lean_majors(const GemmProblem& p, const SplitArgs& split, int splits,
                          cudaStream_t stream) {
  return with_majors(p, [&]<bool A_KMAJ, bool B_KMAJ>() {
    return launch_lean_tile<T, A_KMAJ, B_KMAJ>(p, split, splits, stream);
  });
}

}  // namespace
}  // namespace blublas::gemm_detail
