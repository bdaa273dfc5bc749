// sm80_gemm_kernel.cuh (internal): the mma.sync GEMM kernel template of the sm_80 path, for
// bf16/f16 (m16n8k16) and tf32 (m16n8k8) operands with fp32 accumulation. Included only by the
// explicit-instantiation files sm80_{bf16,f16,tf32}_gemm.cu, so each compiles a bounded set.
//
// Note [sm80 mma.sync kernel]
// - CTA tile BM x BN, k slices of 64 bytes per row (32 16-bit or 16 fp32 elements), WARPS_M x
//   WARPS_N warps each owning a (BM/WARPS_M) x (BN/WARPS_N) sub-tile as 16 x 8 mma tiles.
// - Global -> shared with cp.async (16-byte .cg copies, bypassing L1) into a STAGES-deep ring:
//   wait for slice kt, one barrier, issue slice kt+STAGES-1, compute kt. Edge tiles and K tails
//   use the src-size form of cp.async (zero fill), so any M, N, K is exact; the path requires
//   16-byte aligned pointers, leading dimensions and batch strides (sm80_gemm_supports checks).
// - Shared-memory layout follows the operand's global major (no transpose on the way in):
//   k-major tiles are [rows][BK + 16 bytes], m/n-major tiles [BK][rows + 8 elements]. The padding
//   puts the 8 rows an ldmatrix phase (or a tf32 fragment load) touches in distinct banks.
// - 16-bit fragments come from ldmatrix.x4 (k-major operand) or ldmatrix.x4.trans (m/n-major):
//   .trans of a [k][m] block hands each thread the (m, k..k+1) pair the mma fragment needs.
// - tf32 k-major fragments also come from ldmatrix.x4 (a b16 8 x 8 block is 8 rows x 4 floats and
//   hands thread l the float at (l/4, l%4), the m16n8k8 layout); there is no 32-bit .trans, so
//   m/n-major tf32 fragments use 32-bit shared loads (conflict-free: row stride = 8 mod 32
//   words). Values are rounded as cvt.rna.tf32.f32 does (nearest, ties away; Note [tf32
//   rounding by integer add]).
// - Warp tiles: 64 x 64 in the 128 x 128 tile (4 warps, ~220 registers, 2 CTAs per SM), 64 x 32
//   in 128 x 64, 32 x 32 in 64 x 64.
//
// Note [sm80 warps per scheduler]
// On Hopper ptxas gives every HMMA.16816 a fixed 6-cycle issue stall (control bits of the sm_90a
// SASS, session 14), so one warp issues at most one MMA per 6 cycles; with 2 warps per scheduler
// Nsight Compute showed 2.0 "wait" stalls per issued instruction and the HMMA pipe 33% busy (qkv
// fwd). Measured (H100, same binary, A/B): 8 warps of 64 x 32 held to 128 registers (4 warps per
// scheduler, 24% occupancy) left the pipe at 33% and lost overall (GPT-2 bf16 set 0.316 vs 0.329 of
// cuBLAS): the stalls moved to shared memory (mio_throttle 1.2, short_scoreboard 1.3 per issue:
// 6 ldmatrix per 16 MMA instead of 8 per 32) and L2 ran at 63%. Kept: 4 warps of 64 x 64.
// 128-byte k slices (3 stages, half the barriers and cp.async set-ups per flop) measured no better
// either (0.323). What is left (0.33 of cuBLAS; an mma.sync kernel tops out near 615 TFLOP/s on an
// H100, the HMMA pipe's 100%): a 128 x 256 CTA (less L2 traffic per flop), fragment reuse across
// the two k16 steps, and a look at L2 and shared-memory sectors per request in Nsight Compute.
// - Tiles are visited in groups of kGroupM tile rows so that CTAs running together share A and
//   B panels in L2. The epilogue goes through shared memory (Note [sm80 staged epilogue]).
//
// Note [sm80 staged epilogue]
// The first epilogue stored straight from the accumulator fragments: 64 pairs per thread, each an
// inlined copy of epilogue.cuh's store for the three output dtypes (D's dtype is picked at run
// time). That made the 128x128 kernel ~52K SASS instructions around a ~150-instruction main loop,
// and Nsight Compute (H100, qkv fwd 16384x2304x768, session 14) showed what it cost: 0.20 issued
// warps per scheduler, 5.6 warps stalled on "no instruction" per issued one (the code does not fit
// the instruction cache, every CTA's epilogue streams it from L2), 102 TFLOP/s = 0.16 of cuBLAS.
// Now the accumulators go to shared memory (the pipeline's, free after the main loop; rows of
// BN + 8 floats, so the float2 writes of a half-warp, 4 rows x 4 lanes, hit 32 distinct banks),
// and one rolled loop per output dtype walks the tile row by row: consecutive threads take
// consecutive column pairs (coalesced stores, where the fragment stores touched 8 rows per warp
// instruction), and the epilogue is inlined three times instead of 192.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "blublas/check.h"
#include "common/arch.cuh"
#include "common/tf32_round.h"
#include "gemm/epilogue.cuh"
#include "gemm/heuristics.h"

