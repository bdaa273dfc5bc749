// CUDA LayerNorm over the last dim, forward and backward.
// Generic kernels (every floating dtype, weight/bias optional): forward one block per row with a
// two-pass mean/variance (block_reduce.cuh); backward dx one block per row, and dweight/dbias as
// column sums over rows computed per column in row order, the rows cut into chunks whose partial
// sums are added in chunk order (Note [Deterministic reductions] in cuda_reduce.cu).
// Contiguous f32/bf16 with a weight use blublas::layernorm_forward; the backward uses
// blublas::layernorm_backward for f32 when dx and dweight are wanted (its dweight/dbias are f32).
#include <algorithm>

#include "blublas/layernorm.h"
#include "cuda/block_reduce.cuh"
#include "cuda/cuda_ops.h"

namespace blu::cuda_ops {
namespace {

using namespace detail;

template <typename T> struct stats_of { using type = float; };
template <> struct stats_of<double> { using type = double; };

template <typename T>
__global__ void ln_fwd_kernel(T* y, typename stats_of<T>::type* mean,
                              typename stats_of<T>::type* rstd, const T* x, const T* w,
                              const T* b, int64_t cols, double eps) {
  using C = compute_t<T>;
  using S = typename stats_of<T>::type;
  __shared__ C scratch[kThreads / 32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * cols;
  T* yr = y + row * cols;
  C s = 0;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) s += load_c(xr[i]);
  const C mu = block_sum(s, scratch) / static_cast<C>(cols);
  C v = 0;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    const C d = load_c(xr[i]) - mu;
    v += d * d;
  }
  v = block_sum(v, scratch);
  const C rs = C(1) / sqrt(v / static_cast<C>(cols) + static_cast<C>(eps));
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    C n = (load_c(xr[i]) - mu) * rs;
    if (w) n *= load_c(w[i]);
    if (b) n += load_c(b[i]);
    yr[i] = store_c<T>(n);
  }
  if (threadIdx.x == 0) {
    mean[row] = static_cast<S>(mu);
    rstd[row] = static_cast<S>(rs);
  }
}

template <typename T>
__global__ void ln_bwd_dx_kernel(T* dx, const T* dy, const T* x, const T* w,
                                 const typename stats_of<T>::type* mean,
                                 const typename stats_of<T>::type* rstd, int64_t cols) {
  using C = compute_t<T>;
  __shared__ C scratch[kThreads / 32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * cols;
  const T* gr = dy + row * cols;
  T* o = dx + row * cols;
  const C mu = static_cast<C>(mean[row]), rs = static_cast<C>(rstd[row]);
  C sum_g = 0, sum_gx = 0;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    const C g = load_c(gr[i]) * (w ? load_c(w[i]) : C(1));
    const C xh = (load_c(xr[i]) - mu) * rs;
    sum_g += g;
    sum_gx += g * xh;
  }
  sum_g = block_sum(sum_g, scratch);
  sum_gx = block_sum(sum_gx, scratch);
  const C inv_n = C(1) / static_cast<C>(cols);
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    const C g = load_c(gr[i]) * (w ? load_c(w[i]) : C(1));
    const C xh = (load_c(xr[i]) - mu) * rs;
    o[i] = store_c<T>(rs * (g - sum_g * inv_n - xh * sum_gx * inv_n));
  }
}

// partial[chunk][c] = sum over the chunk's rows of dy * xhat (dw) and dy (db).
template <typename T>
__global__ void ln_bwd_params_kernel(compute_t<T>* pdw, compute_t<T>* pdb, const T* dy,
                                     const T* x, const typename stats_of<T>::type* mean,
                                     const typename stats_of<T>::type* rstd, int64_t rows,
                                     int64_t cols, int64_t chunk_rows) {
  using C = compute_t<T>;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t r1 = min(rows, r0 + chunk_rows);
  C sw = 0, sb = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const C g = load_c(dy[r * cols + c]);
    sw += g * (load_c(x[r * cols + c]) - static_cast<C>(mean[r])) * static_cast<C>(rstd[r]);
    sb += g;
  }
  pdw[blockIdx.y * cols + c] = sw;
  pdb[blockIdx.y * cols + c] = sb;
}

template <typename T>
__global__ void ln_bwd_params_finish(T* dw, T* db, const compute_t<T>* pdw,
                                     const compute_t<T>* pdb, int64_t cols, int64_t chunks) {
  using C = compute_t<T>;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= cols) return;
  C sw = 0, sb = 0;
  for (int64_t k = 0; k < chunks; ++k) {
    sw += pdw[k * cols + c];
    sb += pdb[k * cols + c];
  }
  if (dw) dw[c] = store_c<T>(sw);
  if (db) db[c] = store_c<T>(sb);
}

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

template <typename T>
void ln_fwd_typed(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                  const Tensor& w, const Tensor& b, double eps) {
  using S = typename stats_of<T>::type;
  const int64_t cols = x.size(-1), rows = x.numel() / std::max<int64_t>(cols, 1);
  if (rows == 0) return;
  ln_fwd_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream_of(y)>>>(
      static_cast<T*>(y.data_ptr()), static_cast<S*>(mean.data_ptr()),
      static_cast<S*>(rstd.data_ptr()), static_cast<const T*>(x.data_ptr()), ptr_or_null<T>(w),
      ptr_or_null<T>(b), cols, eps);
  BLU_KERNEL_LAUNCH_CHECK("ln_fwd_kernel");
}

