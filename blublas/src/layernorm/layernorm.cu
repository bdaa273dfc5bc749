// layernorm.cu: LayerNorm forward (optional fused residual add) and backward for f32 / bf16.
//
// Note [LayerNorm kernel shapes]
// Fast path (cols a multiple of the 16-byte pack, 16-byte aligned pointers, cols <= 64 elements
// per lane): one warp per row holds the row in registers (C = 768 f32 is 6 float4 per lane), so
// the statistics are an exact two-pass mean / variance with no second memory read, and the
// output is written from registers. Backward: a block owns a contiguous chunk of rows (the chunk
// size depends only on `rows`); each lane accumulates dweight/dbias for its fixed columns in
// registers across the block's rows, the 8 warps are added into shared memory in warp order and
// one partial per block goes to the workspace; a second kernel adds the partials in block order.
// Any other shape takes the generic path: a block per row reading the row from global memory
// (L1/L2) in several passes, and a column kernel for the parameter-gradient partials.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "blublas/check.h"
#include "blublas/layernorm.h"
#include "elementwise/vector_io.cuh"
#include "reduce/reduce_primitives.cuh"

namespace blublas {
namespace {

using fused::from_f32;
using fused::kPack16;
using fused::load_f32;
using fused::store_f32;
using fused::to_f32;
using fused::warp_sum;

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpsPerBlock * 32;
constexpr int kMaxElemsPerLaneFwd = 64;
constexpr int kMaxElemsPerLaneBwd = 32;
constexpr int64_t kBwdMinRowsPerBlock = 32;
constexpr int64_t kBwdMaxBlocks = 1024;
constexpr int kGenericThreads = 256;

// ---------------------------------------------------------------- forward, warp per row
template <typename T, int W, int kPacks, bool kResidual>
__global__ void __launch_bounds__(kThreads)
    ln_fwd_warp_kernel(T* __restrict__ out, float* __restrict__ mean_out,
                       float* __restrict__ rstd_out, T* res_out, const T* x, const T* res,
                       const T* __restrict__ w, const T* __restrict__ b, int64_t rows, int cols,
                       float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int npacks = cols / W;
  const int64_t base = row * cols;
  float v[kPacks][W];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int p = lane + 32 * k;
    if (p < npacks) {
      load_f32<T, W>(x + base + p * W, v[k]);
      if constexpr (kResidual) {
        float r[W];
        load_f32<T, W>(res + base + p * W, r);
#pragma unroll
        for (int i = 0; i < W; ++i) v[k][i] = to_f32(from_f32<T>(v[k][i] + r[i]));
        store_f32<T, W>(res_out + base + p * W, v[k]);
      }
#pragma unroll
      for (int i = 0; i < W; ++i) sum += v[k][i];
    }
  }
  const float mean = warp_sum(sum) / static_cast<float>(cols);
  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    if (lane + 32 * k < npacks) {
#pragma unroll
      for (int i = 0; i < W; ++i) {
        const float d = v[k][i] - mean;
        sq += d * d;
      }
    }
  }
  const float rstd = rsqrtf(warp_sum(sq) / static_cast<float>(cols) + eps);
  if (lane == 0) {
    if (mean_out) mean_out[row] = mean;
    if (rstd_out) rstd_out[row] = rstd;
  }
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int p = lane + 32 * k;
    if (p < npacks) {
      float wv[W], bv[W], o[W];
      load_f32<T, W>(w + p * W, wv);
      if (b) {
        load_f32<T, W>(b + p * W, bv);
      } else {
#pragma unroll
        for (int i = 0; i < W; ++i) bv[i] = 0.0f;
      }
#pragma unroll
      for (int i = 0; i < W; ++i) o[i] = (v[k][i] - mean) * rstd * wv[i] + bv[i];
      store_f32<T, W>(out + base + p * W, o);
    }
  }
}