namespace blublas::gemm_detail::sm80 {

constexpr int kGroupM = 8;

struct Tf32 {};  // tag: fp32 storage, tf32 tensor-core math
// FP8 pairs (Note [sm89 FP8 mma.sync]): byte storage, m16n8k32 with A's and B's formats.
struct E4M3E4M3 {};
struct E4M3E5M2 {};
struct E5M2E4M3 {};
struct E5M2E5M2 {};
template <typename T>
inline constexpr bool kIsFp8 = std::is_same_v<T, E4M3E4M3> || std::is_same_v<T, E4M3E5M2> ||
                               std::is_same_v<T, E5M2E4M3> || std::is_same_v<T, E5M2E5M2>;

template <typename T> struct Storage { using type = T; };
template <> struct Storage<Tf32> { using type = float; };
template <> struct Storage<E4M3E4M3> { using type = uint8_t; };
template <> struct Storage<E4M3E5M2> { using type = uint8_t; };
template <> struct Storage<E5M2E4M3> { using type = uint8_t; };
template <> struct Storage<E5M2E5M2> { using type = uint8_t; };

// Note [sm89 FP8 mma.sync]
// The FP8 kernels are the 16-bit ones with bytes for elements: mma.sync m16n8k32 (sm_89 and
// newer) takes its A fragment as four .b32 of four FP8 values each at the byte positions where
// m16n8k16 takes two 16-bit values (row g / g + 8, k bytes 4t..4t+3 and 16 + 4t..), and B the same,
// so the ldmatrix.x4 (b16) loads of a K-major tile hand out the FP8 fragments unchanged: only the
// byte offset of the second k half (16 bytes = 16 FP8 or 8 16-bit elements) is written in bytes.
// ldmatrix .trans moves 16-bit units, so FP8 takes K-major operands only (as the FP8 wgmma does;
// gemm.cpp checks). The per-tensor scales multiply the accumulators before the epilogue and amax
// is the max |D| of the stored values (Note [FP8 GEMM] in gemm.cpp). The instantiations
// (sm80_fp8_gemm.cu) are compiled for sm_89 too; on sm_80/86 code the mma is absent (trap) and the
// host refuses FP8 below sm_89.

template <typename T, int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_>
struct KernelConfig {
  using Elem = typename Storage<T>::type;
  static constexpr bool kTf32 = std::is_same_v<T, Tf32>;
  static constexpr bool kFp8 = kIsFp8<T>;
  static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int kElem = sizeof(Elem);
  static constexpr int kBK = 64 / kElem;        // elements of k per slice (64 bytes; 128 measured no
                                                // faster: Note [sm80 warps per scheduler])
  static constexpr int kChunk = 16 / kElem;     // elements per 16-byte cp.async
  static constexpr int kCPR = 4;                // 16-byte chunks per k-major row of a slice
  static constexpr int kMmaK = kTf32 ? 8 : kFp8 ? 32 : 16;
  static constexpr int kHalfK = 16 / kElem;       // elements in 16 bytes of k (an ldmatrix column block)
  static constexpr int kWM = BM / WARPS_M, kWN = BN / WARPS_N;
  static constexpr int kMT = kWM / 16, kNT = kWN / 8;
  static constexpr int kKMajStride = kBK + kChunk;  // [rows][kBK + 16 bytes]
  static constexpr int kAMStride = BM + 8;          // [kBK][BM + 8]
  static constexpr int kBNStride = BN + 8;          // [kBK][BN + 8]
  template <bool KMAJ, int ROWS>
  static constexpr int tile_elems() { return KMAJ ? ROWS * kKMajStride : kBK * (ROWS + 8); }
  // The epilogue stages the fp32 accumulator tile through the pipeline's shared memory
  // (Note [sm80 staged epilogue]): rows of BN + 8 floats.
  static constexpr int kStageLd = BN + 8;
  template <bool A_KMAJ, bool B_KMAJ>
  static constexpr int smem_bytes() {
    constexpr int pipeline = STAGES * (tile_elems<A_KMAJ, BM>() + tile_elems<B_KMAJ, BN>()) * kElem;
    constexpr int staging = BM * kStageLd * 4;
    return pipeline > staging ? pipeline : staging;
  }
  static_assert(kNT % 2 == 0, "B fragments are loaded in pairs of n8 tiles");
  static_assert((BM * kCPR) % kThreads == 0 && (BN * kCPR) % kThreads == 0, "chunks per thread");
};

// ---- PTX wrappers ---------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
#if BLUBLAS_SM80_ENABLED
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(src_bytes));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if BLUBLAS_SM80_ENABLED
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if BLUBLAS_SM80_ENABLED
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
#if BLUBLAS_SM80_ENABLED
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
#if BLUBLAS_SM80_ENABLED
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
#endif
}