template <typename T>
void ln_bwd_typed(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy,
                  const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  using S = typename stats_of<T>::type;
  using C = compute_t<T>;
  const int64_t cols = x.size(-1), rows = x.numel() / std::max<int64_t>(cols, 1);
  cudaStream_t stream = stream_of(x);
  const S* mp = static_cast<const S*>(mean.data_ptr());
  const S* rp = static_cast<const S*>(rstd.data_ptr());
  if (dx.defined() && rows > 0) {
    ln_bwd_dx_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        static_cast<T*>(dx.data_ptr()), static_cast<const T*>(dy.data_ptr()),
        static_cast<const T*>(x.data_ptr()), ptr_or_null<T>(w), mp, rp, cols);
    BLU_KERNEL_LAUNCH_CHECK("ln_bwd_dx_kernel");
  }
  if (!dw.defined() && !db.defined()) return;
  const int64_t col_blocks = (cols + kThreads - 1) / kThreads;
  const int64_t target_blocks = static_cast<int64_t>(sm_count()) * 8;
  int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(target_blocks / col_blocks, rows / 32));
  chunks = std::min<int64_t>(chunks, 65535);
  const int64_t chunk_rows = rows == 0 ? 1 : (rows + chunks - 1) / chunks;
  chunks = rows == 0 ? 1 : (rows + chunk_rows - 1) / chunk_rows;
  DeviceBuffer partial(static_cast<std::size_t>(2 * chunks * cols) * sizeof(C),
                       x.device().index, stream);
  C* pdw = partial.as<C>();
  C* pdb = pdw + chunks * cols;
  ln_bwd_params_kernel<T><<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks)),
                            kThreads, 0, stream>>>(pdw, pdb, static_cast<const T*>(dy.data_ptr()),
                                                   static_cast<const T*>(x.data_ptr()), mp, rp,
                                                   rows, cols, chunk_rows);
  BLU_KERNEL_LAUNCH_CHECK("ln_bwd_params_kernel");
  ln_bwd_params_finish<T><<<static_cast<unsigned>(col_blocks), kThreads, 0, stream>>>(
      dw.defined() ? static_cast<T*>(dw.data_ptr()) : nullptr,
      db.defined() ? static_cast<T*>(db.data_ptr()) : nullptr, pdw, pdb, cols, chunks);
  BLU_KERNEL_LAUNCH_CHECK("ln_bwd_params_finish");
}

bool blublas_float(DType t, blublas::Dtype* out) {
  if (t == DType::F32) { *out = blublas::Dtype::kF32; return true; }
  if (t == DType::BF16) { *out = blublas::Dtype::kBF16; return true; }
  return false;
}

}  // namespace

void layer_norm_forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                        const Tensor& weight, const Tensor& bias, double eps) {
  if (x.numel() == 0) return;
  blublas::Dtype bt;
  if (blublas_float(x.dtype(), &bt) && weight.defined()) {
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    const blublas::Status st = blublas::layernorm_forward(
        y.data_ptr(), static_cast<float*>(mean.data_ptr()), static_cast<float*>(rstd.data_ptr()),
        nullptr, x.data_ptr(), nullptr, weight.data_ptr(),
        bias.defined() ? bias.data_ptr() : nullptr, rows, cols, static_cast<float>(eps), bt,
        stream_of(y));
    if (blublas_ok(st, "layer_norm")) return;
  }
  BLU_CUDA_SWITCH_FLOAT(x.dtype(), T, "layer_norm",
                        ln_fwd_typed<T>(y, mean, rstd, x, weight, bias, eps));
}

void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                         const Tensor& dy, const Tensor& x, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd) {
  if (x.numel() == 0) {
    if (dweight.defined()) fill_(dweight, 0.0);
    if (dbias.defined()) fill_(dbias, 0.0);
    return;
  }
  if (x.dtype() == DType::F32 && weight.defined() && dx.defined() && dweight.defined()) {
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    std::size_t ws_bytes = 0;
    if (blublas_ok(blublas::layernorm_backward_workspace_size(rows, cols, &ws_bytes),
                   "layer_norm_backward")) {
      cudaStream_t stream = stream_of(x);
      DeviceBuffer ws(ws_bytes, x.device().index, stream);
      const blublas::Status st = blublas::layernorm_backward(
          dx.data_ptr(), static_cast<float*>(dweight.data_ptr()),
          dbias.defined() ? static_cast<float*>(dbias.data_ptr()) : nullptr, dy.data_ptr(),
          x.data_ptr(), static_cast<const float*>(mean.data_ptr()),
          static_cast<const float*>(rstd.data_ptr()), weight.data_ptr(), rows, cols,
          blublas::Dtype::kF32, false, false, ws.get(), ws_bytes, stream);
      if (blublas_ok(st, "layer_norm_backward")) return;
    }
  }
  BLU_CUDA_SWITCH_FLOAT(x.dtype(), T, "layer_norm_backward",
                        ln_bwd_typed<T>(dx, dweight, dbias, dy, x, weight, mean, rstd));
}

}  // namespace blu::cuda_ops
