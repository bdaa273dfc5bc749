// CUDA LayerNorm over the last dim, forward and backward.
// Generic kernels (every floating dtype, weight/bias optional): forward one block per row with a
// two-pass mean/variance (block_reduce.cuh); backward dx one warp per row with the row in
// registers where it fits (Note [LayerNorm backward rows in registers]), else one block per row,
// and dweight/dbias as column sums over rows computed per column in row order, the rows cut into
// chunks whose partial sums are added in a fixed order (Note [Deterministic reductions] in
// cuda_reduce.cu).
// Contiguous f32/bf16 with a weight use blublas::layernorm_forward; the backward uses
// blublas::layernorm_backward for f32 when dx and dweight are wanted (its dweight/dbias are f32).
#include <algorithm>
#include <cstdint>

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
                                 const typename stats_of<T>::type* rstd, int64_t cols, const T* res) {
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
    const T v = store_c<T>(rs * (g - sum_g * inv_n - xh * sum_gx * inv_n));
    o[i] = res ? store_c<T>(load_c(v) + load_c(res[row * cols + i])) : v;  // Note [LayerNorm backward with the residual gradient]
  }
}

// Note [LayerNorm backward rows in registers]
// ln_bwd_dx_kernel (a 256-thread block per row, two passes over dy and x with scalar loads) ran a
// bf16 [16384, 768] row set in 62 us on the H100 (1.2 TB/s; 25 launches, 1.54 ms of a d12 bf16 B16
// compiled step, session 19). Here a warp takes a row: each lane loads kVecs 16-byte vectors of dy
// and x once (768 bf16 columns = 3 vectors a lane), keeps them in registers for the second pass,
// and the two row sums are warp butterflies (warp_sum: a fixed tree, so the same bits every run).
// For rows of at most 32 * kMaxVecs vectors with every pointer 16-byte aligned; the block-per-row
// kernel keeps everything else. Predicted: ~2.5 TB/s, ~30 us a launch (-0.8 ms a step).
constexpr int kMaxVecs = 4;

template <typename T, int kVecs>
__global__ void ln_bwd_dx_warp_kernel(T* dx, const T* dy, const T* x, const T* w,
                                      const typename stats_of<T>::type* mean,
                                      const typename stats_of<T>::type* rstd, int64_t rows, int cols,
                                      const T* res) {
  using C = compute_t<T>;
  constexpr int kV = 16 / sizeof(T);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32, nvec = cols / kV;
  const uint4* gv = reinterpret_cast<const uint4*>(dy + row * cols);
  const uint4* xv = reinterpret_cast<const uint4*>(x + row * cols);
  const uint4* wv = reinterpret_cast<const uint4*>(w);
  uint4 graw[kVecs], xraw[kVecs];
  const C mu = static_cast<C>(mean[row]), rs = static_cast<C>(rstd[row]);
  C sum_g = 0, sum_gx = 0;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int v = lane + 32 * j;
    if (v >= nvec) break;
    graw[j] = gv[v];
    xraw[j] = xv[v];
    uint4 wraw = w ? wv[v] : uint4{};
    const T* ge = reinterpret_cast<const T*>(&graw[j]);
    const T* xe = reinterpret_cast<const T*>(&xraw[j]);
    const T* we = reinterpret_cast<const T*>(&wraw);
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      const C g = load_c(ge[e]) * (w ? load_c(we[e]) : C(1));
      sum_g += g;
      sum_gx += g * ((load_c(xe[e]) - mu) * rs);
    }
  }
  sum_g = warp_sum(sum_g);
  sum_gx = warp_sum(sum_gx);
  const C inv_n = C(1) / static_cast<C>(cols);
  uint4* ov = reinterpret_cast<uint4*>(dx + row * cols);
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int v = lane + 32 * j;
    if (v >= nvec) break;
    uint4 wraw = w ? wv[v] : uint4{}, out;
    // Note [LayerNorm backward with the residual gradient]: the residual's vector, when given.
    const uint4 rraw = res ? reinterpret_cast<const uint4*>(res + row * cols)[v] : uint4{};
    const T* ge = reinterpret_cast<const T*>(&graw[j]);
    const T* xe = reinterpret_cast<const T*>(&xraw[j]);
    const T* we = reinterpret_cast<const T*>(&wraw);
    const T* re = reinterpret_cast<const T*>(&rraw);
    T* oe = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      const C g = load_c(ge[e]) * (w ? load_c(we[e]) : C(1));
      const C xh = (load_c(xe[e]) - mu) * rs;
      oe[e] = store_c<T>(rs * (g - sum_g * inv_n - xh * sum_gx * inv_n));
      if (res) oe[e] = store_c<T>(load_c(oe[e]) + load_c(re[e]));
    }
    ov[v] = out;
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

