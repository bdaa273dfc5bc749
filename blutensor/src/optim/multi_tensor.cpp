// multi_tensor.cpp: the public multi-tensor optimizer primitives (optim.h): adamw_step_,
// global_norm and scale_tensors_. Each checks its lists once and makes one backend call
// (backend_ops.def: adamw_step, global_norm, scale_tensors_) for the whole list.
//
// Note [Multi-tensor primitives]
// An optimizer written with tensor ops launches ~10 kernels per parameter tensor (GPT-2 124M: 148
// tensors, ~1500 launches per step, plus ~450 for the gradient norm), each moving the whole tensor
// through memory again. These primitives hand a whole list to the backend instead:
//   - adamw_step_: one pass over (p, g, m, v) per element; on CUDA blublas::adamw_update packs up
//     to 256 tensors into one launch (cuda_adamw.cu); on the CPU a fused loop per tensor.
//   - global_norm: one deterministic reduction over all elements (fixed partition, partial sums
//     added in order; on CUDA blublas::grad_global_norm: f32 partials per 4096 elements, f64
//     final sum; on the CPU f64 partials per 64K elements) and the clip coefficient computed on
//     the device, so clipping needs no host round trip.
//   - scale_tensors_: one multi-tensor kernel multiplying by a device scalar.
// Dtypes a backend cannot take (global_norm on CUDA for f64/f16) fall back to tensor ops here.
#include <cmath>

#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "blutensor/optim.h"
#include "dispatch.h"
#include "ops/op_helpers.h"

namespace blu::optim {
namespace {

void check_list(const char* op, const std::vector<Tensor>& ts) {
  for (std::size_t i = 0; i < ts.size(); ++i) {
    BLU_CHECK(ts[i].defined(), op, ": tensor ", i, " of ", ts.size(), " is undefined");
    BLU_CHECK(is_floating(ts[i].dtype()), op, ": tensor ", i, " is ", ts[i].describe(),
              " (floating dtypes only)");
  }
  detail::check_same_device(op, ts);
}

// The backend's global_norm; false when it declined the list.
bool backend_global_norm(const Tensor& norm, const Tensor& coef, const std::vector<Tensor>& ts,
                         double max_norm) {
  const Device dev = ts[0].device();
  bool done = false;
#if BLU_HAVE_CUDA_OPS
  if (dev.is_cuda()) {
    DeviceGuard guard(dev);
    done = cuda_ops::global_norm(norm, coef, ts, max_norm);
  } else {
    done = cpu_ops::global_norm(norm, coef, ts, max_norm);
  }
#else
  BLU_CHECK(!dev.is_cuda(), "global_norm: this build of blutensor has no CUDA ops");
  done = cpu_ops::global_norm(norm, coef, ts, max_norm);
#endif
  // Recorded once it ran (Note [Step capture]): a declined list is composed from recorded ops.
  if (done) {
    capture::detail::RecordAs<decltype(&cpu_ops::global_norm)>::run("global_norm", dev, norm, coef, ts, max_norm);
  }
  return done;
}

}  // namespace

void adamw_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                 const AdamWOptions& options, int64_t step, const Tensor& grad_scale) {
  NoGradGuard ng;
  BLU_CHECK(grads.size() == params.size() && exp_avgs.size() == params.size() &&
                exp_avg_sqs.size() == params.size(),
            "adamw_step_: list sizes differ: ", params.size(), " params, ", grads.size(),
            " grads, ", exp_avgs.size(), " exp_avgs, ", exp_avg_sqs.size(), " exp_avg_sqs");
  BLU_CHECK(step >= 1, "adamw_step_: step=", step, " must be >= 1 (the count after this update)");
  BLU_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1 &&
                options.eps >= 0 && std::isfinite(options.lr),
            "adamw_step_: beta1=", options.beta1, " beta2=", options.beta2, " eps=", options.eps,
            " lr=", options.lr, " (need 0 <= beta < 1, eps >= 0, finite lr)");
  if (params.empty()) return;
  if (grad_scale.defined()) {
    BLU_CHECK(grad_scale.numel() == 1 && grad_scale.dtype() == kFloat32 &&
                  grad_scale.device() == params[0].device(),
              "adamw_step_: grad_scale is ", grad_scale.describe(),
              ", expected one f32 element on the parameters' device ", params[0].describe());
  }
  std::vector<Tensor> gs;
  gs.reserve(grads.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    BLU_CHECK(
        p.defined() && grads[i].defined() && exp_avgs[i].defined() && exp_avg_sqs[i].defined(),
        "adamw_step_: entry ", i, " has an undefined parameter, grad or moment");
    BLU_CHECK(p.dtype() == kFloat32 || p.dtype() == kFloat64, "adamw_step_: parameter ", i, " is ",
              p.describe(), " (f32 or f64 only)");
    for (const Tensor* t : {&grads[i], &exp_avgs[i], &exp_avg_sqs[i]}) {
      BLU_CHECK(t->sizes() == p.sizes() && t->dtype() == p.dtype() && t->device() == p.device(),
                "adamw_step_: entry ", i, ": ", t->describe(), " does not match parameter ",
                p.describe(), " (same sizes, dtype and device)");
    }
    BLU_CHECK(p.is_contiguous() && exp_avgs[i].is_contiguous() && exp_avg_sqs[i].is_contiguous(),
              "adamw_step_: entry ", i, ": parameter and moments must be contiguous, got ",
              p.describe());
    BLU_CHECK(p.device() == params[0].device(), "adamw_step_: parameter ", i, " is ", p.describe(),
              ", parameter 0 is ", params[0].describe(), " (one device per call)");
    gs.push_back(detail::contiguous_nograd(grads[i]));
  }
  AdamWParams hp;
  hp.lr = options.lr;
  hp.beta1 = options.beta1;
  hp.beta2 = options.beta2;
  hp.eps = options.eps;
  hp.weight_decay = options.weight_decay;
  hp.step = step;
  BLU_DISPATCH(params[0].device(), adamw_step, params, gs, exp_avgs, exp_avg_sqs, grad_scale, hp);
  for (std::size_t i = 0; i < params.size(); ++i) {
    params[i].bump_version();
    exp_avgs[i].bump_version();
    exp_avg_sqs[i].bump_version();
  }
}

