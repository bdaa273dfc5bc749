// simt_f32_gemm.cu: the strict fp32 GEMM on CUDA cores (FFMA only: no TF32 and no tensor-core
// instruction anywhere, which the SASS check confirms), register-blocked and shared-memory tiled.
//
// Note [SIMT fp32 tiling]
// A CTA computes a BM x BN tile of D (128 x 128 with 256 threads, or 64 x 64 with 64 threads for
// problems with fewer tiles than SMs); each thread owns 8 x 8 outputs laid out as four 4 x 4
// quadrants at row offsets {0, BM/2} and column offsets {0, BN/2}, so its shared-memory reads are
// two float4 per operand per k step, and threads of a warp read few distinct addresses
// (broadcast). k advances 8 at a time through two shared-memory buffers: the next slice is loaded
// from global memory into registers while the current one is consumed, then stored to the other
// buffer; one barrier per slice.
//   Shared memory holds both operands k-outer (as[k][m], bs[k][n]) whatever their global major.
// The m- (n-) contiguous operand is copied with float4 as is; the k-contiguous one is loaded with
// float4 along k and stored transposed (4 scalar stores; the +4 row padding makes those stores
// conflict-free). Global float4 loads need ld, batch stride and pointer to be multiples of 4
// floats (VEC); otherwise, and on edge tiles, guarded scalar loads are used, so any size and
// alignment is accepted.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "blublas/check.h"
#include "gemm/epilogue.cuh"
#include "gemm/simt_gemm_launch.h"

