// sm90_gemm_kernel.cuh (internal): the sm_90a GEMM kernel template. One CTA per SM, persistent
// over work units (output tile x batch x K split) in a grouped (L2-friendly) order; warp-
// specialized: warpgroup 0 is the producer (one thread issues TMA loads of A and B into a
// multi-stage ring of 128B-swizzled shared-memory tiles), warpgroups 1..kConsumers are consumers
// (wgmma from shared memory, fp32 accumulators in registers, epilogue straight from registers).
// Instantiated for one config per file (sm90_<type>_gemm_<tile>.cu) to bound compile time.
// Two consumer schedules: cooperative (both consumer warpgroups split one BM x BN tile along M)
// and ping-pong (each consumer warpgroup owns whole tiles, alternating; Note [sm90 ping-pong]).
//
// Note [sm90 pipeline protocol]
// Two mbarrier arrays per stage s: full[s] (count 1: the producer's arrive.expect_tx; TMA then
// completes the byte count) and empty[s] (count 4 * kConsumers: lane 0 of every consumer warp
// arrives once the wgmmas that read stage s have completed). Producer and consumers walk the same
// sequence of (stage, phase): stage advances per k-block, phase flips when stage wraps. The
// producer waits empty[s] with parity phase^1 (a fresh barrier passes at once), consumers wait
// full[s] with parity phase. Consumers commit one wgmma group per k-block and wait_group<1>: the
// previous k-block's wgmmas are then complete and its stage is released while the current one
// runs; at the end of a work unit wait_group<0> drains and releases the last stage before the
// epilogue reads the accumulators.
//
// Note [sm90 cluster multicast]
// With kCluster = 2 the grid is launched in clusters of two CTAs. A work unit then covers two
// vertically adjacent tiles (KernelParams::tiles_m counts such pairs; CTA rank r takes tile row
// 2 * pair + r, possibly past M: its loads are zero-filled and its stores skipped). Each CTA loads
// its own A tile and half of the shared B tile, multicast into both CTAs' shared memory at the
// same offsets, completing bytes on both CTAs' full barriers (each still expects a whole stage).
// A stage may be overwritten only when the consumers of both CTAs have released it, so every
// consumer warp arrives on the empty barrier of both CTAs (count 2 * 4 * kConsumers). The CTAs
// sync as a cluster after barrier init and again before exit (no CTA leaves while its peer may
// still multicast into it or arrive on its barriers), which is why producer threads do not exit
// early.
//
// Note [sm90 ping-pong]
// With kPingPong the two consumer warpgroups take the CTA's work units alternately (warpgroup c
// runs units c, c + 2, ...), each computing a whole BM x BN tile (kWgM = BM). The producer still
// loads every unit's k-blocks in order into the one ring, so a consumer walks the ring over all
// units and skips (advances its stage/phase past) the k-blocks of the other's units. A stage is
// read by one warpgroup only: its empty barrier counts 4 warp arrivals. What it buys: while one
// warpgroup runs its epilogue (which the cooperative schedule cannot hide: the tensor cores idle
// from the last k-block of a tile to the first of the next), the other runs its main loop.
// The main loops strictly alternate (order[2] mbarriers, count 1: warpgroup c arrives on
// order[1 - c] once it has waited for every k-block of its unit; warpgroup 1 waits before each
// unit, warpgroup 0 before each unit but its first). This is needed for correctness, not only
// for the schedule: a parity wait tells phases apart only one phase deep. Without the order, a
// warpgroup that skipped ahead waited on full[s] for a k-block two ring passes ahead of the
// barrier, saw the parity of an older phase and read the other warpgroup's data (run2-0020:
// launch failures on every multi-unit ping-pong GEMM). With it, when a warpgroup first waits on
// ring position p, position p - kStages (the other's unit or its own earlier one) has completed,
// and p + kStages cannot have (it needs p released).
//
// Note [sm90 192x192 tile]
// Three consumer warpgroups of m64n192 (96 accumulators each) on a 192x192 tile, 4 stages of 48 KB
// (since session 28; 3 before, when two-box epilogue passes took 48 KB of staging: Note [sm90
// epilogue pass width]). The stage count is cuBLAS's: its kernel on the GPT-2 / Llama forwards
// (ncu, H200, session 28) is nvjet_sm90_tst_192x192_64x4_2x1 (192x192, BK 64, 4 stages, clusters
// 2x1, 384 threads at 168 registers, 213 KB of shared memory). Measured 3 -> 4 stages (H200, forced
// tile, ratio to cuBLAS in the same process): Llama gate/up fwd 0.891 -> 0.915, down dX 0.922 ->
// 0.976, gate/up dW 0.714 -> 0.793, qkvo fwd 0.803 -> 0.842; down fwd 0.907 -> 0.886, down dW
// 0.749 -> 0.728 (run-to-run spread ~5%). The same tile in clusters of two (B multicast; the MN-
// major B split 1 + 2 boxes) was correct (tests, property test) but 1.5-9x slower than without
// clusters on every shape, like 128x256_2c_cl2 in session 9; ncu then found why (Note [Cluster
// arrive scope] in sm90_primitives.cuh). After the fix (H200, session 28, call 5): even with the
// cluster-less tile on single-split shapes (lm-head fwd 2.10 vs 2.24 ms, qkv dX 0.093 vs 0.097,
// down fwd 0.079 vs 0.078, attn_proj fwd 0.042 vs 0.041) and 1.4-4x slower on the split-K shapes,
// which session 29 traced to the plan, not the kernel: a forced tile outside the cost model's
// candidates ran with one split (the cluster tile is modelled now). Not kept (unused by kAuto; CI
// compile time): commit f49d0aa has it.
// cuBLAS runs this tile shape (its tile 209, clusters 2x1x1) also on the skinny deep-K weight gradients, where it is the wave arithmetic that
// counts: fc dW (3072 x 768, K = 16384) is 16 x 4 = 64 tiles, x 2 splits = 128 units = one even
// wave on 132 SMs, where 128x256 needs 72 tiles x 3 splits = 216 units in two uneven waves. Per
// k-block it moves (192 + 192) / (192 * 192) bytes per output of global/L2 traffic against
// (128 + 256) / (128 * 256) for 128x256, so the main loop is no slower. The kernel is the same
// template: kConsumers = 3 gives 512 threads, setmaxnreg 40 (producer) / 152 (consumers).
// Its TMA-store epilogue passes are one box wide (Note [sm90 epilogue pass width]).

// Note [sm90 work units]
// unit u = split * (tiles * batch) + b * tiles + t; t walks the tiles in groups of group_m tile
// rows (column-major inside a group) so CTAs running at once share A rows and B columns in L2.
// Split s covers k-blocks [s*kb/S, (s+1)*kb/S). With S > 1 the epilogue writes raw fp32 partial
// sums to the workspace and a separate kernel (sm90_splitk_reduce.cu) adds the S partials in
// split order and applies the epilogue: deterministic, the same bits every run. decode_unit lives
// in sm90_work_units.h (host and device) so the CPU tests check this numbering.

#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/arch.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/sm90_primitives.cuh"
#include "gemm/sm90_wgmma_ops.cuh"
#include "gemm/sm90_work_units.h"

