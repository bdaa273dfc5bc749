// softmax.cu: row softmax forward and backward (f32 / bf16), see Note [Softmax row residency] in
// blublas/softmax.h. Resident kernels keep kLoads packs per thread in registers (32 f32 values for
// the forward, 2 x 16 for the backward's y and dy), so each element is read once and written once;
// the generic kernels (rows longer than 8 blocks can hold, or long rows without clusters) use the
// online normalizer and read the row twice.
#include <cuda_bf16.h>

#include <cstdint>

#include "blublas/check.h"
#include "blublas/softmax.h"
#include "elementwise/vector_io.cuh"
#include "reduce/reduce_primitives.cuh"
#include "softmax/row_resident.cuh"

namespace blublas {
namespace {

using namespace fused;  // NOLINT: the kernel helpers of this family

// ---------------------------------------------------------------- resident forward
template <typename T, int W, int kLoads, bool kCluster>
__global__ void __launch_bounds__(kResidentMaxThreads, W > 1 ? 2 : 1)
    softmax_fwd_resident_kernel(T* y, const T* x, int64_t cols, int cluster, int64_t chunk) {
  __shared__ float scratch[32];
  __shared__ MaxSum slot;
  const RowSliceIndex sl = row_slice(kCluster ? cluster : 1, chunk, cols);
  const T* xr = x + sl.row * cols + sl.begin;
  T* yr = y + sl.row * cols + sl.begin;
  const int nvalid = static_cast<int>(sl.end - sl.begin);
  float v[kLoads][W];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int e = (k * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x)) * W;
    if (e < nvalid) {
      load_f32_stream<T, W>(xr + e, v[k]);
#pragma unroll
      for (int i = 0; i < W; ++i) m = fmaxf(m, v[k][i]);
    }
  }
  const float mb = block_max(m, scratch);
  const float mref = mb == -INFINITY ? 0.0f : mb;  // a fully -inf slice contributes exp(-inf) = 0
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int e = (k * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x)) * W;
    if (e < nvalid) {
#pragma unroll
      for (int i = 0; i < W; ++i) {
        v[k][i] = __expf(v[k][i] - mref);
        s += v[k][i];
      }
    }
  }
  const MaxSum local{mb, block_sum(s, scratch)};
  const MaxSum all = cluster_combine_maxsum<kCluster>(local, &slot);
  const float scale = (local.s == 0.0f ? 0.0f : __expf(mb - all.m)) / all.s;
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int e = (k * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x)) * W;
    if (e < nvalid) {
      float o[W];
#pragma unroll
      for (int i = 0; i < W; ++i) o[i] = v[k][i] * scale;
      store_f32<T, W>(yr + e, o);
    }
  }
}

// ---------------------------------------------------------------- resident backward
template <typename T, int W, int kLoads, bool kCluster>
__global__ void __launch_bounds__(kResidentMaxThreads, W > 1 ? 2 : 1)
    softmax_bwd_resident_kernel(T* dx, const T* dy, const T* y, int64_t cols, int cluster,
                                int64_t chunk) {
  __shared__ float scratch[32];
  __shared__ float slot;
  const RowSliceIndex sl = row_slice(kCluster ? cluster : 1, chunk, cols);
  const int64_t base = sl.row * cols + sl.begin;
  const int nvalid = static_cast<int>(sl.end - sl.begin);
  float yv[kLoads][W], gv[kLoads][W];
  float dot = 0.0f;
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int e = (k * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x)) * W;
    if (e < nvalid) {
      load_f32_stream<T, W>(y + base + e, yv[k]);
      load_f32_stream<T, W>(dy + base + e, gv[k]);
#pragma unroll
      for (int i = 0; i < W; ++i) dot += yv[k][i] * gv[k][i];
    }
  }
  const float total = cluster_combine_sum<kCluster>(block_sum(dot, scratch), &slot);
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int e = (k * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x)) * W;
    if (e < nvalid) {
      float o[W];
#pragma unroll
      for (int i = 0; i < W; ++i) o[i] = yv[k][i] * (gv[k][i] - total);
      store_f32<T, W>(dx + base + e, o);
    }
  }
}

