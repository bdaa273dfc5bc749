// optim_kernels.cpp: the CPU backend's multi-tensor optimizer kernels (backend_ops.def):
// global_norm and scale_tensors_ (adamw_step is in nn_kernels.cpp). Deterministic whatever the
// thread count: the norm sums fixed 64K-element chunks in f64 and adds the chunk sums in order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/cpu_loops.h"
#include "cpu/cpu_ops.h"
#include "cpu/dtype_switch.h"

namespace blu::cpu_ops {
namespace {

constexpr int64_t kNormChunkElements = int64_t{1} << 16;

template <typename T>
void sum_squares_chunks(const Tensor& t, std::vector<double>& partials) {
  const T* x = static_cast<const T*>(t.data_ptr());
  const int64_t n = t.numel();
  const int64_t chunks = (n + kNormChunkElements - 1) / kNormChunkElements;
  const std::size_t base = partials.size();
  partials.resize(base + static_cast<std::size_t>(chunks), 0.0);
  double* out = partials.data() + base;
  cpu::parallel_for(chunks, kNormChunkElements, [&](int64_t c) {
    const int64_t end = std::min(n, (c + 1) * kNormChunkElements);
    double s = 0;
    for (int64_t i = c * kNormChunkElements; i < end; ++i) {
      const double v = static_cast<double>(static_cast<cpu::compute_t<T>>(x[i]));
      s += v * v;
    }
    out[c] = s;
  });
}

template <typename T>
void scale_typed(const Tensor& t, float factor) {
  using C = cpu::compute_t<T>;
  T* x = static_cast<T*>(t.data_ptr());
  const int64_t n = t.numel();
  const C f = static_cast<C>(factor);
  cpu::parallel_for((n + 4095) / 4096, 4096, [&](int64_t blk) {
    const int64_t end = std::min(n, (blk + 1) * 4096);
    for (int64_t i = blk * 4096; i < end; ++i) x[i] = T(static_cast<C>(x[i]) * f);
  });
}

}  // namespace

bool global_norm(const Tensor& norm, const Tensor& clip_coef, const std::vector<Tensor>& tensors,
                 double max_norm) {
  std::vector<double> partials;
  for (const Tensor& t : tensors) {
    BLU_SWITCH_FLOAT_DTYPES(t.dtype(), T, "global_norm", sum_squares_chunks<T>(t, partials));
  }
  double total = 0;
  for (double s : partials) total += s;
  const double n = std::sqrt(total);
  *static_cast<float*>(norm.data_ptr()) = static_cast<float>(n);
  if (clip_coef.defined()) {
    *static_cast<float*>(clip_coef.data_ptr()) =
        max_norm > 0 ? static_cast<float>(std::min(1.0, max_norm / (n + 1e-6))) : 1.0f;
  }
  return true;
}

void copy_tensors_(const std::vector<Tensor>& dsts, const std::vector<Tensor>& srcs) {
  for (std::size_t i = 0; i < dsts.size(); ++i) copy_(dsts[i], srcs[i]);
}

void scale_tensors_(const std::vector<Tensor>& tensors, const Tensor& factor) {
  const float f = *static_cast<const float*>(factor.data_ptr());
  for (const Tensor& t : tensors) {
    BLU_SWITCH_FLOAT_DTYPES(t.dtype(), T, "scale_tensors_", scale_typed<T>(t, f));
  }
}

}  // namespace blu::cpu_ops