namespace blublas::gemm_detail {
namespace {

constexpr int kBK = 8;

template <int BM, int BN>
struct SimtTile {
  static constexpr int kThreads = (BM / 8) * (BN / 8);
  static constexpr int kALoads = BM * kBK / 4 / kThreads;  // float4 per thread per slice
  static constexpr int kBLoads = BN * kBK / 4 / kThreads;
  static_assert(kALoads >= 1 && kBLoads >= 1, "tile too small for its thread count");
};

// Loads 4 consecutive floats along the contiguous dimension of an operand slice: element
// (outer, inner..inner+3) at x[outer*ld + inner]; zero where outside [0, n_outer) x [0, n_inner).
template <bool VEC>
__device__ __forceinline__ float4 load4_guarded(const float* __restrict__ x, int64_t ld, int outer,
                                                int inner, int n_outer, int n_inner) {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (outer >= n_outer) return v;
  const float* p = x + static_cast<int64_t>(outer) * ld + inner;
  if (VEC && inner + 3 < n_inner) return *reinterpret_cast<const float4*>(p);
  if (inner + 0 < n_inner) v.x = p[0];
  if (inner + 1 < n_inner) v.y = p[1];
  if (inner + 2 < n_inner) v.z = p[2];
  if (inner + 3 < n_inner) v.w = p[3];
  return v;
}

// One operand slice (rows = the operand's M or N extent, kBK deep) from global to registers.
// KMAJ: element (r, k) at x[r*ld + k]; else at x[k*ld + r].
template <int ROWS, int LOADS, int THREADS, bool KMAJ, bool VEC>
__device__ __forceinline__ void load_slice(float4 (&reg)[LOADS], const float* __restrict__ x,
                                           int64_t ld, int r0, int k0, int n_rows, int n_k) {
#pragma unroll
  for (int l = 0; l < LOADS; ++l) {
    const int g = threadIdx.x + l * THREADS;
    if (KMAJ) {
      const int r = g / (kBK / 4), k4 = (g % (kBK / 4)) * 4;
      reg[l] = load4_guarded<VEC>(x, ld, r0 + r, k0 + k4, n_rows, n_k);
    } else {
      const int k = g / (ROWS / 4), r4 = (g % (ROWS / 4)) * 4;
      reg[l] = load4_guarded<VEC>(x, ld, k0 + k, r0 + r4, n_k, n_rows);
    }
  }
}

template <int ROWS, int LOADS, int THREADS, bool KMAJ>
__device__ __forceinline__ void store_slice(float (*s)[ROWS + 4], const float4 (&reg)[LOADS]) {
#pragma unroll
  for (int l = 0; l < LOADS; ++l) {
    const int g = threadIdx.x + l * THREADS;
    if (KMAJ) {
      const int r = g / (kBK / 4), k4 = (g % (kBK / 4)) * 4;
      s[k4 + 0][r] = reg[l].x;
      s[k4 + 1][r] = reg[l].y;
      s[k4 + 2][r] = reg[l].z;
      s[k4 + 3][r] = reg[l].w;
    } else {
      const int k = g / (ROWS / 4), r4 = (g % (ROWS / 4)) * 4;
      *reinterpret_cast<float4*>(&s[k][r4]) = reg[l];
    }
  }
}

template <int BM, int BN, bool A_KMAJ, bool B_KMAJ, bool VEC>
__global__ void __launch_bounds__(SimtTile<BM, BN>::kThreads, 2)
    simt_f32_tiled_kernel(const float* __restrict__ a, int64_t lda, int64_t stride_a,
                          const float* __restrict__ b, int64_t ldb, int64_t stride_b, int m, int n,
                          int k_total, SplitArgs split, EpilogueArgs e) {
  using Tile = SimtTile<BM, BN>;
  constexpr int kThreads = Tile::kThreads;
  __shared__ __align__(16) float as[2][kBK][BM + 4];
  __shared__ __align__(16) float bs[2][kBK][BN + 4];

  const int batch = blockIdx.z % split.batches;
  const int split_index = blockIdx.z / split.batches;
  a += batch * stride_a;
  b += batch * stride_b;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int tx = threadIdx.x % (BN / 8), ty = threadIdx.x / (BN / 8);
  // This split's k range [k_lo, k); loads are guarded against k as the end of the range.
  const int k_lo = split.k_split > 0 ? split_index * split.k_split : 0;
  const int k = split.k_split > 0 ? min(k_total, k_lo + split.k_split) : k_total;

  float acc[8][8];
#pragma unroll
  for (int r = 0; r < 8; ++r) {
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[r][c] = 0.0f;
  }

  float4 ra[Tile::kALoads], rb[Tile::kBLoads];
  load_slice<BM, Tile::kALoads, kThreads, A_KMAJ, VEC>(ra, a, lda, m0, k_lo, m, k);
  load_slice<BN, Tile::kBLoads, kThreads, B_KMAJ, VEC>(rb, b, ldb, n0, k_lo, n, k);
  store_slice<BM, Tile::kALoads, kThreads, A_KMAJ>(as[0], ra);
  store_slice<BN, Tile::kBLoads, kThreads, B_KMAJ>(bs[0], rb);
  __syncthreads();

  int buf = 0;
  for (int k0 = k_lo; k0 < k; k0 += kBK) {
    const bool has_next = k0 + kBK < k;
    if (has_next) {
      load_slice<BM, Tile::kALoads, kThreads, A_KMAJ, VEC>(ra, a, lda, m0, k0 + kBK, m, k);
      load_slice<BN, Tile::kBLoads, kThreads, B_KMAJ, VEC>(rb, b, ldb, n0, k0 + kBK, n, k);
    }
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      float fa[8], fb[8];
      const float4 a0 = *reinterpret_cast<const float4*>(&as[buf][kk][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&as[buf][kk][ty * 4 + BM / 2]);
      const float4 b0 = *reinterpret_cast<const float4*>(&bs[buf][kk][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4*>(&bs[buf][kk][tx * 4 + BN / 2]);
      fa[0] = a0.x; fa[1] = a0.y; fa[2] = a0.z; fa[3] = a0.w;
      fa[4] = a1.x; fa[5] = a1.y; fa[6] = a1.z; fa[7] = a1.w;
      fb[0] = b0.x; fb[1] = b0.y; fb[2] = b0.z; fb[3] = b0.w;
      fb[4] = b1.x; fb[5] = b1.y; fb[6] = b1.z; fb[7] = b1.w;
#pragma unroll
      for (int r = 0; r < 8; ++r) {
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[r][c] = fmaf(fa[r], fb[c], acc[r][c]);
      }
    }
    if (has_next) {
      store_slice<BM, Tile::kALoads, kThreads, A_KMAJ>(as[buf ^ 1], ra);
      store_slice<BN, Tile::kBLoads, kThreads, B_KMAJ>(bs[buf ^ 1], rb);
    }
    __syncthreads();
    buf ^= 1;
  }

  if (split.partial != nullptr) {
    float* out = split.partial + static_cast<int64_t>(split_index * split.batches + batch) * m * n;
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int i = m0 + (r < 4 ? ty * 4 + r : BM / 2 + ty * 4 + (r - 4));
      if (i >= m) continue;
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const int j = n0 + (c < 4 ? tx * 4 + c : BN / 2 + tx * 4 + (c - 4));
        if (j < n) out[static_cast<int64_t>(i) * n + j] = acc[r][c];
      }
    }
    return;
  }
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int i = m0 + (r < 4 ? ty * 4 + r : BM / 2 + ty * 4 + (r - 4));
    if (i >= m) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int j = n0 + h * (BN / 2) + tx * 4;
      epilogue_store2<float>(e, batch, i, j, acc[r][h * 4 + 0], acc[r][h * 4 + 1]);
      epilogue_store2<float>(e, batch, i, j + 2, acc[r][h * 4 + 2], acc[r][h * 4 + 3]);
    }
  }
}

