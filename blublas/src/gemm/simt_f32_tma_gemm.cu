// simt_f32_tma_gemm.cu: the strict fp32 GEMM on CUDA cores (FFMA only) fed by TMA on sm_90: the
// lean kernel's 128 x 128 tile and 8 x 8 lane tiles (Note [SIMT fp32 lean kernel]) with the
// operand slabs brought into shared memory by the tensor-memory accelerator through a ring of
// mbarrier-guarded stages instead of register-staged LDG / STS and one block barrier per slab.
// B n-major; A m-major (the dW products dY^T X of a training step) or, t88k8 only, k-major (the
// forwards on a transposed B, and dX). BLUBLAS_SIMT_VARIANT=t88 (16-deep slabs, 4 stages) or
// t88k8 (8-deep, 8 stages) forces one (Note [SIMT fp32 variant choice] in simt_f32_gemm.cu).
//
// Note [SIMT fp32 through TMA]
// Why. The lean kernel's loop is ~92% FFMA; ncu on fc dW (session 9) put its issue slots at 75.7%
// busy with barrier stalls 0.28 and dispatch 0.54 per issue. Here a consumer warp's loop is the
// fragment reads and the outer products only: no global loads, no shared-memory stores, no
// staging registers, no block-wide barrier. Each warp waits on the stage's "full" mbarrier (the
// TMA transaction count) and frees the stage with one arrival on its "empty" mbarrier (count:
// the 8 warps), so warps drift against each other by up to the ring's depth instead of meeting
// at a barrier every slab.
// Producer. Thread 0 (a consumer too) issues the first STAGES slabs before the loop; after its
// own warp finishes slab i it waits for the empty barrier of slab i-L's stage (every warp done
// with it; L = 2 with 4 or more stages, 1 in 087460f) and issues slab i-L+STAGES there. Every
// issued slab is consumed, so no copy is in flight at exit. Phases: slab i uses stage
// i % STAGES for the (i / STAGES)-th time, so its full wait and its stage's empty wait take
// parity (i / STAGES) & 1; neither barrier can run two phases ahead of a waiter (the refill needs
// every warp's arrival).
// Layout. A box of BK k-rows x 128 m (n) columns, m (n) contiguous, no swizzle: the stage is the
// lean kernel's [k][m] buffer without its padding (the padding served the transposing stores,
// which are gone). A lane's fragment read is one LDS.128 at its 4 x 4 block's row, 4 (A) or 8 (B)
// distinct float4 per warp in 64 / 128 contiguous bytes: one wavefront each.
// A k-major A comes as a box of 128 rows x 8 k (32-byte rows, k contiguous): a lane owns rows
// row_base + 4 r (interleaved, not 4 x 4 blocks) and reads each as one float4 = 4 k steps of that
// row, so a warp's read touches 4 consecutive rows, 128 contiguous bytes, one wavefront (16-deep
// rows would put rows r and r + 2 in the same banks). The 8 rows x 4 k (32 registers) replace
// A's double-buffered fragments (16), read per group of 4 k steps; B stays double-buffered.
// Same LDS count per k as the m-major loop (two LDS.128 of A and two of B), no transposing
// stores. The epilogue stores the interleaved rows (simt_store_lane_tile's ROWS_INTERLEAVED).
// Bounds. TMA fills zeros past M, N and K, so every slab is a whole slab (0 * 0 adds +0). A split
// range (split-K) must be whole slabs: k_split % BK == 0 (k_split is a multiple of 8, so t88k8
// takes every split plan, t88 those with k_split % 16 == 0), except the last split, which ends at
// K. Operands: 16-byte aligned base, leading dimension and batch stride multiples of 4 floats.
// Not taken on other architectures or with a k-major B: the caller keeps the lean kernel.
// Proxies: the warps' fragment reads (generic proxy) precede the refill's TMA write (async proxy)
// of the same stage: their arrivals release, the producer's empty wait acquires, and the producer
// fences (fence.proxy.async) before it issues the copy.
// Measured (session 36, 087460f, H200, gemm_bench fp32 GPT-2 set, ratio to cuBLAS in the same
// process; raw bench/results/h200/raw/session36/call4_simt_tma): correct (the SIMT GPU tests,
// every variant, 7/7) and SLOWER: t88 dW fc / fc_proj / lm head 0.679 / 0.677 / 0.694 against the
// default l88k16's 0.862 / 0.857 / 0.913 (qkv and attn_proj dW split in 7 / 14, k_split % 16 = 8:
// handed over to the default); t88k8 0.51-0.72 on every shape; the fp32 d12 step with t88k8 40.4K
// tok/s against 56.5K. That version unrolled the stage loop S times (a 4.9k-instruction body,
// ~78 KB, 84% FFMA against the lean loop's 92%, run by warps drifting apart), and every thread
// fenced before its arrival: fence.proxy.async is MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC.S in the SASS,
// once a slab per thread. This version (one slab per iteration with a run-time stage, the fence
// in the producer only, the refill lag L = 2) is NOT measured. Not the default anywhere.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "blublas/check.h"
#include "common/arch.cuh"
#include "common/tma_loader.h"
#include "gemm/epilogue.cuh"
#include "gemm/simt_gemm_launch.h"
#include "gemm/simt_lane_store.cuh"
#include "gemm/sm90_gemm_launch.h"  // sm90::check_binary: the build's sm_90a code
#include "gemm/sm90_primitives.cuh"

