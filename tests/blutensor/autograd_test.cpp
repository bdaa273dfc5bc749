// Autograd semantics: accumulation, backward with a gradient, no_grad, detach, retain_graph,
// the saved-tensor version check, grad-ready hooks and in-place rules.
#include <gtest/gtest.h>

#include "blutensor/blutensor.h"
#include "support/error_of.h"

namespace {

using namespace blu;

using blu::test::error_of;

Tensor vec(std::vector<double> v) { return from_vector(v, {}, kFloat64); }

TEST(Autograd, ChainRuleAndAccumulation) {
  Tensor x = vec({1, 2, 3}).requires_grad_();
  Tensor y = (x * x + x * 3.0).sum();  // dy/dx = 2x + 3
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{5, 7, 9}));
  // A second graph accumulates into .grad.
  (x * 2.0).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{7, 9, 11}));
  x.set_grad(Tensor());
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(y.grad_fn()->name(), "sum");
}

TEST(Autograd, BackwardWithGradientAndDiamond) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor a = x * 2.0;
  Tensor b = a * a + a;  // uses a twice
  b.backward(vec({1, 10}));
  // db/dx = (2a + 1) * 2, a = 2x
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{(2 * 2 + 1) * 2 * 1.0, (2 * 4 + 1) * 2 * 10.0}));
  std::string e = error_of([&] { (x * 2.0).backward(); });
  EXPECT_NE(e.find("grad can be implicitly created only for scalar outputs"), std::string::npos) << e;
  e = error_of([&] { (x * 2.0).backward(vec({1, 2, 3})); });
  EXPECT_NE(e.find("does not match the root"), std::string::npos) << e;
}

TEST(Autograd, NoGradAndDetach) {
  Tensor x = vec({1, 2}).requires_grad_();
  {
    NoGradGuard ng;
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_FALSE(GradMode::is_enabled());
  }
  EXPECT_TRUE(GradMode::is_enabled());
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.storage(), x.storage());
  Tensor z = (d * x).sum();  // gradient flows only through x
  z.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 2}));
  std::string e = error_of([&] { (d * 2.0).sum().backward(); });
  EXPECT_NE(e.find("does not require grad"), std::string::npos) << e;
}

TEST(Autograd, RetainGraph) {
  Tensor x = vec({3}).requires_grad_();
  Tensor y = (x * x).sum();
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{12}));
  std::string e = error_of([&] { y.backward(); });
  EXPECT_NE(e.find("backward through the graph a second time"), std::string::npos) << e;
  EXPECT_NE(e.find("retain_graph=true"), std::string::npos) << e;
}

TEST(Autograd, InPlaceModificationOfSavedTensorIsDetected) {
  Tensor w = vec({1, 2}).requires_grad_();
  Tensor x = vec({3, 4});
  Tensor y = (w * x).sum();  // mul saves x for w's gradient
  x.mul_(2.0);
  std::string e = error_of([&] { y.backward(); });
  EXPECT_NE(e.find("a tensor saved for backward was modified in place: mul"), std::string::npos) << e;
  // Through a view too (shared version counter).
  Tensor x2 = vec({3, 4});
  Tensor y2 = (w * x2).sum();
  x2.narrow(0, 0, 1).fill_(0.0);
  EXPECT_NE(error_of([&] { y2.backward(); }).find("modified in place"), std::string::npos);
  // Unmodified: fine.
  Tensor y3 = (w * vec({3, 4})).sum();
  y3.backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{3, 4}));
}

TEST(Autograd, InPlaceRules) {
  Tensor w = vec({1, 2}).requires_grad_();
  std::string e = error_of([&] { w.add_(1.0); });
  EXPECT_NE(e.find("add_: in-place operation on f64[2] on cpu which requires grad"), std::string::npos) << e;
  {
    NoGradGuard ng;
    w.add_(1.0);  // optimizer-style update
  }
  EXPECT_EQ(w.to_vector<double>(), (std::vector<double>{2, 3}));
  Tensor buf = zeros({2}, kFloat64);
  e = error_of([&] { buf.copy_(w * 2.0); });
  EXPECT_NE(e.find("copy_: in-place operation with an operand"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { (w * 2.0).requires_grad_(false); }).find("only leaf tensors"), std::string::npos);
  EXPECT_NE(error_of([&] { zeros({2}, kInt64).requires_grad_(); }).find("only floating"), std::string::npos);
}