namespace blublas::gemm_detail::sm90 {

// Kernel arguments besides the two tensor maps (passed by value).
struct KernelParams {
  int m = 0, n = 0, k = 0, batch = 1;
  int tiles_m = 0, tiles_n = 0;
  int group_m = 1;
  int splits = 1;
  int kblocks = 0;    // ceil(k / BK)
  int num_units = 0;  // tiles_m * tiles_n * batch * splits
  int a_rank3 = 0, b_rank3 = 0;  // operand has a batch dimension in its tensor map
  int out_type = 0;              // 0 f32, 1 bf16, 2 f16 (D's dtype)
  EpilogueArgs epi;
  int fast_epi = 0;              // epilogue through smem + TMA store (Note [sm90 TMA-store epilogue])
  int d_rank3 = 0;               // D / aux tensor maps have a batch dimension
  int bias_pairs = 0;            // per-column bias aligned for pair loads (Note [sm90 epilogue bias prefetch])
  float* partial = nullptr;      // split-K partials (splits > 1), row-major [split][b][m][ld]
  int64_t partial_ld = 0;
  int64_t partial_split_stride = 0;
  const float* scale_a = nullptr;  // FP8 (Note [FP8 GEMM]): acc *= *scale_a * *scale_b (null = 1)
  const float* scale_b = nullptr;
  int epi_ahead = 0;             // C / aux loaded at the unit's start (Note [sm90 epilogue loads ahead])
  int aux_buffer = 0;            // GELU's aux staged in the second tile (Note [sm90 GELU epilogue])
  float* bgrad = nullptr;        // kBiasGradA summed from A's stages (Note [sm90 fused bias gradient])
  // Note [sm90 stream-K] (sm90_work_units.h): sk_ctas partition CTAs (0: strided units); sk_units
  // k-iterations of sk_gran k-blocks; per partition CTA and consumer warpgroup an fp32
  // accumulator slot and a flag (zeroed by the launcher before the kernel).
  int sk_ctas = 0;
  int sk_gran = 1;
  int sk_units = 0;
  float* sk_partial = nullptr;
  uint32_t* sk_flags = nullptr;
};

// The generic epilogue's staging (Note [sm90 epilogue through shared memory]).
constexpr int kEpiCols = 32;
constexpr int kEpiLd = kEpiCols + 8;  // floats per staging row (padding against bank conflicts)

template <class In>
inline constexpr bool kIsFp8In = std::is_same_v<In, InE4M3E4M3> || std::is_same_v<In, InE4M3E5M2> ||
                                 std::is_same_v<In, InE5M2E4M3> || std::is_same_v<In, InE5M2E5M2>;

template <class In_, int kBM, int kBN, int kStages_, int kConsumers_, bool kAKMajor_,
          bool kBKMajor_, int kCluster_ = 1, bool kPingPong_ = false>
struct KernelConfig {
  using In = In_;
  // Consumer schedule (Note [sm90 ping-pong]): each consumer warpgroup owns whole tiles.
  static constexpr bool kPingPong = kPingPong_;
  // CTAs per cluster along M (1 or 2). With 2, the CTA pair computes vertically adjacent tiles
  // that share the B tile: each CTA loads half of it and multicasts it to both
  // (Note [sm90 cluster multicast]).
  static constexpr int kCluster = kCluster_;
  static constexpr int BM = kBM;
  static constexpr int BN = kBN;
  static constexpr int kStages = kStages_;
  static constexpr int kConsumers = kConsumers_;
  static constexpr bool kAKMajor = kAKMajor_;
  static constexpr bool kBKMajor = kBKMajor_;
  static constexpr bool kFp8 = kIsFp8In<In>;
  static constexpr int kElemBytes = std::is_same_v<In, InTf32> ? 4 : kFp8 ? 1 : 2;
  static constexpr int BK = 128 / kElemBytes;  // one 128-byte swizzle row along K
  static constexpr int kKSteps = 4;            // 32-byte K slices per BK (k16 / k8 / k32 each)
  static constexpr int kWgM = kPingPong ? BM : BM / kConsumers;  // tile rows per warpgroup
  static constexpr int kStageReaders = kPingPong ? 1 : kConsumers;  // warpgroups reading a stage
  static constexpr int kMI = kWgM / 64;        // m64 wgmmas per consumer warpgroup
  static constexpr int kABytes = BM * 128;
  static constexpr int kBBytes = BN * 128;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  // + full[kStages], empty[kStages], the ping-pong order[2] and two epilogue-load mbarriers per
  // consumer warpgroup (Note [sm90 C through TMA], Note [sm90 epilogue loads ahead]).
  static constexpr int kBarrierBytes = (2 * kStages + 2 + 2 * kConsumers) * 8;
  // Note [sm90 epilogue pass width]: 128-byte TMA-store boxes per pass (two, 256 bytes a staged
  // row, where they fit next to the stages; else one). Staging per consumer warpgroup: kWgM rows
  // of the larger of that and the generic epilogue's kEpiLd floats.
  static constexpr int kPassBoxes =
      1024 + kStages * kStageBytes + kConsumers * kWgM * 256 + kBarrierBytes <= 232448 ? 2 : 1;
  static constexpr int kStagingRowBytes = 128 * kPassBoxes;
  static constexpr int kStagingBytes =
      kConsumers * kWgM * (kStagingRowBytes > kEpiLd * 4 ? kStagingRowBytes : kEpiLd * 4);
  static constexpr int kSmemBytes = 1024 + kStages * kStageBytes + kStagingBytes + kBarrierBytes;
  // Note [sm90 epilogue loads ahead]: a second staging tile per consumer warpgroup, 1024-aligned
  // after the barriers, present only in launches that load C or aux ahead (kSmemBytesAhead).
  static constexpr int kAheadOffset =
      (kStages * kStageBytes + kStagingBytes + kBarrierBytes + 1023) / 1024 * 1024;
  static constexpr int kSmemBytesAhead = 1024 + kAheadOffset + kStagingBytes;
  static constexpr bool kEpiAhead = kPingPong && kSmemBytesAhead <= 232448;
  // Registers after setmaxnreg (only with two or more consumer warpgroups). setmaxnreg moves
  // registers within the CTA's launch allocation, kThreads x the per-thread count ptxas gives
  // under __launch_bounds__(kThreads, 1) (65536 / kThreads rounded down to 8: 168 at 384
  // threads, 128 at 512), not the whole 64K file: an .inc beyond it waits forever. So 128 *
  // (kProducerRegs + kConsumers * kConsumerRegs) <= kThreads * kLaunchRegs: 2 consumers 232 (128
  // accumulators of m64n256) + 40, 3 consumers 152 (96 of m64n192; Note [sm90 192x192 tile]) + 56.
  // Note [sm90 fused bias gradient]: idle producer warps sum A's MN-major 16-bit stages, one warp
  // per 64-row panel (warps 1..3 of the producer warpgroup); their 16 partial sums spilled at 40
  // registers, so those kernels give the producer warpgroup 56, the two consumers 224 (56 + 2 x
  // 224 = 504 = 384 x 168 / 128; ptxas: no spills at 224 in the 2-consumer kernels).
  static constexpr bool kFusedBiasGrad = !kAKMajor && kCluster == 1 && kElemBytes == 2 && !kFp8 && BM <= 192;
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  // Note [sm90 stream-K]: cooperative 16-bit kernels without a cluster (the tf32 128x256 consumer
  // spilled with the parts' adds).
  static constexpr bool kStreamK = !kPingPong && kCluster == 1 && kElemBytes == 2 && !kFp8;
  static constexpr int kProducerRegs = kFusedBiasGrad ? 56 : 40;
  static constexpr int kConsumerRegs = kConsumers >= 3 ? 152 : kConsumers == 2 ? (kFusedBiasGrad ? 224 : 232) : 0;

  static_assert(kWgM % 64 == 0 && kMI >= 1, "BM must be a multiple of 64 * kConsumers");
  static_assert(!kPingPong || (kConsumers == 2 && kCluster == 1),
                "ping-pong: two consumer warpgroups, no cluster");
  // Note [sm90 epilogue output types]
  // The TMA-store epilogue is unrolled straight-line code per output type, most of each kernel's
  // instructions and compile time. It is compiled for the output types the library's callers
  // take from each input type: f32 always (accumulation, strict outputs), bf16 from bf16 and FP8
  // inputs, f16 from f16 inputs (out_type: 0 f32, 1 bf16, 2 f16). Another pairing (bf16 in, f16
  // out; tf32 in, 16-bit out) is still exact, on the generic epilogue (the launcher checks it).
  // Dropping the unused third type took ~1/3 of the epilogue code out of the bf16 / f16 / FP8
  // kernels and 2/3 out of the tf32 ones (CI builds every sm90 object on 2 cores: session 18's
  // landing took 2085 s, the sm90 objects 50-180 s each).
  static constexpr bool fast_out_type(int out_type) {
    return out_type == 0 || (out_type == 1 && (std::is_same_v<In, InBf16> || kFp8)) ||
           (out_type == 2 && std::is_same_v<In, InF16>);
  }
  static_assert(kSmemBytes <= 232448, "shared memory above the sm_90 opt-in limit");
  static_assert(128 * (kProducerRegs + kConsumers * kConsumerRegs) <= kThreads * kLaunchRegs || kConsumers < 2,
                "setmaxnreg budget above the CTA's launch allocation (an .inc would wait forever)");
  static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256, "BN: 64, 128, 192 or 256");
  static_assert(BM <= 256 && BN <= 256, "TMA boxes are at most 256 rows");
  static_assert(!(std::is_same_v<In, InTf32> || kFp8) || (kAKMajor && kBKMajor),
                "tf32 and FP8 wgmma take K-major operands only");
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "tiles must stay 1024-byte aligned");
  static_assert(kCluster == 1 || (kCluster == 2 && BN % 128 == 0),
                "cluster multicast splits B into two halves of whole 64-wide boxes");
};

__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, uint64_t* bar,
                                         int rank3, int c0, int c1, int batch) {
  if (rank3) {
    tma_load_3d(dst, map, bar, c0, c1, batch);
  } else {
    tma_load_2d(dst, map, bar, c0, c1);
  }
}

// ---- epilogue ------------------------------------------------------------------------------
// Note [sm90 epilogue through shared memory]
// The accumulators of a consumer warpgroup (kWgM rows x BN columns) leave in chunks of
// kEpiCols columns: each thread writes its fragment to a padded fp32 staging buffer, the
// warpgroup syncs on its named barrier, then threads walk the chunk row by row (consecutive
// threads own consecutive column pairs, so global stores coalesce) and apply the shared
// epilogue (epilogue.cuh). The staging loop is rolled: one copy per output dtype instead of BN
// inlined copies of the epilogue, which keeps both the code and the compile time small.

__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
#endif
}

// Writes one chunk of staged values (rows x kEpiCols) to D through the epilogue, or to the
// split-K partial buffer. row0/col0: the chunk's first row and column in D.
template <class OutT, int kRows>
__device__ __forceinline__ void store_chunk(const KernelParams& p, const WorkUnit& w,
                                            const float* staging, int row0, int col0, int t,
                                            float& amax) {
#pragma unroll 1
  for (int idx = t; idx < kRows * (kEpiCols / 2); idx += 128) {
    const int r = idx / (kEpiCols / 2);
    const int cp = idx - r * (kEpiCols / 2);
    const int row = row0 + r;
    const int col = col0 + 2 * cp;
    if (row >= p.m || col >= p.n) continue;
    const float2 v = *reinterpret_cast<const float2*>(staging + r * kEpiLd + 2 * cp);
    if constexpr (std::is_same_v<OutT, void>) {
      float* out = p.partial + static_cast<int64_t>(w.split) * p.partial_split_stride +
                   (static_cast<int64_t>(w.batch) * p.m + row) * p.partial_ld + col;
      if (col + 1 < p.n) {
        *reinterpret_cast<float2*>(out) = v;
      } else {
        out[0] = v.x;
      }
    } else {
      const float2 out = epilogue_store2<OutT>(p.epi, w.batch, row, col, v.x, v.y);
      amax = fmaxf(amax, fmaxf(fabsf(out.x), fabsf(out.y)));  // dead code unless FP8 reads it
    }
  }
}