namespace blublas::gemm_detail {
namespace {

template <int BK_, int STAGES_, bool A_KMAJ_>
struct TmaTile {
  static constexpr int BM = 128, BN = 128, TM = 8, TN = 8, LM = 4, LN = 8;
  static constexpr int BK = BK_, kStages = STAGES_;
  static constexpr bool kAKMajor = A_KMAJ_;
  static constexpr int kWarpM = LM * TM, kWarpN = LN * TN;  // 32 x 64
  static constexpr int kWarpsN = BN / kWarpN;
  static constexpr int kWarps = (BM / kWarpM) * kWarpsN;  // 8
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kStageA = BK * BM, kStageB = BK * BN;  // floats
  static constexpr uint32_t kStageBytes = (kStageA + kStageB) * sizeof(float);
  static constexpr int kBarOffset = kStages * (kStageA + kStageB) * sizeof(float);  // bytes
  static constexpr int kSmemBytes = kBarOffset + 2 * kStages * 8;
  static_assert((kStageA * sizeof(float)) % 128 == 0 && (kStageB * sizeof(float)) % 128 == 0 &&
                    kStageBytes % 128 == 0,
                "TMA destinations stay 128-byte aligned");
  static_assert(kSmemBytes <= 113 * 1024, "two CTAs per SM");
  static_assert(BK % 2 == 0, "fragment double buffer: slab i+1's step 0 reads into buffer 0");
  static_assert(!kAKMajor || BK == 8, "k-major A: 32-byte rows (Note [SIMT fp32 through TMA])");
};

using Tma88k16 = TmaTile<16, 4, false>;
using Tma88k8 = TmaTile<8, 8, false>;
using Tma88k8KA = TmaTile<8, 8, true>;  // k-major A (forwards on a transposed B, dX)

extern __shared__ __align__(128) float tma_simt_smem[];

#if BLUBLAS_SM90A_ENABLED
__device__ __forceinline__ void tma_box(float* dst, const CUtensorMap* map, uint64_t* bar,
                                        bool rank3, int c0, int c1, int batch) {
  if (rank3) {
    sm90::tma_load_3d(dst, map, bar, c0, c1, batch);
  } else {
    sm90::tma_load_2d(dst, map, bar, c0, c1);
  }
}
#endif

// A lane's fragment of one k step: N values as N / 4 float4 reads STEP floats apart.
template <int N, int STEP>
__device__ __forceinline__ void lds_frag(const float* p, float (&f)[N]) {
#pragma unroll
  for (int i = 0; i < N / 4; ++i) {
    const float4 v = *reinterpret_cast<const float4*>(p + i * STEP);
    f[i * 4 + 0] = v.x; f[i * 4 + 1] = v.y; f[i * 4 + 2] = v.z; f[i * 4 + 3] = v.w;
  }
}

template <class T>
__global__ void __launch_bounds__(T::kThreads, 2)
    simt_f32_tma_kernel(const __grid_constant__ CUtensorMap map_a,
                        const __grid_constant__ CUtensorMap map_b, int a_rank3, int b_rank3, int m,
                        int n, int k_total, SplitArgs split, EpilogueArgs e) {
#if BLUBLAS_SM90A_ENABLED
  constexpr int BK = T::BK, S = T::kStages, TM = T::TM, TN = T::TN;
  // The refill lag: the producer frees slab i-L's stage after its own slab i, so it waits on the
  // slowest warp L-1 slabs behind it (087460f had L = 1: warp 0 met every other warp each slab);
  // the ring still holds S-L slabs ahead of the producer (32 k at t88: TMA needs ~1 us).
  constexpr int L = S >= 4 ? 2 : 1;
  float* const as = tma_simt_smem;
  float* const bs = tma_simt_smem + S * T::kStageA;
  uint64_t* const full = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(tma_simt_smem) +
                                                     T::kBarOffset);
  uint64_t* const empty = full + S;