// cvt.rna.tf32.f32 as two instructions (Note [tf32 rounding by integer add]).
__device__ __forceinline__ uint32_t to_tf32(float x) {
  return detail::tf32_rna_bits(__float_as_uint(x));
}

template <typename T>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if BLUBLAS_SM80_ENABLED
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else if constexpr (kIsFp8<T>) {
#if __CUDA_ARCH__ >= 890
#define BLUBLAS_FP8_MMA(TA, TB)                                                                         \
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." TA "." TB ".f32 {%0, %1, %2, %3}, "           \
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"                                       \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                         \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
    if constexpr (std::is_same_v<T, E4M3E4M3>) {
      BLUBLAS_FP8_MMA("e4m3", "e4m3");
    } else if constexpr (std::is_same_v<T, E4M3E5M2>) {
      BLUBLAS_FP8_MMA("e4m3", "e5m2");
    } else if constexpr (std::is_same_v<T, E5M2E4M3>) {
      BLUBLAS_FP8_MMA("e5m2", "e4m3");
    } else {
      BLUBLAS_FP8_MMA("e5m2", "e5m2");
    }
#undef BLUBLAS_FP8_MMA
#else
    __trap();  // FP8 mma.sync needs sm_89 (the host never launches it below)
#endif
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#endif
}

// ---- global -> shared ---------------------------------------------------------------------------
// Note [sm80 slice loader]
// One operand's slices (ROWS of its M or N extent x kBK of k) into shared memory, 16-byte cp.async
// chunks, kPer chunks per thread. The first version recomputed every chunk's row, k, bounds and
// 64-bit address in each slice: ~240 SASS instructions per slice around 64 HMMA (Nsight Compute,
// session 14: "wait" stalls on the integer chains, 1.8 per issue). What a thread's chunks are does
// not change from slice to slice: set-up computes the first chunk's source and shared offset, the
// chunks' row or k step, and what bounds each chunk can meet; a slice then costs an add per chunk
// plus one compare for the k bound (k-major: the K tail; m/n-major: rows past K).
//  - k-major (element (r, k) at x[r*ld + k], tile [ROWS][kKMajStride]): chunk l is row
//    tid/4 + l*(kThreads/4), k offset (tid%4)*E; its row bound is fixed, its k bound moves.
//  - m/n-major (x[k*ld + r], tile [kBK][ROWS + 8]): chunk l is k row tid/kPerRow + l*(kThreads/kPerRow),
//    column (tid%kPerRow)*E; its column bound (elements left in the row, 0..E) is fixed.
template <typename Cfg, bool KMAJ, int ROWS>
struct SliceLoader {
  using Elem = typename Cfg::Elem;
  static constexpr int E = Cfg::kChunk;
  static constexpr int kPer = ROWS * Cfg::kCPR / Cfg::kThreads;
  static constexpr int kPerRow = ROWS / E;  // m/n-major chunks per k row
  static constexpr int kRowStep = KMAJ ? Cfg::kThreads / Cfg::kCPR : Cfg::kThreads / kPerRow;
  static_assert(kPer >= 1 && (ROWS * Cfg::kCPR) % Cfg::kThreads == 0, "whole chunks per thread");
  static_assert(KMAJ || Cfg::kThreads % kPerRow == 0, "m/n-major k rows split evenly over threads");