template <class Cfg>
__device__ __forceinline__ void consumer_epilogue(const KernelParams& p, const WorkUnit& w, int c,
                                                  float* staging,
                                                  float (&acc)[Cfg::kMI][Cfg::BN / 2]) {
  constexpr int kRows = Cfg::kWgM;
  const int t = threadIdx.x % 128;
  const int warp = t / 32, lane = t % 32;
  const int row0 = w.tm * Cfg::BM + (Cfg::kPingPong ? 0 : c * Cfg::kWgM);
  const int col_tile = w.tn * Cfg::BN;
  float amax = 0.0f;
#pragma unroll
  for (int chunk = 0; chunk < Cfg::BN / kEpiCols; ++chunk) {
    const int col0 = col_tile + chunk * kEpiCols;
    if (col0 >= p.n) break;  // uniform across the warpgroup
    named_barrier_sync(1 + c, 128);  // the previous chunk has been read
#pragma unroll
    for (int mi = 0; mi < Cfg::kMI; ++mi) {
#pragma unroll
      for (int jj = 0; jj < kEpiCols / 8; ++jj) {
        const int j = chunk * (kEpiCols / 8) + jj;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = mi * 64 + warp * 16 + lane / 4 + h * 8;
          *reinterpret_cast<float2*>(staging + r * kEpiLd + jj * 8 + (lane % 4) * 2) =
              make_float2(acc[mi][4 * j + 2 * h], acc[mi][4 * j + 2 * h + 1]);
        }
      }
    }
    named_barrier_sync(1 + c, 128);
    if (p.partial != nullptr) {
      store_chunk<void, kRows>(p, w, staging, row0, col0, t, amax);
    } else if (p.out_type == 1) {
      store_chunk<__nv_bfloat16, kRows>(p, w, staging, row0, col0, t, amax);
    } else if (p.out_type == 2) {
      store_chunk<__half, kRows>(p, w, staging, row0, col0, t, amax);
    } else {
      store_chunk<float, kRows>(p, w, staging, row0, col0, t, amax);
    }
  }
  // Split-K partials carry no amax: the reduction kernel takes it from the final values.
  if constexpr (Cfg::kFp8) {
    if (p.epi.amax != nullptr && p.partial == nullptr) amax_warp_commit(p.epi.amax, amax);
  }
}

// Note [sm90 epilogue pass width]
// A pass of the TMA-store epilogue stages Cfg::kPassBoxes 64-row x 128-byte boxes per m64 block
// (two: 128 columns of 16-bit D, 64 of f32; one: half that) and stores them. Two where they fit;
// the 192x192 tile with 4 stages (4 x 48 KB, the stage count cuBLAS's 192x192 kernel runs) has
// room only for one (3 x 64 rows x 160 bytes for the generic epilogue's staging, 30 KB: 228.5 KB
// in all), so its passes are half as wide and twice as many.
//
// Note [sm90 TMA-store epilogue]
// When D (and aux, and C with beta != 0: Note [sm90 C through TMA]) are TMA-aligned, the
// epilogue stays in registers:
// alpha, bias and GELU are applied to the accumulators, the 16-bit results are written to a
// 128B-swizzled staging tile (the same XOR pattern TMA uses, so the stores are conflict-free) and
// one thread per warpgroup issues TMA stores of 64x64 boxes (TMA clips the tile edges). The
// stores run asynchronously while the warpgroup starts its next work unit; the staging buffer is
// reused only after cp.async.bulk.wait_group.read. Columns leave in passes of Cfg::kPassBoxes
// 128-byte boxes (Note [sm90 epilogue pass width]); with
// aux, each pass stores the pre-activation first, then D = gelu(pre).
// Per output type: columns per 128-byte box row and per pass of kBoxes boxes (Note [sm90
// epilogue pass width]).
template <class OutT, int kBoxes>
struct StoreShape {
  static constexpr int kBoxCols = 128 / static_cast<int>(sizeof(OutT));
  static constexpr int kPassCols = kBoxes * kBoxCols;
};
// TMA stores write whole 16-byte chunks of a row: the last partial chunk past N would be written
// too, so the launcher takes this path only when N * 2 bytes is a multiple of 16 (seen on H200:
// N = 517 wrote columns 517..519). Compile-time switch kept for bisecting.
constexpr bool kEnableTmaStoreEpilogue = true;

template <class OutT>
__device__ __forceinline__ uint32_t pack2(float v0, float v1) {
  if constexpr (std::is_same_v<OutT, __nv_bfloat16>) {
    __nv_bfloat162 h = __floats2bfloat162_rn(v0, v1);
    return *reinterpret_cast<uint32_t*>(&h);
  } else {
    __half2 h = __floats2half2_rn(v0, v1);
    return *reinterpret_cast<uint32_t*>(&h);
  }
}

__device__ __forceinline__ void st_shared_b32(uint32_t addr, uint32_t v) {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
#endif
}

__device__ __forceinline__ void st_shared_v2_f32(uint32_t addr, float v0, float v1) {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(v0), "f"(v1) : "memory");
#endif
}

__device__ __forceinline__ uint32_t ld_shared_b32(uint32_t addr) {
  uint32_t v = 0;
#if BLUBLAS_SM90A_ENABLED
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
#endif
  return v;
}

__device__ __forceinline__ float2 ld_shared_v2_f32(uint32_t addr) {
  float2 v = make_float2(0.0f, 0.0f);
#if BLUBLAS_SM90A_ENABLED
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
#endif
  return v;
}

// The pair (C, or kGeluGrad's aux) a TMA load left at a staging address: the address this thread
// writes D's pair to.
template <class OutT>
__device__ __forceinline__ float2 staged_pair(uint32_t addr) {
  if constexpr (std::is_same_v<OutT, float>) {
    return ld_shared_v2_f32(addr);
  } else if constexpr (std::is_same_v<OutT, __nv_bfloat16>) {
    const uint32_t v = ld_shared_b32(addr);
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
  } else {
    const uint32_t v = ld_shared_b32(addr);
    return __half22float2(*reinterpret_cast<const __half2*>(&v));
  }
}

// What a TMA load left in the staging tile for stage_pass to read (Note [sm90 C through TMA]).
constexpr int kStagedNone = 0, kStagedC = 1, kStagedGeluGradAux = 2;

// Note [sm90 epilogue bias prefetch]
// A per-column bias adds the same two values to every row of a thread's column pair. Loaded where
// they are added, each pair was a global load between shared stores that the compiler may not
// reorder (asm volatile with a memory clobber), so every column group waited for its load (H100,
// session 18, ncu on the qkv forward with bias: 4.26 long-scoreboard stalls per issue; the step's
// K = 768 GEMMs with a bias 0.75-0.81x cuBLASLt with its bias epilogue). The pass's pairs are now
// loaded together before its first store (16 registers: 16 bf16x2 words, or 8 float2), so the
// pass waits once. Pair loads need the bias 4-byte (16-bit) / 8-byte (f32) aligned: the launcher
// sets bias_pairs, else two scalar loads per pair (still all ahead). Columns past N read 0.
template <class OutT>
using BiasPair = std::conditional_t<std::is_same_v<OutT, float>, float2, uint32_t>;

template <class OutT>
__device__ __forceinline__ BiasPair<OutT> load_bias_pair(const OutT* bias, int gcol, int n, bool pairs) {
  if constexpr (std::is_same_v<OutT, float>) {
    if (gcol + 1 < n && pairs) return __ldg(reinterpret_cast<const float2*>(bias + gcol));
    return make_float2(gcol < n ? __ldg(bias + gcol) : 0.0f, gcol + 1 < n ? __ldg(bias + gcol + 1) : 0.0f);
  } else {
    const uint16_t* b16 = reinterpret_cast<const uint16_t*>(bias);
    if (gcol + 1 < n && pairs) return __ldg(reinterpret_cast<const uint32_t*>(b16 + gcol));
    const uint32_t lo = gcol < n ? __ldg(b16 + gcol) : 0u;
    const uint32_t hi = gcol + 1 < n ? __ldg(b16 + gcol + 1) : 0u;
    return lo | (hi << 16);
  }
}

template <class OutT>
__device__ __forceinline__ float2 bias_pair_f32(BiasPair<OutT> v) {
  if constexpr (std::is_same_v<OutT, float>) {
    return v;
  } else if constexpr (std::is_same_v<OutT, __nv_bfloat16>) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(&v));
  }
}

