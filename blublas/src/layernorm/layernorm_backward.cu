// layernorm_backward.cu: LayerNorm backward (dx, dweight, dbias) for f32 / bf16.
//
// Note [LayerNorm backward shapes]
// Fast path (cols a multiple of the 16-byte pack, 16-byte aligned pointers, cols <= 32 f32 or 64
// 16-bit elements per lane): one warp per row holds x and dout in registers, so dx needs one read
// of each. A
// block owns a contiguous range of rows; each warp adds its rows' dout * xhat and dout into its
// own shared-memory slice (16-byte accesses to the lane's fixed columns: no sharing, no sync), the
// 8 slices are added in warp order at the end and the block writes one partial [2][cols] to the
// caller's workspace; a finish kernel adds the partials in block order. Every sum has a fixed
// order, so the result is bitwise reproducible run to run.
//
// Note [LayerNorm backward grid]
// The session-1 kernel cut the rows into fixed 32-row chunks, one per block: 512 blocks for 16384
// rows is 1.3 waves of 3 blocks per SM on an H200, so the last third of the kernel ran on a
// quarter of the machine. The default grid is instead `SMs x occupancy` blocks (capped so every
// warp has a row) with the rows split evenly, so all SMs finish together; the partition (hence the
// bits of dweight/dbias) depends on the device's SM count, never on timing. With each warp
// walking ~8 rows, the next row's x / dout / mean / rstd are loaded before the current row's
// reductions (register prefetch), which hides the per-row load latency. The finish kernel is
// launched dependent (Note [Programmatic dependent launch]) so its launch overlaps the tail.
// Any other shape takes the generic path: a block per row for dx and a column kernel for the
// parameter-gradient partials.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "blublas/check.h"
#include "blublas/device_info.h"
#include "blublas/layernorm.h"
#include "layernorm/layernorm_common.cuh"
#include "layernorm/layernorm_variants.h"
#include "reduce/reduce_primitives.cuh"

namespace blublas {
namespace {

using fused::from_f32;
using fused::kPack16;
using fused::load_f32;
using fused::Pack;
using fused::store_f32;
using fused::to_f32;
using fused::warp_sum;
using lnorm::aligned16;
using lnorm::load_pack;
using lnorm::pack_elem;
using lnorm::store_pack;

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpsPerBlock * 32;
// Fast path up to 32 f32 / 64 16-bit elements per lane (1024 / 2048 columns; Note [Packed wide rows]).
template <typename T>
constexpr int kMaxElemsPerLane = sizeof(T) == 2 ? 64 : 32;
constexpr int64_t kMinChunkRows = 32;   // variant 1 and the generic path: rows per block
constexpr int64_t kMaxPartials = 1024;  // workspace bound (device independent)
constexpr int kGenericThreads = 256;
// H200 run 3, 16384x768: f32 v3 48.3 us (v5 48.2, v2 50.1, v1 53.2); bf16 v2 35.5 us (v3 38.5:
// the prefetch variant runs 1 block/SM, v1 40.0).
template <typename T>
constexpr int kDefaultBackwardVariant = sizeof(T) == 4 ? 3 : 2;

// Hides a pack's value from the optimizer (an empty asm that "changes" its words), so values
// derived from it are recomputed after this point instead of kept in registers from before.
template <typename P>
__device__ __forceinline__ void opaque(P& pk) {
  static_assert(sizeof(P) % 4 == 0, "whole 32-bit words");
  uint32_t* u = reinterpret_cast<uint32_t*>(&pk);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(P) / 4); ++i) asm volatile("" : "+r"(u[i]));
}