  const int batch = blockIdx.z % split.batches;
  const int split_index = blockIdx.z / split.batches;
  const int m0 = blockIdx.y * T::BM, n0 = blockIdx.x * T::BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm0 = (warp / T::kWarpsN) * T::kWarpM, wn0 = (warp % T::kWarpsN) * T::kWarpN;
  // m-major A: 4 x 4 blocks (rows row_base + 0..3 and + 16); k-major A: rows row_base + 4 r.
  const int row_base = wm0 + (lane / T::LN) * (T::kAKMajor ? 1 : 4);
  const int col_base = wn0 + (lane % T::LN) * 4;
  const int k_lo = split.k_split > 0 ? split_index * split.k_split : 0;
  const int k_hi = split.k_split > 0 ? min(k_total, k_lo + split.k_split) : k_total;
  const int slabs = k_hi > k_lo ? (k_hi - k_lo + BK - 1) / BK : 0;
  const bool producer = threadIdx.x == 0;

  if (producer) {
    for (int s = 0; s < S; ++s) {
      sm90::mbar_init(&full[s], 1);
      sm90::mbar_init(&empty[s], T::kWarps);
    }
    sm90::mbar_fence_init();
  }
  __syncthreads();

  auto issue = [&](int slab, int stage) {
    sm90::mbar_arrive_expect_tx(&full[stage], T::kStageBytes);
    const int kc = k_lo + slab * BK;
    const int bz = batch;
    const int ma = static_cast<int>(blockIdx.y) * T::BM;
    tma_box(as + stage * T::kStageA, &map_a, &full[stage], a_rank3 != 0, T::kAKMajor ? kc : ma,
            T::kAKMajor ? ma : kc, bz);
    tma_box(bs + stage * T::kStageB, &map_b, &full[stage], b_rank3 != 0,
            static_cast<int>(blockIdx.x) * T::BN, kc, bz);
  };
  if (producer) {
    sm90::tma_prefetch_map(&map_a);
    sm90::tma_prefetch_map(&map_b);
    for (int s = 0; s < S && s < slabs; ++s) issue(s, s);
  }

  float acc[TM][TN];
#pragma unroll
  for (int r = 0; r < TM; ++r) {
#pragma unroll
    for (int c = 0; c < TN; ++c) acc[r][c] = 0.0f;
  }
  float fb[2][TN];
  auto read_b = [&](const float* sb, int kk, float(&fb_)[TN]) {
    lds_frag<TN, T::LN * 4>(sb + kk * T::BN + col_base, fb_);
  };
  // m-major A: A fragments double-buffered per k step like B's.
  float fa[2][TM];
  auto read_a = [&](const float* sa, int kk, float(&fa_)[TM]) {
    lds_frag<TM, T::LM * 4>(sa + kk * T::BM + row_base, fa_);
  };
  // k-major A: the stage is [BM][8] (k contiguous); a lane reads each of its 8 rows as one float4
  // of 4 k steps (a group), rows row_base + 4 r: the 4 distinct rows of a warp's read are 4
  // consecutive 32-byte rows, one wavefront.
  float ag[TM][4];
  auto read_a_group = [&](const float* sa, int g) {
#pragma unroll
    for (int r = 0; r < TM; ++r) {
      const float4 v =
          *reinterpret_cast<const float4*>(&sa[(row_base + r * T::LM) * BK + g * 4]);
      ag[r][0] = v.x; ag[r][1] = v.y; ag[r][2] = v.z; ag[r][3] = v.w;
    }
  };
  auto outer = [&](const float(&fa_)[TM], const float(&fb_)[TN]) {
#pragma unroll
    for (int r = 0; r < TM; ++r) {
#pragma unroll
      for (int c = 0; c < TN; ++c) acc[r][c] = fmaf(fa_[r], fb_[c], acc[r][c]);
    }
  };
  auto outer_group = [&](int kk, const float(&fb_)[TN]) {
#pragma unroll
    for (int r = 0; r < TM; ++r) {
#pragma unroll
      for (int c = 0; c < TN; ++c) acc[r][c] = fmaf(ag[r][kk], fb_[c], acc[r][c]);
    }
  };
  // Step 0 of a slab's fragments (B's, and A's where A is m-major) into buffer 0.
  auto read_first = [&](const float* sa, const float* sb) {
    if constexpr (!T::kAKMajor) read_a(sa, 0, fa[0]);
    read_b(sb, 0, fb[0]);
  };