// D(b, i, j) = epilogue(sum over splits s, in order, of partial(s, b, i, j)).
//
// Note [Split-K reduce bandwidth]
// The reduce reads splits x M x N floats (22 x 768 x 768 = 52 MB for attn_proj's dW) to write
// M x N. One element per thread with a serial s += partial[sp] loop keeps one load in flight per
// thread: measured 60-180 us per call in the GPT-2 fp32 step (6.4 ms over 52 calls) against ~15 us
// at HBM bandwidth. With n % 4 == 0 each thread takes 4 consecutive elements (one row) as float4
// and issues kSplitBatch splits' loads before adding them; the additions stay in split order, so
// the result is bitwise the one-element kernel's.
constexpr int kSplitBatch = 8;

__global__ void simt_split_reduce_kernel(const float* __restrict__ partial, int splits, int batches,
                                         int m, int n, EpilogueArgs e) {
  const int64_t per_batch = static_cast<int64_t>(m) * n;
  const int64_t total = per_batch * batches;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int sp = 0; sp < splits; ++sp) s += partial[sp * total + idx];
    const int batch = static_cast<int>(idx / per_batch);
    const int64_t r = idx % per_batch;
    epilogue_store1<float>(e, batch, static_cast<int>(r / n), static_cast<int>(r % n), s);
  }
}

__global__ void simt_split_reduce4_kernel(const float4* __restrict__ partial, int splits,
                                          int batches, int m, int n, EpilogueArgs e) {
  const int64_t per_batch4 = static_cast<int64_t>(m) * n / 4;
  const int64_t total4 = per_batch4 * batches;
  const int n4 = n / 4;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total4;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int sp0 = 0; sp0 < splits; sp0 += kSplitBatch) {
      float4 v[kSplitBatch];
#pragma unroll
      for (int u = 0; u < kSplitBatch; ++u) {
        if (sp0 + u < splits) v[u] = __ldcs(partial + (sp0 + u) * total4 + idx);
      }
#pragma unroll
      for (int u = 0; u < kSplitBatch; ++u) {
        if (sp0 + u < splits) {
          s.x += v[u].x;
          s.y += v[u].y;
          s.z += v[u].z;
          s.w += v[u].w;
        }
      }
    }
    const int batch = static_cast<int>(idx / per_batch4);
    const int64_t r4 = idx % per_batch4;
    const int i = static_cast<int>(r4 / n4), j = static_cast<int>(r4 % n4) * 4;
    epilogue_store2<float>(e, batch, i, j, s.x, s.y);
    epilogue_store2<float>(e, batch, i, j + 2, s.z, s.w);
  }
}