// ---------------------------------------------------------------- warp per row (fast path)
// partial: [gridDim.x][2][cols] (dweight partial, dbias partial). kBalanced: block b owns rows
// [rows * b / G, rows * (b + 1) / G); otherwise [b * chunk, (b + 1) * chunk). Warp w of the
// block takes rows row0 + w, row0 + w + 8, ...
template <typename T, int W, int kPacks, bool kBalanced, bool kPrefetch>
__global__ void __launch_bounds__(kThreads, (kPacks * W <= 24 && !kPrefetch) ? 2 : 1)
    ln_bwd_rows_kernel(T* dx, float* __restrict__ partial, const T* dout, const T* __restrict__ x,
                       const float* __restrict__ mean, const float* __restrict__ rstd,
                       const T* __restrict__ w, int64_t rows, int cols, int64_t chunk_rows,
                       const T* residual) {
  static_assert(W % 4 == 0, "the slices are accumulated through 16-byte shared accesses");
  using P = Pack<T, W>;
  extern __shared__ float4 acc_smem4[];  // [kWarpsPerBlock][2][cols] floats
  float* acc_smem = reinterpret_cast<float*>(acc_smem4);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int npacks = cols / W;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  float* my_dw = acc_smem + static_cast<int64_t>(warp) * 2 * cols;
  float* my_db = my_dw + cols;
  lnorm::pdl_wait();  // launched dependent (variant 5): dout is the previous kernel's output
  for (int c = lane; c < 2 * cols; c += 32) my_dw[c] = 0.0f;
  __syncwarp();

  int64_t row0, row1;
  if constexpr (kBalanced) {
    row0 = rows * blockIdx.x / gridDim.x;
    row1 = rows * (blockIdx.x + 1) / gridDim.x;
  } else {
    row0 = static_cast<int64_t>(blockIdx.x) * chunk_rows;
    row1 = min(rows, row0 + chunk_rows);
  }

  // The current row lives in f32 registers (xv = x, g = dout); a prefetched next row stays
  // packed (half the registers for bf16) until it becomes current.
  auto load_raw = [&](int64_t r, P(&xa)[kPacks], P(&ga)[kPacks], float& m, float& s) {
    const int64_t base = r * cols;
    m = mean[r];
    s = rstd[r];
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = lane + 32 * k;
      if (p < npacks) {
        xa[k] = load_pack<T, W>(x + base + p * W);
        ga[k] = load_pack<T, W>(dout + base + p * W);
      }
    }
  };
  // Note [Packed wide rows]: above 32 elements per lane (16-bit types: 513..2048 columns, e.g.
  // GPT-2 d48's 1600) the f32 copies of x and dout spill; the row then stays packed (half the
  // registers) and x-hat and dout * w are recomputed from the packs for dx.
  constexpr bool kPackedRow = kPacks * W > 32;
  constexpr int kF = kPackedRow ? 1 : kPacks;
  float xv[kF][W], g[kF][W];
  [[maybe_unused]] P xc[kPackedRow ? kPacks : 1], gc[kPackedRow ? kPacks : 1];
  float mu = 0.0f, rs = 0.0f;
  auto to_current = [&](const P(&xa)[kPacks], const P(&ga)[kPacks]) {
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      if (lane + 32 * k < npacks) {
        if constexpr (kPackedRow) {
          xc[k] = xa[k];
          gc[k] = ga[k];
        } else {
#pragma unroll
          for (int i = 0; i < W; ++i) {
            xv[k][i] = pack_elem(xa[k], i);
            g[k][i] = pack_elem(ga[k], i);
          }
        }
      }
    }
  };
  auto load_current = [&](int64_t r) {
    P xa[kPacks], ga[kPacks];
    load_raw(r, xa, ga, mu, rs);
    to_current(xa, ga);
  };

  int64_t row = row0 + warp;
  if (row < row1) load_current(row);
  for (; row < row1; row += kWarpsPerBlock) {
    const int64_t next = row + kWarpsPerBlock;
    P xn[kPacks], gn[kPacks];
    float mun = 0.0f, rsn = 0.0f;
    if (kPrefetch && next < row1) load_raw(next, xn, gn, mun, rsn);

    const int64_t base = row * cols;
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = lane + 32 * k;
      if (p < npacks) {
        const P wp = load_pack<T, W>(w + p * W);
        float xh[W], gk[W];
#pragma unroll
        for (int i = 0; i < W; ++i) {
          if constexpr (kPackedRow) {
            xh[i] = (pack_elem(xc[k], i) - mu) * rs;
            gk[i] = pack_elem(gc[k], i);
          } else {
            xh[i] = (xv[k][i] - mu) * rs;
            gk[i] = g[k][i];
          }
        }
        // 16-byte shared-memory accesses (W % 4 == 0; the slice offsets are multiples of 4
        // floats): a lane's pack is contiguous, so a warp's accesses are conflict-free.
        float4* dw4 = reinterpret_cast<float4*>(my_dw + p * W);
        float4* db4 = reinterpret_cast<float4*>(my_db + p * W);
#pragma unroll
        for (int q = 0; q < W / 4; ++q) {
          float4 a = dw4[q], d = db4[q];
          a.x += gk[4 * q + 0] * xh[4 * q + 0];
          a.y += gk[4 * q + 1] * xh[4 * q + 1];
          a.z += gk[4 * q + 2] * xh[4 * q + 2];
          a.w += gk[4 * q + 3] * xh[4 * q + 3];
          d.x += gk[4 * q + 0];
          d.y += gk[4 * q + 1];
          d.z += gk[4 * q + 2];
          d.w += gk[4 * q + 3];
          dw4[q] = a;
          db4[q] = d;
        }
#pragma unroll
        for (int i = 0; i < W; ++i) {
          gk[i] *= pack_elem(wp, i);
          s1 += gk[i];
          s2 += gk[i] * xh[i];
          if constexpr (!kPackedRow) {
            xv[k][i] = xh[i];
            g[k][i] = gk[i];
          }
        }
      }
    }
    const float c1 = warp_sum(s1) * inv_cols, c2 = warp_sum(s2) * inv_cols;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = lane + 32 * k;
      if (p < npacks) {
        float prev[W], xh[W], gw[W];
        if (residual != nullptr) load_f32<T, W>(residual + base + p * W, prev);
        if constexpr (kPackedRow) {
          const P wp = load_pack<T, W>(w + p * W);
          opaque(xc[k]);  // recompute here: no f32 copy kept alive from the first loop
          opaque(gc[k]);
#pragma unroll
          for (int i = 0; i < W; ++i) {
            xh[i] = (pack_elem(xc[k], i) - mu) * rs;
            gw[i] = pack_elem(gc[k], i) * pack_elem(wp, i);
          }
        } else {
#pragma unroll
          for (int i = 0; i < W; ++i) xh[i] = xv[k][i], gw[i] = g[k][i];
        }
        P o;
#pragma unroll
        for (int i = 0; i < W; ++i) {
          const float d = rs * (gw[i] - c1 - xh[i] * c2);
          o.v[i] = from_f32<T>(residual != nullptr ? prev[i] + d : d);
        }
        store_pack<T, W>(dx + base + p * W, o);
      }
    }
    if (next < row1) {
      if constexpr (kPrefetch) {
        to_current(xn, gn);
        mu = mun;
        rs = rsn;
      } else {
        load_current(next);
      }
    }
  }
  // The dependent finish kernel may launch now; it waits for this grid's completion.
  lnorm::pdl_trigger();
  __syncthreads();
  // Add the warps' slices in warp order (fixed) and write the block's partial.
  float* dst = partial + static_cast<int64_t>(blockIdx.x) * 2 * cols;
  for (int c = threadIdx.x; c < 2 * cols; c += blockDim.x) {
    float t = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kWarpsPerBlock; ++wi) {
      t += acc_smem[static_cast<int64_t>(wi) * 2 * cols + c];
    }
    dst[c] = t;
  }
}