TEST(Autograd, GradReadyHooksFireOncePerLeafWhenFinal) {
  Tensor a = vec({1, 2}).requires_grad_();
  Tensor b = vec({3, 4}).requires_grad_();
  std::vector<std::string> order;
  std::vector<double> seen_a;
  a.register_grad_ready_hook([&](Tensor& p) {
    order.push_back("a");
    seen_a = p.grad().to_vector<double>();
  });
  int id = b.register_grad_ready_hook([&](Tensor&) { order.push_back("b"); });
  // a is used twice (early and late); its hook must fire once, with the full gradient.
  Tensor h = a * 2.0;
  Tensor out = ((h * b).sum() + (a * 5.0).sum());
  out.backward();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(std::count(order.begin(), order.end(), "a"), 1);
  EXPECT_EQ(seen_a, (std::vector<double>{2 * 3 + 5, 2 * 4 + 5}));
  b.remove_grad_ready_hook(id);
  order.clear();
  (a * b).sum().backward();
  EXPECT_EQ(order, (std::vector<std::string>{"a"}));
  EXPECT_NE(error_of([&] { (a * 2.0).register_grad_ready_hook([](Tensor&) {}); }).find("needs a leaf"),
            std::string::npos);
}

TEST(Autograd, GradientsOfViewsAndBroadcasts) {
  Tensor x = arange(6, kFloat64).view({2, 3}).detach().requires_grad_();
  Tensor y = x.t().slice(0, 1, 3).sum() + x.select(0, 1).sum() * 10.0;
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 1, 1, 10, 11, 11}));
  Tensor bias = vec({1, 2, 3}).requires_grad_();
  (zeros({4, 3}, kFloat64) + bias).sum().backward();
  EXPECT_EQ(bias.grad().to_vector<double>(), (std::vector<double>{4, 4, 4}));
}

TEST(Autograd, CustomOpThroughRecord) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor y;
  {
    NoGradGuard ng;
    y = x * 3.0;
  }
  y = autograd::record("triple", y.detach(), {x}, {}, [](const Tensor& g, const BackwardContext&) {
    return std::vector<Tensor>{g * 3.0};
  });
  EXPECT_EQ(y.grad_fn()->name(), "triple");
  y.sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3, 3}));
}

// Note [Split of adjacent gradients]: gradients that are the pieces of one buffer reach split's
// input as that buffer (no concatenation copy); any other gradients are concatenated.
TEST(Autograd, SplitOfAdjacentGradientsIsTheirUnion) {
  const Tensor buf = arange(36, kFloat64).view({2, 3, 6});
  for (const std::string order : {"adjacent", "reversed", "missing"}) {
    SCOPED_TRACE(order);
    Tensor x = zeros({2, 3, 6}, kFloat64).requires_grad_();
    const void* seen = nullptr;
    Tensor y;
    {
      NoGradGuard ng;
      y = x * 1.0;
    }
    y = autograd::record("probe", y.detach(), {x}, {}, [&seen](const Tensor& g, const BackwardContext&) {
      seen = g.data_ptr();
      return std::vector<Tensor>{g};
    });
    std::vector<Tensor> parts = y.split(2, -1);
    std::vector<Tensor> grads = {buf.narrow(-1, 0, 2), buf.narrow(-1, 2, 2), buf.narrow(-1, 4, 2)};
    if (order == "reversed") grads = {buf.narrow(-1, 4, 2), buf.narrow(-1, 2, 2), buf.narrow(-1, 0, 2)};
    if (order == "missing") parts.pop_back(), grads.pop_back();
    autograd::backward(parts, grads);
    const std::vector<double> all = buf.to_vector<double>();
    std::vector<double> want = all;
    for (size_t i = 0; i < want.size(); ++i) {
      const size_t c = i % 6;  // column; piece c / 2
      if (order == "reversed") want[i] = all[i - c + (4 - 2 * (c / 2) + c % 2)];
      if (order == "missing" && c >= 4) want[i] = 0;
    }
    EXPECT_EQ(x.grad().to_vector<double>(), want);
    if (order == "adjacent") {
      EXPECT_EQ(seen, buf.data_ptr());
    } else {
      EXPECT_NE(seen, buf.data_ptr());
    }
  }
}

}  // namespace
