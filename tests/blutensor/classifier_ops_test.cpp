// classifier_ops_test.cpp: linear_cross_entropy (Note [Linear cross-entropy]) against
// cross_entropy(linear(x, W, b), t) in float64 on random odd shapes: the loss and the gradients of
// x and W (with an upstream gradient other than 1, ignored targets, a mask bias with -inf columns),
// for chunks of 1 row, odd chunks, one chunk and more rows than exist; float32 within rounding;
// no_grad gives the same loss without the gradient; bad input is a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "blutensor/random.h"
#include "common/expect_error.h"

namespace {

using namespace blu;

struct Case {
  Tensor x, w, b, t;
};

Case make_case(uint64_t seed, int64_t n, int64_t c, int64_t v, DType dt, bool with_bias, bool with_ignored) {
  Generator g(seed);
  Case k;
  NoGradGuard ng;
  k.x = mul(randn({n, c}, TensorOptions(dt), &g), 0.7);
  k.w = mul(randn({v, c}, TensorOptions(dt), &g), 0.5);
  if (with_bias) {
    k.b = mul(randn({v}, TensorOptions(dt), &g), 0.3);
    k.b.narrow(0, v - 2, 2).fill_(-std::numeric_limits<double>::infinity());  // padded classes
  }
  k.t = randint(0, v - 2, {n}, TensorOptions(kInt64), &g);
  if (with_ignored) {
    if (n > 2) k.t.narrow(0, 1, 1).fill_(-100);
    if (n > 5) k.t.narrow(0, n - 3, 1).fill_(-100);
  }
  return k;
}

double max_abs(const Tensor& t) {
  NoGradGuard ng;
  return max_abs_diff(t, mul(t, 0.0));
}

struct Result {
  double loss;
  Tensor dx, dw;
};

Result run(const Case& k, bool fused, int64_t rows, double upstream) {
  Tensor x = k.x.detach().clone(), w = k.w.detach().clone();
  x.requires_grad_(true);
  w.requires_grad_(true);
  Tensor loss = fused ? linear_cross_entropy(x, w, k.b, k.t, -100, rows) : cross_entropy(linear(x, w, k.b), k.t);
  mul(loss, upstream).backward();
  return {loss.item(), x.grad(), w.grad()};
}

TEST(LinearCrossEntropy, MatchesLinearThenCrossEntropyInFloat64) {
  std::mt19937 rng(7);
  int cases = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t n = 1 + rng() % 37, c = 1 + rng() % 19, v = 3 + rng() % 41;
    const bool bias = trial % 2 == 0, ignored = trial % 3 == 0;
    const Case k = make_case(100 + trial, n, c, v, kFloat64, bias, ignored);
    const double upstream = 0.25 + (trial % 5);
    const Result ref = run(k, false, 0, upstream);
    for (int64_t rows : {int64_t{1}, int64_t{3}, n / 2 + 1, n, n + 5, int64_t{0}}) {
      SCOPED_TRACE("n " + std::to_string(n) + " c " + std::to_string(c) + " v " + std::to_string(v) + " rows " +
                   std::to_string(rows));
      const Result got = run(k, true, rows, upstream);
      EXPECT_NEAR(got.loss, ref.loss, 1e-12 * std::max(1.0, std::fabs(ref.loss)));
      EXPECT_LT(max_abs_diff(got.dx, ref.dx), 1e-12);
      EXPECT_LT(max_abs_diff(got.dw, ref.dw), 1e-12);
      ++cases;
    }
  }
  EXPECT_EQ(cases, 240);
}

TEST(LinearCrossEntropy, Float32WithinRoundingAndNoGradSkipsTheGradient) {
  const Case k = make_case(3, 53, 24, 67, kFloat32, true, true);
  const Result ref = run(k, false, 0, 1.0);
  const Result got = run(k, true, 8, 1.0);
  EXPECT_NEAR(got.loss, ref.loss, 1e-6 * std::fabs(ref.loss));
  const double scale_dx = std::max(1e-3, max_abs(ref.dx)), scale_dw = std::max(1e-3, max_abs(ref.dw));
  EXPECT_LT(max_abs_diff(got.dx, ref.dx), 1e-5 * scale_dx);
  EXPECT_LT(max_abs_diff(got.dw, ref.dw), 1e-5 * scale_dw);
  // The gradient of a graph that uses the loss twice: 2x.
  {
    Tensor x = k.x.detach().clone(), w = k.w.detach().clone();
    x.requires_grad_(true);
    w.requires_grad_(true);
    Tensor loss = linear_cross_entropy(x, w, k.b, k.t, -100, 8);
    add(loss, loss).backward();
    EXPECT_LT(max_abs_diff(w.grad(), mul(ref.dw, 2.0)), 2e-5 * scale_dw);
  }
  NoGradGuard ng;
  Tensor x = k.x.detach().clone();
  const Tensor loss = linear_cross_entropy(x, k.w, k.b, k.t, -100, 5);
  EXPECT_NEAR(loss.item(), ref.loss, 1e-6 * std::fabs(ref.loss));
  EXPECT_FALSE(loss.requires_grad());
}

