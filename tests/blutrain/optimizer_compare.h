// optimizer_compare.h: the harness of optimizer_test.cpp (CPU) and optimizer_gpu_test.cpp. It runs
// blu::train::clip_grad_norm + blu::train::AdamW for several steps on two copies of one random
// state: the reference (CPU f32 contiguous gradients: blutensor's CPU multi-tensor loops) and a
// second path (CUDA tensors: the fused multi-tensor kernels; or CPU tensors with strided
// gradients), and bounds every element of the norm, clipped gradients, p, m and v by f32
// rounding, with magnitudes tracked in float64 (no cancellation hides behind a small result). The
// reference norm is the exact one rounded to f32 (global_norm's output is a 0-d f32).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "blutensor/blutensor.h"
#include "blutrain/optimizer.h"

namespace blu::test {

struct OptimizerCase {
  std::vector<Shape> shapes{{37, 53}, {129}, {3, 1001}, {4099}, {1, 5}, {7, 11, 13}};
  std::vector<bool> decay{true, false, true, false, true, true};
  int steps = 6;
  uint64_t seed = 1234;
};

// One copy of the parameters, their AdamW and the tensors NamedParam points at.
struct OptimizerState {
  std::vector<std::unique_ptr<Tensor>> params;
  std::vector<train::NamedParam> named;
  std::unique_ptr<train::AdamW> opt;
};

inline train::AdamWConfig compare_config() {
  train::AdamWConfig c;
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.eps = 1e-8;
  c.weight_decay = 0.1;
  return c;
}

inline OptimizerState make_state(const OptimizerCase& oc, const std::vector<Tensor>& init,
                                 Device dev) {
  OptimizerState s;
  for (std::size_t i = 0; i < init.size(); ++i) {
    s.params.push_back(std::make_unique<Tensor>(init[i].to(dev).clone()));
    s.params.back()->requires_grad_(true);
    std::string name = "p";  // (not "p" + to_string: GCC 12's -Wrestrict false positive)
    name += std::to_string(i);
    s.named.push_back({name, s.params.back().get(), oc.decay[i], false});
  }
  s.opt = std::make_unique<train::AdamW>(s.named, compare_config());
  return s;
}

// Gradient of parameter i at one step for a copy: contiguous on `dev`, or (strided) a
// non-contiguous view with the same values on the CPU.
inline Tensor grad_for(const Tensor& g, Device dev, bool strided) {
  if (!strided) return g.to(dev).clone();
  Shape wide = g.sizes();
  wide.push_back(2);
  Tensor big = full(wide, std::nan(""), TensorOptions(g.dtype()).device(dev));
  big.select(-1, 0).copy_(g);
  return big.select(-1, 0);
}

// Worst |got - want| / tol over all elements (returned); on a failure the message names the
// element.
inline double expect_close(const char* what, std::size_t index, int step, const Tensor& want,
                           const Tensor& got, const std::vector<double>& tol) {
  const std::vector<double> a = want.to_double_vector(), b = got.to(kCPU).to_double_vector();
  EXPECT_EQ(a.size(), b.size()) << what << index;
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double r = std::fabs(a[i] - b[i]) / tol[i];
    if (std::isnan(r) || std::isnan(a[i]) != std::isnan(b[i])) r = INFINITY;
    if (r > worst) {
      worst = r;
      at = i;
    }
  }
  EXPECT_LE(worst, 1.0) << what << index << " at step " << step << ": worst element " << at
                        << " got " << b[at] << " want " << a[at] << " |diff| "
                        << std::fabs(a[at] - b[at]) << " tol " << tol[at] << " (" << a.size()
                        << " elements)";
  return worst;
}

