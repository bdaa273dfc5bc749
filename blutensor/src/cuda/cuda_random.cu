// CUDA random fills (uniform, normal) and dropout from the shared Philox mapping of
// blutensor/philox.h, so that a CUDA tensor gets the very numbers the CPU backend draws for the
// same (seed, offset): element i (row-major) reads counter offset + i / 4 (uniform, dropout) or
// offset + i / 2 (normal) exactly as in Note [Random streams]. One thread per element calls the
// same host/device functions as the CPU (no re-derivation that could drift); the affine map
// a + b * u is done in double and rounded like the CPU's.
#include "blutensor/philox.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernel_utils.cuh"

namespace blu::cuda_ops {
namespace {

using namespace detail;

template <typename T, bool kNormal>
__global__ void random_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, double a,
                              double b) {
  using C = compute_t<T>;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double v;
    if constexpr (kNormal) {
      const float z = philox::normal_at(seed, offset, static_cast<uint64_t>(i));
      v = a + b * static_cast<double>(z);
    } else {
      const float u = philox::uniform_at(seed, offset, static_cast<uint64_t>(i));
      v = a + (b - a) * static_cast<double>(u);
    }
    out[i] = store_c<T>(static_cast<C>(v));
  }
}

template <typename T>
__global__ void dropout_kernel(T* out, const T* x, int64_t n, float p, compute_t<T> scale,
                               uint64_t seed, uint64_t offset) {
  using C = compute_t<T>;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bool keep = philox::dropout_keep(seed, offset, static_cast<uint64_t>(i), p);
    out[i] = store_c<T>(keep ? load_c(x[i]) * scale : C(0));
  }
}

template <typename T, bool kNormal>
void random_typed(const Tensor& out, uint64_t seed, uint64_t offset, double a, double b) {
  const int64_t n = out.numel();
  if (n == 0) return;
  random_kernel<T, kNormal><<<grid_for(n), kThreads, 0, stream_of(out)>>>(
      static_cast<T*>(out.data_ptr()), n, seed, offset, a, b);
  BLU_KERNEL_LAUNCH_CHECK(kNormal ? "random_normal_kernel" : "random_uniform_kernel");
}

template <typename T>
void dropout_typed(const Tensor& out, const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  const int64_t n = x.numel();
  if (n == 0) return;
  dropout_kernel<T><<<grid_for(n), kThreads, 0, stream_of(out)>>>(
      static_cast<T*>(out.data_ptr()), static_cast<const T*>(x.data_ptr()), n,
      static_cast<float>(p), static_cast<compute_t<T>>(1.0 / (1.0 - p)), seed, offset);
  BLU_KERNEL_LAUNCH_CHECK("dropout_kernel");
}

}  // namespace

void dropout(const Tensor& out, const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  BLU_CUDA_SWITCH_FLOAT(x.dtype(), T, "dropout", dropout_typed<T>(out, x, p, seed, offset));
}

void random_uniform(const Tensor& out, uint64_t seed, uint64_t offset, double low, double high) {
  BLU_CUDA_SWITCH_FLOAT(out.dtype(), T, "uniform_",
                        (random_typed<T, false>(out, seed, offset, low, high)));
}

void random_normal(const Tensor& out, uint64_t seed, uint64_t offset, double mean,
                   double stddev) {
  BLU_CUDA_SWITCH_FLOAT(out.dtype(), T, "normal_",
                        (random_typed<T, true>(out, seed, offset, mean, stddev)));
}

}  // namespace blu::cuda_ops