// ---------------------------------------------------------------- generic (any cols)
template <typename T>
__global__ void __launch_bounds__(kGenericThreads)
    ln_bwd_dx_generic_kernel(T* dx, const T* dout, const T* __restrict__ x,
                             const float* __restrict__ mean, const float* __restrict__ rstd,
                             const T* __restrict__ w, int64_t cols, const T* residual) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int64_t base = row * cols;
  const float mu = mean[row], rs = rstd[row];
  float s1 = 0.0f, s2 = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xh = (to_f32(x[base + c]) - mu) * rs;
    const float g = to_f32(dout[base + c]) * to_f32(w[c]);
    s1 += g;
    s2 += g * xh;
  }
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const float c1 = fused::block_sum(s1, scratch) * inv_cols;
  const float c2 = fused::block_sum(s2, scratch) * inv_cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xh = (to_f32(x[base + c]) - mu) * rs;
    const float g = to_f32(dout[base + c]) * to_f32(w[c]);
    float d = rs * (g - c1 - xh * c2);
    if (residual != nullptr) d += to_f32(residual[base + c]);
    dx[base + c] = from_f32<T>(d);
  }
}

// One thread per column, rows of the chunk in increasing order. Same partial layout as above.
template <typename T>
__global__ void __launch_bounds__(kGenericThreads)
    ln_bwd_params_generic_kernel(float* __restrict__ partial, const T* __restrict__ dout,
                                 const T* __restrict__ x, const float* __restrict__ mean,
                                 const float* __restrict__ rstd, int64_t rows, int64_t cols,
                                 int64_t rows_per_block) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * rows_per_block;
  const int64_t row1 = min(rows, row0 + rows_per_block);
  float dw = 0.0f, db = 0.0f;
  for (int64_t r = row0; r < row1; ++r) {
    const float g = to_f32(dout[r * cols + c]);
    dw += g * (to_f32(x[r * cols + c]) - mean[r]) * rstd[r];
    db += g;
  }
  float* dst = partial + static_cast<int64_t>(blockIdx.y) * 2 * cols;
  dst[c] = dw;
  dst[cols + c] = db;
}

