// gelu_linear_test.cpp: Note [GELU recompute]: gelu_linear(pre, W, b) equals linear(gelu(pre), W, b)
// bit for bit (output, and the gradients of pre, W and b, with and without a bias, random odd
// shapes, fp32 and fp64, leading dimensions of any rank), while its autograd node saves pre and
// the weight only; bad input is a clear error naming the op.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "blutensor/random.h"
#include "common/expect_error.h"

namespace {

using namespace blu;

std::vector<uint8_t> bytes(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<uint8_t> out(static_cast<size_t>(c.numel()) * c.element_size());
  std::memcpy(out.data(), c.data_ptr(), out.size());
  return out;
}

TEST(GeluLinear, EqualsLinearOverGeluBitForBit) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const DType dt = trial % 3 == 2 ? kFloat64 : kFloat32;
    const int64_t in = 1 + rng() % 29, out = 1 + rng() % 23, b0 = 1 + rng() % 5, b1 = 1 + rng() % 7;
    const bool with_bias = trial % 2 == 0;
    SCOPED_TRACE("trial " + std::to_string(trial) + " in " + std::to_string(in) + " out " + std::to_string(out));
    Generator g(500 + trial);
    Tensor pre0, w0, bias0, up;
    {
      NoGradGuard ng;
      pre0 = mul(randn(trial % 4 == 0 ? Shape{b0 * b1, in} : Shape{b0, b1, in}, TensorOptions(dt), &g), 1.5);
      w0 = mul(randn({out, in}, TensorOptions(dt), &g), 0.4);
      if (with_bias) bias0 = randn({out}, TensorOptions(dt), &g);
      Shape ys = pre0.sizes();
      ys.back() = out;
      up = randn(ys, TensorOptions(dt), &g);
    }
    const auto run = [&](bool fused) {
      Tensor pre = pre0.clone(), w = w0.clone(), b = with_bias ? bias0.clone() : Tensor();
      pre.requires_grad_(true);
      w.requires_grad_(true);
      if (with_bias) b.requires_grad_(true);
      Tensor y = fused ? gelu_linear(pre, w, b) : linear(gelu(pre), w, b);
      sum(mul(y, up)).backward();
      std::vector<Tensor> r{y.detach(), pre.grad(), w.grad()};
      if (with_bias) r.push_back(b.grad());
      return r;
    };
    const std::vector<Tensor> ref = run(false), got = run(true);
    ASSERT_EQ(ref.size(), got.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_EQ(got[i].sizes(), ref[i].sizes()) << i;
      EXPECT_EQ(bytes(got[i]), bytes(ref[i])) << "output/gradient " << i;
    }
  }
}

TEST(GeluLinear, BadInputIsAClearError) {
  const Tensor pre = zeros({3, 5}), w = zeros({4, 5});
  using test::expect_error;
  expect_error([&] { gelu_linear(pre, zeros({4, 6})); }, "gelu_linear: input");
  expect_error([&] { gelu_linear(pre, w, zeros({5})); }, "gelu_linear: bias");
  expect_error([&] { gelu_linear(pre.to(kFloat64), w); }, "gelu_linear");
}

}  // namespace