// Runs both copies for oc.steps steps (clipping on odd steps) and compares after each one.
inline void compare_optimizer_paths(const OptimizerCase& oc, Device other, bool strided_grads) {
  Generator gen(oc.seed);
  std::vector<Tensor> init;
  for (const Shape& s : oc.shapes) init.push_back(randn(s, {}, &gen) * 0.5);
  OptimizerState ref = make_state(oc, init, kCPU);
  OptimizerState alt = make_state(oc, init, other);
  const train::AdamWConfig cfg = compare_config();
  // float64 magnitude bounds: |m| <= mabs, v (no cancellation), sum of learning rates.
  std::vector<std::vector<double>> mabs(init.size());
  for (std::size_t i = 0; i < init.size(); ++i)
    mabs[i].assign(static_cast<std::size_t>(init[i].numel()), 0.0);
  double lr_sum = 0;
  // Relative differences of the clip coefficients so far (the alternative path's norm is f32 on
  // CUDA): a clipped step scales the gradients, hence m by up to that much and v by twice it.
  double clip_rel = 0;
  for (int t = 1; t <= oc.steps; ++t) {
    double worst_g = 0, worst_p = 0, worst_m = 0, worst_v = 0;
    std::vector<Tensor> grads;
    double sumsq = 0;
    for (std::size_t i = 0; i < init.size(); ++i) {
      Tensor g = randn(oc.shapes[i], {}, &gen) * (0.01 * t + 1e-3 * static_cast<double>(i));
      for (double x : g.to_double_vector()) sumsq += x * x;
      grads.push_back(g);
      ref.params[i]->set_grad(g.clone());
      alt.params[i]->set_grad(grad_for(g, other, strided_grads));
    }
    const double exact = std::sqrt(sumsq);
    const double max_norm = t % 2 == 1 ? 0.5 * exact : 1e9;  // clip on odd steps
    const double n_ref = train::clip_grad_norm(ref.named, max_norm);
    const double n_alt = train::clip_grad_norm(alt.named, max_norm);
    EXPECT_NEAR(n_ref, exact, 6e-8 * exact) << "reference norm at step " << t;  // f32 rounding
    EXPECT_NEAR(n_alt, exact, 2e-6 * exact) << "norm at step " << t;
    const double norm_rel = std::fabs(n_alt - n_ref) / n_ref;
    if (n_ref > max_norm) clip_rel += 2 * norm_rel + 2.4e-7;  // + rounding of the coefficient
    const double lr = 1e-2 / t;
    lr_sum += lr;
    for (std::size_t i = 0; i < init.size(); ++i) {
      const Tensor& g_ref = ref.params[i]->grad();
      const std::vector<double> gv = g_ref.to_double_vector();
      std::vector<double> tol(gv.size());
      for (std::size_t e = 0; e < gv.size(); ++e) {  // the clip coefficient: f32 (CUDA) vs f64
        tol[e] = (4e-7 + 2 * norm_rel) * std::fabs(gv[e]) + 1e-30;
      }
      worst_g = std::max(worst_g, expect_close("grad", i, t, g_ref, alt.params[i]->grad(), tol));
      for (std::size_t e = 0; e < gv.size(); ++e)
        mabs[i][e] = cfg.beta1 * mabs[i][e] + (1 - cfg.beta1) * std::fabs(gv[e]);
    }
    ref.opt->step(lr);
    alt.opt->step(lr);
    for (std::size_t i = 0; i < init.size(); ++i) {
      const std::vector<double> p = ref.params[i]->to_double_vector(),
                                v = ref.opt->exp_avg_sq()[i].to_double_vector();
      std::vector<double> tol_p(p.size()), tol_m(p.size()), tol_v(p.size());
      for (std::size_t e = 0; e < p.size(); ++e) {
        tol_p[e] = 3e-7 * t * std::fabs(p[e]) + 2e-6 * t * lr_sum + 1e-30;
        // 1 - beta rounded to f32 from f32 beta (blublas) or from f64 (the CPU loop): 2.4e-7 of m,
        // v.
        tol_m[e] = (8e-7 + 3e-7 * t + clip_rel) * mabs[i][e] + 1e-30;
        tol_v[e] = (8e-7 + 3e-7 * t + 2 * clip_rel) * v[e] + 1e-30;
      }
      worst_p = std::max(worst_p, expect_close("p", i, t, *ref.params[i], *alt.params[i], tol_p));
      worst_m = std::max(
          worst_m, expect_close("m", i, t, ref.opt->exp_avg()[i], alt.opt->exp_avg()[i], tol_m));
      worst_v = std::max(worst_v, expect_close("v", i, t, ref.opt->exp_avg_sq()[i],
                                               alt.opt->exp_avg_sq()[i], tol_v));
    }
    std::printf("step %d: norm rel err %.3g; worst |diff|/tol grad %.3g p %.3g m %.3g v %.3g\n", t,
                norm_rel, worst_g, worst_p, worst_m, worst_v);
    EXPECT_EQ(ref.opt->step_count(), alt.opt->step_count());
    ref.opt->zero_grad();
    alt.opt->zero_grad();
  }
}

// Two optimizer states on `dev` from the same random initial weights (the default OptimizerCase,
// generator seed oc.seed + salt), for the bit-for-bit comparisons below.
struct TwinStates {
  OptimizerCase oc;
  Generator gen;
  std::vector<Tensor> init;
  OptimizerState a, b;
  TwinStates(Device dev, uint64_t salt) : gen(oc.seed + salt) {
    for (const Shape& s : oc.shapes) init.push_back(randn(s, {}, &gen) * 0.5);
    a = make_state(oc, init, dev);
    b = make_state(oc, init, dev);
  }
};

// x and y hold the same bytes (copied to the CPU, contiguous).
inline bool same(const Tensor& x, const Tensor& y) {
  const Tensor cx = x.to(kCPU).contiguous(), cy = y.to(kCPU).contiguous();
  return cx.numel() == cy.numel() &&
         std::memcmp(cx.data_ptr(), cy.data_ptr(), static_cast<std::size_t>(cx.numel()) * cx.element_size()) == 0;
}

// Weights and both moments of a and b bit for bit after step t.
inline void expect_same_states(const OptimizerState& a, const OptimizerState& b, int t, Device dev) {
  for (std::size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_TRUE(same(*a.params[i], *b.params[i])) << "param " << i << " step " << t << " on " << dev.str();
    EXPECT_TRUE(same(a.opt->exp_avg()[i], b.opt->exp_avg()[i])) << "exp_avg " << i << " step " << t;
    EXPECT_TRUE(same(a.opt->exp_avg_sq()[i], b.opt->exp_avg_sq()[i])) << "exp_avg_sq " << i << " step " << t;
  }
}

