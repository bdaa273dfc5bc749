// simt_f32_async_gemm.cu: the strict fp32 GEMM on CUDA cores (FFMA only) with its operands staged
// by cp.async through a multi-stage shared-memory ring instead of through registers (Note [SIMT
// fp32 async kernel]). Chosen by simt_f32_gemm.cu; BLUBLAS_SIMT_VARIANT=a88|a816|a816w|a168w forces
// one. Needs sm_80 (cp.async) and an n-major B (simt_f32_async_ok).
//
// Note [SIMT fp32 async kernel]
// Why. The lean kernels (Note [SIMT fp32 lean kernel]) stage the next slab in registers: an LDG
// at the top of the slab, an STS (four, transposed, for a k-major operand) at its end. That costs
// registers (so 8 x 16 per lane fits only one 256-thread CTA or two 128-thread CTAs per SM) and
// makes every warp wait for its own loads at the store, one slab after issuing them: with 2 warps
// per scheduler the wide lean tiles lost 10-45% with a k-major operand (Note [SIMT fp32 wide
// tiles]). cuBLAS's fastest strict fp32 kernels on the GPT-2 step (H100 profile, session 8:
// sm80_xmma_gemm_f32f32 128x128x8 stage3 with 2 x 2 warps and 256x128x8 stage3 with 4 x 2 warps,
// cutlass_80_simt_sgemm 128x256_8x4 / 256x128_8x4; 78.7 + 58.7 + 57.5 + 24.0 + 17.6 ms of the
// 236.8 ms of GEMM) all hold 128 accumulators per thread and fill 3-4 stages of 8-deep slabs with
// cp.async, which writes shared memory without passing through registers and without the warp
// waiting for it until the slab is needed, S - 1 slabs later.
// How. Slabs are BK = 8 deep, the ring holds S of them (S - 1 in flight while one is read). Slab t
// goes to stage t % S; its copies are issued at the top of slab t - S + 1 and committed as one
// group (an empty group past the last slab, so the count stays regular); before reading slab t + 1
// a thread waits until at most S - 2 groups are pending, then the CTA's barrier makes every
// thread's copies visible. The barrier also ends every read of the stage that the next issue
// overwrites (slab t's fragments are all read before the barrier that ends slab t), so one barrier
// per slab suffices, as in the lean kernels. Fragments are double-buffered in registers (step kk + 1
// read while step kk's FFMAs issue), the shared layout is the lean one (as[k][m], bs[k][n], rows
// padded by 4 floats: LDS.128 fragment reads, one wavefront each).
// Copies. An m/n-major operand: one 16-byte cp.async per float4 of a k row. A k-major operand is
// transposed on the way: one 4-byte cp.async per float; lane l of a warp copies k = l % 8 of row
// l / 8, so a warp instruction reads 4 rows x 32 bytes (4 full sectors) and writes banks
// 4 * k + row (rows padded to BM + 4 = 4 mod 32): conflict-free. Rows are clamped as in the lean
// kernels (a row past the operand's end reads a valid row whose results are never stored); k past
// the split's range is zero-filled by the copy's source size (0 bytes read), so there is no tail
// slab: the last slab is the only one that takes the guarded copies.
// Configurations (BM x BN, threads, per lane, CTAs per SM, stages; shared memory per CTA):
//   a88    128 x 128, 256 threads, 8 x 8,  2 per SM, 4 stages, 33792 bytes
//   a816   128 x 128, 128 threads, 8 x 16, 2 per SM, 4 stages, 33792 bytes (xmma 128x128x8, 2 x 2)
//   a816w  128 x 256, 256 threads, 8 x 16, 1 per SM, 4 stages, 50176 bytes (cutlass 128x256_8x4)
//   a168w  256 x 128, 256 threads, 16 x 8, 1 per SM, 4 stages, 50176 bytes (cutlass 256x128_8x4)
// Main loop per 8-deep slab per thread (a816w, A k-major): 1024 FFMA, 48 LDS.128, 4 4-byte and 2
// 16-byte cp.async, commit, wait, barrier, pointer increments: ~94% FFMA (lean l88k16: 92%).
#include <cuda_runtime.h>

