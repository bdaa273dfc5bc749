// optimizer.cpp: AdamW from blutensor in-place ops (no graph: NoGradGuard), gradient clipping
// and the learning-rate schedule. Every step uses the same op order, so it is deterministic.
#include "blutrain/optimizer.h"

#include <algorithm>
#include <cmath>

#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "blutrain/nvtx.h"

namespace blu::train {

AdamW::AdamW(std::vector<NamedParam> params, const AdamWConfig& cfg) : params_(std::move(params)), cfg_(cfg) {
  for (const NamedParam& p : params_) {
    m_.push_back(zeros_like(p.tensor->detach()));
    v_.push_back(zeros_like(p.tensor->detach()));
  }
}

void AdamW::zero_grad() {
  for (const NamedParam& p : params_) p.tensor->set_grad(Tensor());
}

void AdamW::step(double lr) {
  BLU_NVTX_RANGE("adamw");
  NoGradGuard no_grad;
  ++t_;
  const double bc1 = 1.0 - std::pow(cfg_.beta1, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(cfg_.beta2, static_cast<double>(t_));
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& g = params_[i].tensor->grad();
    if (!g.defined()) continue;
    Tensor p = params_[i].tensor->detach();
    Tensor& m = m_[i];
    Tensor& v = v_[i];
    m.mul_(cfg_.beta1).add_(g, 1.0 - cfg_.beta1);
    v.mul_(cfg_.beta2).add_(g * g, 1.0 - cfg_.beta2);
    // p -= lr * (m / bc1) / (sqrt(v / bc2) + eps) + lr * wd * p   (decoupled decay)
    Tensor denom = add(mul(sqrt(v), 1.0 / std::sqrt(bc2)), cfg_.eps);
    if (params_[i].decay && cfg_.weight_decay != 0) p.mul_(1.0 - lr * cfg_.weight_decay);
    p.add_(m / denom, -lr / bc1);
  }
}

double clip_grad_norm(const std::vector<NamedParam>& params, double max_norm) {
  BLU_NVTX_RANGE("grad_norm");
  NoGradGuard no_grad;
  std::vector<Tensor> squares;
  for (const NamedParam& p : params) {
    const Tensor& g = p.tensor->grad();
    if (g.defined()) squares.push_back(sum(g * g).reshape({1}));
  }
  if (squares.empty()) return 0.0;
  const double norm = std::sqrt(sum(cat(squares, 0)).item());
  if (max_norm > 0 && norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    for (const NamedParam& p : params) {
      Tensor g = p.tensor->grad();
      if (g.defined()) g.mul_(scale);
    }
  }
  return norm;
}

double learning_rate(int64_t step, double max_lr, double min_lr, int64_t warmup, int64_t max_steps) {
  if (step < warmup) return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= max_steps) return min_lr;
  const double ratio = static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, max_steps - warmup));
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (max_lr - min_lr);
}

}  // namespace blu::train