Status launch_split_reduce(const GemmProblem& p, const float* partial, int splits,
                           cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(p.batch) * p.m * p.n;
  constexpr int kThreads = 256;
  if (p.n % 4 == 0 && reinterpret_cast<std::uintptr_t>(partial) % 16 == 0) {
    const int64_t total4 = total / 4;
    const int blocks =
        static_cast<int>(std::min<int64_t>((total4 + kThreads - 1) / kThreads, 65535));
    simt_split_reduce4_kernel<<<blocks, kThreads, 0, stream>>>(
        reinterpret_cast<const float4*>(partial), splits, p.batch, p.m, p.n, make_epilogue_args(p));
    BLUBLAS_KERNEL_LAUNCH_CHECK("simt_split_reduce4_kernel");
    return Status::success();
  }
  const int blocks = static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, 65535));
  simt_split_reduce_kernel<<<blocks, kThreads, 0, stream>>>(partial, splits, p.batch, p.m, p.n,
                                                            make_epilogue_args(p));
  BLUBLAS_KERNEL_LAUNCH_CHECK("simt_split_reduce_kernel");
  return Status::success();
}

template <int BM, int BN, bool A_KMAJ, bool B_KMAJ, bool VEC>
Status launch_tile(const GemmProblem& p, const SplitArgs& split, int splits, cudaStream_t stream) {
  const dim3 grid((p.n + BN - 1) / BN, (p.m + BM - 1) / BM, p.batch * splits);
  simt_f32_tiled_kernel<BM, BN, A_KMAJ, B_KMAJ, VEC>
      <<<grid, SimtTile<BM, BN>::kThreads, 0, stream>>>(
          static_cast<const float*>(p.a), p.lda, p.stride_a, static_cast<const float*>(p.b), p.ldb,
          p.stride_b, p.m, p.n, p.k, split, make_epilogue_args(p));
  BLUBLAS_KERNEL_LAUNCH_CHECK("simt_f32_tiled_kernel");
  return Status::success();
}

bool vec4_ok(const void* ptr, int64_t ld, int64_t stride) {
  return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0 && ld % 4 == 0 && stride % 4 == 0;
}

template <int BM, int BN, bool VEC>
Status launch_legacy(const GemmProblem& p, const SplitArgs& split, int splits, cudaStream_t stream) {
  return with_majors(p, [&]<bool A_KMAJ, bool B_KMAJ>() {
    return launch_tile<BM, BN, A_KMAJ, B_KMAJ, VEC>(p, split, splits, stream);
  });
}

// vec: A and B allow float4 loads (vec4_ok).
template <int BM, int BN>
Status launch_vec(const GemmProblem& p, bool vec, const SplitArgs& split, int splits,
                  cudaStream_t stream) {
  return vec ? launch_legacy<BM, BN, true>(p, split, splits, stream)
             : launch_legacy<BM, BN, false>(p, split, splits, stream);
}