  const Elem* x;    // the operand (fallback address of empty chunks)
  const Elem* src;  // chunk 0's source at k = 0
  int64_t ld;
  int soff;         // chunk 0's element offset in a stage tile
  int lim;          // k-major: rows left from chunk 0's row (chunk l in range if l*kRowStep < lim);
                    // m/n-major: elements of chunk 0's row segment inside the operand (0..E)
  int kc;           // k-major: the chunk's k offset in the slice; m/n-major: chunk 0's k row

  __device__ __forceinline__ SliceLoader(const Elem* x_, int64_t ld_, int r0, int n_rows) : x(x_), ld(ld_) {
    const int t = static_cast<int>(threadIdx.x);
    if constexpr (KMAJ) {
      const int r = t / Cfg::kCPR;
      kc = (t % Cfg::kCPR) * E;
      lim = n_rows - (r0 + r);
      src = x + static_cast<int64_t>(r0 + r) * ld + kc;
      soff = r * Cfg::kKMajStride + kc;
    } else {
      const int rc = (t % kPerRow) * E;
      kc = t / kPerRow;
      lim = max(0, min(E, n_rows - (r0 + rc)));
      src = x + static_cast<int64_t>(kc) * ld + r0 + rc;
      soff = kc * (ROWS + 8) + rc;
    }
  }

  // Slice at k0 into the stage tile s (n_k: the operand's K).
  __device__ __forceinline__ void load(Elem* s, int k0, int n_k) const {
    if constexpr (KMAJ) {
      const int kvalid = max(0, min(E, n_k - (k0 + kc)));
      const Elem* p = src + k0;
#pragma unroll
      for (int l = 0; l < kPer; ++l) {
        const int valid = l * kRowStep < lim ? kvalid : 0;
        cp_async_16(s + soff + l * kRowStep * Cfg::kKMajStride, valid > 0 ? p + l * kRowStep * ld : x,
                    valid * Cfg::kElem);
      }
    } else {
      const Elem* p = src + static_cast<int64_t>(k0) * ld;
#pragma unroll
      for (int l = 0; l < kPer; ++l) {
        const int valid = k0 + kc + l * kRowStep < n_k ? lim : 0;
        cp_async_16(s + soff + l * kRowStep * (ROWS + 8), valid > 0 ? p + l * kRowStep * ld : x,
                    valid * Cfg::kElem);
      }
    }
  }
};

// ---- fragments ----------------------------------------------------------------------------------
// A fragment of the 16 x kMmaK tile at (row m, k kk) of the A slice.
template <typename Cfg, typename T, bool KMAJ>
__device__ __forceinline__ void load_a_frag(uint32_t (&a)[4], const typename Cfg::Elem* s, int m,
                                            int kk, int lane) {
  if constexpr (!Cfg::kTf32) {
    if constexpr (KMAJ) {
      ldmatrix_x4(a, s + (m + lane % 16) * Cfg::kKMajStride + kk + (lane / 16) * Cfg::kHalfK);
    } else {
      static_assert(!Cfg::kFp8, "FP8 operands are K-major only (Note [sm89 FP8 mma.sync])");
      const int q = lane / 8;
      ldmatrix_x4_trans(a, s + (kk + (q / 2) * 8 + lane % 8) * Cfg::kAMStride + m + (q % 2) * 8);
    }
  } else if constexpr (KMAJ) {
    // tf32 k-major: an 8 x 8 b16 ldmatrix block is 8 rows x 4 floats, and thread l receives the
    // float at (row l/4, k l%4): exactly the a0..a3 layout of m16n8k8 for blocks at k+0 and k+4.
    ldmatrix_x4(a, s + (m + lane % 16) * Cfg::kKMajStride + kk + (lane / 16) * 4);
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = to_tf32(__uint_as_float(a[i]));
  } else {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = m + g + 8 * (i & 1), col = kk + t + 4 * (i >> 1);
      a[i] = to_tf32(s[col * Cfg::kAMStride + row]);
    }
  }
}