// The chunk partials summed per column. A block takes 32 columns; its 8 warps each add every 8th
// chunk (warp p: chunks p, p + 8, ...), then warp 0 adds the 8 warp sums in order: a fixed order,
// so the same bits every run. (Was one thread per column adding all chunks: 3 blocks for 768
// columns x 352 chunks, 37 us a launch, 0.93 ms of a d12 bf16 B16 step on the H100, session 19.)
template <typename T>
__global__ void ln_bwd_params_finish(T* dw, T* db, const compute_t<T>* pdw,
                                     const compute_t<T>* pdb, int64_t cols, int64_t chunks) {
  using C = compute_t<T>;
  constexpr int kParts = kThreads / 32;
  __shared__ C sw[kParts][33], sb[kParts][33];
  const int lane = threadIdx.x % 32, part = threadIdx.x / 32;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  C w = 0, b = 0;
  if (c < cols) {
    for (int64_t k = part; k < chunks; k += kParts) {
      w += pdw[k * cols + c];
      b += pdb[k * cols + c];
    }
  }
  sw[part][lane] = w;
  sb[part][lane] = b;
  __syncthreads();
  if (part != 0 || c >= cols) return;
  w = 0, b = 0;
  for (int p = 0; p < kParts; ++p) {
    w += sw[p][lane];
    b += sb[p][lane];
  }
  if (dw) dw[c] = store_c<T>(w);
  if (db) db[c] = store_c<T>(b);
}

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Note [LayerNorm backward rows in registers]: launches the warp-per-row dx kernel when the row
// fits and the pointers are 16-byte aligned; false (nothing launched) otherwise.
template <typename T>
bool ln_bwd_dx_warp(const Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& w,
                    const typename stats_of<T>::type* mp, const typename stats_of<T>::type* rp,
                    int64_t rows, int64_t cols, cudaStream_t stream, const T* res = nullptr) {
  if constexpr (sizeof(T) > 4) {
    return false;
  } else {
    constexpr int kV = 16 / sizeof(T);
    const T* wp = ptr_or_null<T>(w);
    if (cols % kV != 0 || cols > 32 * kMaxVecs * kV || !aligned16(dx.data_ptr()) || !aligned16(dy.data_ptr()) ||
        !aligned16(x.data_ptr()) || (wp != nullptr && !aligned16(wp)) || (res != nullptr && !aligned16(res))) {
      return false;
    }
    const int nvec = static_cast<int>(cols / kV), vecs = (nvec + 31) / 32;
    const unsigned blocks = static_cast<unsigned>((rows + kThreads / 32 - 1) / (kThreads / 32));
    auto launch = [&](auto kernel) {
      kernel<<<blocks, kThreads, 0, stream>>>(static_cast<T*>(dx.data_ptr()), static_cast<const T*>(dy.data_ptr()),
                                             static_cast<const T*>(x.data_ptr()), wp, mp, rp, rows,
                                             static_cast<int>(cols), res);
    };
    if (vecs <= 1) launch(ln_bwd_dx_warp_kernel<T, 1>);
    else if (vecs <= 2) launch(ln_bwd_dx_warp_kernel<T, 2>);
    else launch(ln_bwd_dx_warp_kernel<T, kMaxVecs>);
    BLU_KERNEL_LAUNCH_CHECK("ln_bwd_dx_warp_kernel");
    return true;
  }
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
                  const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                  const Tensor& residual = Tensor()) {
  using S = typename stats_of<T>::type;
  using C = compute_t<T>;
  const int64_t cols = x.size(-1), rows = x.numel() / std::max<int64_t>(cols, 1);
  cudaStream_t stream = stream_of(x);
  const S* mp = static_cast<const S*>(mean.data_ptr());
  const S* rp = static_cast<const S*>(rstd.data_ptr());
  const T* res = ptr_or_null<T>(residual);
  if (dx.defined() && rows > 0 && !ln_bwd_dx_warp<T>(dx, dy, x, w, mp, rp, rows, cols, stream, res)) {
    ln_bwd_dx_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        static_cast<T*>(dx.data_ptr()), static_cast<const T*>(dy.data_ptr()),
        static_cast<const T*>(x.data_ptr()), ptr_or_null<T>(w), mp, rp, cols, res);
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
  ln_bwd_params_finish<T><<<static_cast<unsigned>((cols + 31) / 32), kThreads, 0, stream>>>(
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

// Note [LayerNorm backward with the residual gradient] (src/capture/capture_ln_residual.cpp).
bool layer_norm_backward_add(const Tensor& out, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                             const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                             const Tensor& residual) {
  if (x.dtype() != DType::BF16 || out.dtype() != DType::BF16 || residual.dtype() != DType::BF16 ||
      !out.is_contiguous() || !residual.is_contiguous() || !dy.is_contiguous() || !x.is_contiguous() ||
      out.numel() != x.numel() || residual.numel() != x.numel() || x.numel() == 0)
    return false;
  ln_bwd_typed<__nv_bfloat16>(out, dweight, dbias, dy, x, weight, mean, rstd, residual);
  return true;
}

bool layer_norm_backward_one_pass(const Tensor& out, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                                  const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                  const Tensor& residual) {
  blublas::Dtype bt, pt;
  if (!blublas_float(x.dtype(), &bt) || x.numel() == 0 || !x.is_contiguous() || !weight.defined() ||
      !dweight.defined() || !blublas_float(dweight.dtype(), &pt) || (pt != blublas::Dtype::kF32 && pt != bt))
    return false;
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  const auto same = [&](const Tensor& t) {
    return t.defined() && t.dtype() == x.dtype() && t.is_contiguous() && t.numel() == x.numel();
  };
  const auto param = [&](const Tensor& t) {
    return t.dtype() == dweight.dtype() && t.is_contiguous() && t.numel() == cols;
  };
  const auto stat = [&](const Tensor& t) { return t.dtype() == DType::F32 && t.is_contiguous() && t.numel() == rows; };
  if (!same(out) || !same(dy) || (residual.defined() && !same(residual)) || weight.dtype() != x.dtype() ||
      !weight.is_contiguous() || weight.numel() != cols || !param(dweight) || (dbias.defined() && !param(dbias)) ||
      !stat(mean) || !stat(rstd))
    return false;
  std::size_t ws_bytes = 0;
  if (!blublas_ok(blublas::layernorm_backward_workspace_size(rows, cols, &ws_bytes), "layer_norm_backward"))
    return false;
  cudaStream_t stream = stream_of(x);
  DeviceBuffer ws(ws_bytes, x.device().index, stream);
  const blublas::Status st = blublas::layernorm_backward_residual(
      out.data_ptr(), residual.defined() ? residual.data_ptr() : nullptr, dweight.data_ptr(),
      dbias.defined() ? dbias.data_ptr() : nullptr, pt, dy.data_ptr(), x.data_ptr(),
      static_cast<const float*>(mean.data_ptr()), static_cast<const float*>(rstd.data_ptr()), weight.data_ptr(),
      rows, cols, bt, false, ws.get(), ws_bytes, stream);
  return blublas_ok(st, "layer_norm_backward");
}

}  // namespace blu::cuda_ops