// Note [SIMT fp32 variant choice]
// Problems with at least one 128 x 128 tile per SM (kTiled128, and every split-K plan) take a lean
// kernel (Note [SIMT fp32 lean kernel]) whenever it accepts the problem (float4 operands, M / N
// multiples of 4 on an m- / n-contiguous operand): with a k-major operand (NT forwards, NN dX)
// l88 (8 x 8 per lane, 4 warps per scheduler: the k-major loads are the latency-bound ones, where
// 2 warps per scheduler lost 10%), with both operands m/n-major (TN dW) l168w (256 x 128 CTA,
// 16 x 8 per lane, one CTA per SM; Note [SIMT fp32 wide tiles]). SASS of the main loops (sm_90a,
// 2 slabs = 16 k): l88 1024 FFMA of ~1140 instructions (~90%), l816 2048 of ~2220 (~92%), against
// ~86% for legacy and w816.
// Sweep of 2026-11-25 (H100, gemm_bench fp32 GPT-2 set, ratio to cuBLAS in the same process):
//   dW:  l168w 0.845-0.901 vs l816 0.829-0.886 (+2% on every shape; 89.4 vs 91.5 ms a step)
//   dX:  l88 0.93-0.96 vs l168w 0.65-0.91, l816w 0.62-0.85
//   fwd: l88 0.87-0.90 vs both wide tiles 0.54-0.75
// The wide tiles lose with a k-major operand: one CTA (8 warps) per SM leaves 2 warps per
// scheduler to hide the k-major loads' latency (the effect l88's 4 warps per scheduler fixed).
// Session 7 sweep (2026-11-26, H200, bench/results/h200/raw/session7/simt_sweep): the 16-deep
// slabs of l88k16 (Note [Deep slabs]) win with B n-major: dW 84.8 ms a GPT-2 step vs l88 /
// l168w 89.8 / 89.9 (0.885-0.947 of cuBLAS), dX 84.4 vs 87.9 (0.925-1.009); with B k-major
// (forwards) l88 and l88k16 tie (91.5 / 91.7 ms) and the other deep tiles lose (0.51-0.80). So
// the default is l88 when B is k-major and l88k16 otherwise; the SIMT path runs most NT
// forwards on a transposed B anyway (Note [SIMT NT via a transposed B], heuristics.cpp).
// Otherwise, by the normalized operand majors (run3 sweep, H200, ratio to cuBLAS), the previous
// choice ("old"):
//   B k-major (NT forwards, TT):    legacy 8 x 8   (qkv fwd: legacy 0.80, w816 0.72-0.75)
//   A k-major, B n-major (NN, dX):  warp 16 x 8    (fc dX: w168 0.83, w816 0.82, legacy 0.82)
//   both m/n-major (TN, dW):        warp 8 x 16    (qkv dW: w816 0.89, w168 0.86, legacy 0.81)
// Sessions 36-37 (H200): a TMA-fed l88 tile lost and was removed (Note [SIMT fp32 through TMA,
// measured and removed] below).
// Operands that do not allow float4 loads take the legacy kernel. BLUBLAS_SIMT_VARIANT=<name>
// (kVariantNames; the lean tiles also with 16-deep slabs, "l88k16" etc., Note [Deep slabs] in
// simt_f32_lean_gemm.cu), or per operand majors "kk:<name>,kn:<name>,mn:<name>"
// (env_variant), overrides the choice for measurement sweeps ("old": the previous choice above);
// a forced kernel that cannot take the problem, or an unknown name, leaves the default. The
// variable is read at every call (a getenv, negligible next to a GEMM), so tests can switch it.
enum class Variant : int {
  kLegacy128 = 0,  // simt_f32_tiled_kernel<128, 128>: 8 x 8 per thread, quadrants at BM/2, BN/2
  kLegacy64,       // simt_f32_tiled_kernel<64, 64>: for problems short of one tile per SM
  kW816,           // simt_f32_warp_kernel, SimtWarpVariant::k816
  kW168,           // simt_f32_warp_kernel, SimtWarpVariant::k168
  kOld,            // the choice before the lean kernels (legacy / w168 / w816 by majors)
  // The lean kernels, in SimtLeanVariant's order (lean_variant is an offset): kL88 -> k88 ...
  kL88,            // 128 x 128 CTA, 8 x 8 per lane
  kL816,           // 8 x 16 per lane
  kL168,           // 16 x 8 per lane
  kL88n64,         // 128 x 64 CTA
  kL816w,          // 128 x 256 CTA
  kL168w,          // 256 x 128 CTA
  kL88k16,         // l88 / l88n64 with 16-deep slabs (Note [Deep slabs])
  kL88n64k16,
};
constexpr const char* kVariantNames[] = {
    "legacy", "legacy64", "w816",  "w168",   "old",       "l88", "l816", "l168", "l88n64",
    "l816w",  "l168w",    "l88k16", "l88n64k16"};
constexpr int kVariantCount = sizeof(kVariantNames) / sizeof(kVariantNames[0]);
static_assert(kVariantCount == static_cast<int>(Variant::kL88n64k16) + 1, "a name per Variant");
static_assert(static_cast<int>(Variant::kL88n64k16) - static_cast<int>(Variant::kL88) ==
                  static_cast<int>(SimtLeanVariant::k88n64k16),
              "the lean Variants mirror SimtLeanVariant");

constexpr bool is_lean(Variant v) { return v >= Variant::kL88 && v <= Variant::kL88n64k16; }

// The lean kernel configuration of a lean Variant.
constexpr SimtLeanVariant lean_variant(Variant v) {
  return static_cast<SimtLeanVariant>(static_cast<int>(v) - static_cast<int>(Variant::kL88));
}