// ---------------------------------------------------------------- generic (online) kernels
template <typename T, int W>
__global__ void __launch_bounds__(kGenericRowThreads)
    softmax_fwd_generic_kernel(T* y, const T* x, int64_t cols) {
  __shared__ MaxSum scratch[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * cols;
  MaxSum st{-INFINITY, 0.0f};
  for (int64_t e = static_cast<int64_t>(threadIdx.x) * W; e < cols;
       e += static_cast<int64_t>(blockDim.x) * W) {
    float v[W];
    load_f32<T, W>(x + base + e, v);
    float m = st.m;
#pragma unroll
    for (int i = 0; i < W; ++i) m = fmaxf(m, v[i]);
    float s = st.m == -INFINITY ? 0.0f : st.s * __expf(st.m - m);
    if (m != -INFINITY) {
#pragma unroll
      for (int i = 0; i < W; ++i) s += __expf(v[i] - m);
    }
    st = {m, s};
  }
  const MaxSum all = block_maxsum(st, scratch);
  const float inv = 1.0f / all.s;
  for (int64_t e = static_cast<int64_t>(threadIdx.x) * W; e < cols;
       e += static_cast<int64_t>(blockDim.x) * W) {
    float v[W];
    load_f32<T, W>(x + base + e, v);
#pragma unroll
    for (int i = 0; i < W; ++i) v[i] = __expf(v[i] - all.m) * inv;
    store_f32<T, W>(y + base + e, v);
  }
}

template <typename T, int W>
__global__ void __launch_bounds__(kGenericRowThreads)
    softmax_bwd_generic_kernel(T* dx, const T* dy, const T* y, int64_t cols) {
  __shared__ float scratch[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * cols;
  float dot = 0.0f;
  for (int64_t e = static_cast<int64_t>(threadIdx.x) * W; e < cols;
       e += static_cast<int64_t>(blockDim.x) * W) {
    float a[W], b[W];
    load_f32<T, W>(y + base + e, a);
    load_f32<T, W>(dy + base + e, b);
#pragma unroll
    for (int i = 0; i < W; ++i) dot += a[i] * b[i];
  }
  const float total = block_sum(dot, scratch);
  for (int64_t e = static_cast<int64_t>(threadIdx.x) * W; e < cols;
       e += static_cast<int64_t>(blockDim.x) * W) {
    float a[W], b[W];
    load_f32<T, W>(y + base + e, a);
    load_f32<T, W>(dy + base + e, b);
#pragma unroll
    for (int i = 0; i < W; ++i) a[i] = a[i] * (b[i] - total);
    store_f32<T, W>(dx + base + e, a);
  }
}

// ---------------------------------------------------------------- dispatch
bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

// kLoads per thread: 32 floats of registers per array in the forward, 16 per array backward
// (half that for the scalar path, whose per-element addresses and predicates also take registers).
template <typename T, int W, bool kBackward>
constexpr int kLoadsFor = W == 1 ? (kBackward ? 8 : 16) : (kBackward ? 16 : 32) / W;

template <typename T, int W>
Status forward_w(T* y, const T* x, int64_t rows, int64_t cols, bool clusters_ok, cudaStream_t s) {
  constexpr int kLoads = kLoadsFor<T, W, false>;
  ResidentConfig cfg;
  cudaError_t err;
  if (pick_resident_config(cols, W, kLoads, clusters_ok, &cfg)) {
    if (cfg.cluster > 1) {
      err = launch_resident(softmax_fwd_resident_kernel<T, W, kLoads, true>, cfg, rows, s, y, x,
                            cols, cfg.cluster, cfg.chunk_elems);
    } else {
      err = launch_resident(softmax_fwd_resident_kernel<T, W, kLoads, false>, cfg, rows, s, y, x,
                            cols, cfg.cluster, cfg.chunk_elems);
    }
  } else {
    softmax_fwd_generic_kernel<T, W><<<static_cast<unsigned>(rows), kGenericRowThreads, 0, s>>>(
        y, x, cols);
    err = cudaGetLastError();
  }
  BLUBLAS_CHECK(err == cudaSuccess, StatusCode::kCudaError, "softmax_forward: launch failed: ",
                cudaGetErrorString(err), " (rows=", rows, " cols=", cols, ")");
  return Status::success();
}

template <typename T, int W>
Status backward_w(T* dx, const T* dy, const T* y, int64_t rows, int64_t cols, bool clusters_ok,
                  cudaStream_t s) {
  constexpr int kLoads = kLoadsFor<T, W, true>;
  ResidentConfig cfg;
  cudaError_t err;
  if (pick_resident_config(cols, W, kLoads, clusters_ok, &cfg)) {
    if (cfg.cluster > 1) {
      err = launch_resident(softmax_bwd_resident_kernel<T, W, kLoads, true>, cfg, rows, s, dx,
                            dy, y, cols, cfg.cluster, cfg.chunk_elems);
    } else {
      err = launch_resident(softmax_bwd_resident_kernel<T, W, kLoads, false>, cfg, rows, s, dx,
                            dy, y, cols, cfg.cluster, cfg.chunk_elems);
    }
  } else {
    softmax_bwd_generic_kernel<T, W><<<static_cast<unsigned>(rows), kGenericRowThreads, 0, s>>>(
        dx, dy, y, cols);
    err = cudaGetLastError();
  }
  BLUBLAS_CHECK(err == cudaSuccess, StatusCode::kCudaError, "softmax_backward: launch failed: ",
                cudaGetErrorString(err), " (rows=", rows, " cols=", cols, ")");
  return Status::success();
}

Status check_args(const char* op, int64_t rows, int64_t cols, Dtype dtype) {
  BLUBLAS_CHECK_ARG(dtype == Dtype::kF32 || dtype == Dtype::kBF16, op, ": dtype ",
                    dtype_name(dtype), " not supported (f32, bf16)");
  BLUBLAS_CHECK_ARG(rows >= 0 && cols >= 1, op, ": rows=", rows, " cols=", cols,
                    " (need rows >= 0, cols >= 1)");
  BLUBLAS_CHECK_ARG(rows * kResidentMaxCluster <= 2147483647LL && cols <= (int64_t{1} << 40),
                    op, ": rows=", rows, " cols=", cols, " too large");
  return Status::success();
}

template <typename T>
Status forward_typed(void* y, const void* x, int64_t rows, int64_t cols, cudaStream_t s) {
  bool clusters_ok = false;
  BLUBLAS_RETURN_IF_ERROR(clusters_available(&clusters_ok));
  constexpr int W = kPack16<T>;
  if (cols % W == 0 && aligned16(x) && aligned16(y)) {
    return forward_w<T, W>(static_cast<T*>(y), static_cast<const T*>(x), rows, cols, clusters_ok,
                           s);
  }
  return forward_w<T, 1>(static_cast<T*>(y), static_cast<const T*>(x), rows, cols, clusters_ok, s);
}

template <typename T>
Status backward_typed(void* dx, const void* dy, const void* y, int64_t rows, int64_t cols,
                      cudaStream_t s) {
  bool clusters_ok = false;
  BLUBLAS_RETURN_IF_ERROR(clusters_available(&clusters_ok));
  constexpr int W = kPack16<T>;
  auto* d = static_cast<T*>(dx);
  auto* g = static_cast<const T*>(dy);
  auto* p = static_cast<const T*>(y);
  if (cols % W == 0 && aligned16(dx) && aligned16(dy) && aligned16(y)) {
    return backward_w<T, W>(d, g, p, rows, cols, clusters_ok, s);
  }
  return backward_w<T, 1>(d, g, p, rows, cols, clusters_ok, s);
}

}  // namespace

Status softmax_forward(void* y, const void* x, int64_t rows, int64_t cols, Dtype dtype,
                       cudaStream_t stream) {
  BLUBLAS_RETURN_IF_ERROR(check_args("softmax_forward", rows, cols, dtype));
  if (rows == 0) return Status::success();
  BLUBLAS_CHECK_ARG(y && x, "softmax_forward: y and x must not be null");
  if (dtype == Dtype::kF32) return forward_typed<float>(y, x, rows, cols, stream);
  return forward_typed<__nv_bfloat16>(y, x, rows, cols, stream);
}

Status softmax_backward(void* dx, const void* dy, const void* y, int64_t rows, int64_t cols,
                        Dtype dtype, cudaStream_t stream) {
  BLUBLAS_RETURN_IF_ERROR(check_args("softmax_backward", rows, cols, dtype));
  if (rows == 0) return Status::success();
  BLUBLAS_CHECK_ARG(dx && dy && y, "softmax_backward: dx, dy and y must not be null");
  if (dtype == Dtype::kF32) return backward_typed<float>(dx, dy, y, rows, cols, stream);
  return backward_typed<__nv_bfloat16>(dx, dy, y, rows, cols, stream);
}

}  // namespace blublas