// out[c] (+)= sum_b partial[b][which][c]. grid (ceil(cols/32), 2), block (32, kFinishLanes): lane
// y sums partials y, y + kFinishLanes, ... in order, then the lanes are added in lane order.
// Launched dependent (PDL): waits for the partials before reading anything.
// OutT: f32, or the activations' 16-bit type (the f32 sum rounded once; Note [LayerNorm backward
// into the record's tensors] in blutensor's cuda_layernorm.cu).
constexpr int kFinishLanes = 16;
template <typename OutT>
__global__ void __launch_bounds__(32 * kFinishLanes)
    ln_bwd_finish_kernel(OutT* dweight, OutT* dbias, const float* __restrict__ partial,
                         int64_t blocks, int64_t cols, bool accumulate) {
  __shared__ float red[kFinishLanes][33];
  lnorm::pdl_wait();
  const int which = blockIdx.y;
  OutT* outp = which == 0 ? dweight : dbias;
  if (outp == nullptr) return;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float s = 0.0f;
  if (c < cols) {
#pragma unroll 4
    for (int64_t b = threadIdx.y; b < blocks; b += kFinishLanes) {
      s += partial[(b * 2 + which) * cols + c];
    }
  }
  red[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float t = 0.0f;
#pragma unroll
    for (int i = 0; i < kFinishLanes; ++i) t += red[i][threadIdx.x];
    outp[c] = from_f32<OutT>(accumulate ? to_f32(outp[c]) + t : t);
  }
}

// ---------------------------------------------------------------- dispatch
// Fixed chunks (variant 1, generic path): >= 32 rows per block, at most kMaxPartials blocks.
int64_t chunk_rows(int64_t rows) {
  return std::max(kMinChunkRows, (rows + kMaxPartials - 1) / kMaxPartials);
}
int64_t chunk_blocks(int64_t rows) { return (rows + chunk_rows(rows) - 1) / chunk_rows(rows); }