// B fragments of two n8 tiles at (k kk, n, n+8): b[0], b[1] for the first, b[2], b[3] the second.
template <typename Cfg, typename T, bool KMAJ>
__device__ __forceinline__ void load_b_frag_pair(uint32_t (&b)[4], const typename Cfg::Elem* s,
                                                 int n, int kk, int lane) {
  if constexpr (!Cfg::kTf32) {
    const int q = lane / 8;
    if constexpr (KMAJ) {
      ldmatrix_x4(b, s + (n + (q / 2) * 8 + lane % 8) * Cfg::kKMajStride + kk + (q % 2) * Cfg::kHalfK);
    } else {
      static_assert(!Cfg::kFp8, "FP8 operands are K-major only (Note [sm89 FP8 mma.sync])");
      ldmatrix_x4_trans(b, s + (kk + (q % 2) * 8 + lane % 8) * Cfg::kBNStride + n + (q / 2) * 8);
    }
  } else if constexpr (KMAJ) {
    const int q = lane / 8;  // as the 16-bit case, with 4-float k blocks
    ldmatrix_x4(b, s + (n + (q / 2) * 8 + lane % 8) * Cfg::kKMajStride + kk + (q % 2) * 4);
#pragma unroll
    for (int i = 0; i < 4; ++i) b[i] = to_tf32(__uint_as_float(b[i]));
  } else {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int col = n + g + 8 * (i >> 1), k = kk + t + 4 * (i & 1);
      b[i] = to_tf32(s[k * Cfg::kBNStride + col]);
    }
  }
}

struct KernelArgs {
  const void* a; int64_t lda, stride_a;
  const void* b; int64_t ldb, stride_b;
  int m, n, k;
  int tiles_m, tiles_n;
  const float* scale_a = nullptr;  // FP8: acc *= *scale_a * *scale_b before the epilogue (null = 1)
  const float* scale_b = nullptr;
  // Split-K (Note [sm80 split-K] in heuristics.cpp): split blockIdx.y runs k slices
  // [y * kt_per_split, (y + 1) * kt_per_split) and stores its fp32 tile (times the FP8 scales) to
  // partial[y][batch][i][j] (rows of partial_ld floats); splitk_reduce applies the epilogue.
  float* partial = nullptr;
  int64_t partial_ld = 0;
  int kt_per_split = 0;
};

// On sm_90 ptxas builds FP8 mma.sync from other instructions (Hopper's native FP8 is wgmma): with
// 64 x 64 warp tiles that spills, so the Hopper code keeps only the 32 x 32 warp tile (the 64 x 64
// CTA tile), which sm80_gemm_run picks for FP8 there: a test path, not Hopper's FP8 GEMM.
template <typename Cfg>
inline constexpr bool kFp8WideOnHopper =
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    Cfg::kFp8 && Cfg::kWM * Cfg::kWN > 32 * 32;
#else
    false;
#endif

// The walk over the staged tile (Note [sm80 staged epilogue]): thread x takes column pairs x,
// x + kThreads, ... of the row-major BM x BN tile, so a warp covers 64 consecutive columns of one
// row; fn(tile row, tile column, the pair). Rows past m end the walk (rows only grow along it).
template <typename Cfg, typename F>
__device__ __forceinline__ void for_each_staged_pair(const float* stage, int rows_left, F&& fn) {
  constexpr int kPairs = Cfg::BN / 2;
#pragma unroll 2
  for (int idx = threadIdx.x; idx < Cfg::BM * kPairs; idx += Cfg::kThreads) {
    const int r = idx / kPairs, c = (idx % kPairs) * 2;
    if (r >= rows_left) break;
    fn(r, c, *reinterpret_cast<const float2*>(stage + r * Cfg::kStageLd + c));
  }
}