// ---------------------------------------------------------------- forward, generic (any cols)
template <typename T>
__global__ void __launch_bounds__(kGenericThreads)
    ln_fwd_generic_kernel(T* out, float* __restrict__ mean_out, float* __restrict__ rstd_out,
                          T* res_out, const T* x, const T* res, const T* __restrict__ w,
                          const T* __restrict__ b, int64_t rows, int64_t cols, float eps) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int64_t base = row * cols;
  // Pass 1: h = x (+ res) (stored to res_out: every later pass of this thread reads back its own
  // elements, so aliasing res_out with x or res is safe), and its sum.
  const T* h = x;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float hv = to_f32(x[base + c]);
    if (res) {
      const T hs = from_f32<T>(hv + to_f32(res[base + c]));
      res_out[base + c] = hs;
      hv = to_f32(hs);
    }
    sum += hv;
  }
  if (res) h = res_out;
  const float mean = fused::block_sum(sum, scratch) / static_cast<float>(cols);
  float sq = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float d = to_f32(h[base + c]) - mean;
    sq += d * d;
  }
  const float rstd = rsqrtf(fused::block_sum(sq, scratch) / static_cast<float>(cols) + eps);
  if (threadIdx.x == 0) {
    if (mean_out) mean_out[row] = mean;
    if (rstd_out) rstd_out[row] = rstd;
  }
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float bv = b ? to_f32(b[c]) : 0.0f;
    out[base + c] = from_f32<T>((to_f32(h[base + c]) - mean) * rstd * to_f32(w[c]) + bv);
  }
}

// ---------------------------------------------------------------- backward, warp per row
// partial: [gridDim.x][2][cols] (dweight partial, dbias partial). Each warp accumulates its rows'
// dweight/dbias for the lane's fixed columns in its own shared-memory slice acc[warp][2][cols]
// (no sharing, no sync); the slices are added in warp order at the end.
template <typename T, int W, int kPacks>
__global__ void __launch_bounds__(kThreads, (W == 4 && kPacks <= 6) ? 3 : 2)
    ln_bwd_warp_kernel(T* dx, float* __restrict__ partial, const T* dout, const T* __restrict__ x,
                       const float* __restrict__ mean, const float* __restrict__ rstd,
                       const T* __restrict__ w, int64_t rows, int cols, int64_t rows_per_block,
                       bool accumulate_dx) {
  static_assert(W % 4 == 0, "the warp kernel accumulates through 16-byte shared accesses");
  extern __shared__ float4 acc_smem4[];  // [kWarpsPerBlock][2][cols] floats
  float* acc_smem = reinterpret_cast<float*>(acc_smem4);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int npacks = cols / W;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  float* my_dw = acc_smem + static_cast<int64_t>(warp) * 2 * cols;
  float* my_db = my_dw + cols;
  for (int c = lane; c < 2 * cols; c += 32) my_dw[c] = 0.0f;
  __syncwarp();

  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int64_t row1 = min(rows, row0 + rows_per_block);
  for (int64_t row = row0 + warp; row < row1; row += kWarpsPerBlock) {
    const int64_t base = row * cols;
    const float mu = mean[row], rs = rstd[row];
    float xh[kPacks][W], g[kPacks][W];
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = lane + 32 * k;
      if (p < npacks) {
        load_f32<T, W>(x + base + p * W, xh[k]);
        load_f32<T, W>(dout + base + p * W, g[k]);
      }
    }
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = lane + 32 * k;
      if (p < npacks) {
        float wv[W];
        load_f32<T, W>(w + p * W, wv);
#pragma unroll
        for (int i = 0; i < W; ++i) xh[k][i] = (xh[k][i] - mu) * rs;
        // 16-byte shared-memory accesses (W % 4 == 0; the slice offsets are multiples of 4
        // floats): a lane's pack is contiguous, so a warp's accesses are conflict-free.
        float4* dw4 = reinterpret_cast<float4*>(my_dw + p * W);
        float4* db4 = reinterpret_cast<float4*>(my_db + p * W);
#pragma unroll
        for (int q = 0; q < W / 4; ++q) {
          float4 a = dw4[q], d = db4[q];
          a.x += g[k][4 * q + 0] * xh[k][4 * q + 0];
          a.y += g[k][4 * q + 1] * xh[k][4 * q + 1];
          a.z += g[k][4 * q + 2] * xh[k][4 * q + 2];
          a.w += g[k][4 * q + 3] * xh[k][4 * q + 3];
          d.x += g[k][4 * q + 0];
          d.y += g[k][4 * q + 1];
          d.z += g[k][4 * q + 2];
          d.w += g[k][4 * q + 3];
          dw4[q] = a;
          db4[q] = d;
        }
#pragma unroll
        for (int i = 0; i < W; ++i) {
          g[k][i] *= wv[i];
          s1 += g[k][i];
          s2 += g[k][i] * xh[k][i];
        }
      }
    }
    const float c1 = warp_sum(s1) * inv_cols, c2 = warp_sum(s2) * inv_cols;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = lane + 32 * k;
      if (p < npacks) {
        float o[W];
        if (accumulate_dx) load_f32<T, W>(dx + base + p * W, o);
#pragma unroll
        for (int i = 0; i < W; ++i) {
          const float d = rs * (g[k][i] - c1 - xh[k][i] * c2);
          o[i] = accumulate_dx ? o[i] + d : d;
        }
        store_f32<T, W>(dx + base + p * W, o);
      }
    }
  }
  __syncthreads();
  // Add the warps' slices in warp order (fixed) and write the block's partial.
  float* dst = partial + static_cast<int64_t>(blockIdx.x) * 2 * cols;
  for (int c = threadIdx.x; c < 2 * cols; c += blockDim.x) {
    float t = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kWarpsPerBlock; ++wi) t += acc_smem[static_cast<int64_t>(wi) * 2 * cols + c];
    dst[c] = t;
  }
}