int variant_index(const char* name, std::size_t len) {
  for (int i = 0; i < kVariantCount; ++i)
    if (std::strlen(kVariantNames[i]) == len && std::strncmp(name, kVariantNames[i], len) == 0)
      return i;
  return -1;
}

// The forced variant for a problem's operand majors, or -1. BLUBLAS_SIMT_VARIANT is either one
// name (every problem) or a comma-separated list of MAJORS:NAME entries, MAJORS being A's major
// (k or m) then B's (k or n): kk = forward (NT), kn = dX (NN), mn = dW (TN), mk = TT; majors not
// listed keep the default ("kk:l816w,kn:l168w").
int env_variant(const GemmProblem& p) {
  const char* s = std::getenv("BLUBLAS_SIMT_VARIANT");
  if (s == nullptr) return -1;
  if (std::strchr(s, ':') == nullptr) return variant_index(s, std::strlen(s));
  const char majors[2] = {p.a_k_major ? 'k' : 'm', p.b_k_major ? 'k' : 'n'};
  for (const char* e = s; *e != '\0';) {
    const char* end = std::strchr(e, ',');
    const std::size_t len = end ? static_cast<std::size_t>(end - e) : std::strlen(e);
    if (len > 3 && e[2] == ':' && e[0] == majors[0] && e[1] == majors[1])
      return variant_index(e + 3, len - 3);
    if (end == nullptr) break;
    e = end + 1;
  }
  return -1;
}

Variant old_variant(const GemmProblem& p, bool vec) {
  if (!vec || p.b_k_major) return Variant::kLegacy128;
  return p.a_k_major ? Variant::kW168 : Variant::kW816;
}

Variant tiled128_variant(const GemmProblem& p, bool vec) {
  const int forced = env_variant(p);
  const bool lean = simt_f32_lean_ok(p, vec);
  if (forced >= 0) {
    const Variant v = static_cast<Variant>(forced);
    if (is_lean(v)) {
      if (lean) return v;
    } else if (v == Variant::kOld) {
      return old_variant(p, vec);
    } else if (vec || (v != Variant::kW816 && v != Variant::kW168)) {
      return v;  // the legacy kernels take any problem, the warp tiles float4 operands only
    }
  }
  if (lean) return p.b_k_major ? Variant::kL88 : Variant::kL88k16;
  return old_variant(p, vec);
}

}  // namespace

// Note [SIMT fp32 cp.async staging, measured twice]
// A cp.async-pipelined variant measured slower than this register-staged kernel on an H200 (run 9:
// NN 0.77 vs 0.85, NT 0.69 vs 0.79 of cuBLAS) and was removed; see bench/NOTES.md. Session 8 tried
// it again on the lean tiles (commit 340df02, simt_f32_async_gemm.cu: a 4-stage ring of 8-deep
// slabs filled by cp.async, 16-byte copies for an m/n-major operand, 4-byte transposing copies for
// a k-major one, zero-fill past k instead of a tail slab; 128 accumulators per lane as in cuBLAS's
// sm80_xmma / cutlass simt kernels). H100 sweep, same process as cuBLAS (geomean of the GPT-2 fp32
// set): l88k16 default 0.936, a88 (128 x 128, 8 x 8, 256 threads) 0.820, a816 (128 x 128, 8 x 16,
// 128 threads) 0.752, a816w (128 x 256) 0.741, a168w (256 x 128) 0.725; in the trainer's step
// 298.4 ms by default against 334.8 (a88) .. 379.7 (a168w). ncu, a816w on fc dW: issue slots busy
// 69.6% (l88k16 75.8%), FMA pipe 62.2% (69.6%), 2 warps per scheduler with 1.37 eligible; on fc fwd
// 56.4% busy, 41.9% of cycles with no eligible warp. a88 lost too at l88's occupancy (4 warps per
// scheduler), so it is not only the 128-accumulator tiles' 2 warps per scheduler: the cp.async
// main loop itself ran slower (untested suspects: the issue branch and the guarded / unguarded
// split inside the unrolled k loop, run-time stage indices; no SASS was read). Removed again.
// Note [SIMT fp32 through TMA, measured and removed]
// Sessions 36-37 (commits 55e9c05 .. 86cf368, simt_f32_tma_gemm.cu, in git history): l88's tile
// with its operand slabs brought by TMA through a ring of mbarrier stages (no register staging,
// no STS, no block barrier; warps drift by up to the ring's depth), B n-major, A m-major (t88:
// 16-deep slabs, 4 stages) or also k-major (t88k8: 8-deep, 8 stages, interleaved lane rows).
// H200, gemm_bench fp32 vs cuBLAS in the same process: first version (087460f, stage loop
// unrolled into a 4.9k-instruction body, a per-thread fence.proxy.async = MEMBAR.ALL.CTA per
// slab) t88 fc / fc_proj dW 0.679 / 0.677 against l88k16's 0.862 / 0.857; t88k8 0.51-0.72
// everywhere. Reworked (one slab per iteration, run-time stage, the fence in the producer only,
// refill lag 2; 685 / 1229-instruction loops, 75-83% FFMA): t88 fc / fc_proj dW 0.830 / 0.828
// against 0.863 / 0.857 (session 37, raw/session37/call1_simt_sweep), t88k8 0.72-0.78. The lean
// kernel's register-staged loop (92% FFMA, 2 CTAs per SM) stays ahead; the waits on the full
// barrier and the producer's serial refill cost more than the STS + barrier they replaced.
// Also tried (session 8, not measured): l88k16 persistent, the next tile's first slab loaded under
// the epilogue; at the 128-register cap ptxas spilled 276-468 bytes (bench/NOTES.md, Session 8).

