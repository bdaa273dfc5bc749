// optimizer.cpp: AdamW (fused loops on the CPU, blutensor in-place ops elsewhere; no graph:
// NoGradGuard), gradient clipping and the learning-rate schedule. Deterministic: the same
// operations in the same order every step, whatever the thread count.
#include "blutrain/optimizer.h"

#include <algorithm>
#include <cmath>

#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "blutrain/nvtx.h"

#ifdef _OPENMP
#define BLU_OMP_FOR _Pragma("omp parallel for schedule(static)")
#else
#define BLU_OMP_FOR
#endif

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

namespace {

bool cpu_f32_contiguous(const Tensor& t) { return t.is_cpu() && t.dtype() == kFloat32 && t.is_contiguous(); }

// Note [CPU fast paths]
// On the CPU, AdamW and the gradient norm are single fused loops over float arrays (one pass
// instead of ~10 tensor ops). Elementwise work is split by OpenMP; the norm's partial sums are
// per fixed-size chunk, added in chunk order, so the result does not depend on the thread count.
void adamw_cpu(float* p, const float* g, float* m, float* v, int64_t n, double lr, double beta1, double beta2,
               double eps, double decay, double bc1, double bc2) {
  const float b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
  const float one_minus_b1 = static_cast<float>(1.0 - beta1), one_minus_b2 = static_cast<float>(1.0 - beta2);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2)), step = static_cast<float>(lr / bc1);
  const float keep = static_cast<float>(1.0 - lr * decay), e = static_cast<float>(eps);
BLU_OMP_FOR
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = b1 * m[i] + one_minus_b1 * gi;
    const float vi = b2 * v[i] + one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * keep - step * mi / (std::sqrt(vi) * inv_sqrt_bc2 + e);
  }
}

double sum_squares_cpu(const float* g, int64_t n) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
BLU_OMP_FOR
  for (int64_t c = 0; c < chunks; ++c) {
    double s = 0;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) s += static_cast<double>(g[i]) * g[i];
    partial[static_cast<size_t>(c)] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace

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
    const double decay = params_[i].decay ? cfg_.weight_decay : 0.0;
    if (cpu_f32_contiguous(p) && cpu_f32_contiguous(g) && cpu_f32_contiguous(m) && cpu_f32_contiguous(v)) {
      adamw_cpu(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), p.numel(), lr,
                cfg_.beta1, cfg_.beta2, cfg_.eps, decay, bc1, bc2);
      p.bump_version();
      continue;
    }
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
  double cpu_total = 0;
  for (const NamedParam& p : params) {
    const Tensor& g = p.tensor->grad();
    if (!g.defined()) continue;
    if (cpu_f32_contiguous(g)) {
      cpu_total += sum_squares_cpu(g.data_ptr<float>(), g.numel());
    } else {
      squares.push_back(sum(g * g).reshape({1}));
    }
  }
  const double norm = std::sqrt(cpu_total + (squares.empty() ? 0.0 : sum(cat(squares, 0)).item()));
  if (max_norm > 0 && norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    for (const NamedParam& p : params) {
      Tensor g = p.tensor->grad();
      if (!g.defined()) continue;
      if (cpu_f32_contiguous(g)) {
        float* d = g.data_ptr<float>();
        const float f = static_cast<float>(scale);
        const int64_t n = g.numel();
BLU_OMP_FOR
        for (int64_t i = 0; i < n; ++i) d[i] *= f;
        g.bump_version();
      } else {
        g.mul_(scale);
      }
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
