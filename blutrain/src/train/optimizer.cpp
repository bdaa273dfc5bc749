// optimizer.cpp: AdamW (blutensor's multi-tensor primitives on every device: Note [Fused optimizer
// step]; no graph: NoGradGuard), gradient clipping, the update
// that refuses non-finite gradients (Note [Non-finite steps]) and the learning-rate schedule. Deterministic: the same operations in the same order every step,
// whatever the thread count.
#include "blutrain/optimizer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <tuple>

#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "blutensor/optim.h"
#include "blutrain/nvtx.h"

namespace blu::train {

AdamW::AdamW(std::vector<NamedParam> params, const AdamWConfig& cfg, bool allocate)
    : params_(std::move(params)), cfg_(cfg), m_(params_.size()), v_(params_.size()) {
  if (allocate) allocate_moments();
}

void AdamW::allocate_moments() {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!m_[i].defined()) m_[i] = zeros_like(params_[i].tensor->detach());
    if (!v_[i].defined()) v_[i] = zeros_like(params_[i].tensor->detach());
  }
}

void AdamW::zero_grad() {
  for (const NamedParam& p : params_) p.tensor->set_grad(Tensor());
}

namespace {

bool cpu_f32_contiguous(const Tensor& t) { return t.is_cpu() && t.dtype() == kFloat32 && t.is_contiguous(); }

// The gradients of `params` that exist, in order.
std::vector<Tensor> defined_grads(const std::vector<NamedParam>& params) {
  std::vector<Tensor> grads;
  for (const NamedParam& p : params) {
    if (p.tensor->grad().defined()) grads.push_back(p.tensor->grad());
  }
  return grads;
}

}  // namespace

// Note [Fused optimizer step]
// On every device the update and the norm go through blutensor's multi-tensor primitives
// (blutensor/optim.h, Note [Multi-tensor primitives]), so a captured step (Note [Step capture] in
// blutensor/capture.h) holds them; on the CPU they are the backend's fused, chunk-deterministic
// loops (cpu/nn_kernels.cpp adamw_one, cpu/optim_kernels.cpp): blutrain had its own copies of
// those loops until 2026-11-26, invisible to the capture.
//   - AdamW::step: one blu::optim::adamw_step_ per (device, weight-decay) group, i.e. two
//     blublas::adamw_update launches for GPT-2 (decayed 2-D weights, the rest) instead of ~10
//     blutensor ops per tensor (~1500 launches). Same formula as adamw_cpu: m and v updated, then
//     p = p (1 - lr wd) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps) with bc = 1 - beta^t, in f32
//     (the GPU contracts to FMAs and takes lr/bc1 and 1/sqrt(bc2) rounded once to f32: results
//     agree with the CPU loop to f32 rounding, tests/blutrain/optimizer_gpu_test.cpp). The
//     moments stay the same tensors, so checkpoints do not change.
//   - clip_grad_norm: one blu::optim::global_norm (blublas::grad_global_norm: a fixed partition,
//     f32 partials, an f64 final sum: deterministic) read with one .item(), the sync the trainer
//     already had for logging the norm, after one scale_tensors_ launch by the device's
//     coefficient (Note [Clipping on the device]; under --tp the host's max_norm / (norm + 1e-6)).
// No other host synchronisation: launches only. Kill-and-resume stays bitwise: every kernel
// has a fixed reduction order and nothing depends on timing. Measured (H200, 2026-11-22,
// TrainOptimizerGpu.Gpt2SizedStepTiming): GPT-2 124M clip + AdamW in 1.28 ms, against 12.99 ms
// for the per-tensor ops it replaced (10x); 40 B/param moved, 3.9 TB/s.
void AdamW::step(double lr, const Tensor& grad_scale) {
  BLU_NVTX_RANGE("adamw");
  NoGradGuard no_grad;
  ++t_;
  // (device type, device index, decay) -> the p, g, m, v lists of one multi-tensor call.
  std::map<std::tuple<int, int, bool>, std::array<std::vector<Tensor>, 4>> fused;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& g = params_[i].tensor->grad();
    if (!g.defined()) continue;
    Tensor p = params_[i].tensor->detach();
    Tensor& m = m_[i];
    Tensor& v = v_[i];
    BLU_CHECK(m.defined() && v.defined(), "AdamW::step: parameter ", params_[i].name,
              " has no moments (built without them for ZeRO-1; call allocate_moments())");
    auto& lists = fused[{static_cast<int>(p.device().type), p.device().index, params_[i].decay}];
    lists[0].push_back(p);
    lists[1].push_back(g);
    lists[2].push_back(m);
    lists[3].push_back(v);
  }
  for (auto& [key, lists] : fused) {
    blu::optim::AdamWOptions o;
    o.lr = lr;
    o.beta1 = cfg_.beta1;
    o.beta2 = cfg_.beta2;
    o.eps = cfg_.eps;
    o.weight_decay = std::get<2>(key) ? cfg_.weight_decay : 0.0;
    blu::optim::adamw_step_(lists[0], lists[1], lists[2], lists[3], o, t_, grad_scale);
  }
}

