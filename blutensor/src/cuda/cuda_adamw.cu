// CUDA AdamW over a list of parameters (cuda_ops::adamw_step, the multi-tensor entry point of
// blutensor's optimizer). f32 lists go to blublas::adamw_update, one launch per 256 tensors
// (GPT-2 124M's 148 tensors are a single launch); f64 lists (and anything blublas refuses) run
// a per-tensor generic kernel with the CPU backend's formula in the compute type:
//   p = p (1 - lr wd) - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
#include <cmath>
#include <algorithm>

#include "blublas/adamw.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernel_utils.cuh"

namespace blu::cuda_ops {
namespace {

using namespace detail;

template <typename T>
struct AdamWScalars {
  compute_t<T> b1, b2, eps, decay, step_size, inv_sqrt_bc2;
};

template <typename T>
__global__ void adamw_kernel(T* p, const T* g, T* m, T* v, int64_t n, AdamWScalars<T> s,
                             const float* __restrict__ grad_scale) {
  using C = compute_t<T>;
  // grad_scale: the gradient as scale_tensors_ would have left it (the product rounded to T).
  const C gs = grad_scale != nullptr ? static_cast<C>(*grad_scale) : C(1);
  if (!isfinite(gs)) return;  // a non-finite grad_scale skips the update (optim.h)
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const C gi = grad_scale != nullptr ? load_c(store_c<T>(load_c(g[i]) * gs)) : load_c(g[i]);
    const C mi = s.b1 * load_c(m[i]) + (C(1) - s.b1) * gi;
    const C vi = s.b2 * load_c(v[i]) + (C(1) - s.b2) * gi * gi;
    C pi = load_c(p[i]) * s.decay;
    pi -= s.step_size * mi / (sqrt(vi) * s.inv_sqrt_bc2 + s.eps);
    m[i] = store_c<T>(mi);
    v[i] = store_c<T>(vi);
    p[i] = store_c<T>(pi);
  }
}

template <typename T>
void adamw_generic(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                   const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                   const float* grad_scale, const AdamWParams& hp) {
  using C = compute_t<T>;
  AdamWScalars<T> s;
  s.b1 = static_cast<C>(hp.beta1);
  s.b2 = static_cast<C>(hp.beta2);
  s.eps = static_cast<C>(hp.eps);
  s.decay = static_cast<C>(1.0 - hp.lr * hp.weight_decay);
  const C bc1 = static_cast<C>(1.0 - std::pow(hp.beta1, static_cast<double>(hp.step)));
  const C bc2 = static_cast<C>(1.0 - std::pow(hp.beta2, static_cast<double>(hp.step)));
  s.step_size = static_cast<C>(hp.lr) / bc1;
  s.inv_sqrt_bc2 = C(1) / static_cast<C>(std::sqrt(static_cast<double>(bc2)));
  for (std::size_t i = 0; i < params.size(); ++i) {
    const int64_t n = params[i].numel();
    if (n == 0) continue;
    adamw_kernel<T><<<grid_for(n), kThreads, 0, stream_of(params[i])>>>(
        static_cast<T*>(params[i].data_ptr()), static_cast<const T*>(grads[i].data_ptr()),
        static_cast<T*>(exp_avgs[i].data_ptr()), static_cast<T*>(exp_avg_sqs[i].data_ptr()), n, s,
        grad_scale);
    BLU_KERNEL_LAUNCH_CHECK("adamw_kernel");
  }
}

// copies (optional, else params' size): per parameter a bf16 tensor of its size (undefined: none)
// that blublas writes bf16(p) into after the update.
bool adamw_blublas(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                   const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                   const float* grad_scale, const AdamWParams& hp, const std::vector<Tensor>* copies = nullptr) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i].dtype() != DType::F32 || grads[i].dtype() != DType::F32) return false;
  }
  if (hp.step > 2147483647) return false;
  std::vector<blublas::AdamWTensor> descs;
  descs.reserve(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i].numel() == 0) continue;
    blublas::AdamWTensor d;
    d.param = static_cast<float*>(params[i].data_ptr());
    d.grad = grads[i].data_ptr();
    d.m = static_cast<float*>(exp_avgs[i].data_ptr());
    d.v = static_cast<float*>(exp_avg_sqs[i].data_ptr());
    d.numel = params[i].numel();
    d.weight_decay = static_cast<float>(hp.weight_decay);
    if (copies != nullptr && (*copies)[i].defined()) d.param_bf16 = (*copies)[i].data_ptr();
    descs.push_back(d);
  }
  if (descs.empty()) return true;
  blublas::AdamWHyper h;
  h.lr = static_cast<float>(hp.lr);
  h.beta1 = static_cast<float>(hp.beta1);
  h.beta2 = static_cast<float>(hp.beta2);
  h.eps = static_cast<float>(hp.eps);
  h.step = static_cast<int>(hp.step);
  cudaStream_t stream = stream_of(params[0]);
  // A refusal of the first launch falls back to the generic kernel; a later one (after part of
  // the update ran) is an error.
  for (std::size_t b = 0; b < descs.size(); b += blublas::kAdamWTensorsPerLaunch) {
    const int count = static_cast<int>(
        std::min<std::size_t>(blublas::kAdamWTensorsPerLaunch, descs.size() - b));
    if (b == 0) {
      blublas::Status st =
          blublas::adamw_update(descs.data(), count, blublas::Dtype::kF32, h, grad_scale, stream);
      if (!blublas_ok(st, "adamw_step")) return false;
    } else {
      BLU_BLAS_CHECK(blublas::adamw_update(descs.data() + b, count, blublas::Dtype::kF32, h,
                                           grad_scale, stream),
                     "adamw_step (CUDA)");
    }
  }
  return true;
}

}  // namespace

void adamw_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                const Tensor& grad_scale, const AdamWParams& hp) {
  BLU_CHECK(grads.size() == params.size() && exp_avgs.size() == params.size() &&
                exp_avg_sqs.size() == params.size(),
            "adamw_step (CUDA): list sizes differ: ", params.size(), " params, ", grads.size(),
            " grads, ", exp_avgs.size(), " exp_avg, ", exp_avg_sqs.size(), " exp_avg_sq");
  if (params.empty()) return;
  const float* gs = grad_scale.defined() ? static_cast<const float*>(grad_scale.data_ptr()) : nullptr;
  if (adamw_blublas(params, grads, exp_avgs, exp_avg_sqs, gs, hp)) return;
  BLU_CUDA_SWITCH_FLOAT(params[0].dtype(), T, "adamw_step",
                        adamw_generic<T>(params, grads, exp_avgs, exp_avg_sqs, gs, hp));
}

bool adamw_step_bf16_copies(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                            const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                            const Tensor& grad_scale, const AdamWParams& hp, const std::vector<Tensor>& copies) {
  if (params.empty() || grads.size() != params.size() || exp_avgs.size() != params.size() ||
      exp_avg_sqs.size() != params.size() || copies.size() != params.size())
    return false;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor& c = copies[i];
    if (!params[i].is_contiguous() || !grads[i].is_contiguous() || !exp_avgs[i].is_contiguous() ||
        !exp_avg_sqs[i].is_contiguous())
      return false;
    if (c.defined() && (c.dtype() != DType::BF16 || !c.is_contiguous() || c.numel() != params[i].numel()))
      return false;
  }
  const float* gs = grad_scale.defined() ? static_cast<const float*>(grad_scale.data_ptr()) : nullptr;
  return adamw_blublas(params, grads, exp_avgs, exp_avg_sqs, gs, hp, &copies);
}

}  // namespace blu::cuda_ops