// Upper bound on the partials the balanced grid writes (device independent): at most one block
// per 8 rows (every warp has a row) and at most kMaxPartials.
int64_t max_partials(int64_t rows) {
  return std::min(kMaxPartials, (rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

struct BwdArgs {
  void* dweight;  // param_dtype
  void* dbias;
  Dtype param_dtype;
  const float* mean;
  const float* rstd;
  int64_t rows;
  int cols;
  const void* residual;  // the activations' type; null: no add
  bool acc_params;
  float* partial;
  cudaStream_t stream;
};

template <typename T, int W, int kPacks, bool kBalanced, bool kPrefetch>
Status launch_rows(bool pdl_entry, T* dx, const T* dout, const T* x, const T* w,
                   const BwdArgs& a, int64_t* blocks_out, bool* pdl_out) {
  auto kernel = ln_bwd_rows_kernel<T, W, kPacks, kBalanced, kPrefetch>;
  const int smem = kWarpsPerBlock * 2 * a.cols * static_cast<int>(sizeof(float));
  // Above 48 KiB of dynamic shared memory needs the opt-in (cheap; set on every call so that no
  // per-device state is cached).
  BLUBLAS_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int64_t blocks = chunk_blocks(a.rows);
  bool pdl = false;
  if constexpr (kBalanced) {
    DeviceInfo info;
    BLUBLAS_RETURN_IF_ERROR(current_device_info(&info));
    int per_sm = 0;
    BLUBLAS_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
    blocks = std::min<int64_t>(max_partials(a.rows),
                               static_cast<int64_t>(std::max(per_sm, 1)) * info.sm_count);
    pdl = info.sm_major >= 9;
  }
  BLUBLAS_CUDA_CHECK(lnorm::launch_kernel(pdl && pdl_entry, kernel,
                                          dim3(static_cast<unsigned>(blocks)), dim3(kThreads),
                                          static_cast<std::size_t>(smem), a.stream, dx, a.partial,
                                          dout, x, a.mean, a.rstd, w, a.rows, a.cols,
                                          chunk_rows(a.rows), static_cast<const T*>(a.residual)));
  *blocks_out = blocks;
  *pdl_out = pdl;
  return Status::success();
}

template <typename T, int W, int kPacks>
Status launch_variant(int variant, T* dx, const T* dout, const T* x, const T* w,
                      const BwdArgs& a, int64_t* blocks, bool* pdl) {
  // The register prefetch doubles the row's registers: only up to 24 elements per lane
  // (cols <= 768); wider rows use the balanced grid without it.
  constexpr bool kCanPrefetch = kPacks * W <= 24;
  switch (variant) {
    case 1:
      return launch_rows<T, W, kPacks, false, false>(false, dx, dout, x, w, a, blocks, pdl);
    case 2:
      return launch_rows<T, W, kPacks, true, false>(false, dx, dout, x, w, a, blocks, pdl);
    case 3:
      return launch_rows<T, W, kPacks, true, kCanPrefetch>(false, dx, dout, x, w, a, blocks, pdl);
    case 5:
      return launch_rows<T, W, kPacks, true, kCanPrefetch>(true, dx, dout, x, w, a, blocks, pdl);
    default:
      return Status(StatusCode::kInvalidArgument,
                    detail::concat("layernorm_backward: unknown variant ", variant));
  }
}

template <typename T>
Status backward_typed(int variant, T* dx, const T* dout, const T* x, const T* w,
                      const BwdArgs& a) {
  constexpr int W = kPack16<T>;
  const int64_t rows = a.rows, cols = a.cols;
  if (variant == 0) variant = kDefaultBackwardVariant<T>;
  const bool vec = cols % W == 0 && aligned16(dx) && aligned16(dout) && aligned16(x) &&
                   aligned16(w) && (a.residual == nullptr || aligned16(a.residual));
  int64_t blocks = chunk_blocks(rows);
  bool pdl = false;
  bool launched = false;
  Status st = Status::success();
  if (vec) {
    const int need = static_cast<int>((cols / W + 31) / 32);
    launched = lnorm::with_packs<kMaxElemsPerLane<T>, W>(need, [&](auto kp) {
      constexpr int k = decltype(kp)::value;
      static_cast<void>(st = launch_variant<T, W, k>(variant, dx, dout, x, w, a, &blocks, &pdl));
    });
  }
  BLUBLAS_RETURN_IF_ERROR(st);
  if (!launched) {
    // The partials first: dx may alias dout (or the residual), and the dx kernel overwrites it.
    const dim3 grid(static_cast<unsigned>((cols + kGenericThreads - 1) / kGenericThreads),
                    static_cast<unsigned>(blocks));
    ln_bwd_params_generic_kernel<T><<<grid, kGenericThreads, 0, a.stream>>>(
        a.partial, dout, x, a.mean, a.rstd, rows, cols, chunk_rows(rows));
    BLUBLAS_KERNEL_LAUNCH_CHECK("layernorm_backward (partials)");
    ln_bwd_dx_generic_kernel<T><<<static_cast<unsigned>(rows), kGenericThreads, 0, a.stream>>>(
        dx, dout, x, a.mean, a.rstd, w, cols, static_cast<const T*>(a.residual));
  }
  BLUBLAS_KERNEL_LAUNCH_CHECK(launched ? "layernorm_backward (dx + partials)" : "layernorm_backward (dx)");
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), 2);
  if (a.param_dtype == Dtype::kF32) {
    BLUBLAS_CUDA_CHECK(lnorm::launch_kernel(pdl, ln_bwd_finish_kernel<float>, grid, dim3(32, kFinishLanes),
                                            0, a.stream, static_cast<float*>(a.dweight),
                                            static_cast<float*>(a.dbias), static_cast<const float*>(a.partial),
                                            blocks, cols, a.acc_params));
  } else {
    BLUBLAS_CUDA_CHECK(lnorm::launch_kernel(pdl, ln_bwd_finish_kernel<T>, grid, dim3(32, kFinishLanes), 0,
                                            a.stream, static_cast<T*>(a.dweight), static_cast<T*>(a.dbias),
                                            static_cast<const float*>(a.partial), blocks, cols, a.acc_params));
  }
  BLUBLAS_KERNEL_LAUNCH_CHECK("layernorm_backward (finish)");
  return Status::success();
}

constexpr int64_t kMaxGridX = 2147483647;

}  // namespace

