// layernorm_forward.cu: LayerNorm forward (optional fused residual add) for f32 / bf16.
//
// Note [LayerNorm forward shapes]
// Fast path (cols a multiple of the 16-byte pack, 16-byte aligned pointers, cols <= 64 elements
// per lane): one warp owns a row and holds it in registers (C = 768 f32 is 6 float4 per lane), so
// the statistics are an exact two-pass mean / variance with no second memory read, and the output
// is written from registers. The variants (layernorm_variants.h) differ only in the block size
// (8 or 4 warps) and the launch (ordinary or dependent). At GPT-2 size the kernel moves ~100 MB
// (f32): on an H200 a cudaMemcpyAsync of the same bytes takes 27.7 us (0.86 of the 1 GiB copy
// bandwidth), the kernel 29.3 us; persistent warps with a register prefetch of the next row and
// streaming cache hints measured slower (bench/NOTES.md) and were removed.
// Any other shape takes the generic path: a block per row reading the row from global memory
// (L1/L2) in three passes.
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
using fused::Pack;
using fused::to_f32;
using fused::warp_sum;
using lnorm::aligned16;
using lnorm::load_pack;
using lnorm::pack_elem;
using lnorm::store_pack;

constexpr int kThreads = 256;
constexpr int kMaxElemsPerLane = 64;
constexpr int kGenericThreads = 256;
constexpr int kDefaultForwardVariant = 3;  // H200 run 3: v3 29.3 us, v5 29.5, v1 29.8

// ---------------------------------------------------------------- warp per row (fast path)
// Warp g = blockIdx.x * warps + warp takes row g.
template <typename T, int W, int kPacks, bool kResidual>
__global__ void __launch_bounds__(kThreads, kPacks * W * (kResidual ? 2 : 1) <= 32 ? 4 : 1)
    ln_fwd_rows_kernel(T* out, float* __restrict__ mean_out, float* __restrict__ rstd_out,
                       T* res_out, const T* x, const T* res, const T* __restrict__ w,
                       const T* __restrict__ b, int64_t rows, int cols, float eps) {
  using P = Pack<T, W>;
  const int lane = threadIdx.x & 31;
  const int warps = static_cast<int>(blockDim.x >> 5);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * warps + (threadIdx.x >> 5);
  lnorm::pdl_wait();  // launched dependent (variant 5): x is the previous kernel's output
  if (row >= rows) return;
  const int npacks = cols / W;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const int64_t base = row * cols;

  // h = x (+ res), rounded to T like res_out, in f32 registers.
  float v[kPacks][W];
  {
    P xr[kPacks], rr[kPacks];
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = lane + 32 * k;
      if (p < npacks) {
        xr[k] = load_pack<T, W>(x + base + p * W);
        if constexpr (kResidual) rr[k] = load_pack<T, W>(res + base + p * W);
      }
    }
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      if (lane + 32 * k < npacks) {
#pragma unroll
        for (int i = 0; i < W; ++i) {
          float h = pack_elem(xr[k], i);
          if constexpr (kResidual) h = to_f32(from_f32<T>(h + pack_elem(rr[k], i)));
          v[k][i] = h;
        }
      }
    }
  }
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int p = lane + 32 * k;
    if (p < npacks) {
#pragma unroll
      for (int i = 0; i < W; ++i) sum += v[k][i];
      if constexpr (kResidual) {
        P hp;
#pragma unroll
        for (int i = 0; i < W; ++i) hp.v[i] = from_f32<T>(v[k][i]);
        store_pack<T, W>(res_out + base + p * W, hp);
      }
    }
  }
  const float mean = warp_sum(sum) * inv_cols;
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
  const float rstd = rsqrtf(warp_sum(sq) * inv_cols + eps);
  if (lane == 0) {
    if (mean_out) mean_out[row] = mean;
    if (rstd_out) rstd_out[row] = rstd;
  }
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int p = lane + 32 * k;
    if (p < npacks) {
      const P wp = load_pack<T, W>(w + p * W);
      P bp;
      if (b) bp = load_pack<T, W>(b + p * W);
      P o;
#pragma unroll
      for (int i = 0; i < W; ++i) {
        const float bv = b ? pack_elem(bp, i) : 0.0f;
        o.v[i] = from_f32<T>((v[k][i] - mean) * rstd * pack_elem(wp, i) + bv);
      }
      store_pack<T, W>(out + base + p * W, o);
    }
  }
}

// ---------------------------------------------------------------- generic (any cols)
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

// ---------------------------------------------------------------- dispatch
struct FwdArgs {
  float* mean;
  float* rstd;
  int64_t rows;
  int cols;
  float eps;
  cudaStream_t stream;
};