#include <cstdint>

#include "blublas/check.h"
#include "blublas/device_info.h"
#include "common/cp_async.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/simt_gemm_launch.h"
#include "gemm/simt_lane_store.cuh"

namespace blublas::gemm_detail {
namespace {

template <int BM_, int BN_, int TM_, int TN_, int LM_, int LN_, int MIN_BLOCKS_, int STAGES_>
struct AsyncTile {
  static constexpr int BM = BM_, BN = BN_, TM = TM_, TN = TN_, LM = LM_, LN = LN_;
  static constexpr int kMinBlocks = MIN_BLOCKS_, kStages = STAGES_, BK = 8;
  static constexpr int kWarpM = LM * TM, kWarpN = LN * TN;
  static constexpr int kWarpsM = BM / kWarpM, kWarpsN = BN / kWarpN;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kLdA = BM + 4, kLdB = BN + 4;
  static constexpr int kStageA = BK * kLdA, kStageB = BK * kLdB;  // floats per stage
  static constexpr int kSmemBytes =
      kStages * (kStageA + kStageB) * static_cast<int>(sizeof(float));
  static_assert(LM * LN == 32, "lane grid must be one warp");
  static_assert(LM <= 8 && LN <= 8, "one wavefront per fragment read");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "lane tiles are 4 x 4 blocks");
  static_assert(BM % kWarpM == 0 && BN % kWarpN == 0, "CTA tile must be whole warp tiles");
  static_assert(kStages >= 3, "S - 1 slabs in flight while one is read");
  static_assert(kLdA % 32 == 4 && kLdB % 32 == 4, "transposed copies conflict-free");
};

// One operand's copies of a slab. k-major (ROWS x 8 slab, k contiguous): kSlots floats per thread,
// slot l = row (thread + l * THREADS) / 8, k = thread % 8 (the same k for every slot). m/n-major
// (8 x ROWS, rows contiguous): kSlots float4, slot g = thread + l * THREADS at k row g / (ROWS / 4),
// rows (g % (ROWS / 4)) * 4.
template <int ROWS, int THREADS, bool KMAJ>
struct AsyncLoader {
  static constexpr int kLd = ROWS + 4;
  static constexpr int kSlots = KMAJ ? ROWS * 8 / THREADS : ROWS * 2 / THREADS;
  // Slot l's k row minus slot 0's (m/n-major) and its shared offset minus slot 0's, in floats.
  static constexpr int kSlotK = KMAJ ? 0 : THREADS / (ROWS / 4);
  static constexpr int kSlotDelta = KMAJ ? THREADS / 8 : kSlotK * kLd;
  static_assert(kSlots >= 1 && (KMAJ ? ROWS * 8 % THREADS : ROWS * 2 % THREADS) == 0,
                "even slab split");
  static_assert(KMAJ ? THREADS % 8 == 0 : THREADS % (ROWS / 4) == 0,
                "every slot of a thread has the same k (k-major) or the same rows (m/n-major)");
  const float* ptr[kSlots];
  int64_t step;  // floats from one slab to the next
  uint32_t dst;  // slot 0's shared offset within a stage, bytes
  int kq;        // slot 0's k within the slab

  __device__ __forceinline__ AsyncLoader(const float* x, int64_t ld, int r0, int k_lo, int n_rows) {
    const int t = static_cast<int>(threadIdx.x);
    step = KMAJ ? 8 : 8 * ld;
    int row0;
    if constexpr (KMAJ) {
      kq = t % 8;
      row0 = t / 8;
    } else {
      kq = t / (ROWS / 4);
      row0 = (t % (ROWS / 4)) * 4;
    }
#pragma unroll
    for (int l = 0; l < kSlots; ++l) {
      if constexpr (KMAJ) {
        const int r = min(r0 + row0 + l * (THREADS / 8), n_rows - 1);
        ptr[l] = x + static_cast<int64_t>(r) * ld + (k_lo + kq);
      } else {  // n_rows % 4 == 0: the clamped float4 stays 16-byte aligned and inside
        const int r = min(r0 + row0, n_rows - 4);
        ptr[l] = x + static_cast<int64_t>(k_lo + kq + l * kSlotK) * ld + r;
      }
    }
    dst = static_cast<uint32_t>((kq * kLd + row0) * sizeof(float));
  }