// ---------------------------------------------------------------- backward, generic (any cols)
template <typename T>
__global__ void __launch_bounds__(kGenericThreads)
    ln_bwd_dx_generic_kernel(T* dx, const T* dout, const T* __restrict__ x,
                             const float* __restrict__ mean, const float* __restrict__ rstd,
                             const T* __restrict__ w, int64_t cols, bool accumulate_dx) {
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
    if (accumulate_dx) d += to_f32(dx[base + c]);
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
constexpr int kFinishLanes = 32;
__global__ void __launch_bounds__(32 * kFinishLanes)
    ln_bwd_finish_kernel(float* dweight, float* dbias, const float* __restrict__ partial,
                         int64_t blocks, int64_t cols, bool accumulate) {
  __shared__ float red[kFinishLanes][33];
  const int which = blockIdx.y;
  float* outp = which == 0 ? dweight : dbias;
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
    outp[c] = accumulate ? outp[c] + t : t;
  }
}

// ---------------------------------------------------------------- dispatch helpers
bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

int64_t bwd_rows_per_block(int64_t rows) {
  return std::max(kBwdMinRowsPerBlock, (rows + kBwdMaxBlocks - 1) / kBwdMaxBlocks);
}

template <typename T, int W, int kPacks, bool kRes>
void launch_fwd_warp(T* out, float* mean, float* rstd, T* res_out, const T* x, const T* res,
                     const T* w, const T* b, int64_t rows, int cols, float eps, cudaStream_t s) {
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  ln_fwd_warp_kernel<T, W, kPacks, kRes><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
      out, mean, rstd, res_out, x, res, w, b, rows, cols, eps);
}

// Calls f(std::integral_constant<int, kPacks>) for the smallest supported kPacks >= need.
template <int kMaxElems, int W, typename F>
bool with_packs(int need, F&& f) {
  bool done = false;
  auto try_one = [&](auto kp) {
    constexpr int k = decltype(kp)::value;
    if constexpr (k * W <= kMaxElems) {
      if (!done && need <= k) {
        f(kp);
        done = true;
      }
    }
  };
  try_one(std::integral_constant<int, 1>{});
  try_one(std::integral_constant<int, 2>{});
  try_one(std::integral_constant<int, 3>{});
  try_one(std::integral_constant<int, 4>{});
  try_one(std::integral_constant<int, 6>{});
  try_one(std::integral_constant<int, 8>{});
  try_one(std::integral_constant<int, 12>{});
  try_one(std::integral_constant<int, 16>{});
  return done;
}