// The staged tile through the epilogue; returns the thread's max |D| stored (AMAX: the FP8
// calls), else 0.
template <typename Cfg, typename OutT, bool AMAX>
__device__ __forceinline__ float store_staged(const float* stage, const EpilogueArgs& e, int batch, int m0, int n0) {
  float amax = 0.0f;
  for_each_staged_pair<Cfg>(stage, e.m - m0, [&](int r, int c, float2 v) {
    const float2 out = epilogue_store2<OutT>(e, batch, m0 + r, n0 + c, v.x, v.y);
    if constexpr (AMAX) amax = fmaxf(amax, fmaxf(fabsf(out.x), fabsf(out.y)));
  });
  return amax;
}

template <typename Cfg, typename T, bool A_KMAJ, bool B_KMAJ>
__device__ __forceinline__ void sm80_gemm_body(const KernelArgs& args, EpilogueArgs e);

template <typename Cfg, typename T, bool A_KMAJ, bool B_KMAJ>
__global__ void __launch_bounds__(Cfg::kThreads, 1) sm80_gemm_kernel(KernelArgs args, EpilogueArgs e) {
  if constexpr (kFp8WideOnHopper<Cfg>) {
    __trap();
  } else {
    sm80_gemm_body<Cfg, T, A_KMAJ, B_KMAJ>(args, e);
  }
}