  // Copies one slab into the stage at shared address `stage` (bytes) and advances to the next.
  // GUARD: k at or past `k_end` (counted from the slab's first k) is zero-filled, not read.
  template <bool GUARD>
  __device__ __forceinline__ void issue(uint32_t stage, int k_end) {
#pragma unroll
    for (int l = 0; l < kSlots; ++l) {
      const uint32_t s = stage + dst + static_cast<uint32_t>(l * kSlotDelta * sizeof(float));
      if constexpr (KMAJ) {
        if constexpr (GUARD) {
          cp_async::copy4(s, ptr[l], kq < k_end ? 4 : 0);
        } else {
          cp_async::copy4(s, ptr[l]);
        }
      } else {
        if constexpr (GUARD) {
          cp_async::copy16(s, ptr[l], kq + l * kSlotK < k_end ? 16 : 0);
        } else {
          cp_async::copy16(s, ptr[l]);
        }
      }
      ptr[l] += step;
    }
  }
};

extern __shared__ __align__(16) float async_dyn_smem[];

template <class T, bool A_KMAJ, bool B_KMAJ>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks)
    simt_f32_async_kernel(const float* __restrict__ a, int64_t lda, int64_t stride_a,
                          const float* __restrict__ b, int64_t ldb, int64_t stride_b, int m, int n,
                          int k_total, SplitArgs split, EpilogueArgs e) {
  constexpr int BM = T::BM, BN = T::BN, TM = T::TM, TN = T::TN, S = T::kStages;
  constexpr int kLdA = T::kLdA, kLdB = T::kLdB;
  float* const as = async_dyn_smem;
  float* const bs = async_dyn_smem + S * T::kStageA;

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
  const int slabs = (k_hi - k_lo + 7) / 8;

  float acc[TM][TN];
#pragma unroll
  for (int r = 0; r < TM; ++r) {
#pragma unroll
    for (int c = 0; c < TN; ++c) acc[r][c] = 0.0f;
  }

  AsyncLoader<BM, T::kThreads, A_KMAJ> load_a(a, lda, m0, k_lo, m);
  AsyncLoader<BN, T::kThreads, B_KMAJ> load_b(b, ldb, n0, k_lo, n);
  const uint32_t as_u32 = cp_async::smem_u32(as), bs_u32 = cp_async::smem_u32(bs);
  constexpr uint32_t kStageBytesA = T::kStageA * sizeof(float);
  constexpr uint32_t kStageBytesB = T::kStageB * sizeof(float);
  // Slab t's copies into stage st (the guarded form for the slab that reaches past k_hi).
  auto issue = [&](int t, int st) {
    const int k_end = k_hi - (k_lo + t * 8);
    if (k_end >= 8) {
      load_a.template issue<false>(as_u32 + st * kStageBytesA, k_end);
      load_b.template issue<false>(bs_u32 + st * kStageBytesB, k_end);
    } else {
      load_a.template issue<true>(as_u32 + st * kStageBytesA, k_end);
      load_b.template issue<true>(bs_u32 + st * kStageBytesB, k_end);
    }
  };
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < slabs) issue(s, s);
    cp_async::commit();
  }
  cp_async::wait<S - 2>();
  __syncthreads();

  float fa[2][TM], fb[2][TN];
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

  if (slabs > 0) read_frags(as, bs, 0, fa[0], fb[0]);
  int rs = 0, ws = S - 1;  // the stage read now, the stage the next issue fills
  for (int t = 0; t < slabs; ++t) {
    const float* sa = as + rs * T::kStageA;
    const float* sb = bs + rs * T::kStageB;
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      if (kk == 0) {
        if (t + S - 1 < slabs) issue(t + S - 1, ws);
        cp_async::commit();
        ws = ws + 1 == S ? 0 : ws + 1;
      }
      if (kk < 7) {
        read_frags(sa, sb, kk + 1, fa[(kk + 1) % 2], fb[(kk + 1) % 2]);
      } else {
        cp_async::wait<S - 2>();
        __syncthreads();
        rs = rs + 1 == S ? 0 : rs + 1;
        if (t + 1 < slabs) read_frags(as + rs * T::kStageA, bs + rs * T::kStageB, 0, fa[0], fb[0]);
      }
#pragma unroll
      for (int r = 0; r < TM; ++r) {
#pragma unroll
        for (int c = 0; c < TN; ++c) acc[r][c] = fmaf(fa[kk % 2][r], fb[kk % 2][c], acc[r][c]);
      }
    }
  }
  cp_async::wait<0>();  // only empty groups remain; nothing may be in flight at exit

  simt_store_lane_tile<TM, TN, T::LM, T::LN>(acc, split, split_index, batch, m, n, m0, n0,
                                             row_base, col_base, e);
}