template <typename T>
Status forward_typed(T* out, float* mean, float* rstd, T* res_out, const T* x, const T* res,
                     const T* w, const T* b, int64_t rows, int64_t cols, float eps,
                     cudaStream_t s) {
  constexpr int W = kPack16<T>;
  const bool vec = cols % W == 0 && aligned16(out) && aligned16(x) && aligned16(w) &&
                   (b == nullptr || aligned16(b)) &&
                   (res == nullptr || (aligned16(res) && aligned16(res_out)));
  bool launched = false;
  if (vec) {
    const int need = static_cast<int>((cols / W + 31) / 32);
    launched = with_packs<kMaxElemsPerLaneFwd, W>(need, [&](auto kp) {
      constexpr int k = decltype(kp)::value;
      if (res) {
        launch_fwd_warp<T, W, k, true>(out, mean, rstd, res_out, x, res, w, b, rows,
                                       static_cast<int>(cols), eps, s);
      } else {
        launch_fwd_warp<T, W, k, false>(out, mean, rstd, res_out, x, res, w, b, rows,
                                        static_cast<int>(cols), eps, s);
      }
    });
  }
  if (!launched) {
    ln_fwd_generic_kernel<T><<<static_cast<unsigned>(rows), kGenericThreads, 0, s>>>(
        out, mean, rstd, res_out, x, res, w, b, rows, cols, eps);
  }
  BLUBLAS_KERNEL_LAUNCH_CHECK("layernorm_forward");
  return Status::success();
}

template <typename T>
Status backward_typed(T* dx, float* dweight, float* dbias, const T* dout, const T* x,
                      const float* mean, const float* rstd, const T* w, int64_t rows,
                      int64_t cols, bool acc_dx, bool acc_params, float* partial,
                      cudaStream_t s) {
  constexpr int W = kPack16<T>;
  const int64_t rpb = bwd_rows_per_block(rows);
  const int64_t blocks = (rows + rpb - 1) / rpb;
  const bool vec = cols % W == 0 && aligned16(dx) && aligned16(dout) && aligned16(x) &&
                   aligned16(w);
  bool launched = false;
  if (vec) {
    const int need = static_cast<int>((cols / W + 31) / 32);
    launched = with_packs<kMaxElemsPerLaneBwd, W>(need, [&](auto kp) {
      constexpr int k = decltype(kp)::value;
      const int smem = kWarpsPerBlock * 2 * static_cast<int>(cols) * static_cast<int>(sizeof(float));
      // Above 48 KiB of dynamic shared memory needs the opt-in (cheap; set on every call so that
      // no per-device state is cached).
      cudaFuncSetAttribute(ln_bwd_warp_kernel<T, W, k>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           smem);
      ln_bwd_warp_kernel<T, W, k><<<static_cast<unsigned>(blocks), kThreads, smem, s>>>(
          dx, partial, dout, x, mean, rstd, w, rows, static_cast<int>(cols), rpb, acc_dx);
    });
  }
  if (!launched) {
    ln_bwd_dx_generic_kernel<T><<<static_cast<unsigned>(rows), kGenericThreads, 0, s>>>(
        dx, dout, x, mean, rstd, w, cols, acc_dx);
    BLUBLAS_KERNEL_LAUNCH_CHECK("layernorm_backward (dx)");
    const dim3 grid(static_cast<unsigned>((cols + kGenericThreads - 1) / kGenericThreads),
                    static_cast<unsigned>(blocks));
    ln_bwd_params_generic_kernel<T><<<grid, kGenericThreads, 0, s>>>(partial, dout, x, mean, rstd,
                                                                     rows, cols, rpb);
  }
  BLUBLAS_KERNEL_LAUNCH_CHECK("layernorm_backward (partials)");
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), 2);
  ln_bwd_finish_kernel<<<grid, dim3(32, kFinishLanes), 0, s>>>(dweight, dbias, partial, blocks, cols,
                                                    acc_params);
  BLUBLAS_KERNEL_LAUNCH_CHECK("layernorm_backward (finish)");
  return Status::success();
}