std::size_t simt_split_bytes(const GemmProblem& p, const SimtPlan& plan) {
  if (plan.kernel == SimtKernel::kGeneric || plan.splits <= 1) return 0;
  return static_cast<std::size_t>(plan.splits) * p.batch * p.m * static_cast<std::size_t>(p.n) *
         sizeof(float);
}

Status simt_f32_tiled_launch(const GemmProblem& p, const SimtPlan& plan, float* partial,
                             cudaStream_t stream) {
  BLUBLAS_CHECK(p.ab_type == Dtype::kF32 && p.cd_type == Dtype::kF32, StatusCode::kNotSupported,
                "simt f32 gemm: needs f32 A, B, C, D");
  SplitArgs split;
  split.batches = p.batch;
  if (plan.splits > 1) {
    BLUBLAS_CHECK(partial != nullptr, StatusCode::kWorkspaceTooSmall,
                  "simt f32 gemm: split-K needs its partial-tile workspace");
    split.k_split = plan.k_split;
    split.partial = partial;
  }
  const int splits = plan.splits > 1 ? plan.splits : 1;
  const bool vec = vec4_ok(p.a, p.lda, p.stride_a) && vec4_ok(p.b, p.ldb, p.stride_b);
  const Variant v =
      plan.kernel == SimtKernel::kTiled64 ? Variant::kLegacy64 : tiled128_variant(p, vec);
  if (is_lean(v)) {
    BLUBLAS_RETURN_IF_ERROR(simt_f32_lean_launch(p, lean_variant(v), split, splits, vec, stream));
  } else if (v == Variant::kW816 || v == Variant::kW168) {
    const SimtWarpVariant w = v == Variant::kW816 ? SimtWarpVariant::k816 : SimtWarpVariant::k168;
    BLUBLAS_RETURN_IF_ERROR(simt_f32_warp_launch(p, w, split, splits, vec, stream));
  } else if (v == Variant::kLegacy128) {
    BLUBLAS_RETURN_IF_ERROR((launch_vec<128, 128>(p, vec, split, splits, stream)));
  } else {  // kLegacy64 (kOld is resolved by tiled128_variant)
    BLUBLAS_RETURN_IF_ERROR((launch_vec<64, 64>(p, vec, split, splits, stream)));
  }
  if (splits > 1) BLUBLAS_RETURN_IF_ERROR(launch_split_reduce(p, partial, splits, stream));
  return Status::success();
}

}  // namespace blublas::gemm_detail