  if (slabs > 0) {
    sm90::mbar_wait(&full[0], 0);
    read_first(as, bs);
  }
  // One slab per iteration, its stage a run-time index (session 36: the stage loop unrolled S
  // times made a 4.9k-instruction body, ~78 KB, which warps drifting apart run at different
  // places; Note [SIMT fp32 through TMA], measured).
  int st = 0;
  uint32_t parity = 0;
  for (int i = 0; i < slabs; ++i) {
    const float* sa = as + st * T::kStageA;
    const float* sb = bs + st * T::kStageB;
    if constexpr (T::kAKMajor) {
      read_a_group(sa, 0);
#pragma unroll
      for (int kk = 0; kk < BK - 1; ++kk) {
        if (kk == 4) read_a_group(sa, 1);
        read_b(sb, kk + 1, fb[(kk + 1) % 2]);
        outer_group(kk % 4, fb[kk % 2]);
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < BK - 1; ++kk) {
        read_a(sa, kk + 1, fa[(kk + 1) % 2]);
        read_b(sb, kk + 1, fb[(kk + 1) % 2]);
        outer(fa[kk % 2], fb[kk % 2]);
      }
    }
    // This warp's reads of the stage are done (the last step's fragments are in registers).
    sm90::mbar_arrive_warp(&empty[st], lane);
    const int nst = st + 1 == S ? 0 : st + 1;
    const uint32_t nparity = st + 1 == S ? parity ^ 1u : parity;
    if (i + 1 < slabs) {
      sm90::mbar_wait(&full[nst], nparity);
      read_first(as + nst * T::kStageA, bs + nst * T::kStageB);
    }
    if constexpr (T::kAKMajor) {
      outer_group(3, fb[(BK - 1) % 2]);
    } else {
      outer(fa[(BK - 1) % 2], fb[(BK - 1) % 2]);
    }
    // Refill slab i-L's stage with slab i-L+S once every warp has left it. The proxy fence after
    // the wait orders the warps' reads (generic proxy, released by their arrivals and acquired
    // here) before the TMA write (async proxy); one thread, not every thread before its arrival:
    // per thread it was a MEMBAR.ALL.CTA a slab (SASS of 087460f).
    if (producer && i >= L && i - L + S < slabs) {
      const int pst = st >= L ? st - L : st - L + S;
      sm90::mbar_wait(&empty[pst], st >= L ? parity : parity ^ 1u);
      sm90::fence_proxy_async_smem();
      issue(i - L + S, pst);
    }
    __syncwarp();  // warp 0 reconverges before the next slab's products
    st = nst;
    parity = nparity;
  }

