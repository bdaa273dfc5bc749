// nonfinite_test.cpp: the pieces of the --nonfinite policy (Note [Non-finite steps] in
// src/train/nonfinite.h): clip_and_update leaves weights, AdamW moments and step count bitwise
// alone when a gradient (or the loss) is not finite and names the first bad parameter in the
// optimizer's order, on both CPU paths (contiguous and strided gradients); the stop/skip streak
// counting; the test hook's parser. The end-to-end runs are in train_loop_test.cpp and
// data_parallel_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "blutensor/blutensor.h"
#include "blutrain/optimizer.h"

#include "../../blutrain/src/train/nonfinite.h"

using namespace blu;
using namespace blu::train;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Four parameters with random values, gradients and (after one good step) moments.
struct Params {
  std::vector<std::unique_ptr<Tensor>> tensors;
  std::vector<NamedParam> named;
  std::unique_ptr<AdamW> opt;
  bool strided = false;

  explicit Params(bool strided_grads) : strided(strided_grads) {
    const std::vector<Shape> shapes = {{17, 9}, {9}, {5, 33}, {33}};
    const char* names[] = {"wte.weight", "h.0.ln_1.bias", "h.0.mlp.c_fc.weight", "ln_f.bias"};
    Generator gen(42);
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      tensors.push_back(std::make_unique<Tensor>(randn(shapes[i], {}, &gen)));
      tensors.back()->requires_grad_(true);
      named.push_back({names[i], tensors.back().get(), shapes[i].size() == 2, false});
    }
    opt = std::make_unique<AdamW>(named, AdamWConfig{});
    set_grads(1);
    opt->step(1e-3);  // non-zero moments and step count 1
    set_grads(2);
  }
  void set_grads(uint64_t seed) {
    Generator gen(seed);
    for (const NamedParam& p : named) {
      Tensor g = randn(p.tensor->sizes(), {}, &gen);
      if (strided) {  // a non-contiguous view: the multi-tensor path (Note [Fused optimizer step on
                      // CUDA])
        Shape wide = g.sizes();
        wide.push_back(2);
        Tensor big = zeros(wide);
        big.select(-1, 0).copy_(g);
        g = big.select(-1, 0);
      }
      p.tensor->set_grad(g);
    }
  }
  void poison(std::size_t i, double value) {
    Tensor g = named[i].tensor->grad();
    g.reshape({-1}).narrow(0, g.numel() / 2, 1).fill_(value);
  }
  // Parameters, then moments, as values.
  std::vector<std::vector<double>> snapshot() {
    std::vector<std::vector<double>> out;
    for (const NamedParam& p : named) out.push_back(p.tensor->detach().to_double_vector());
    for (const Tensor& m : opt->exp_avg()) out.push_back(m.to_double_vector());
    for (const Tensor& v : opt->exp_avg_sq()) out.push_back(v.to_double_vector());
    return out;
  }
};

void expect_bitwise_equal(const std::vector<std::vector<double>>& a,
                          const std::vector<std::vector<double>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t t = 0; t < a.size(); ++t) {
    ASSERT_EQ(a[t].size(), b[t].size());
    for (std::size_t i = 0; i < a[t].size(); ++i) {
      ASSERT_EQ(std::memcmp(&a[t][i], &b[t][i], sizeof(double)), 0)
          << "tensor " << t << " element " << i;
    }
  }
}

}  // namespace

TEST(Nonfinite, UpdateIsRefusedAndTheFirstBadGradientNamedOnBothCpuPaths) {
  for (bool strided : {false, true}) {
    for (double bad : {kNaN, kInf, -kInf}) {
      for (double clip : {1.0, 0.0}) {
        SCOPED_TRACE(std::string(strided ? "strided" : "contiguous") + " grads, value " +
                     std::to_string(bad) + ", clip " + std::to_string(clip));
        Params p(strided);
        p.poison(3, bad);
        p.poison(2, bad);  // the first bad one in the optimizer's order is index 2
        const auto before = p.snapshot();
        const UpdateResult r = clip_and_update(*p.opt, clip, 1e-3);
        EXPECT_FALSE(r.applied);
        EXPECT_FALSE(std::isfinite(r.grad_norm));
        EXPECT_EQ(r.first_nonfinite, "h.0.mlp.c_fc.weight");
        EXPECT_EQ(p.opt->step_count(), 1);
        expect_bitwise_equal(p.snapshot(), before);
      }
    }
    // A non-finite loss with finite gradients: no update, no parameter to name.
    Params q(strided);
    const auto before = q.snapshot();
    const UpdateResult r = clip_and_update(*q.opt, 1.0, 1e-3, /*loss_finite=*/false);
    EXPECT_FALSE(r.applied);
    EXPECT_TRUE(std::isfinite(r.grad_norm));
    EXPECT_EQ(r.first_nonfinite, "");
    EXPECT_EQ(q.opt->step_count(), 1);
    expect_bitwise_equal(q.snapshot(), before);
    // Finite: the update happens (what AdamW::step after clip_grad_norm does).
    const UpdateResult ok = clip_and_update(*q.opt, 1.0, 1e-3);
    EXPECT_TRUE(ok.applied);
    EXPECT_EQ(q.opt->step_count(), 2);
    EXPECT_NE(q.snapshot()[0], before[0]);
  }
}