//                          BM   BN TM  TN LM LN blk S
using Async88 = AsyncTile<128, 128, 8, 8, 4, 8, 2, 4>;     // 256 thr, warp tiles 32 x 64
using Async816 = AsyncTile<128, 128, 8, 16, 8, 4, 2, 4>;   // 128 thr, warp tiles 64 x 64
using Async816w = AsyncTile<128, 256, 8, 16, 8, 4, 1, 4>;  // 256 thr, 2 x 4 warps
using Async168w = AsyncTile<256, 128, 16, 8, 4, 8, 1, 4>;  // 256 thr, 4 x 2 warps

template <class T, bool A_KMAJ, bool B_KMAJ>
Status launch_async_tile(const GemmProblem& p, const SplitArgs& split, int splits,
                         cudaStream_t stream) {
  const dim3 grid((p.n + T::BN - 1) / T::BN, (p.m + T::BM - 1) / T::BM, p.batch * splits);
  const auto kernel = simt_f32_async_kernel<T, A_KMAJ, B_KMAJ>;
  if constexpr (T::kSmemBytes > 48 * 1024) {
    BLUBLAS_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes));
  }
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(
      static_cast<const float*>(p.a), p.lda, p.stride_a, static_cast<const float*>(p.b), p.ldb,
      p.stride_b, p.m, p.n, p.k, split, make_epilogue_args(p));
  BLUBLAS_KERNEL_LAUNCH_CHECK("simt_f32_async_kernel");
  return Status::success();
}

// B n-major only (simt_f32_async_ok): the SIMT path runs NT problems on a transposed B (Note [SIMT
// NT via a transposed B]), and a88 with both operands k-major spills at its 128-register cap.
template <class T>
Status launch_async_majors(const GemmProblem& p, const SplitArgs& split, int splits,
                           cudaStream_t stream) {
  return p.a_k_major ? launch_async_tile<T, true, false>(p, split, splits, stream)
                     : launch_async_tile<T, false, false>(p, split, splits, stream);
}

}  // namespace

bool simt_f32_async_ok(const GemmProblem& p, bool vec) {
  if (p.b_k_major || !simt_f32_lean_ok(p, vec)) return false;
  DeviceInfo info;
  return current_device_info(&info).ok() && info.sm_major >= 8;
}

Status simt_f32_async_launch(const GemmProblem& p, SimtAsyncVariant v, const SplitArgs& split,
                             int splits, bool vec, cudaStream_t stream) {
  BLUBLAS_CHECK(simt_f32_async_ok(p, vec), StatusCode::kNotSupported,
                "simt f32 async kernel: needs sm_80 or newer, an n-major B, 16-byte aligned A, B, "
                "lds and batch strides, M a multiple of 4 for an m-major A and N of 4; M=",
                p.m, " N=", p.n);
  switch (v) {
    case SimtAsyncVariant::k88: return launch_async_majors<Async88>(p, split, splits, stream);
    case SimtAsyncVariant::k816: return launch_async_majors<Async816>(p, split, splits, stream);
    case SimtAsyncVariant::k816w: return launch_async_majors<Async816w>(p, split, splits, stream);
    case SimtAsyncVariant::k168w: return launch_async_majors<Async168w>(p, split, splits, stream);
  }
  return Status(StatusCode::kInvalidArgument, "simt f32 async kernel: unknown variant");
}

}  // namespace blublas::gemm_detail