  simt_store_lane_tile<TM, TN, T::LM, T::LN, T::kAKMajor>(acc, split, split_index, batch, m, n,
                                                          m0, n0, row_base, col_base, e);
#else
  __trap();  // never launched: simt_f32_tma_ok needs an sm_90 device and sm_90a machine code
#endif
}

// A 2-D map {rows, K}, box {128, BK} (k-major: {K, rows}, box {BK, 128}); 3-D with the batch
// for a strided batch; no swizzle.
Status make_map(CUtensorMap* map, const void* ptr, int64_t ld, int64_t stride, bool k_major,
                int rows, int k, int batch, int bk, bool* rank3) {
  *rank3 = batch > 1 && stride != 0;
  const uint64_t r = static_cast<uint64_t>(rows), kk = static_cast<uint64_t>(k);
  const uint64_t dims[3] = {k_major ? kk : r, k_major ? r : kk, static_cast<uint64_t>(batch)};
  const uint64_t strides[2] = {static_cast<uint64_t>(ld) * sizeof(float),
                               static_cast<uint64_t>(stride) * sizeof(float)};
  const uint32_t box[3] = {k_major ? static_cast<uint32_t>(bk) : 128u,
                           k_major ? 128u : static_cast<uint32_t>(bk), 1};
  return blublas::detail::encode_tensor_map_tiled(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                                                  *rank3 ? 3 : 2, ptr, dims, strides, box,
                                                  CU_TENSOR_MAP_SWIZZLE_NONE);
}

template <class T>
bool tile_ok(const GemmProblem& p, const SplitArgs& split, const DeviceInfo& dev) {
  // A batched operand takes a 3-D map: its batch stride a multiple of 16 bytes, the matrices
  // not overlapping (stride 0, one matrix for every batch, takes the 2-D map).
  auto aligned = [&](const void* ptr, int64_t ld, int64_t stride, int64_t lines) {
    return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0 && ld % 4 == 0 &&
           (p.batch == 1 || stride == 0 || (stride % 4 == 0 && stride >= ld * lines));
  };
  return dev.sm_version() == 90 && p.ab_type == Dtype::kF32 && p.a_k_major == T::kAKMajor &&
         !p.b_k_major && p.m > 0 && p.n > 0 && p.k > 0 &&
         aligned(p.a, p.lda, p.stride_a, p.a_k_major ? p.m : p.k) &&
         aligned(p.b, p.ldb, p.stride_b, p.k) && split.k_split % T::BK == 0 &&
         sm90::check_binary(dev).ok();
}

template <class T>
Status launch_tile(const GemmProblem& p, const SplitArgs& split, int splits, cudaStream_t stream) {
  alignas(64) CUtensorMap map_a;
  alignas(64) CUtensorMap map_b;
  bool a3 = false, b3 = false;
  BLUBLAS_RETURN_IF_ERROR(
      make_map(&map_a, p.a, p.lda, p.stride_a, T::kAKMajor, p.m, p.k, p.batch, T::BK, &a3));
  BLUBLAS_RETURN_IF_ERROR(
      make_map(&map_b, p.b, p.ldb, p.stride_b, false, p.n, p.k, p.batch, T::BK, &b3));
  const auto kernel = simt_f32_tma_kernel<T>;
  BLUBLAS_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes));
  const dim3 grid((p.n + T::BN - 1) / T::BN, (p.m + T::BM - 1) / T::BM, p.batch * splits);
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(map_a, map_b, a3 ? 1 : 0, b3 ? 1 : 0, p.m,
                                                      p.n, p.k, split, make_epilogue_args(p));
  BLUBLAS_KERNEL_LAUNCH_CHECK("simt_f32_tma_kernel");
  return Status::success();
}

}  // namespace

bool simt_f32_tma_ok(const GemmProblem& p, SimtTmaVariant v, const SplitArgs& split,
                     const DeviceInfo& dev) {
  if (v == SimtTmaVariant::k88k16) return tile_ok<Tma88k16>(p, split, dev);
  return p.a_k_major ? tile_ok<Tma88k8KA>(p, split, dev) : tile_ok<Tma88k8>(p, split, dev);
}

Status simt_f32_tma_launch(const GemmProblem& p, SimtTmaVariant v, const SplitArgs& split,
                           int splits, const DeviceInfo& dev, cudaStream_t stream) {
  BLUBLAS_CHECK(simt_f32_tma_ok(p, v, split, dev), StatusCode::kNotSupported,
                "simt f32 TMA kernel: needs an sm_90 device with sm_90a code, f32 m-major A (t88k8: "
                "or k-major) and n-major B (16-byte aligned, lds and batch strides multiples of 4) and whole "
                "slabs per split; M=", p.m, " N=", p.n, " K=", p.k, " k_split=", split.k_split);
  if (v == SimtTmaVariant::k88k16) return launch_tile<Tma88k16>(p, split, splits, stream);
  return p.a_k_major ? launch_tile<Tma88k8KA>(p, split, splits, stream)
                     : launch_tile<Tma88k8>(p, split, splits, stream);
}

}  // namespace blublas::gemm_detail