TEST(Nonfinite, AllFiniteAndFirstNonfiniteGradient) {
  Tensor t = randn({3, 50});
  EXPECT_TRUE(all_finite(t));
  EXPECT_TRUE(all_finite(t.transpose(0, 1)));  // the reduction path
  t.reshape({-1}).narrow(0, 149, 1).fill_(kInf);
  EXPECT_FALSE(all_finite(t));
  EXPECT_FALSE(all_finite(t.transpose(0, 1)));
  Params p(false);
  EXPECT_EQ(first_nonfinite_gradient(p.named), "");
  p.named[0].tensor->set_grad(Tensor());  // a parameter without a gradient is skipped
  p.poison(1, kNaN);
  EXPECT_EQ(first_nonfinite_gradient(p.named), "h.0.ln_1.bias");
}

TEST(Nonfinite, StopAndSkipPolicies) {
  using A = NonfinitePolicy::Action;
  NonfinitePolicy stop("stop", 10);
  EXPECT_EQ(stop.on_step(false), A::kContinue);
  EXPECT_EQ(stop.on_step(true), A::kStop);
  NonfinitePolicy skip("skip", 3);
  const std::vector<bool> steps = {false, true, true, false, true, true, true};
  const std::vector<A> want = {A::kContinue, A::kSkip, A::kSkip, A::kContinue,
                               A::kSkip,     A::kSkip, A::kStop};
  for (std::size_t i = 0; i < steps.size(); ++i)
    EXPECT_EQ(skip.on_step(steps[i]), want[i]) << "step " << i;
  EXPECT_EQ(skip.consecutive(), 3);
  NonfinitePolicy once("skip", 1);
  EXPECT_EQ(once.on_step(true), A::kStop);
  EXPECT_THROW(NonfinitePolicy("ignore", 10), blu::Error);
  EXPECT_THROW(NonfinitePolicy("skip", 0), blu::Error);
  EXPECT_EQ(describe_nonfinite_step(7, kNaN, kInf, "h.1.mlp.c_fc.weight"),
            "step 7: loss nan, gradient norm inf, first non-finite gradient (optimizer order): "
            "h.1.mlp.c_fc.weight");
  EXPECT_EQ(describe_nonfinite_step(2, -kInf, 1.5, ""),
            "step 2: loss -inf, gradient norm 1.5000, every gradient finite");
}

TEST(Nonfinite, InjectionHookParsesItsSpecAndRefusesBadOnes) {
  Params p(false);
  NonfiniteInjection a = NonfiniteInjection::parse("5", p.named);
  EXPECT_TRUE(a.active(5));
  EXPECT_FALSE(a.active(4) || a.active(6));
  EXPECT_EQ(a.target, "ln_f.bias");  // the last parameter
  EXPECT_TRUE(std::isnan(a.value));
  NonfiniteInjection b = NonfiniteInjection::parse("3-7@h.0.mlp.c_fc.weight:-inf", p.named);
  EXPECT_TRUE(b.active(3) && b.active(7) && !b.active(8));
  EXPECT_EQ(b.target, "h.0.mlp.c_fc.weight");
  EXPECT_EQ(b.value, -kInf);
  double unused_loss = 0;
  b.apply(p.named, unused_loss);
  EXPECT_EQ(first_nonfinite_gradient(p.named), "h.0.mlp.c_fc.weight");
  double loss = 1.0;
  NonfiniteInjection::parse("2@loss:inf", p.named).apply(p.named, loss);
  EXPECT_EQ(loss, kInf);
  EXPECT_FALSE(NonfiniteInjection().enabled());
  for (const char* bad : {"", "0", "x", "5-3", "3@", "3@nope", "3:zero", "-2", "2-"}) {
    try {
      NonfiniteInjection::parse(bad, p.named);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const blu::Error& e) {
      EXPECT_NE(std::string(e.what()).find(kInjectNonfiniteEnv), std::string::npos) << e.what();
    }
  }
}