constexpr int64_t kMaxGridX = 2147483647;

}  // namespace

Status layernorm_forward(void* out, float* mean, float* rstd, void* residual_out, const void* x,
                         const void* residual, const void* weight, const void* bias, int64_t rows,
                         int64_t cols, float eps, Dtype dtype, cudaStream_t stream) {
  BLUBLAS_CHECK_ARG(dtype == Dtype::kF32 || dtype == Dtype::kBF16,
                    "layernorm_forward: dtype ", dtype_name(dtype), " not supported (f32, bf16)");
  BLUBLAS_CHECK_ARG(rows >= 0 && cols >= 1, "layernorm_forward: rows=", rows, " cols=", cols,
                    " (need rows >= 0, cols >= 1)");
  BLUBLAS_CHECK_ARG(rows <= kMaxGridX && cols <= kMaxGridX, "layernorm_forward: rows=", rows,
                    " cols=", cols, " too large");
  BLUBLAS_CHECK_ARG(eps >= 0.0f, "layernorm_forward: eps=", eps, " must be >= 0");
  if (rows == 0) return Status::success();
  BLUBLAS_CHECK_ARG(out && x && weight, "layernorm_forward: out, x and weight must not be null");
  BLUBLAS_CHECK_ARG((residual == nullptr) == (residual_out == nullptr),
                    "layernorm_forward: residual and residual_out must both be set or both null");
  if (dtype == Dtype::kF32) {
    return forward_typed<float>(static_cast<float*>(out), mean, rstd,
                                static_cast<float*>(residual_out), static_cast<const float*>(x),
                                static_cast<const float*>(residual),
                                static_cast<const float*>(weight), static_cast<const float*>(bias),
                                rows, cols, eps, stream);
  }
  using bf = __nv_bfloat16;
  return forward_typed<bf>(static_cast<bf*>(out), mean, rstd, static_cast<bf*>(residual_out),
                           static_cast<const bf*>(x), static_cast<const bf*>(residual),
                           static_cast<const bf*>(weight), static_cast<const bf*>(bias), rows,
                           cols, eps, stream);
}

Status layernorm_backward_workspace_size(int64_t rows, int64_t cols, std::size_t* bytes) {
  BLUBLAS_CHECK_ARG(bytes != nullptr, "layernorm_backward_workspace_size: bytes is null");
  BLUBLAS_CHECK_ARG(rows >= 0 && cols >= 1, "layernorm_backward_workspace_size: rows=", rows,
                    " cols=", cols);
  const int64_t rpb = bwd_rows_per_block(std::max<int64_t>(rows, 1));
  const int64_t blocks = (rows + rpb - 1) / rpb;
  *bytes = static_cast<std::size_t>(blocks) * 2 * static_cast<std::size_t>(cols) * sizeof(float);
  return Status::success();
}

Status layernorm_backward(void* dx, float* dweight, float* dbias, const void* dout, const void* x,
                          const float* mean, const float* rstd, const void* weight, int64_t rows,
                          int64_t cols, Dtype dtype, bool accumulate_dx, bool accumulate_dparams,
                          void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  BLUBLAS_CHECK_ARG(dtype == Dtype::kF32 || dtype == Dtype::kBF16,
                    "layernorm_backward: dtype ", dtype_name(dtype), " not supported (f32, bf16)");
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
  float* partial = static_cast<float*>(workspace);
  if (dtype == Dtype::kF32) {
    return backward_typed<float>(static_cast<float*>(dx), dweight, dbias,
                                 static_cast<const float*>(dout), static_cast<const float*>(x),
                                 mean, rstd, static_cast<const float*>(weight), rows, cols,
                                 accumulate_dx, accumulate_dparams, partial, stream);
  }
  using bf = __nv_bfloat16;
  return backward_typed<bf>(static_cast<bf*>(dx), dweight, dbias, static_cast<const bf*>(dout),
                            static_cast<const bf*>(x), mean, rstd, static_cast<const bf*>(weight),
                            rows, cols, accumulate_dx, accumulate_dparams, partial, stream);
}

}  // namespace blublas
