// multi_tensor_test.cpp: blutensor's multi-tensor optimizer primitives on the CPU (optim.h:
// adamw_step_, global_norm, scale_tensors_) against float64 references on fresh random lists of
// odd sizes (every element bounded), their agreement with optim::AdamW / clip_grad_norm_, and
// the errors bad lists give.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "blutensor/blutensor.h"
#include "support/grad_scale_update.h"

namespace {

using namespace blu;

std::vector<Shape> odd_shapes() {
  return {{37, 53}, {129}, {3, 1001}, {1}, {5, 7, 9}};
}

std::vector<Tensor> random_list(Generator& gen, DType dt, double scale) {
  std::vector<Tensor> out;
  for (const Shape& s : odd_shapes()) out.push_back((randn(s, {}, &gen) * scale).to(dt));
  return out;
}

std::vector<Tensor> clones(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.clone());
  return out;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// float64 AdamW reference (the formula of backend_ops.def) on vectors.
void adamw_ref(std::vector<double>& p, const std::vector<double>& g, std::vector<double>& m,
               std::vector<double>& v, const optim::AdamWOptions& o, int64_t step) {
  const double bc1 = 1 - std::pow(o.beta1, static_cast<double>(step));
  const double bc2 = 1 - std::pow(o.beta2, static_cast<double>(step));
  for (std::size_t i = 0; i < p.size(); ++i) {
    m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
    v[i] = o.beta2 * v[i] + (1 - o.beta2) * g[i] * g[i];
    p[i] = p[i] * (1 - o.lr * o.weight_decay) - o.lr / bc1 * m[i] / (std::sqrt(v[i] / bc2) + o.eps);
  }
}

TEST(MultiTensor, AdamWStepMatchesFloat64Reference) {
  for (DType dt : {kFloat32, kFloat64}) {
    Generator gen(7);
    std::vector<Tensor> ps = random_list(gen, dt, 1.0);
    std::vector<Tensor> ms, vs;
    for (const Tensor& p : ps) {
      ms.push_back(zeros_like(p));
      vs.push_back(zeros_like(p));
    }
    std::vector<std::vector<double>> rp, rm, rv;
    for (const Tensor& p : ps) {
      rp.push_back(p.to_double_vector());
      rm.emplace_back(p.numel(), 0.0);
      rv.emplace_back(p.numel(), 0.0);
    }
    optim::AdamWOptions o{3e-3, 0.9, 0.95, 1e-8, 0.1};
    const double u = dt == kFloat32 ? 6e-8 : 1.2e-16;
    for (int64_t step = 1; step <= 4; ++step) {
      std::vector<Tensor> gs = random_list(gen, dt, 0.1 * static_cast<double>(step));
      // The reference starts from the current (rounded) state: only this step's rounding counts.
      for (std::size_t i = 0; i < ps.size(); ++i) {
        rp[i] = ps[i].to_double_vector();
        rm[i] = ms[i].to_double_vector();
        rv[i] = vs[i].to_double_vector();
      }
      const std::vector<std::vector<double>> m_prev = rm;
      optim::adamw_step_(ps, gs, ms, vs, o, step);
      for (std::size_t i = 0; i < ps.size(); ++i) {
        const std::vector<double> g = gs[i].to_double_vector();
        adamw_ref(rp[i], g, rm[i], rv[i], o, step);
        const std::vector<double> gp = ps[i].to_double_vector(), gm = ms[i].to_double_vector(),
                                  gv = vs[i].to_double_vector();
        for (std::size_t e = 0; e < gp.size(); ++e) {
          const double m_mag = o.beta1 * std::fabs(m_prev[i][e]) + (1 - o.beta1) * std::fabs(g[e]);
          // 8 ulps: the f32 kernel also rounds 1 - beta (2.4e-7 relative for 0.9 and 0.95).
          ASSERT_NEAR(gm[e], rm[i][e], 8 * u * m_mag + 1e-300)
              << "m, tensor " << i << " elem " << e;
          ASSERT_NEAR(gv[e], rv[i][e], 8 * u * rv[i][e] + 1e-300)
              << "v, tensor " << i << " elem " << e;
          ASSERT_NEAR(gp[e], rp[i][e], 6 * u * std::fabs(rp[i][e]) + 40 * u * o.lr)
              << dtype_name(dt) << " p, tensor " << i << " elem " << e << " step " << step;
        }
      }
    }
  }
}

TEST(MultiTensor, AdamWStepIsWhatOptimAdamWDoes) {
  Generator gen(11);
  std::vector<Tensor> init = random_list(gen, kFloat32, 1.0);
  std::vector<Tensor> grads = random_list(gen, kFloat32, 0.2);
  std::vector<Tensor> params;
  for (const Tensor& t : init) params.push_back(t.clone().requires_grad_(true));
  optim::AdamWOptions o{1e-2, 0.8, 0.9, 1e-6, 0.05};
  optim::AdamW opt(params, o);
  std::vector<Tensor> ps = clones(init), ms, vs;
  for (const Tensor& p : ps) {
    ms.push_back(zeros_like(p));
    vs.push_back(zeros_like(p));
  }
  for (int64_t step = 1; step <= 3; ++step) {
    for (std::size_t i = 0; i < params.size(); ++i) params[i].set_grad(grads[i]);
    opt.step();
    optim::adamw_step_(ps, grads, ms, vs, o, step);
  }
  for (std::size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(ps[i].to_double_vector(), params[i].to_double_vector()) << "tensor " << i;
    EXPECT_EQ(ms[i].to_double_vector(), opt.exp_avg(i).to_double_vector()) << "tensor " << i;
  }
}

TEST(MultiTensor, GlobalNormAndClipCoefficient) {
  Generator gen(3);
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    std::vector<Tensor> ts = random_list(gen, dt, 0.7);
    ts.push_back(randn({6, 10}, {}, &gen).to(dt).t());  // a strided member
    double sumsq = 0;
    for (const Tensor& t : ts) {
      for (double x : t.to_double_vector()) sumsq += x * x;
    }
    const double exact = std::sqrt(sumsq);
    optim::GlobalNorm gn = optim::global_norm(ts, 0.25 * exact);
    EXPECT_EQ(gn.norm.dtype(), kFloat32);
    EXPECT_EQ(gn.norm.numel(), 1);
    EXPECT_NEAR(gn.norm.item(), exact, 1e-6 * exact) << dtype_name(dt);
    EXPECT_NEAR(gn.clip_coef.item(), 0.25 * exact / (exact + 1e-6), 1e-6) << dtype_name(dt);
    EXPECT_EQ(optim::global_norm(ts, 10 * exact).clip_coef.item(), 1.0);
    EXPECT_EQ(optim::global_norm(ts, 0.0).clip_coef.item(), 1.0);
  }
  // Mixed dtypes (the composite path) and the empty list.
  std::vector<Tensor> mixed{randn({17}, {}, &gen), randn({9}, {}, &gen).to(kFloat64)};
  double sumsq = 0;
  for (const Tensor& t : mixed) {
    for (double x : t.to_double_vector()) sumsq += x * x;
  }
  EXPECT_NEAR(optim::global_norm(mixed).norm.item(), std::sqrt(sumsq), 1e-6 * std::sqrt(sumsq));
  EXPECT_EQ(optim::global_norm({}).norm.item(), 0.0);
  EXPECT_EQ(optim::global_norm({}).clip_coef.item(), 1.0);
}