GlobalNorm global_norm(const std::vector<Tensor>& tensors, double max_norm) {
  NoGradGuard ng;
  check_list("global_norm", tensors);
  GlobalNorm out;
  if (tensors.empty()) {
    out.norm = scalar_tensor(0.0, kFloat32);
    out.clip_coef = scalar_tensor(1.0, kFloat32);
    return out;
  }
  const Device dev = tensors[0].device();
  std::vector<Tensor> ts;
  ts.reserve(tensors.size());
  bool one_dtype = true;
  for (const Tensor& t : tensors) {
    ts.push_back(detail::contiguous_nograd(t));
    one_dtype = one_dtype && t.dtype() == tensors[0].dtype();
  }
  out.norm = detail::new_empty({}, kFloat32, dev);
  out.clip_coef = detail::new_empty({}, kFloat32, dev);
  if (one_dtype && backend_global_norm(out.norm, out.clip_coef, ts, max_norm)) return out;
  // Composite fallback: per-tensor sums of squares in f64, added in list order.
  Tensor total;
  for (const Tensor& t : ts) {
    Tensor sq = sum(mul(t, t).to(kFloat64));
    total = total.defined() ? add(total, sq) : sq;
  }
  Tensor norm64 = sqrt(total);
  out.norm = norm64.to(kFloat32);
  out.clip_coef = max_norm > 0 ? clamp_max(rdiv(add(norm64, 1e-6), max_norm), 1.0).to(kFloat32)
                               : full({}, 1.0, TensorOptions().dtype(kFloat32).device(dev));
  return out;
}

void scale_tensors_(const std::vector<Tensor>& tensors, const Tensor& factor) {
  NoGradGuard ng;
  check_list("scale_tensors_", tensors);
  BLU_CHECK(factor.defined() && factor.numel() == 1,
            "scale_tensors_: factor must be a one-element ", "tensor, got ",
            factor.defined() ? factor.describe() : std::string("undefined"));
  if (tensors.empty()) return;
  BLU_CHECK(factor.device() == tensors[0].device(), "scale_tensors_: factor ", factor.describe(),
            " is not on the tensors' device ", tensors[0].device().str());
  const Tensor f =
      detail::contiguous_nograd(factor.dtype() == kFloat32 ? factor : factor.to(kFloat32));
  std::vector<Tensor> contiguous;
  for (const Tensor& t : tensors) {
    if (t.is_contiguous()) {
      contiguous.push_back(t);
    } else {
      Tensor view = t;
      view.mul_(f.reshape({}).to(t.dtype()));  // a strided view: the generic elementwise path
    }
  }
  if (!contiguous.empty()) BLU_DISPATCH(tensors[0].device(), scale_tensors_, contiguous, f);
  for (const Tensor& t : contiguous) t.bump_version();
}

}  // namespace blu::optim