// kWhat: 0 = D without GELU, 1 = aux (pre-activation, also left in acc), 3 = D = acc (alpha 1, no
// bias: Note [sm90 plain epilogue]), 4 = D = gelu(acc) after a kWhat 1 pass put the pre-activation
// in acc (Note [sm90 GELU epilogue]; 2, GELU of alpha acc + bias in one pass, is gone). kLean: with kStagedNone alpha 1 and no per-row bias (pre = acc
// + column bias); with kStagedC alpha 1 and no bias (D = acc + beta C).
// Staging address of (row r, 16-byte chunk c) in a 64-row x 128-byte box: r*128 + ((c ^ r%8)*16).
// With the box 1024-byte aligned that is row_addr ^ (c_const << 4), where row_addr already holds
// this lane's part of the chunk XORed with r%8, so each store is one XOR with a constant (32-bit
// shared addresses keep register pressure low next to the 128 live accumulators).
// amax (FP8 configs only): the running max |value| of this thread's in-range elements.
// kStaged: what a TMA load left at the staging addresses before this pass (a template argument, not
// a runtime flag: Note [sm90 epilogue variants]).
template <class Cfg, class OutT, int kWhat, int kStaged, bool kLean = false>
__device__ __forceinline__ void stage_pass(const KernelParams& p, int pass, int row_base,
                                           int col_base, uint8_t* stg,
                                           float (&acc)[Cfg::kMI][Cfg::BN / 2], float& amax) {
  using Shape = StoreShape<OutT, Cfg::kPassBoxes>;
  constexpr int kEs = static_cast<int>(sizeof(OutT));
  const int t = threadIdx.x % 128;
  const int warp = t / 32, lane = t % 32;
  const OutT* bias = static_cast<const OutT*>(p.epi.bias);
  const uint32_t stg_addr = smem_u32(stg);
  const int lane_byte = (lane % 4) * 2 * kEs;  // this lane's first column, bytes into the chunk row
  const int lane_chunk = lane_byte / 16, lane_within = lane_byte % 16;
  // Note [sm90 epilogue bias prefetch]: this pass's column-bias pairs, all loads issued here.
  constexpr bool kPlain = kWhat == 3 || kWhat == 4;  // acc is D's value (before GELU for 4)
  constexpr int kGroups = Shape::kPassCols / 8;
  BiasPair<OutT> col_bias[kGroups];
  // The plain, C-staged lean and GELU-gradient passes have no bias at all: no bias code.
  constexpr bool kNoBias = kPlain || kStaged == kStagedGeluGradAux || (kLean && kStaged == kStagedC);
  const bool per_col = !kNoBias && bias != nullptr && p.epi.bias_per_col;
#pragma unroll
  for (int jj = 0; jj < kGroups; ++jj) {
    col_bias[jj] = BiasPair<OutT>{};
    if (pass * kGroups + jj >= Cfg::BN / 8) continue;
    if (per_col) {
      const int gcol = col_base + pass * Shape::kPassCols + jj * 8 + (lane % 4) * 2;
      col_bias[jj] = load_bias_pair<OutT>(bias, gcol, p.n, p.bias_pairs != 0);
    }
  }
#pragma unroll
  for (int mi = 0; mi < Cfg::kMI; ++mi) {
    float row_bias[2] = {0.0f, 0.0f};
    uint32_t row_addr[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp * 16 + lane / 4 + 8 * h;  // row inside the m64 block
      row_addr[h] = stg_addr + static_cast<uint32_t>(mi * Cfg::kPassBoxes * 64 * 128 + r * 128 +
                                                     (((r % 8) ^ lane_chunk) << 4) + lane_within);
      if (!kNoBias && !kLean && bias != nullptr && !p.epi.bias_per_col) {
        const int grow = row_base + mi * 64 + r;
        row_bias[h] = grow < p.m ? to_f32(bias[grow]) : 0.0f;
      }
    }
#pragma unroll
    for (int jj = 0; jj < Shape::kPassCols / 8; ++jj) {
      const int j = pass * (Shape::kPassCols / 8) + jj;
      if (j >= Cfg::BN / 8) break;
      const float2 bp = bias_pair_f32<OutT>(col_bias[jj]);
      const float b0 = bp.x, b1 = bp.y;
      constexpr int kGroupsPerBox = Shape::kBoxCols / 8;
      const uint32_t box_offset = static_cast<uint32_t>((jj / kGroupsPerBox) * 64 * 128);
      const uint32_t chunk_xor = static_cast<uint32_t>(((jj % kGroupsPerBox) * 8 * kEs / 16) << 4);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t addr = (row_addr[h] ^ chunk_xor) + box_offset;
        float v0, v1;
        if constexpr (kStaged == kStagedGeluGradAux) {  // kGeluGrad: D = acc * gelu'(pre-activation)
          // alpha 1 (tma_store_ok sends other alphas to the generic epilogue): no alpha, no bias.
          const float2 av = staged_pair<OutT>(addr);
          if constexpr (std::is_same_v<OutT, float>) {
            v0 = acc[mi][4 * j + 2 * h] * gelu_tanh_grad(av.x);
            v1 = acc[mi][4 * j + 2 * h + 1] * gelu_tanh_grad(av.y);
          } else {  // Note [Fast GELU gradient for 16-bit outputs]
            v0 = acc[mi][4 * j + 2 * h] * gelu_tanh_grad_fast(av.x);
            v1 = acc[mi][4 * j + 2 * h + 1] * gelu_tanh_grad_fast(av.y);
          }
        } else if constexpr (kStaged == kStagedC && kLean) {  // alpha 1, no bias: D = acc + beta C
          const float2 cv = staged_pair<OutT>(addr);
          v0 = acc[mi][4 * j + 2 * h] + p.epi.beta * cv.x;
          v1 = acc[mi][4 * j + 2 * h + 1] + p.epi.beta * cv.y;
        } else if constexpr (kStaged == kStagedC) {  // the generic epilogue's order: alpha acc + beta C + bias
          const float2 cv = staged_pair<OutT>(addr);
          v0 = p.epi.alpha * acc[mi][4 * j + 2 * h] + p.epi.beta * cv.x + b0 + row_bias[h];
          v1 = p.epi.alpha * acc[mi][4 * j + 2 * h + 1] + p.epi.beta * cv.y + b1 + row_bias[h];
        } else if constexpr (kPlain) {
          v0 = acc[mi][4 * j + 2 * h];
          v1 = acc[mi][4 * j + 2 * h + 1];
        } else if constexpr (kLean) {  // alpha 1, no row bias: Note [sm90 plain epilogue]
          v0 = acc[mi][4 * j + 2 * h] + b0;
          v1 = acc[mi][4 * j + 2 * h + 1] + b1;
        } else {
          v0 = p.epi.alpha * acc[mi][4 * j + 2 * h] + b0 + row_bias[h];
          v1 = p.epi.alpha * acc[mi][4 * j + 2 * h + 1] + b1 + row_bias[h];
        }
        if constexpr (kWhat == 1) {  // Note [sm90 GELU epilogue]: the D pass starts from pre
          acc[mi][4 * j + 2 * h] = v0;
          acc[mi][4 * j + 2 * h + 1] = v1;
        }
        if constexpr (kWhat == 4) {  // Note [Fast GELU for 16-bit outputs] (f32 D is exact)
          if constexpr (std::is_same_v<OutT, float>) {
            v0 = gelu_tanh(v0);
            v1 = gelu_tanh(v1);
          } else {
            v0 = gelu_tanh_fast(v0);
            v1 = gelu_tanh_fast(v1);
          }
        }
        if constexpr (Cfg::kFp8) {  // TMA clips the tile edges; amax must too
          const int grow = row_base + mi * 64 + warp * 16 + lane / 4 + 8 * h;
          const int gcol = col_base + pass * Shape::kPassCols + jj * 8 + (lane % 4) * 2;
          if (grow < p.m && gcol < p.n) amax = fmaxf(amax, fabsf(v0));
          if (grow < p.m && gcol + 1 < p.n) amax = fmaxf(amax, fabsf(v1));
        }
        if constexpr (std::is_same_v<OutT, float>) {
          st_shared_v2_f32(addr, v0, v1);
        } else {
          st_shared_b32(addr, pack2<OutT>(v0, v1));
        }
      }
    }
  }
}

// fn(box offset in the staging tile, c0, r0) for each 64-row x 128-byte box of pass `pass` that
// holds columns of the tile (a two-box pass past BN holds one box) and starts
// inside the matrix (TMA clips the rest of a box at the edges).
template <class Cfg, class OutT, class Fn>
__device__ __forceinline__ void for_each_pass_box(const KernelParams& p, int pass, int row_base, int col_base,
                                                  Fn&& fn) {
  using Shape = StoreShape<OutT, Cfg::kPassBoxes>;
#pragma unroll
  for (int mi = 0; mi < Cfg::kMI; ++mi) {
#pragma unroll
    for (int box = 0; box < Cfg::kPassBoxes; ++box) {
      if (pass * Shape::kPassCols + box * Shape::kBoxCols >= Cfg::BN) continue;
      const int c0 = col_base + pass * Shape::kPassCols + box * Shape::kBoxCols;
      const int r0 = row_base + mi * 64;
      if (c0 >= p.n || r0 >= p.m) continue;
      fn((mi * Cfg::kPassBoxes + box) * (64 * 128), c0, r0);
    }
  }
}

template <class Cfg, class OutT>
__device__ __forceinline__ void store_pass(const KernelParams& p, const CUtensorMap* map, int pass,
                                           int row_base, int col_base, int batch, uint8_t* stg) {
  for_each_pass_box<Cfg, OutT>(p, pass, row_base, col_base, [&](int offset, int c0, int r0) {
    if (p.d_rank3) {
      tma_store_3d(map, stg + offset, c0, r0, batch);
    } else {
      tma_store_2d(map, stg + offset, c0, r0);
    }
  });
  bulk_commit();
}

// Note [sm90 C through TMA]
// With beta != 0 (D += A B: the chunked weight gradient's accumulation, the compiled step's
// residual GEMMs) the TMA-store epilogue first loads the pass's C boxes with TMA into the staging
// tile, in the same 128B-swizzled layout the store uses: each thread then finds C's pair at the
// address it writes D's pair to, so C costs one shared load per pair and one bulk load per box
// instead of a global load per pair. The generic epilogue's per-pair C loads left the consumer
// warps waiting on each (H100, session 17: the 50304 x 768 x 640 f32 accumulate took 0.479 ms at
// 9.1 long-scoreboard stalls per issue and 22% of DRAM bandwidth; cuBLAS 0.184). One thread issues
// the loads on the warpgroup's own mbarrier (cbar[c], count 1 with the byte count) after the
// previous pass's stores have read the staging tile; every thread of the warpgroup waits on the
// barrier's phase (c_phase, flipped once per pass). Boxes past M or N are not loaded (nor
// stored); rows and columns of a loaded box past the matrix read as zeros. C = D (in place) is
// safe: a pass loads, then overwrites, then stores the same elements, and no other tile or pass
// touches them. Not with the GELU epilogues (their aux pass would overwrite C in the staging tile
// before the D pass reads it): those keep the generic epilogue when beta != 0. kGeluGrad (D = (alpha
// acc + bias) * gelu'(aux), the fc_proj dX GEMM with the GELU backward) reads aux the same way
// through map_aux (without beta): the generic epilogue made that fused GEMM slower than the GEMM
// plus an elementwise kernel (fused_step.cpp, gelu_grad_epilogue: 7.95 vs 1.74 + 1.0 ms a bf16
// step, H100). Not in the 3-consumer 192x192 tile: at 152 registers a consumer thread it spilled
// with the staged loads (4-16 bytes), so the launcher keeps its beta != 0 and kGeluGrad problems on
// the generic epilogue (loads_ok in tma_store_ok).
// Status: on by default since session 18 (BLUBLAS_SM90_C_TMA=0 or Sm90Override::c_through_tma = 0
// turns it off; CThroughTma checks it against float64 and against its generic twin). Measured
// (H100, session 18, blublas-profiler vs cuBLAS in the same process): 50304 x 768 x 640 bf16 -> f32
// beta = 1 0.479 -> 0.204 ms (0.386x -> 0.903x cuBLAS; predicted 0.15-0.2); 16384 x 768 x 3072
// bf16 beta = 1 0.219 -> 0.148 ms (0.533x -> 0.719x); GPT-2 d12 bf16 B16 compiled engine 294.5K ->
// 341.5K tok/s, autograd 314.2K -> 326.2K.
template <class Cfg, class OutT>
__device__ __forceinline__ void load_c_pass(const KernelParams& p, const CUtensorMap* map, int pass,
                                            int row_base, int col_base, int batch, uint8_t* stg,
                                            uint64_t* bar) {
  uint32_t bytes = 0;  // whole boxes: TMA counts the zero-filled part past the edges too
  for_each_pass_box<Cfg, OutT>(p, pass, row_base, col_base, [&](int, int, int) { bytes += 64 * 128; });
  mbar_arrive_expect_tx(bar, bytes);
  for_each_pass_box<Cfg, OutT>(p, pass, row_base, col_base, [&](int offset, int c0, int r0) {
    tma_load(stg + offset, map, bar, p.d_rank3, c0, r0, batch);
  });
}