TEST(MultiTensor, ScaleTensorsContiguousStridedAndHalf) {
  Generator gen(5);
  std::vector<Tensor> ts = random_list(gen, kFloat32, 1.0);
  ts.push_back(randn({8, 3}, {}, &gen).to(kBFloat16));
  ts.push_back(randn({4, 6}, {}, &gen).t());  // strided view: scaled in place through the view
  std::vector<std::vector<double>> before;
  for (const Tensor& t : ts) before.push_back(t.to_double_vector());
  const double f = 0.37;
  optim::scale_tensors_(ts, scalar_tensor(f, kFloat32));
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const std::vector<double> after = ts[i].to_double_vector();
    const double tol = ts[i].dtype() == kBFloat16 ? 4e-3 : 1.2e-7;
    for (std::size_t e = 0; e < after.size(); ++e) {
      ASSERT_NEAR(after[e], before[i][e] * static_cast<float>(f), tol * std::fabs(before[i][e]))
          << "tensor " << i << " elem " << e;
    }
  }
}

TEST(MultiTensor, ClipGradNormUsesOneReduction) {
  Generator gen(9);
  std::vector<Tensor> params;
  double sumsq = 0;
  for (const Shape& s : odd_shapes()) {
    Tensor p = randn(s, {}, &gen).requires_grad_(true);
    Tensor g = randn(s, {}, &gen);
    for (double x : g.to_double_vector()) sumsq += x * x;
    p.set_grad(g);
    params.push_back(p);
  }
  const double exact = std::sqrt(sumsq);
  Tensor norm = optim::clip_grad_norm_(params, 1.0);
  EXPECT_NEAR(norm.item(), exact, 1e-6 * exact);
  double after = 0;
  for (const Tensor& p : params) {
    for (double x : p.grad().to_double_vector()) after += x * x;
  }
  EXPECT_NEAR(std::sqrt(after), 1.0, 1e-5);
}

