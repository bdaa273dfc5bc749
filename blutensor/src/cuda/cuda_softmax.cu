// CUDA softmax / log-softmax over the last dim (forward and backward) and the causal mask fill.
// Generic kernels: one block per row, three fixed-order passes (max, sum of exp, write), the
// block reductions of block_reduce.cuh (deterministic). Plain softmax on contiguous f32/bf16 uses
// blublas::softmax_forward / softmax_backward (Note [blublas fast paths] in cuda_elementwise.cu).
// As on the CPU, a row that is entirely -inf uses max 0 (stays finite in log-softmax).
#include <algorithm>

#include "blublas/softmax.h"
#include "cuda/block_reduce.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/elementwise_engine.cuh"

namespace blu::cuda_ops {
namespace {

using namespace detail;

template <typename T>
__global__ void softmax_fwd_kernel(T* y, const T* x, int64_t cols, bool log) {
  using C = compute_t<T>;
  __shared__ C scratch[kThreads / 32];
  const T* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  T* yr = y + static_cast<int64_t>(blockIdx.x) * cols;
  C m = -INFINITY;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    C v = load_c(xr[i]);
    m = v > m ? v : m;
  }
  m = block_max(m, scratch);
  if (m == C(-INFINITY)) m = C(0);
  C s = 0;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) s += exp(load_c(xr[i]) - m);
  s = block_sum(s, scratch);
  if (log) {
    const C lse = m + ::log(s);
    for (int64_t i = threadIdx.x; i < cols; i += kThreads) yr[i] = store_c<T>(load_c(xr[i]) - lse);
  } else {
    const C inv = C(1) / s;
    for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
      yr[i] = store_c<T>(exp(load_c(xr[i]) - m) * inv);
    }
  }
}

template <typename T>
__global__ void softmax_bwd_kernel(T* dx, const T* dy, const T* y, int64_t cols, bool log) {
  using C = compute_t<T>;
  __shared__ C scratch[kThreads / 32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * cols;
  const T* g = dy + base;
  const T* yr = y + base;
  T* o = dx + base;
  C dot = 0;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    dot += log ? load_c(g[i]) : load_c(g[i]) * load_c(yr[i]);
  }
  dot = block_sum(dot, scratch);
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    const C gi = load_c(g[i]), yi = load_c(yr[i]);
    o[i] = store_c<T>(log ? gi - exp(yi) * dot : yi * (gi - dot));
  }
}

bool blublas_float(DType t, blublas::Dtype* out) {
  if (t == DType::F32) { *out = blublas::Dtype::kF32; return true; }
  if (t == DType::BF16) { *out = blublas::Dtype::kBF16; return true; }
  return false;
}

int64_t rows_of(const Tensor& t, int64_t cols) { return t.numel() / std::max<int64_t>(cols, 1); }

template <typename T>
struct CausalFillFn {  // over a [mats * rows, cols] contiguous tensor, by linear index
  int64_t rows, cols;
  T value;
  const T* x;
  T* out;
  __device__ __forceinline__ void operator()(int64_t i) const {
    const int64_t c = i % cols;
    const int64_t r = (i / cols) % rows;
    out[i] = c > r + cols - rows ? value : x[i];
  }
};

template <typename T>
void softmax_fwd_typed(const Tensor& y, const Tensor& x, bool log) {
  const int64_t cols = x.size(-1), rows = rows_of(x, cols);
  BLU_CHECK(rows < (int64_t{1} << 31), "softmax (CUDA): too many rows in ", x.describe());
  softmax_fwd_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream_of(y)>>>(
      static_cast<T*>(y.data_ptr()), static_cast<const T*>(x.data_ptr()), cols, log);
  BLU_KERNEL_LAUNCH_CHECK("softmax_fwd_kernel");
}

template <typename T>
void softmax_bwd_typed(const Tensor& dx, const Tensor& dy, const Tensor& y, bool log) {
  const int64_t cols = y.size(-1), rows = rows_of(y, cols);
  BLU_CHECK(rows < (int64_t{1} << 31), "softmax_backward (CUDA): too many rows in ", y.describe());
  softmax_bwd_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream_of(dx)>>>(
      static_cast<T*>(dx.data_ptr()), static_cast<const T*>(dy.data_ptr()),
      static_cast<const T*>(y.data_ptr()), cols, log);
  BLU_KERNEL_LAUNCH_CHECK("softmax_bwd_kernel");
}

template <typename T>
struct FromDouble {
  double v;
  __device__ __forceinline__ T get() const { return convert<T, double>(v); }
};

template <typename T>
__global__ void causal_fill_value_kernel(CausalFillFn<T> f, FromDouble<T> v, int64_t n) {
  CausalFillFn<T> g = f;
  g.value = v.get();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    g(i);
  }
}

template <typename T>
void causal_fill_typed(const Tensor& out, const Tensor& x, double value) {
  const int64_t n = x.numel();
  if (n == 0) return;
  CausalFillFn<T> f{x.size(-2), x.size(-1), T(), static_cast<const T*>(x.data_ptr()),
                    static_cast<T*>(out.data_ptr())};
  causal_fill_value_kernel<T><<<grid_for(n), kThreads, 0, stream_of(out)>>>(
      f, FromDouble<T>{value}, n);
  BLU_KERNEL_LAUNCH_CHECK("causal_fill_kernel");
}

}  // namespace

void softmax_forward(const Tensor& y, const Tensor& x, bool log) {
  if (x.numel() == 0) return;
  blublas::Dtype bt;
  if (!log && blublas_float(x.dtype(), &bt)) {
    const int64_t cols = x.size(-1);
    if (blublas_ok(blublas::softmax_forward(y.data_ptr(), x.data_ptr(), rows_of(x, cols), cols,
                                            bt, stream_of(y)),
                   "softmax")) {
      return;
    }
  }
  BLU_CUDA_SWITCH_FLOAT(x.dtype(), T, "softmax", softmax_fwd_typed<T>(y, x, log));
}

void softmax_backward(const Tensor& dx, const Tensor& dy, const Tensor& y, bool log) {
  if (y.numel() == 0) return;
  blublas::Dtype bt;
  if (!log && blublas_float(y.dtype(), &bt)) {
    const int64_t cols = y.size(-1);
    if (blublas_ok(blublas::softmax_backward(dx.data_ptr(), dy.data_ptr(), y.data_ptr(),
                                             rows_of(y, cols), cols, bt, stream_of(dx)),
                   "softmax_backward")) {
      return;
    }
  }
  BLU_CUDA_SWITCH_FLOAT(y.dtype(), T, "softmax_backward", softmax_bwd_typed<T>(dx, dy, y, log));
}

void causal_fill(const Tensor& out, const Tensor& x, double value) {
  BLU_CUDA_SWITCH_FLOAT(x.dtype(), T, "causal_fill", causal_fill_typed<T>(out, x, value));
}

}  // namespace blu::cuda_ops