// A pass over what a TMA load staged (C or kGeluGrad's aux): the C-staged lean variant where it
// applies (Note [sm90 plain epilogue]).
template <class Cfg, class OutT, int kStaged>
__device__ __forceinline__ void staged_pass(const KernelParams& p, int pass, int row_base, int col_base,
                                            uint8_t* stg, float (&acc)[Cfg::kMI][Cfg::BN / 2],
                                            float& amax, bool c_lean) {
  if constexpr (kStaged == kStagedC) {
    if (c_lean) {
      stage_pass<Cfg, OutT, 0, kStaged, true>(p, pass, row_base, col_base, stg, acc, amax);
      return;
    }
  }
  stage_pass<Cfg, OutT, 0, kStaged>(p, pass, row_base, col_base, stg, acc, amax);
}

// Note [sm90 plain epilogue]
// In session 29 (H200, Note [Interleaved tile A/B] with the order experiment of
// scripts/device-order-exp.sh) a GEMM kernel paid ~11 us more per call after another of our GEMM
// kernels than after itself, a one-thread kernel or cuBLAS (qkvo fwd 8192x1024x1024: 44 vs 33.5
// us; cuBLAS paid nothing after ours). The suspect is instruction fetch: each kernel is ~34K SASS
// instructions (128x256_2c bf16: every epilogue variant unrolled), and a tile's epilogue runs
// ~1-3K of them once, straight-line, far from the main loop; after another large kernel evicted
// them, the first tile of every CTA fetches them again. The common case (alpha 1, no bias, no
// GELU, no C) now has its own pass variant with no alpha / bias arithmetic and no bias prefetch
// code: about half the instructions per accumulator pair on the path every plain GEMM runs.
// Same values: alpha * acc + 0 + 0 == acc (acc is never -0: it starts at +0). Measured (call 9):
// the penalty after another GEMM kernel ~11 -> ~4.5 us, warm times 7-10% lower (fc fwd 0.1355 ->
// 0.1219 ms), GPT-2 bf16 set in the interleaved table 0.860 -> 0.913 geomean (min 0.692 -> 0.808).
// The lean pass (kLean, written after that call, not yet measured; not in the 192x192 tile, which
// spilled with it) does the same for alpha 1 with a column bias and no GELU (the trainer's qkv /
// attn_proj / fc_proj forwards): pre = acc + bias, the value the general pass computes (alpha *
// acc + bias + 0 with alpha 1; only a -0 sum can come out +0 there). Not for GELU (its tanh
// dominates the pass; lean GELU + aux passes took the 128x256 kernel from 34K to 44K instructions
// and its sm_90a compile from 38 to 55 s). With C staged (beta != 0: the Llama block's
// accumulating dX, the chunked lm-head dW) the lean pass is alpha 1 without bias: D = acc + beta C
// (one FFMA; the general pass's alpha acc + beta C + 0 + 0 may round beta C separately, so the two
// can differ in the last bit when beta is not 1).

// Note [sm90 GELU epilogue]
// Session 30, Nsight Compute source counters on the fc forward with bias + GELU + aux (16384 x
// 3072 x 768 bf16, 64x256_pp, H200; scripts/device-sass-stalls.sh BLU_SASS_SET=epi): 0.75x
// cuBLASLt's GELU_AUX_BIAS kernel. Per 128-column pass a thread ran the aux pass (263 SASS
// instructions: alpha acc + bias + row bias for 64 elements) and then the D pass (765: the same
// bias arithmetic again, then GELU), 'no instruction' about half the D pass's stall samples, and
// between the two a wait for the aux store to finish reading the one staging tile (the named
// barriers after it held ~9% of all samples). Now: the aux pass leaves the pre-activation in acc
// (kWhat 1) and the D pass applies GELU to it (kWhat 4: no alpha, no bias, no prefetch), with the
// shorter GELU of Note [Fast GELU for 16-bit outputs]; GELU without aux runs the same two passes
// without the aux store (one code path; the one-pass kWhat 2 is gone); and where the launch
// has the second staging tile of Note [sm90 epilogue loads ahead] (the ping-pong tiles) aux is
// staged there (aux_buffer), so the D pass waits only for the previous pass's D store, long done.
// Same values as before for aux and D up to the GELU form. The GELU-gradient pass (kGeluGrad,
// staged aux) likewise multiplies acc without alpha or bias (alpha != 1 takes the generic
// epilogue: tma_store_ok) and uses the shorter gradient of gelu_fast.h.

// Note [sm90 epilogue variants]
// The TMA-store epilogue is straight-line code: fully unrolled over the thread's 64-192
// accumulators, once per output type. What a pass reads from the staging tile (nothing, C, or
// kGeluGrad's aux: Note [sm90 C through TMA]) is a template argument, and the consumer picks the
// variant once per tile. As a runtime flag tested per pair (session 17's first version) it doubled
// the kernels' PTX (64x256: 19.4K -> 35.9K instructions) and interleaved the dead variants with the
// live one, and every sm90 GEMM with the TMA-store epilogue got slower, also with beta == 0 (H100,
// session 18: GPT-2 bf16 B16 autograd, the A-K-major 64x256 kernels 5.54 -> 7.35 ms a step, the
// 128x256 ones 3.95 -> 4.66; the generic-epilogue kernels unchanged; the fix brought them back).
// Which cost it was, the per-pair branches or the larger instruction footprint of code that runs
// once per tile, was not profiled.
template <class Cfg, class OutT, int kStaged>
__device__ __forceinline__ void consumer_epilogue_tma(const KernelParams& p, const WorkUnit& w,
                                                      int c, uint8_t* stg,
                                                      const CUtensorMap* map_d,
                                                      const CUtensorMap* map_aux,
                                                      const CUtensorMap* map_c, uint64_t* cbar,
                                                      uint32_t& c_phase, uint8_t* ahead,
                                                      float (&acc)[Cfg::kMI][Cfg::BN / 2]) {
  const int t = threadIdx.x % 128;
  const int row_base = w.tm * Cfg::BM + (Cfg::kPingPong ? 0 : c * Cfg::kWgM);
  const int col_base = w.tn * Cfg::BN;
  // Note [sm90 C through TMA]: C (beta != 0) or, for kGeluGrad, the pre-activation is loaded into
  // the staging tile per pass; never both, never next to GELU's aux store.
  constexpr bool kLoads = kStaged != kStagedNone;
  const bool gelu = !kLoads && (p.epi.kind == static_cast<int>(Epilogue::kBiasGelu) ||
                                p.epi.kind == static_cast<int>(Epilogue::kGelu));
  const bool aux = gelu && p.epi.aux != nullptr;
  const bool alpha_one = !kLoads && p.epi.alpha == 1.0f;
  const bool plain = alpha_one && !gelu && p.epi.bias == nullptr;
  // Not in the 3-consumer tile: its 152 registers spilled (4 bytes) with the lean pass.
  const bool lean = Cfg::kConsumers < 3 && alpha_one && (p.epi.bias == nullptr || p.epi.bias_per_col);
  // The C-staged lean pass: alpha 1, no bias (D = acc + beta C).
  const bool c_lean = kStaged == kStagedC && p.epi.alpha == 1.0f && p.epi.bias == nullptr;
  const CUtensorMap* load_map = kStaged == kStagedC ? map_c : map_aux;
  constexpr int kPassCols = StoreShape<OutT, Cfg::kPassBoxes>::kPassCols;
  constexpr int kPasses = (Cfg::BN + kPassCols - 1) / kPassCols;
  float amax = 0.0f;
  if constexpr (kLoads && Cfg::kEpiAhead) {
    if (p.epi_ahead) {  // Note [sm90 epilogue loads ahead]: pass i's C / aux is in buffer i % 2
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) {
        if (col_base + pass * kPassCols >= p.n) break;  // uniform across the warpgroup
        const int b = pass & 1;
        uint8_t* buf = b == 0 ? ahead : stg;
        mbar_wait(&cbar[b], (c_phase >> b) & 1u);
        c_phase ^= 1u << b;
        staged_pass<Cfg, OutT, kStaged>(p, pass, row_base, col_base, buf, acc, amax, c_lean);
        fence_proxy_async_smem();
        named_barrier_sync(1 + c, 128);  // every thread is done with buf
        if (t == 0) {
          store_pass<Cfg, OutT>(p, map_d, pass, row_base, col_base, w.batch, buf);
          const int next = pass + 2;  // f32 D: four passes, two buffers
          if (next < kPasses && col_base + next * kPassCols < p.n) {
            bulk_wait_read<0>();
            load_c_pass<Cfg, OutT>(p, load_map, next, row_base, col_base, w.batch, buf, &cbar[b]);
          }
        }
      }
      if constexpr (Cfg::kFp8) {
        if (p.epi.amax != nullptr) amax_warp_commit(p.epi.amax, amax);
      }
      return;
    }
  }
  // Note [sm90 GELU epilogue]: aux in the second staging tile where the launch has one.
  uint8_t* pre_stg = stg;
  if constexpr (!kLoads && Cfg::kEpiAhead) {
    if (aux && p.aux_buffer) pre_stg = ahead;
  }
  const bool two_tiles = pre_stg != stg;
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    if (col_base + pass * kPassCols >= p.n) break;  // uniform across the warpgroup
    if constexpr (!kLoads) {
      if (gelu) {  // the pre-activation into acc, and to aux when it is wanted
        // With two tiles the newest store group is the other tile's (D of the last pass).
        if (t == 0) two_tiles ? bulk_wait_read<1>() : bulk_wait_read<0>();
        named_barrier_sync(1 + c, 128);
        float aux_amax = 0.0f;  // amax is of D, not of the pre-activation
        stage_pass<Cfg, OutT, 1, kStagedNone>(p, pass, row_base, col_base, pre_stg, acc, aux_amax);
        if (aux) {
          fence_proxy_async_smem();
          named_barrier_sync(1 + c, 128);
          if (t == 0) store_pass<Cfg, OutT>(p, map_aux, pass, row_base, col_base, w.batch, pre_stg);
        }
      }
    }
    // With two tiles the newest store group is this pass's aux, in the other tile.
    if (t == 0) two_tiles ? bulk_wait_read<1>() : bulk_wait_read<0>();
    named_barrier_sync(1 + c, 128);
    if constexpr (kLoads) {
      if (t == 0) load_c_pass<Cfg, OutT>(p, load_map, pass, row_base, col_base, w.batch, stg, cbar);
      mbar_wait(cbar, c_phase & 1u);
      c_phase ^= 1u;
      staged_pass<Cfg, OutT, kStaged>(p, pass, row_base, col_base, stg, acc, amax, c_lean);
    } else {
      if (plain) {  // Note [sm90 plain epilogue]
        stage_pass<Cfg, OutT, 3, kStagedNone>(p, pass, row_base, col_base, stg, acc, amax);
      } else if (gelu) {  // acc holds the pre-activation (Note [sm90 GELU epilogue])
        stage_pass<Cfg, OutT, 4, kStagedNone>(p, pass, row_base, col_base, stg, acc, amax);
      } else if (lean) {
        if constexpr (Cfg::kConsumers < 3) {
          stage_pass<Cfg, OutT, 0, kStagedNone, true>(p, pass, row_base, col_base, stg, acc, amax);
        }
      } else {
        stage_pass<Cfg, OutT, 0, kStagedNone>(p, pass, row_base, col_base, stg, acc, amax);
      }
    }
    fence_proxy_async_smem();
    named_barrier_sync(1 + c, 128);
    if (t == 0) store_pass<Cfg, OutT>(p, map_d, pass, row_base, col_base, w.batch, stg);
  }
  if constexpr (Cfg::kFp8) {
    if (p.epi.amax != nullptr) amax_warp_commit(p.epi.amax, amax);
  }
}