double grad_sum_of_squares(const std::vector<NamedParam>& params) {
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = defined_grads(params);
  if (grads.empty()) return 0;
  const double n = blu::optim::global_norm(grads, 0.0).norm.item();
  return n * n;
}

void scale_grads(const std::vector<NamedParam>& params, double scale) {
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = defined_grads(params);
  if (!grads.empty()) blu::optim::scale_tensors_(grads, scalar_tensor(scale, kFloat32).to(grads[0].device()));
}

double clip_grad_norm(const std::vector<NamedParam>& params, double max_norm, const GradSumOfSquares& sum_of_squares) {
  BLU_NVTX_RANGE("grad_norm");
  if (!sum_of_squares && max_norm > 0) {
    // Note [Clipping on the device]: the coefficient min(1, max_norm / (norm + 1e-6)) never leaves
    // the device and every step scales by it (by exactly 1 when the norm is below max_norm, which
    // leaves each gradient bit for bit as it was), so the step's launches do not depend on the
    // norm's value: a captured or graph-replayed step (Note [Step capture]) holds for every step.
    // The norm is read afterwards, for the log and the non-finite check.
    std::vector<Tensor> with_grad;
    for (const NamedParam& p : params) {
      if (p.tensor->grad().defined()) with_grad.push_back(*p.tensor);
    }
    return with_grad.empty() ? 0.0 : blu::optim::clip_grad_norm_(with_grad, max_norm).item();
  }
  // Under --tp the model is not all here: sum_of_squares adds the other ranks' shards (a host
  // sum), so the scale is computed on the host.
  const double norm = std::sqrt(sum_of_squares ? sum_of_squares(params) : grad_sum_of_squares(params));
  if (max_norm > 0 && norm > max_norm) scale_grads(params, max_norm / (norm + 1e-6));
  return norm;
}

bool all_finite(const Tensor& t) {
  NoGradGuard no_grad;
  if (cpu_f32_contiguous(t)) {
    const float* d = t.data_ptr<float>();
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(d[i])) return false;
    }
    return true;
  }
  // 0 * x is 0 for every finite x and NaN for NaN and +-inf, so the sum is finite iff all are.
  return std::isfinite(sum(mul(t, 0.0)).item());
}

std::string first_nonfinite_gradient(const std::vector<NamedParam>& params) {
  for (const NamedParam& p : params) {
    const Tensor& g = p.tensor->grad();
    if (g.defined() && !all_finite(g)) return p.name;
  }
  return "";
}