template <typename Cfg, typename T, bool A_KMAJ, bool B_KMAJ>
__device__ __forceinline__ void sm80_gemm_body(const KernelArgs& args, EpilogueArgs e) {
  using Elem = typename Cfg::Elem;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Elem* smem = reinterpret_cast<Elem*>(smem_raw);
  constexpr int kATile = Cfg::template tile_elems<A_KMAJ, Cfg::BM>();
  constexpr int kBTile = Cfg::template tile_elems<B_KMAJ, Cfg::BN>();
  Elem* sa = smem;
  Elem* sb = smem + Cfg::STAGES * kATile;

  // Grouped tile order (Note [sm80 mma.sync kernel]).
  const int pid = blockIdx.x;
  const int per_group = kGroupM * args.tiles_n;
  const int first_m = (pid / per_group) * kGroupM;
  const int group_rows = min(args.tiles_m - first_m, kGroupM);
  const int tm = first_m + (pid % per_group) % group_rows;
  const int tn = (pid % per_group) / group_rows;
  const int m0 = tm * Cfg::BM, n0 = tn * Cfg::BN;
  const int batch = blockIdx.z;
  const Elem* a = static_cast<const Elem*>(args.a) + batch * args.stride_a;
  const Elem* b = static_cast<const Elem*>(args.b) + batch * args.stride_b;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm0 = (warp / Cfg::WARPS_N) * Cfg::kWM, wn0 = (warp % Cfg::WARPS_N) * Cfg::kWN;

  float acc[Cfg::kMT][Cfg::kNT][4];
#pragma unroll
  for (int i = 0; i < Cfg::kMT; ++i) {
#pragma unroll
    for (int j = 0; j < Cfg::kNT; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;
    }
  }

  const int ktiles_all = (args.k + Cfg::kBK - 1) / Cfg::kBK;
  const int kt0 = args.partial != nullptr ? static_cast<int>(blockIdx.y) * args.kt_per_split : 0;
  const int ktiles = args.partial != nullptr ? max(0, min(args.kt_per_split, ktiles_all - kt0)) : ktiles_all;
  const SliceLoader<Cfg, A_KMAJ, Cfg::BM> load_a(a, args.lda, m0, args.m);
  const SliceLoader<Cfg, B_KMAJ, Cfg::BN> load_b_slice(b, args.ldb, n0, args.n);
  auto load_stage = [&](int stage, int kt) {
    load_a.load(sa + stage * kATile, (kt0 + kt) * Cfg::kBK, args.k);
    load_b_slice.load(sb + stage * kBTile, (kt0 + kt) * Cfg::kBK, args.k);
  };
#pragma unroll
  for (int s = 0; s < Cfg::STAGES - 1; ++s) {
    if (s < ktiles) load_stage(s, s);
    cp_async_commit();
  }

  // Note [sm80 fragment pipeline], measured and removed: loading step s + 1's fragments under
  // step s's MMAs (B double-buffered, A row by row) lost on 11 of the 15 GPT-2 shapes (H100,
  // session 14, same binary A/B: qkv fwd 0.303 -> 0.262 of cuBLAS, fc dX 0.385 -> 0.356): it cost
  // ~20 registers and the MMAs were not waiting on fragments but on their own issue stalls (Note
  // [sm80 warps per scheduler]).
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<Cfg::STAGES - 2>();
    __syncthreads();
    const int next = kt + Cfg::STAGES - 1;
    if (next < ktiles) load_stage(next % Cfg::STAGES, next);
    cp_async_commit();
    const Elem* sa_k = sa + (kt % Cfg::STAGES) * kATile;
    const Elem* sb_k = sb + (kt % Cfg::STAGES) * kBTile;
#pragma unroll
    for (int kk = 0; kk < Cfg::kBK; kk += Cfg::kMmaK) {
      uint32_t af[Cfg::kMT][4];
      uint32_t bf[Cfg::kNT / 2][4];
#pragma unroll
      for (int i = 0; i < Cfg::kMT; ++i) load_a_frag<Cfg, T, A_KMAJ>(af[i], sa_k, wm0 + i * 16, kk, lane);
#pragma unroll
      for (int j = 0; j < Cfg::kNT / 2; ++j) load_b_frag_pair<Cfg, T, B_KMAJ>(bf[j], sb_k, wn0 + j * 16, kk, lane);
#pragma unroll
      for (int i = 0; i < Cfg::kMT; ++i) {
#pragma unroll
        for (int j = 0; j < Cfg::kNT; ++j) {
          mma<T>(acc[i][j], af[i], bf[j / 2][(j % 2) * 2], bf[j / 2][(j % 2) * 2 + 1]);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the pipeline's shared memory: it becomes the staging tile

  // Note [sm80 staged epilogue]: fragments -> shared memory -> one rolled loop per output dtype.
  float* stage = reinterpret_cast<float*>(smem_raw);
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < Cfg::kMT; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int j = 0; j < Cfg::kNT; ++j) {
        *reinterpret_cast<float2*>(stage + (wm0 + i * 16 + g + h * 8) * Cfg::kStageLd + wn0 + j * 8 + 2 * t) =
            make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
      }
    }
  }
  __syncthreads();
  // Note [sm89 FP8 mma.sync]: the per-tensor scales multiply the product only (alpha (sa sb acc) +
  // beta C + bias): a split-K partial carries them, else they fold into alpha (no per-element
  // multiply, no registers held).
  float scale = 1.0f;
  if constexpr (Cfg::kFp8) {
    scale = (args.scale_a != nullptr ? *args.scale_a : 1.0f) * (args.scale_b != nullptr ? *args.scale_b : 1.0f);
  }
  if (args.partial != nullptr) {  // split-K: the raw (FP8: scaled) sums; splitk_reduce does the rest
    float* out = args.partial + ((static_cast<int64_t>(blockIdx.y) * gridDim.z + batch) * args.m) * args.partial_ld;
    for_each_staged_pair<Cfg>(stage, args.m - m0, [&](int r, int c, float2 v) {
      if (n0 + c >= args.n) return;  // partial_ld is a multiple of 4 >= n: a pair never straddles it
      *reinterpret_cast<float2*>(out + static_cast<int64_t>(m0 + r) * args.partial_ld + n0 + c) =
          make_float2(v.x * scale, v.y * scale);
    });
    return;
  }
  if constexpr (Cfg::kFp8) {
    e.alpha *= scale;
    const float amax = e.cd_type == static_cast<int>(Dtype::kBF16)
                           ? store_staged<Cfg, __nv_bfloat16, true>(stage, e, batch, m0, n0)
                           : store_staged<Cfg, float, true>(stage, e, batch, m0, n0);
    if (e.amax != nullptr) amax_warp_commit(e.amax, amax);  // every lane of the warp gets here
  } else if constexpr (Cfg::kTf32) {  // f32 inputs take f32 outputs only (validate())
    store_staged<Cfg, float, false>(stage, e, batch, m0, n0);
  } else if (e.cd_type == static_cast<int>(Dtype::kBF16)) {
    store_staged<Cfg, __nv_bfloat16, false>(stage, e, batch, m0, n0);
  } else if (e.cd_type == static_cast<int>(Dtype::kF16)) {
    store_staged<Cfg, __half, false>(stage, e, batch, m0, n0);
  } else {
    store_staged<Cfg, float, false>(stage, e, batch, m0, n0);
  }
}