// The variant for this problem (Note [sm90 epilogue variants]). Not in the 3-consumer tile (152
// registers a thread: it spilled with the staged loads; the launcher keeps beta != 0 and
// kGeluGrad on the generic epilogue there).
template <class Cfg, class OutT>
__device__ __forceinline__ void consumer_epilogue_tma_any(const KernelParams& p, const WorkUnit& w,
                                                          int c, uint8_t* stg,
                                                          const CUtensorMap* map_d,
                                                          const CUtensorMap* map_aux,
                                                          const CUtensorMap* map_c, uint64_t* cbar,
                                                          uint32_t& c_phase, uint8_t* ahead,
                                                          float (&acc)[Cfg::kMI][Cfg::BN / 2]) {
  if constexpr (Cfg::kConsumers < 3) {
    if (p.epi.c != nullptr) {
      consumer_epilogue_tma<Cfg, OutT, kStagedC>(p, w, c, stg, map_d, map_aux, map_c, cbar, c_phase,
                                                 ahead, acc);
      return;
    }
    if (p.epi.kind == static_cast<int>(Epilogue::kGeluGrad)) {
      consumer_epilogue_tma<Cfg, OutT, kStagedGeluGradAux>(p, w, c, stg, map_d, map_aux, map_c, cbar,
                                                           c_phase, ahead, acc);
      return;
    }
  }
  consumer_epilogue_tma<Cfg, OutT, kStagedNone>(p, w, c, stg, map_d, map_aux, map_c, cbar, c_phase,
                                                ahead, acc);
}

// Note [sm90 epilogue loads ahead]
// The staged loads of Note [sm90 C through TMA] waited in the epilogue: per pass, the previous
// pass's store had to finish reading the staging tile, then C / aux came from DRAM (~1-2 us) while
// the warpgroup waited, twice a 64x256 tile. In the ping-pong tile the other warpgroup's main loop
// (~5 us at K = 768) hides only that much epilogue, and the fc_proj dX GEMM with the GELU backward
// (kGeluGrad, 16384 x 3072 x 768) took 0.32 ms in the compiled bf16 step against ~0.15 ms for the
// same GEMM without it (H100, session 22's kernel trace). With kEpiAhead (the ping-pong tiles: a
// second 16 KB-a-pass staging tile per warpgroup fits next to their 4 stages) one thread of the
// warpgroup issues the loads of passes 0 and 1 when its unit starts (before it waits for its
// turn), into the second tile and the staging tile; each pass then computes D in place over its
// loaded C / aux and stores it from there, and with f32 D (four passes) pass i + 2's load goes
// into pass i's buffer once its store has read it. The loads then overlap the unit's main loop.
// Each buffer has its own mbarrier (cbar[2c + b]) and parity bit (c_phase bit b). Same arithmetic,
// same bits. BLUBLAS_SM90_EPI_AHEAD=0 (or Sm90Override::epi_ahead = 0) keeps the per-pass loads.
template <class Cfg, class OutT>
__device__ __forceinline__ void issue_loads_ahead_typed(const KernelParams& p, const WorkUnit& w,
                                                        const CUtensorMap* map, uint8_t* stg,
                                                        uint8_t* ahead, uint64_t* cbar) {
  constexpr int kPassCols = StoreShape<OutT, Cfg::kPassBoxes>::kPassCols;
  constexpr int kPasses = (Cfg::BN + kPassCols - 1) / kPassCols;
  const int row_base = w.tm * Cfg::BM;
  const int col_base = w.tn * Cfg::BN;
  bulk_wait_read<0>();  // the previous unit's stores have read both buffers
#pragma unroll
  for (int pass = 0; pass < 2 && pass < kPasses; ++pass) {
    if (col_base + pass * kPassCols >= p.n) break;
    load_c_pass<Cfg, OutT>(p, map, pass, row_base, col_base, w.batch, pass == 0 ? ahead : stg, &cbar[pass]);
  }
}

template <class Cfg>
__device__ __forceinline__ void issue_loads_ahead(const KernelParams& p, const WorkUnit& w,
                                                  const CUtensorMap* map_aux, const CUtensorMap* map_c,
                                                  uint8_t* stg, uint8_t* ahead, uint64_t* cbar) {
  const CUtensorMap* map = p.epi.c != nullptr ? map_c : map_aux;
  if (p.out_type == 1) {
    if constexpr (Cfg::fast_out_type(1)) issue_loads_ahead_typed<Cfg, __nv_bfloat16>(p, w, map, stg, ahead, cbar);
  } else if (p.out_type == 2) {
    if constexpr (Cfg::fast_out_type(2)) issue_loads_ahead_typed<Cfg, __half>(p, w, map, stg, ahead, cbar);
  } else {
    issue_loads_ahead_typed<Cfg, float>(p, w, map, stg, ahead, cbar);
  }
}

