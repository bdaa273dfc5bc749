// Optimizers, gradient clipping and the LR schedule (Note [Optimizer backends] in optim.h).
#include <cmath>
#include <map>
#include <tuple>

#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "blutensor/optim.h"

namespace blu::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr) : params_(std::move(params)), lr_(lr) {
  for (const Tensor& p : params_) {
    BLU_CHECK(p.defined() && p.is_leaf() && p.requires_grad(),
              "optimizer: parameters must be leaf tensors that require grad, got ", p.describe());
  }
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Optimizer(std::move(params), options.lr), options_(options) {
  exp_avg_.resize(params_.size());
  exp_avg_sq_.resize(params_.size());
  decay_.assign(params_.size(), true);
  for (const Tensor& p : params_) {
    BLU_CHECK(p.dtype() == kFloat32 || p.dtype() == kFloat64, "AdamW: parameters must be f32 or f64, got ",
              p.describe());
  }
}

void AdamW::set_weight_decay_mask(std::vector<bool> decay) {
  BLU_CHECK(decay.size() == params_.size(), "AdamW: weight decay mask has ", decay.size(), " entries for ",
            params_.size(), " parameters");
  decay_ = std::move(decay);
}

std::map<std::string, Tensor> AdamW::state_dict() const {
  std::map<std::string, Tensor> out;
  out["step"] = scalar_tensor(static_cast<double>(step_), kInt64);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    out["exp_avg." + std::to_string(i)] = exp_avg_[i].detach();
    out["exp_avg_sq." + std::to_string(i)] = exp_avg_sq_[i].detach();
  }
  return out;
}

void AdamW::load_state_dict(const std::map<std::string, Tensor>& state) {
  NoGradGuard ng;
  auto it = state.find("step");
  BLU_CHECK(it != state.end() && it->second.numel() == 1, "AdamW::load_state_dict: missing 'step'");
  for (const auto& [key, t] : state) {
    if (key == "step") continue;
    std::size_t dot = key.find('.');
    std::string kind = key.substr(0, dot);
    BLU_CHECK(dot != std::string::npos && (kind == "exp_avg" || kind == "exp_avg_sq"),
              "AdamW::load_state_dict: unexpected key '", key, "'");
    std::size_t i = std::stoul(key.substr(dot + 1));
    BLU_CHECK(i < params_.size(), "AdamW::load_state_dict: '", key, "' but only ", params_.size(), " parameters");
    BLU_CHECK(t.sizes() == params_[i].sizes(), "AdamW::load_state_dict: '", key, "' is ", t.describe(),
              ", parameter ", i, " is ", params_[i].describe());
    Tensor& dst = kind == "exp_avg" ? exp_avg_[i] : exp_avg_sq_[i];
    if (!dst.defined()) dst = zeros_like(params_[i]);
    dst.copy_(t);
  }
  step_ = static_cast<int64_t>(it->second.item());
}

void AdamW::step() {
  NoGradGuard ng;
  ++step_;
  // Groups: (device, dtype, decay) -> indices, each one multi-tensor backend call.
  std::map<std::tuple<int, int, int, bool>, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    BLU_CHECK(p.grad().sizes() == p.sizes() && p.grad().dtype() == p.dtype(), "AdamW: gradient ",
              p.grad().describe(), " does not match parameter ", p.describe());
    BLU_CHECK(p.is_contiguous(), "AdamW: parameter ", p.describe(), " is not contiguous");
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = zeros_like(p);
      exp_avg_sq_[i] = zeros_like(p);
    }
    groups[{static_cast<int>(p.device().type), p.device().index, static_cast<int>(p.dtype()), decay_[i]}].push_back(i);
  }
  for (auto& [key, idx] : groups) {
    std::vector<Tensor> ps, gs, ms, vs;
    for (std::size_t i : idx) {
      ps.push_back(params_[i]);
      gs.push_back(params_[i].grad());
      ms.push_back(exp_avg_[i]);
      vs.push_back(exp_avg_sq_[i]);
    }
    AdamWOptions o = options_;
    o.lr = lr_;
    o.weight_decay = std::get<3>(key) ? options_.weight_decay : 0.0;
    adamw_step_(ps, gs, ms, vs, o, step_);
  }
}

SGD::SGD(std::vector<Tensor> params, double lr, double momentum, double weight_decay)
    : Optimizer(std::move(params), lr), momentum_(momentum), weight_decay_(weight_decay) {
  velocity_.resize(params_.size());
}

void SGD::step() {
  NoGradGuard ng;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    Tensor d = p.grad();
    if (weight_decay_ != 0.0) d = add(d, p, weight_decay_);
    if (momentum_ != 0.0) {
      if (!velocity_[i].defined()) {
        velocity_[i] = d.clone();
      } else {
        velocity_[i].mul_(momentum_).add_(d);
      }
      d = velocity_[i];
    }
    p.add_(d, -lr_);
  }
}

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard ng;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return scalar_tensor(0.0, kFloat32);
  // One fused reduction and one multi-tensor scale (Note [Multi-tensor primitives]); the
  // coefficient stays on the device. max_norm <= 0 keeps the formula (it zeroes the gradients).
  const GlobalNorm gn = global_norm(grads, max_norm);
  scale_tensors_(grads, max_norm > 0 ? gn.clip_coef : clamp_max(rdiv(add(gn.norm, 1e-6), max_norm), 1.0));
  return gn.norm;
}

double lr_warmup_cosine(int64_t step, int64_t warmup_steps, int64_t total_steps, double max_lr, double min_lr) {
  if (warmup_steps > 0 && step < warmup_steps) {
    return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  if (step >= total_steps) return min_lr;
  double progress = static_cast<double>(step - warmup_steps) /
                    static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  double coeff = 0.5 * (1.0 + std::cos(M_PI * progress));
  return min_lr + coeff * (max_lr - min_lr);
}

}  // namespace blu::optim