template <typename T, int W, int kPacks, bool kRes>
Status launch_rows(int warps_per_block, bool pdl, T* out, T* res_out, const T* x, const T* res,
                   const T* w, const T* b, const FwdArgs& a) {
  auto kernel = ln_fwd_rows_kernel<T, W, kPacks, kRes>;
  const int threads = 32 * warps_per_block;
  const int64_t blocks = (a.rows + warps_per_block - 1) / warps_per_block;
  if (pdl) {
    DeviceInfo info;
    BLUBLAS_RETURN_IF_ERROR(current_device_info(&info));
    pdl = info.sm_major >= 9;
  }
  BLUBLAS_CUDA_CHECK(lnorm::launch_kernel(pdl, kernel, dim3(static_cast<unsigned>(blocks)),
                                          dim3(threads), 0, a.stream, out, a.mean, a.rstd, res_out,
                                          x, res, w, b, a.rows, a.cols, a.eps));
  return Status::success();
}

template <typename T, int W, int kPacks, bool kRes>
Status launch_variant(int variant, T* out, T* res_out, const T* x, const T* res, const T* w,
                      const T* b, const FwdArgs& a) {
  switch (variant) {
    case 1:
      return launch_rows<T, W, kPacks, kRes>(8, false, out, res_out, x, res, w, b, a);
    case 3:
      return launch_rows<T, W, kPacks, kRes>(4, false, out, res_out, x, res, w, b, a);
    case 5:
      return launch_rows<T, W, kPacks, kRes>(8, true, out, res_out, x, res, w, b, a);
    default:
      return Status(StatusCode::kInvalidArgument,
                    detail::concat("layernorm_forward: unknown variant ", variant));
  }
}

template <typename T>
Status forward_typed(int variant, T* out, float* mean, float* rstd, T* res_out, const T* x,
                     const T* res, const T* w, const T* b, int64_t rows, int64_t cols, float eps,
                     cudaStream_t s) {
  constexpr int W = kPack16<T>;
  const bool vec = cols % W == 0 && aligned16(out) && aligned16(x) && aligned16(w) &&
                   (b == nullptr || aligned16(b)) &&
                   (res == nullptr || (aligned16(res) && aligned16(res_out)));
  if (variant == 0) variant = kDefaultForwardVariant;
  const FwdArgs a{mean, rstd, rows, static_cast<int>(cols), eps, s};
  bool launched = false;
  Status st = Status::success();
  if (vec) {
    const int need = static_cast<int>((cols / W + 31) / 32);
    launched = lnorm::with_packs<kMaxElemsPerLane, W>(need, [&](auto kp) {
      constexpr int k = decltype(kp)::value;
      static_cast<void>(
          st = res ? launch_variant<T, W, k, true>(variant, out, res_out, x, res, w, b, a)
                   : launch_variant<T, W, k, false>(variant, out, res_out, x, res, w, b, a));
    });
  }
  BLUBLAS_RETURN_IF_ERROR(st);
  if (!launched) {
    ln_fwd_generic_kernel<T><<<static_cast<unsigned>(rows), kGenericThreads, 0, s>>>(
        out, mean, rstd, res_out, x, res, w, b, rows, cols, eps);
  }
  BLUBLAS_KERNEL_LAUNCH_CHECK("layernorm_forward");
  return Status::success();
}

constexpr int64_t kMaxGridX = 2147483647;

}  // namespace

namespace detail {

Status layernorm_forward_variant(int variant, void* out, float* mean, float* rstd,
                                 void* residual_out, const void* x, const void* residual,
                                 const void* weight, const void* bias, int64_t rows, int64_t cols,
                                 float eps, Dtype dtype, cudaStream_t stream) {
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
    return forward_typed<float>(variant, static_cast<float*>(out), mean, rstd,
                                static_cast<float*>(residual_out), static_cast<const float*>(x),
                                static_cast<const float*>(residual),
                                static_cast<const float*>(weight), static_cast<const float*>(bias),
                                rows, cols, eps, stream);
  }
  using bf = __nv_bfloat16;
  return forward_typed<bf>(variant, static_cast<bf*>(out), mean, rstd,
                           static_cast<bf*>(residual_out), static_cast<const bf*>(x),
                           static_cast<const bf*>(residual), static_cast<const bf*>(weight),
                           static_cast<const bf*>(bias), rows, cols, eps, stream);
}

}  // namespace detail

Status layernorm_forward(void* out, float* mean, float* rstd, void* residual_out, const void* x,
                         const void* residual, const void* weight, const void* bias, int64_t rows,
                         int64_t cols, float eps, Dtype dtype, cudaStream_t stream) {
  return detail::layernorm_forward_variant(0, out, mean, rstd, residual_out, x, residual, weight,
                                           bias, rows, cols, eps, dtype, stream);
}

}  // namespace blublas