TEST(MultiTensor, BadListsAreErrors) {
  Tensor a = randn({3, 4}), b = randn({3, 4}), c = randn({5});
  optim::AdamWOptions o;
  EXPECT_NE(error_of([&] {
              optim::adamw_step_({a}, {b, b}, {a}, {a}, o, 1);
            }).find("list sizes differ"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              optim::adamw_step_({a}, {c}, {zeros_like(a)}, {zeros_like(a)}, o, 1);
            }).find("does not match parameter"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              optim::adamw_step_({a}, {b}, {zeros_like(a)}, {zeros_like(a)}, o, 0);
            }).find("step=0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              Tensor h = a.to(kBFloat16);
              optim::adamw_step_({h}, {h}, {h}, {h}, o, 1);
            }).find("f32 or f64 only"),
            std::string::npos);
  optim::AdamWOptions bad = o;
  bad.beta1 = 1.0;
  EXPECT_NE(error_of([&] {
              optim::adamw_step_({a}, {b}, {zeros_like(a)}, {zeros_like(a)}, bad, 1);
            }).find("beta1=1"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              optim::global_norm({a, Tensor()});
            }).find("undefined"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              optim::global_norm({a, from_vector(std::vector<int64_t>{1, 2})});
            }).find("floating"),
            std::string::npos);
  EXPECT_NE(error_of([&] { optim::scale_tensors_({a}, randn({2})); }).find("one-element"),
            std::string::npos);
  for (const Tensor& bad_scale : {randn({2}), scalar_tensor(0.5, kFloat64)}) {
    const std::string e = error_of([&] {
      optim::adamw_step_({a}, {b}, {zeros_like(a)}, {zeros_like(a)}, o, 1, bad_scale);
    });
    EXPECT_NE(e.find("adamw_step_: grad_scale is"), std::string::npos) << e;
    EXPECT_NE(e.find("one f32 element"), std::string::npos) << e;
  }
}

// Note [Clip coefficient in the update] (blutrain): the coefficient inside the update is the
// scaling pass's bits, f32 and f64 lists.
TEST(MultiTensor, AdamWGradScaleIsScaleTensorsThenStep) {
  test::expect_grad_scale_update_is_scale_then_update(kCPU, kFloat32, 31);
  test::expect_grad_scale_update_is_scale_then_update(kCPU, kFloat64, 32);
}

// Note [Multi-tensor cast]: to_dtype_all gives what t.to(dtype) gives, tensor by tensor, bit for
// bit, forward and backward: a list of f32 leaves to bf16 (one node), one of them unused (its
// gradient stays undefined), a non-contiguous one and an f64 one (their own casts), one already
// bf16 (itself), and fp32 -> fp32 (the inputs themselves, no node).
TEST(MultiTensor, ToDtypeAllIsTheCastsOneByOne) {
  Generator gen(17);
  std::vector<Tensor> leaves;
  for (int i = 0; i < 6; ++i) {
    Tensor t = randn(i % 2 ? Shape{3 + i, 5} : Shape{7 + i}, {}, &gen);
    t.requires_grad_(true);
    leaves.push_back(t);
  }
  Tensor wide = randn({4, 6}, {}, &gen);
  Tensor strided = wide.transpose(0, 1);  // non-contiguous
  Tensor f64 = randn({5}, TensorOptions(DType::F64), &gen);
  f64.requires_grad_(true);
  Tensor already = randn({4}, {}, &gen).to(DType::BF16);
  std::vector<Tensor> in = leaves;
  in.push_back(strided);
  in.push_back(f64);
  in.push_back(already);
  const std::vector<Tensor> out = to_dtype_all(in, DType::BF16);
  ASSERT_EQ(out.size(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].dtype(), DType::BF16) << i;
    EXPECT_EQ(out[i].sizes(), in[i].sizes()) << i;
    EXPECT_EQ(out[i].to_double_vector(), in[i].detach().to(DType::BF16).to_double_vector()) << i;
  }
  EXPECT_TRUE(out.back().is_same(already));
  // A loss using all but leaf 4; the same loss through single casts; the same gradients, bitwise.
  auto loss_of = [&](const std::vector<Tensor>& cast) {
    Tensor l = sum(mul(cast[0], cast[0]));
    for (std::size_t i : {1u, 2u, 3u, 5u, 7u}) l = add(l, sum(mul(cast[i], 1.5)));
    return l;
  };
  loss_of(out).backward();
  std::vector<std::vector<double>> g1;
  for (std::size_t i : {0u, 1u, 2u, 3u, 5u}) g1.push_back(leaves[i].grad().to_double_vector());
  EXPECT_FALSE(leaves[4].grad().defined());
  const std::vector<double> g1_f64 = f64.grad().to_double_vector();
  for (Tensor& t : leaves) t.set_grad(Tensor());
  f64.set_grad(Tensor());
  std::vector<Tensor> one_by_one;
  for (const Tensor& t : in) one_by_one.push_back(t.to(DType::BF16));
  loss_of(one_by_one).backward();
  std::size_t k = 0;
  for (std::size_t i : {0u, 1u, 2u, 3u, 5u}) {
    EXPECT_EQ(leaves[i].grad().to_double_vector(), g1[k++]) << "leaf " << i;
    EXPECT_EQ(leaves[i].grad().dtype(), DType::F32);
  }
  EXPECT_EQ(f64.grad().to_double_vector(), g1_f64);
  // Same dtype: the inputs themselves.
  const std::vector<Tensor> same = to_dtype_all(leaves, DType::F32);
  for (std::size_t i = 0; i < leaves.size(); ++i) EXPECT_TRUE(same[i].is_same(leaves[i]));
  EXPECT_TRUE(to_dtype_all({}, DType::BF16).empty());
}

}  // namespace