// Note [Clip coefficient in the update]: clip_and_update (the coefficient inside AdamW) against
// clip_grad_norm + step (the scaling pass) on two copies on `dev`: the same norm, and weights and
// moments bit for bit after every step, clipping on odd steps; the gradients left unscaled.
inline void expect_clip_and_update_is_clip_then_step(Device dev, int steps = 6) {
  TwinStates tw(dev, 7);
  auto& [oc, gen, init, a, b] = tw;
  for (int t = 1; t <= steps; ++t) {
    std::vector<Tensor> grads;
    for (std::size_t i = 0; i < init.size(); ++i) {
      const Tensor g = (randn(oc.shapes[i], {}, &gen) * (0.05 * t)).to(dev);
      grads.push_back(g);
      a.params[i]->set_grad(g.clone());
      b.params[i]->set_grad(g.clone());
    }
    const double probe = train::grad_sum_of_squares(a.named);
    const double max_norm = t % 2 == 1 ? 0.3 * std::sqrt(probe) : 1e9;  // clip on odd steps
    const double lr = 1e-2 / t;
    const double na = train::clip_grad_norm(a.named, max_norm);
    a.opt->step(lr);
    const train::UpdateResult rb = train::clip_and_update(*b.opt, max_norm, lr);
    EXPECT_TRUE(rb.applied);
    EXPECT_EQ(na, rb.grad_norm) << "step " << t;
    expect_same_states(a, b, t, dev);
    for (std::size_t i = 0; i < init.size(); ++i) {
      EXPECT_TRUE(same(b.params[i]->grad(), grads[i])) << "grad " << i << " step " << t << " was scaled";
    }
    EXPECT_EQ(a.opt->step_count(), b.opt->step_count());
    a.opt->zero_grad();
    b.opt->zero_grad();
  }
}

// Note [Update without a host read]: update_unless_nonfinite + finish_deferred_update against
// clip_and_update with the host's loss check, on two copies on `dev`: weights, moments, step
// counts and norms bit for bit every step; step 3 has a NaN loss, step 5 an infinite gradient
// element (a non-finite norm), step 6 clips with max_norm 0 (no deferred launch): the skipped
// steps leave weights, moments and step count as they were on both, applied false.
inline void expect_deferred_update_is_clip_and_update(Device dev, int steps = 7) {
  TwinStates tw(dev, 11);
  auto& [oc, gen, init, a, b] = tw;
  for (int t = 1; t <= steps; ++t) {
    for (std::size_t i = 0; i < init.size(); ++i) {
      Tensor g = randn(oc.shapes[i], {}, &gen) * (0.05 * t);
      if (t == 5 && i == 1) g.view({-1}).narrow(0, 0, 1).fill_(INFINITY);
      g = g.to(dev);
      a.params[i]->set_grad(g.clone());
      b.params[i]->set_grad(g.clone());
    }
    const double max_norm = t == 6 ? 0.0 : t % 2 == 1 ? 0.5 : 1e9;
    const double lr = 1e-2 / t;
    const float loss_value = t == 3 ? NAN : 2.5f - 0.1f * static_cast<float>(t);
    const Tensor loss = full({}, loss_value, TensorOptions(dev));
    std::vector<Tensor> before;
    for (std::size_t i = 0; i < init.size(); ++i) before.push_back(b.params[i]->detach().to(kCPU).clone());
    const int64_t count = b.opt->step_count();
    const train::UpdateResult ra = train::clip_and_update(*a.opt, max_norm, lr, std::isfinite(loss_value));
    train::UpdateResult rb;
    const train::DeferredUpdate d = train::update_unless_nonfinite(*b.opt, max_norm, lr, loss);
    EXPECT_EQ(d.launched, max_norm > 0) << "step " << t;
    if (d.launched) {
      rb = train::finish_deferred_update(*b.opt, loss.item(), d.norm.item());
    } else {
      rb = train::clip_and_update(*b.opt, max_norm, lr, std::isfinite(loss_value));
    }
    const bool skip = t == 3 || t == 5;
    EXPECT_EQ(ra.applied, !skip) << "step " << t;
    EXPECT_EQ(rb.applied, !skip) << "step " << t;
    EXPECT_TRUE(ra.grad_norm == rb.grad_norm || (std::isnan(ra.grad_norm) && std::isnan(rb.grad_norm)))
        << "step " << t << ": " << ra.grad_norm << " vs " << rb.grad_norm;
    EXPECT_EQ(b.opt->step_count(), count + (skip ? 0 : 1)) << "step " << t;
    EXPECT_EQ(a.opt->step_count(), b.opt->step_count()) << "step " << t;
    expect_same_states(a, b, t, dev);
    for (std::size_t i = 0; i < init.size() && skip; ++i) {
      EXPECT_TRUE(same(*b.params[i], before[i])) << "param " << i << " changed at skipped step " << t;
    }
    a.opt->zero_grad();
    b.opt->zero_grad();
  }
}

}  // namespace blu::test