// Note [Clip coefficient in the update]
// clip_grad_norm scales every gradient by the coefficient min(1, max_norm / (norm + 1e-6)) (Note
// [Clipping on the device]) in a pass of its own, and AdamW then reads the gradients again: on
// GPT-2 124M one read and one write of 124M f32 values, 0.34 ms of an H100 bf16 step (session 20's
// profile of the compiled step: scale_tensors_kernel). clip_and_update instead hands the
// coefficient to the update (blu::optim::adamw_step_'s grad_scale, blublas::adamw_update's
// grad_scale on CUDA): g = grad * coef rounded to f32 in a register, which is the value the
// scaling pass stored, so weights and moments are the same bits (optimizer_test checks it against
// clip_grad_norm + step). The gradients stay unscaled; nothing reads them after the update but the
// non-finite report, which now sees the raw gradients (the same first non-finite tensor: scaling
// by a finite coefficient or by 0 never made a non-finite value finite or a finite one
// non-finite, except inf * 0, which was NaN). Under --tp (sum_of_squares) the norm is a host sum
// and clip_grad_norm scales on the host's coefficient as before.
UpdateResult clip_and_update(AdamW& opt, double max_norm, double lr, bool loss_finite,
                             const GradSumOfSquares& sum_of_squares) {
  UpdateResult r;
  Tensor coef;
  if (!sum_of_squares && max_norm > 0) {
    BLU_NVTX_RANGE("grad_norm");
    NoGradGuard no_grad;
    const std::vector<Tensor> grads = defined_grads(opt.params());
    if (!grads.empty()) {
      const blu::optim::GlobalNorm gn = blu::optim::global_norm(grads, max_norm);
      coef = gn.clip_coef;
      r.grad_norm = gn.norm.item();
    }
  } else {
    r.grad_norm = clip_grad_norm(opt.params(), max_norm, sum_of_squares);
  }
  if (loss_finite && std::isfinite(r.grad_norm)) {
    opt.step(lr, coef);
    return r;
  }
  // Unscaled gradients (device coefficient) or gradients scaled by 0 (an infinite norm on the
  // host path: the finite ones became 0, the infinite ones NaN): either way the first
  // non-finite gradient is the first that was.
  r.applied = false;
  r.first_nonfinite = first_nonfinite_gradient(opt.params());
  return r;
}

// Note [Update without a host read]
// clip_and_update reads the gradient norm on the host before it launches AdamW, and the trainer's
// step read the loss before that: two waits for the GPU inside every step, where it idles while
// the host sees the value and launches the next kernels (H100, session 22, the compiled bf16
// step's kernel trace: 0.19 ms before the norm's kernels and 0.39 ms before AdamW's, of ~37 ms;
// the fused engine reads nothing until the step's end). update_unless_nonfinite launches the
// update at once with the clip coefficient guarded on the device: coef + 0 * loss + 0 * norm,
// which is coef itself (the same bits: adding +0 or -0 to a positive number) when both are
// finite and NaN when either is not, and AdamW with a non-finite grad_scale skips the update
// (blu::optim::adamw_step_, blublas::adamw_update: nothing written), which is what the host check
// did. The caller reads the loss and the norm after the launch; finish_deferred_update turns them
// into the UpdateResult and sets the step count back for a skipped update. The recorded step
// (autograd_step, so the captured and compiled engines) then has its host reads at its end.
// Measured (H100, a26ba44, GPT-2 d12 bf16 B16 compiled step): 453.45K tok/s, as before it in the
// previous call; the profiled step's tail lost its 0.4 ms of idle, so the waits were mostly the
// profiler's (CUPTI slows the host), but the step has no host wait inside it any more.
DeferredUpdate update_unless_nonfinite(AdamW& opt, double max_norm, double lr, const Tensor& loss) {
  DeferredUpdate d;
  if (max_norm <= 0) return d;
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = defined_grads(opt.params());
  if (grads.empty()) return d;
  BLU_NVTX_RANGE("grad_norm");
  const blu::optim::GlobalNorm gn = blu::optim::global_norm(grads, max_norm);
  Tensor l = loss.detach();
  if (l.dtype() != kFloat32) l = l.to(kFloat32);
  if (l.device() != gn.norm.device()) l = l.to(gn.norm.device());
  const Tensor coef = add(gn.clip_coef, add(mul(l, 0.0), mul(gn.norm, 0.0)));
  opt.step(lr, coef);
  d.launched = true;
  d.norm = gn.norm;
  return d;
}

UpdateResult finish_deferred_update(AdamW& opt, double loss, double grad_norm) {
  UpdateResult r;
  r.grad_norm = grad_norm;
  if (std::isfinite(loss) && std::isfinite(grad_norm)) return r;
  opt.set_step_count(opt.step_count() - 1);  // the device skipped the update
  r.applied = false;
  r.first_nonfinite = first_nonfinite_gradient(opt.params());
  return r;
}

double learning_rate(int64_t step, double max_lr, double min_lr, int64_t warmup, int64_t max_steps) {
  if (step < warmup) return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= max_steps) return min_lr;
  const double ratio = static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, max_steps - warmup));
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (max_lr - min_lr);
}

}  // namespace blu::train