// Note [sm90 fused bias gradient]
// kBiasGradA (bias_grad[i] = sum_k A'(i, k): the dW GEMM's bias gradient, A' = dY^T MN-major) ran
// as a separate pass over dY (bias_grad_reduce.cu) after the GEMM had already brought every A tile
// into shared memory: at d48 13.3 + 1.4 ms of a 377 ms bf16 step (H200, session 30), where
// cuBLASLt's dW kernels fuse it. Now, for MN-major 16-bit A without a cluster, warps 1..BM/64 of
// the producer warpgroup (idle: one thread issues the TMA loads) each take one 64-row panel of
// every A stage: they wait for the stage like a consumer, sum it when its chunk c belongs to the
// unit (column tile c % tiles_n of the row block), and arrive on the stage's empty barrier (its
// count includes them), so the stage is not refilled under them. The sums reproduce the separate pass's bits
// exactly (Note [Fixed-order bias-gradient reduction], "col" layout): chunks of
// kBiasGradColChunkK = 128 k = two 64-deep stages; in a chunk, class c = k % 8 is summed in k
// order from +0 (the separate kernel's warp c), then the 8 class sums in class order from +0; the
// chunks land in [chunk][m] partials for bias_grad_finish (or in bias_grad itself with one chunk).
// TMA's zero fill past K adds +0.0, which changes no sum (a sum that starts at +0 is never -0).
// Each lane takes two adjacent rows (one 32-bit shared load per k: conflict-free, the 128B
// swizzle keeps a row's 16-byte chunks in one 128-byte line). The entry fuses only when every
// split boundary falls on a chunk boundary (sm90_gemm_entry.cu).
template <class Cfg>
__device__ __forceinline__ void bias_grad_warp(const KernelParams& p, const uint8_t* smem_a,
                                               uint64_t* full, uint64_t* empty, int first_unit,
                                               int unit_step, int panel, int lane) {
  static_assert(Cfg::BK == 64, "two 64-deep stages per 128-k chunk");
  const uint32_t a_lane = smem_u32(smem_a) + static_cast<uint32_t>(panel * Cfg::BK * 128 + (lane % 4) * 4);
  const uint32_t lane_chunk = static_cast<uint32_t>(lane / 4);
  // 32-bit shared addresses of the barriers: at 48 registers a thread, 64-bit pointers spilled.
  const uint32_t full_u = smem_u32(full), empty_u = smem_u32(empty);
  int stage = 0;
  uint32_t phase = 0;
  const int n_local = local_unit_count(p, first_unit, unit_step);
  for (int j = 0; j < n_local; ++j) {
    const WorkUnit w = local_unit(p, first_unit, unit_step, j);
    const int r0 = w.tm * Cfg::BM + panel * 64 + 2 * lane;
    float part[8][2] = {};
    for (int kb = w.kb0; kb < w.kb1; ++kb) {
      mbar_wait_u32(full_u + 8u * static_cast<uint32_t>(stage), phase);
      // Chunk c of a row block is summed by its column tile c % tiles_n: the work is spread over
      // the row block's units (one tile summing every chunk held its stages 2-4x as long).
      if ((kb >> 1) % p.tiles_n == w.tn) {
        if ((kb & 1) == 0) {
#pragma unroll
          for (int c = 0; c < 8; ++c) part[c][0] = part[c][1] = 0.0f;
        }
        const uint32_t tile = a_lane + static_cast<uint32_t>(stage * Cfg::kABytes);
        // Class by class (each in k order, as the separate pass sums it), a class's eight rows
        // loaded together (eight loads in flight; every class at once spilled).
#pragma unroll
        for (int c = 0; c < 8; ++c) {  // rows c, c + 8, ...: their 16-byte chunks XORed with c
          const uint32_t base = tile + static_cast<uint32_t>(c * 128) + ((lane_chunk ^ static_cast<uint32_t>(c)) << 4);
          uint32_t v[Cfg::BK / 8];
#pragma unroll
          for (int i = 0; i < Cfg::BK / 8; ++i) v[i] = ld_shared_b32(base + static_cast<uint32_t>(i * 8 * 128));
          float s0 = part[c][0], s1 = part[c][1];
#pragma unroll
          for (int i = 0; i < Cfg::BK / 8; ++i) {
            float2 f;
            if constexpr (std::is_same_v<typename Cfg::In, InBf16>) {
              f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v[i]));
            } else {
              f = __half22float2(*reinterpret_cast<const __half2*>(&v[i]));
            }
            s0 += f.x;
            s1 += f.y;
          }
          part[c][0] = s0;
          part[c][1] = s1;
        }
        if ((kb & 1) == 1 || kb + 1 == p.kblocks) {  // a chunk is complete
          float t0 = 0.0f, t1 = 0.0f;
#pragma unroll
          for (int c = 0; c < 8; ++c) {
            t0 += part[c][0];
            t1 += part[c][1];
          }
          // More than one chunk (more than two k-blocks): [chunk][m] partials, else the sums.
          float* out = p.bgrad + (p.kblocks > 2 ? static_cast<int64_t>(kb >> 1) * p.m : 0);
          if (r0 < p.m) out[r0] = t0;
          if (r0 + 1 < p.m) out[r0 + 1] = t1;
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive_u32(empty_u + 8u * static_cast<uint32_t>(stage));
      if (++stage == Cfg::kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
  }
}

// Note [sm90 stream-K]: a consumer warpgroup's accumulator slot. Thread t's float4 v of m64 block
// mi sits at (mi * BN/8 + v) * 128 + t: every store and load is a coalesced 2 KB row.
template <class Cfg>
__device__ __forceinline__ float4* stream_k_slot(const KernelParams& p, int cta, int c) {
  constexpr int64_t kFloats = Cfg::kMI * Cfg::BN / 2 * 128;
  return reinterpret_cast<float4*>(p.sk_partial + (static_cast<int64_t>(cta) * Cfg::kConsumers + c) * kFloats) +
         threadIdx.x % 128;
}

// A contributor: the accumulators to this CTA's slot, then the flag (release after every thread's
// stores: each fences, the warpgroup meets at its named barrier, thread 0 releases).
template <class Cfg>
__device__ __forceinline__ void stream_k_store(const KernelParams& p, int cta, int c,
                                               const float (&acc)[Cfg::kMI][Cfg::BN / 2]) {
  float4* slot = stream_k_slot<Cfg>(p, cta, c);
#pragma unroll
  for (int mi = 0; mi < Cfg::kMI; ++mi)
#pragma unroll
    for (int v = 0; v < Cfg::BN / 8; ++v)
      __stcg(slot + (mi * (Cfg::BN / 8) + v) * 128,
             make_float4(acc[mi][4 * v], acc[mi][4 * v + 1], acc[mi][4 * v + 2], acc[mi][4 * v + 3]));
  __threadfence();
  named_barrier_sync(1 + c, 128);
  if (threadIdx.x % 128 == 0) st_release_gpu(p.sk_flags + cta * Cfg::kConsumers + c, 1u);
}

// The finisher: the later parts of its tile added in CTA (= k) order.
template <class Cfg>
__device__ __forceinline__ void stream_k_add(const KernelParams& p, int c, const WorkUnit& w,
                                             float (&acc)[Cfg::kMI][Cfg::BN / 2]) {
  const int last = sk_last_contributor(p, w);
#pragma unroll 1
  for (int h = w.sk_cta + 1; h <= last; ++h) {
    if (threadIdx.x % 128 == 0) {
      const uint32_t* flag = p.sk_flags + h * Cfg::kConsumers + c;
      while (ld_acquire_gpu(flag) == 0u) {
      }
    }
    named_barrier_sync(1 + c, 128);
    const float4* slot = stream_k_slot<Cfg>(p, h, c);
#pragma unroll
    for (int mi = 0; mi < Cfg::kMI; ++mi)
#pragma unroll
      for (int v = 0; v < Cfg::BN / 8; ++v) {
        const float4 x = __ldcg(slot + (mi * (Cfg::BN / 8) + v) * 128);
        acc[mi][4 * v] += x.x;
        acc[mi][4 * v + 1] += x.y;
        acc[mi][4 * v + 2] += x.z;
        acc[mi][4 * v + 3] += x.w;
      }
  }
}

// A consumer warp's release of a stage: the local empty barrier, and the peer's with a cluster.
template <class Cfg>
__device__ __forceinline__ void release_stage(uint64_t* empty_bar) {
  if constexpr (Cfg::kCluster == 1) {
    mbar_arrive(empty_bar);
  } else {
#pragma unroll
    for (int r = 0; r < Cfg::kCluster; ++r) mbar_arrive_cluster(empty_bar, static_cast<uint32_t>(r));
  }
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_gemm_kernel(const __grid_constant__ CUtensorMap map_a,
                     const __grid_constant__ CUtensorMap map_b,
                     const __grid_constant__ CUtensorMap map_d,
                     const __grid_constant__ CUtensorMap map_aux,
                     const __grid_constant__ CUtensorMap map_c, const KernelParams p) {
#if BLUBLAS_SM90A_ENABLED
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, kStages = Cfg::kStages;
  extern __shared__ uint8_t smem_raw[];
  // 1024-byte alignment for the 128B swizzle atoms (Note [wgmma shared-memory descriptors ...]).
  const uint32_t raw_addr = smem_u32(smem_raw);
  uint8_t* smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
  uint8_t* smem_a = smem;
  uint8_t* smem_b = smem + kStages * Cfg::kABytes;
  float* staging = reinterpret_cast<float*>(smem_b + kStages * Cfg::kBBytes);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem_b + kStages * Cfg::kBBytes + Cfg::kStagingBytes);
  uint64_t* empty = full + kStages;
  uint64_t* order = empty + kStages;  // Note [sm90 ping-pong]
  uint64_t* cbar = order + 2;         // Note [sm90 C through TMA]: two per consumer warpgroup
  uint8_t* ahead_base = smem + Cfg::kAheadOffset;  // Note [sm90 epilogue loads ahead] (epi_ahead only)

  // Warp-uniform by construction (a shuffle from lane 0), so ptxas treats the role branches as
  // warpgroup-uniform and applies the setmaxnreg register limits per branch.
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  const int tid_in_wg = threadIdx.x % 128;
  // Note [sm90 fused bias gradient]: these warps also release every stage.
  const int bgrad_warps = Cfg::kFusedBiasGrad && p.bgrad != nullptr ? BM / 64 : 0;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 4 * Cfg::kStageReaders * Cfg::kCluster + bgrad_warps);
    }
    mbar_init(&order[0], 1);
    mbar_init(&order[1], 1);
#pragma unroll
    for (int i = 0; i < 2 * Cfg::kConsumers; ++i) mbar_init(&cbar[i], 1);
    mbar_fence_init();
  }
  __syncthreads();
  if constexpr (Cfg::kCluster > 1) cluster_sync();
  const int cta_rank = Cfg::kCluster > 1 ? static_cast<int>(cluster_cta_rank()) : 0;
  const int first_unit = blockIdx.x / Cfg::kCluster;
  const int unit_step = gridDim.x / Cfg::kCluster;

  if (wg == 0) {
    // ---- producer ----
    if constexpr (Cfg::kConsumerRegs > 0) setmaxnreg_dec<Cfg::kProducerRegs>();
    if (tid_in_wg == 0) {
      tma_prefetch_map(&map_a);
      tma_prefetch_map(&map_b);
      int stage = 0;
      uint32_t phase = 0;
      const int n_local = local_unit_count(p, first_unit, unit_step);
      for (int j = 0; j < n_local; ++j) {
        const WorkUnit w = local_unit(p, first_unit, unit_step, j);
        const int m0 = (w.tm * Cfg::kCluster + cta_rank) * BM, n0 = w.tn * BN;
        for (int kb = w.kb0; kb < w.kb1; ++kb) {
          mbar_wait(&empty[stage], phase ^ 1);
          mbar_arrive_expect_tx(&full[stage], Cfg::kStageBytes);
          uint8_t* sa = smem_a + stage * Cfg::kABytes;
          uint8_t* sb = smem_b + stage * Cfg::kBBytes;
          const int k0 = kb * BK;
          if constexpr (Cfg::kAKMajor) {
            tma_load(sa, &map_a, &full[stage], p.a_rank3, k0, m0, w.batch);
          } else {
#pragma unroll
            for (int j = 0; j < BM / 64; ++j) {
              tma_load(sa + j * BK * 128, &map_a, &full[stage], p.a_rank3, m0 + 64 * j, k0,
                       w.batch);
            }
          }
          if constexpr (Cfg::kCluster == 1) {
            if constexpr (Cfg::kBKMajor) {
              tma_load(sb, &map_b, &full[stage], p.b_rank3, k0, n0, w.batch);
            } else {
#pragma unroll
              for (int j = 0; j < BN / 64; ++j) {
                tma_load(sb + j * BK * 128, &map_b, &full[stage], p.b_rank3, n0 + 64 * j, k0,
                         w.batch);
              }
            }
          } else {
            // This CTA's half of B, multicast to both CTAs of the pair.
            constexpr int kHalf = BN / 2;
            const uint16_t mask = 0x3;
            if constexpr (Cfg::kBKMajor) {
              uint8_t* dst = sb + cta_rank * kHalf * 128;
              const int n_half = n0 + cta_rank * kHalf;
              if (p.b_rank3) {
                tma_load_3d_multicast(dst, &map_b, &full[stage], k0, n_half, w.batch, mask);
              } else {
                tma_load_2d_multicast(dst, &map_b, &full[stage], k0, n_half, mask);
              }
            } else {
#pragma unroll
              for (int jj = 0; jj < kHalf / 64; ++jj) {
                const int j = cta_rank * (kHalf / 64) + jj;
                uint8_t* dst = sb + j * BK * 128;
                if (p.b_rank3) {
                  tma_load_3d_multicast(dst, &map_b, &full[stage], n0 + 64 * j, k0, w.batch, mask);
                } else {
                  tma_load_2d_multicast(dst, &map_b, &full[stage], n0 + 64 * j, k0, mask);
                }
              }
            }
          }
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    } else if constexpr (Cfg::kFusedBiasGrad) {
      const int warp = tid_in_wg / 32;
      if (warp >= 1 && warp <= bgrad_warps) {
        bias_grad_warp<Cfg>(p, smem_a, full, empty, first_unit, unit_step, warp - 1, tid_in_wg % 32);
      }
    }
  } else {
    // ---- consumers ----
    if constexpr (Cfg::kConsumerRegs > 0) setmaxnreg_inc<Cfg::kConsumerRegs>();
    const int c = wg - 1;
    const int lane = tid_in_wg % 32;
    int stage = 0;
    uint32_t phase = 0;
    float acc[Cfg::kMI][BN / 2];
    int turn = 0;  // ping-pong: index of the unit in this CTA's sequence
    // Parity of this warpgroup's next C / aux load, bit b for buffer b (Note [sm90 C through TMA],
    // Note [sm90 epilogue loads ahead]).
    uint32_t c_phase = 0;
    uint8_t* stg_c = reinterpret_cast<uint8_t*>(staging) + c * Cfg::kWgM * Cfg::kStagingRowBytes;
    uint8_t* ahead_c = ahead_base + c * Cfg::kWgM * Cfg::kStagingRowBytes;
    const int n_local = local_unit_count(p, first_unit, unit_step);
    for (int u = 0; u < n_local; ++u, ++turn) {
      // Only the k-block count stays live through the main loop (registers are scarce next to
      // the accumulators); the unit is decoded again for the epilogue.
      int kb_count;
      {
        const WorkUnit w0 = local_unit(p, first_unit, unit_step, u);
        kb_count = w0.kb1 - w0.kb0;
      }
      if constexpr (Cfg::kPingPong) {
        if ((turn & 1) != c) {  // the other warpgroup's unit: skip its k-blocks in the ring
          const int next = stage + kb_count;
          phase ^= static_cast<uint32_t>((next / kStages) & 1);
          stage = next % kStages;
          continue;
        }
      }
      if constexpr (Cfg::kEpiAhead) {  // Note [sm90 epilogue loads ahead]
        if (p.epi_ahead && tid_in_wg == 0) {
          WorkUnit wl = local_unit(p, first_unit, unit_step, u);
          wl.tm = wl.tm * Cfg::kCluster + cta_rank;
          issue_loads_ahead<Cfg>(p, wl, &map_aux, &map_c, stg_c, ahead_c, &cbar[2 * c]);
        }
      }
      if constexpr (Cfg::kPingPong) {  // this warpgroup's turn (Note [sm90 ping-pong])
        // Its j-th unit is turn 2j + c: warpgroup 1 waits for order[1] phase j, warpgroup 0
        // (j >= 1) for order[0] phase j - 1.
        const int j = turn >> 1;
        if (c == 1) {
          mbar_wait(&order[1], static_cast<uint32_t>(j & 1));
        } else if (j > 0) {
          mbar_wait(&order[0], static_cast<uint32_t>((j - 1) & 1));
        }
      }
#pragma unroll
      for (int mi = 0; mi < Cfg::kMI; ++mi) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[mi][i] = 0.0f;
      }
      int prev_stage = -1;
      for (int kb = 0; kb < kb_count; ++kb) {
        mbar_wait(&full[stage], phase);
        const uint32_t a_base = smem_u32(smem_a + stage * Cfg::kABytes);
        const uint32_t b_base = smem_u32(smem_b + stage * Cfg::kBBytes);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < Cfg::kKSteps; ++ks) {
          const uint64_t desc_b =
              Cfg::kBKMajor ? make_desc_sw128(b_base, 32 * ks, 16, 1024)
                            : make_desc_sw128(b_base, 2048 * ks, BK * 128, 1024);
#pragma unroll
          for (int mi = 0; mi < Cfg::kMI; ++mi) {
            // First row of this m64 block in the tile.
            const int row = (Cfg::kPingPong ? 0 : c * Cfg::kWgM) + mi * 64;
            const uint64_t desc_a =
                Cfg::kAKMajor
                    ? make_desc_sw128(a_base, row * 128 + 32 * ks, 16, 1024)
                    : make_desc_sw128(a_base, (row / 64) * BK * 128 + 2048 * ks, BK * 128,
                                         1024);
            Wgmma<typename Cfg::In, BN>::template mma<Cfg::kAKMajor ? 0 : 1,
                                                      Cfg::kBKMajor ? 0 : 1>(acc[mi], desc_a,
                                                                             desc_b, 1);
          }
        }
        wgmma_commit();
        wgmma_wait<1>();
        if (prev_stage >= 0 && lane == 0) release_stage<Cfg>(&empty[prev_stage]);
        prev_stage = stage;
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
      if constexpr (Cfg::kPingPong) {  // every k-block of this unit has landed: pass the turn
        if (tid_in_wg == 0) mbar_arrive(&order[1 - c]);
      }
      wgmma_wait<0>();
#pragma unroll
      for (int mi = 0; mi < Cfg::kMI; ++mi) fence_accumulators(acc[mi]);
      if constexpr (Cfg::kFp8) {  // Note [FP8 GEMM]: the per-tensor scales, before any epilogue
        if (p.scale_a != nullptr || p.scale_b != nullptr) {
          const float s = (p.scale_a != nullptr ? *p.scale_a : 1.0f) *
                          (p.scale_b != nullptr ? *p.scale_b : 1.0f);
#pragma unroll
          for (int mi = 0; mi < Cfg::kMI; ++mi) {
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[mi][i] *= s;
          }
        }
      }
      if (prev_stage >= 0 && lane == 0) release_stage<Cfg>(&empty[prev_stage]);
      WorkUnit w = local_unit(p, first_unit, unit_step, u);
      w.tm = w.tm * Cfg::kCluster + cta_rank;
      if constexpr (Cfg::kStreamK) {  // Note [sm90 stream-K]
        if (p.sk_ctas > 0) {
          if (w.kb0 > 0) {  // a later part of a tile another CTA finishes
            stream_k_store<Cfg>(p, w.sk_cta, c, acc);
            continue;
          }
          if (w.kb1 < p.kblocks) stream_k_add<Cfg>(p, c, w, acc);
        }
      }

      if (kEnableTmaStoreEpilogue && p.fast_epi) {
        uint8_t* stg = stg_c;
        uint64_t* cb = &cbar[2 * c];
        // Note [sm90 epilogue output types]: the launcher sets fast_epi only for these.
        if (p.out_type == 1) {
          if constexpr (Cfg::fast_out_type(1)) {
            consumer_epilogue_tma_any<Cfg, __nv_bfloat16>(p, w, c, stg, &map_d, &map_aux, &map_c, cb,
                                                          c_phase, ahead_c, acc);
          }
        } else if (p.out_type == 2) {
          if constexpr (Cfg::fast_out_type(2)) {
            consumer_epilogue_tma_any<Cfg, __half>(p, w, c, stg, &map_d, &map_aux, &map_c, cb,
                                                   c_phase, ahead_c, acc);
          }
        } else {
          consumer_epilogue_tma_any<Cfg, float>(p, w, c, stg, &map_d, &map_aux, &map_c, cb,
                                                c_phase, ahead_c, acc);
        }
      } else {
        consumer_epilogue<Cfg>(p, w, c, staging + c * Cfg::kWgM * kEpiLd, acc);
      }
    }
    // Bulk stores must finish reading shared memory before the CTA exits.
    if (p.fast_epi && tid_in_wg == 0) bulk_wait<0>();
  }
  if constexpr (Cfg::kCluster > 1) cluster_sync();  // Note [sm90 cluster multicast]
#else
  (void)map_a;
  (void)map_b;
  (void)map_d;
  (void)map_aux;
  (void)map_c;
  (void)p;
  __trap();
#endif
}

}  // namespace blublas::gemm_detail::sm90