// Launches one instantiation (the explicit-instantiation files call this).
template <typename Cfg, typename T, bool A_KMAJ, bool B_KMAJ>
Status launch(const GemmProblem& p, const Sm80Plan& plan, float* partial, cudaStream_t stream) {
  constexpr int kSmem = Cfg::template smem_bytes<A_KMAJ, B_KMAJ>();
  auto kernel = sm80_gemm_kernel<Cfg, T, A_KMAJ, B_KMAJ>;
  BLUBLAS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  KernelArgs args{p.a, p.lda, p.stride_a, p.b, p.ldb, p.stride_b, p.m, p.n, p.k,
                  (p.m + Cfg::BM - 1) / Cfg::BM, (p.n + Cfg::BN - 1) / Cfg::BN, p.scale_a, p.scale_b};
  if (plan.splits > 1) {
    args.partial = partial;
    args.partial_ld = sm80_partial_ld(p);
    args.kt_per_split = plan.kt_per_split;
  }
  const dim3 grid(static_cast<unsigned>(args.tiles_m) * static_cast<unsigned>(args.tiles_n),
                  static_cast<unsigned>(plan.splits), p.batch);
  kernel<<<grid, Cfg::kThreads, kSmem, stream>>>(args, make_epilogue_args(p));
  BLUBLAS_KERNEL_LAUNCH_CHECK("sm80_gemm_kernel");
  return Status::success();
}

template <typename Cfg, typename T>
Status launch_majors(const GemmProblem& p, const Sm80Plan& plan, float* partial, cudaStream_t stream) {
  if constexpr (kIsFp8<T>) {  // K-major only (Note [sm89 FP8 mma.sync])
    BLUBLAS_CHECK(p.a_k_major && p.b_k_major, StatusCode::kNotSupported,
                  "sm80_mma FP8: both operands must be K-major");
    return launch<Cfg, T, true, true>(p, plan, partial, stream);
  } else {
    if (p.a_k_major) {
      return p.b_k_major ? launch<Cfg, T, true, true>(p, plan, partial, stream)
                         : launch<Cfg, T, true, false>(p, plan, partial, stream);
    }
    return p.b_k_major ? launch<Cfg, T, false, true>(p, plan, partial, stream)
                       : launch<Cfg, T, false, false>(p, plan, partial, stream);
  }
}

// The three CTA tiles of one element type (heuristics.cpp's Sm80Tile): what each per-type
// instantiation file (sm80_<type>_gemm.cu) launches.
template <typename T>
Status launch_tile(const GemmProblem& p, const Sm80Plan& plan, float* partial, cudaStream_t stream) {
  switch (plan.tile) {
    case Sm80Tile::k128x128:  // Note [sm80 warps per scheduler]
      return launch_majors<KernelConfig<T, 128, 128, 2, 2, 4>, T>(p, plan, partial, stream);
    case Sm80Tile::k128x64:
      return launch_majors<KernelConfig<T, 128, 64, 2, 2, 4>, T>(p, plan, partial, stream);
    case Sm80Tile::k64x64:
      return launch_majors<KernelConfig<T, 64, 64, 2, 2, 4>, T>(p, plan, partial, stream);
  }
  return Status(StatusCode::kNotSupported, "sm80 gemm: unknown tile");
}

}  // namespace blublas::gemm_detail::sm80