Status layernorm_backward_workspace_size(int64_t rows, int64_t cols, std::size_t* bytes) {
  BLUBLAS_CHECK_ARG(bytes != nullptr, "layernorm_backward_workspace_size: bytes is null");
  BLUBLAS_CHECK_ARG(rows >= 0 && cols >= 1, "layernorm_backward_workspace_size: rows=", rows,
                    " cols=", cols);
  // The generic path writes one partial per 32-row chunk; the fast paths at most max_partials.
  const int64_t partials = std::max(chunk_blocks(rows), max_partials(rows));
  *bytes = static_cast<std::size_t>(partials) * 2 * static_cast<std::size_t>(cols) * sizeof(float);
  return Status::success();
}

namespace detail {

Status layernorm_backward_variant(int variant, void* dx, const void* residual, void* dweight,
                                  void* dbias, Dtype param_dtype, const void* dout, const void* x,
                                  const float* mean, const float* rstd, const void* weight,
                                  int64_t rows, int64_t cols, Dtype dtype, bool accumulate_dparams,
                                  void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  BLUBLAS_CHECK_ARG(dtype == Dtype::kF32 || dtype == Dtype::kBF16,
                    "layernorm_backward: dtype ", dtype_name(dtype), " not supported (f32, bf16)");
  BLUBLAS_CHECK_ARG(param_dtype == Dtype::kF32 || param_dtype == dtype, "layernorm_backward: dweight/dbias dtype ",
                    dtype_name(param_dtype), " with activations ", dtype_name(dtype), " (need f32 or ",
                    dtype_name(dtype), ")");
  BLUBLAS_CHECK_ARG(rows >= 0 && cols >= 1, "layernorm_backward: rows=", rows, " cols=", cols,
                    " (need rows >= 0, cols >= 1)");
  BLUBLAS_CHECK_ARG(rows <= kMaxGridX && cols <= 16384 * 1024, "layernorm_backward: rows=", rows,
                    " cols=", cols, " too large");
  std::size_t need = 0;
  BLUBLAS_RETURN_IF_ERROR(layernorm_backward_workspace_size(rows, cols, &need));
  BLUBLAS_CHECK(workspace_bytes >= need, StatusCode::kWorkspaceTooSmall,
                "layernorm_backward: workspace of ", workspace_bytes, " bytes < ", need,
                " needed for rows=", rows, " cols=", cols);
  if (rows == 0) return Status::success();
  BLUBLAS_CHECK_ARG(dx && dweight && dout && x && mean && rstd && weight,
                    "layernorm_backward: dx, dweight, dout, x, mean, rstd and weight must not be "
                    "null (only dbias may be)");
  BLUBLAS_CHECK_ARG(workspace != nullptr, "layernorm_backward: workspace is null");
  BLUBLAS_CHECK(aligned16(workspace), StatusCode::kMisaligned,
                "layernorm_backward: workspace must be 16-byte aligned");
  const BwdArgs a{dweight, dbias,    param_dtype,        mean, rstd, rows, static_cast<int>(cols),
                  residual, accumulate_dparams, static_cast<float*>(workspace), stream};
  if (dtype == Dtype::kF32) {
    return backward_typed<float>(variant, static_cast<float*>(dx), static_cast<const float*>(dout),
                                 static_cast<const float*>(x), static_cast<const float*>(weight),
                                 a);
  }
  using bf = __nv_bfloat16;
  return backward_typed<bf>(variant, static_cast<bf*>(dx), static_cast<const bf*>(dout),
                            static_cast<const bf*>(x), static_cast<const bf*>(weight), a);
}

}  // namespace detail

Status layernorm_backward(void* dx, float* dweight, float* dbias, const void* dout, const void* x,
                          const float* mean, const float* rstd, const void* weight, int64_t rows,
                          int64_t cols, Dtype dtype, bool accumulate_dx, bool accumulate_dparams,
                          void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  return detail::layernorm_backward_variant(0, dx, accumulate_dx ? dx : nullptr, dweight, dbias, Dtype::kF32,
                                            dout, x, mean, rstd, weight, rows, cols, dtype,
                                            accumulate_dparams, workspace, workspace_bytes, stream);
}

Status layernorm_backward_residual(void* dx, const void* residual, void* dweight, void* dbias,
                                   Dtype param_dtype, const void* dout, const void* x, const float* mean,
                                   const float* rstd, const void* weight, int64_t rows, int64_t cols,
                                   Dtype dtype, bool accumulate_dparams, void* workspace,
                                   std::size_t workspace_bytes, cudaStream_t stream) {
  return detail::layernorm_backward_variant(0, dx, residual, dweight, dbias, param_dtype, dout, x, mean, rstd,
                                            weight, rows, cols, dtype, accumulate_dparams, workspace,
                                            workspace_bytes, stream);
}

}  // namespace blublas