// bf16: the arithmetic of linear + .to(f32) + cross_entropy (the chunk widened to fp32 inside the
// loss kernels, the gradient rounded to bf16 once): the loss within fp32 rounding of that path,
// the gradients within a few bf16 roundings of it (dW summed over chunks in fp32, one extra bf16
// rounding of dX).
TEST(LinearCrossEntropy, Bfloat16FollowsTheCastPath) {
  const Case k32 = make_case(9, 61, 32, 53, kFloat32, true, true);
  Case k = k32;
  k.x = k32.x.to(kBFloat16);
  k.w = k32.w.to(kBFloat16);
  k.b = k32.b.to(kBFloat16);
  const auto run_bf16 = [&](bool fused, int64_t rows) {
    Tensor x = k.x.detach().clone(), w = k.w.detach().clone();
    x.requires_grad_(true);
    w.requires_grad_(true);
    Tensor loss = fused ? linear_cross_entropy(x, w, k.b, k.t, -100, rows)
                        : cross_entropy(linear(x, w, k.b).to(kFloat32), k.t);
    mul(loss, 0.75).backward();
    return Result{loss.item(), x.grad(), w.grad()};
  };
  const Result ref = run_bf16(false, 0);
  for (int64_t rows : {int64_t{7}, int64_t{61}}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    const Result got = run_bf16(true, rows);
    EXPECT_EQ(got.dx.dtype(), kBFloat16);
    EXPECT_EQ(got.dw.dtype(), kBFloat16);
    EXPECT_NEAR(got.loss, ref.loss, 1e-6 * std::fabs(ref.loss));
    const double sdx = max_abs(ref.dx.to(kFloat32)), sdw = max_abs(ref.dw.to(kFloat32));
    EXPECT_LT(max_abs_diff(got.dx.to(kFloat32), ref.dx.to(kFloat32)), 3 * 0.0079 * sdx);
    EXPECT_LT(max_abs_diff(got.dw.to(kFloat32), ref.dw.to(kFloat32)), 3 * 0.0079 * sdw);
    EXPECT_GT(sdx, 0.0);
  }
}

// Every target ignored: the loss is NaN (0 / 0, as cross_entropy's) and the gradients are zero
// (as cross_entropy's backward gives), not NaN: a masked-out micro-batch must not poison an
// accumulation. And with only one input needing a gradient, that one is the reference's.
TEST(LinearCrossEntropy, AllIgnoredGivesZeroGradientsAndOneSidedGradientsMatch) {
  Case k = make_case(21, 13, 6, 9, kFloat64, true, false);
  {
    NoGradGuard ng;
    k.t.fill_(-100);
  }
  const Result got = run(k, true, 4, 1.0);
  EXPECT_TRUE(std::isnan(got.loss));
  EXPECT_EQ(max_abs(got.dx), 0.0);
  EXPECT_EQ(max_abs(got.dw), 0.0);
  const Case k2 = make_case(22, 17, 6, 9, kFloat64, true, true);
  const Result ref = run(k2, false, 0, 2.0);
  for (int side = 0; side < 2; ++side) {
    Tensor x = k2.x.detach().clone(), w = k2.w.detach().clone();
    (side == 0 ? x : w).requires_grad_(true);
    mul(linear_cross_entropy(x, w, k2.b, k2.t, -100, 5), 2.0).backward();
    if (side == 0) {
      EXPECT_LT(max_abs_diff(x.grad(), ref.dx), 1e-12);
      EXPECT_FALSE(w.grad().defined());
    } else {
      EXPECT_LT(max_abs_diff(w.grad(), ref.dw), 1e-12);
      EXPECT_FALSE(x.grad().defined());
    }
  }
}

TEST(LinearCrossEntropy, BadInputIsAClearError) {
  const Case k = make_case(5, 9, 4, 11, kFloat32, true, false);
  using test::expect_error;
  expect_error([&] { linear_cross_entropy(k.x, k.w.narrow(1, 0, 3), k.b, k.t); }, "does not match weight");
  expect_error([&] { linear_cross_entropy(k.x, k.w, k.b.narrow(0, 0, 5), k.t); }, "bias");
  expect_error([&] { linear_cross_entropy(k.x, k.w, k.b, k.t.narrow(0, 0, 4)); }, "9 rows but targets");
  expect_error([&] { linear_cross_entropy(k.x, k.w, k.b, k.t.to(kFloat32)); }, "targets must be");
  Tensor b = k.b.detach().clone();
  b.requires_grad_(true);
  expect_error([&] { linear_cross_entropy(k.x, k.w, b, k.t); }, "needs a gradient");
  expect_error([&] { linear_cross_entropy(k.x.to(kFloat64), k.w, k.b, k.t); }, "linear_cross_entropy");
  expect_error([&] { linear_cross_entropy(k.x.to(kBFloat16), k.w, k.b, k.t); }, "linear_cross_entropy");
}

}  // namespace
