// The short GELU(tanh) and GELU-gradient forms of the sm90 16-bit epilogues (blublas/src/gemm/
// gelu_fast.h, Note [sm90 GELU epilogue]) on the CPU, where the hardware tanh / exp2 / reciprocal
// become libm's: the algebra (sigmoid form, e r^2 for (1 - tanh^2) / 4, the clamp) against float64
// over every finite bf16 input, and the limits for infinities, NaN and huge values. The MUFU error
// itself is the device tests' part (gemm_sm90_gpu_test's GELU epilogues against float64).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "../../blublas/src/gemm/gelu_fast.h"  // internal (src is private)

namespace {

namespace gf = blublas::gemm_detail::gelu_fast;

constexpr double kS = 0.7978845608028654, kC = 0.044715;

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::tanh(kS * (x + kC * x * x * x))); }

// d/dx 0.5 x (1 + tanh u) = 0.5 (1 + tanh u) + 0.5 x sech^2(u) u', sech^2 without 1 - tanh^2.
double gelu_grad_ref(double x) {
  const double u = kS * (x + kC * x * x * x);
  const double ch = std::cosh(u);
  const double sech2 = std::isinf(ch) ? 0.0 : 1.0 / (ch * ch);
  return 0.5 * (1.0 + std::tanh(u)) + 0.5 * x * sech2 * kS * (1.0 + 3.0 * kC * x * x);
}

float bf16_value(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

TEST(GeluFast, EveryFiniteBf16InputAgainstFloat64) {
  double worst_gelu = 0, worst_grad = 0;
  float at_gelu = 0, at_grad = 0;
  int checked = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float x = bf16_value(static_cast<uint16_t>(b));
    if (!std::isfinite(x)) continue;
    ++checked;
    const double g = gelu_ref(x), d = gelu_grad_ref(x);
    const float gf_x = gf::gelu(x), df_x = gf::gelu_grad(x);
    ASSERT_TRUE(std::isfinite(gf_x)) << "gelu(" << x << ") = " << gf_x;
    ASSERT_TRUE(std::isfinite(df_x)) << "gelu'(" << x << ") = " << df_x;
    // Relative to max(1, |gelu|): float rounding of u, t and the FMA (the cancellation of
    // 1 + tanh u for x < -4 leaves ~1e-7 absolute, as in any float form).
    const double eg = std::fabs(gf_x - g) / std::fmax(1.0, std::fabs(g));
    const double ed = std::fabs(df_x - d);  // gelu' lies in [-0.17, 1.13]: absolute
    if (eg > worst_gelu) worst_gelu = eg, at_gelu = x;
    if (ed > worst_grad) worst_grad = ed, at_grad = x;
  }
  EXPECT_EQ(checked, 65536 - 256);  // exponent 0xff: 128 patterns (inf, NaN) per sign
  EXPECT_LT(worst_gelu, 2e-7) << "at x = " << at_gelu;
  EXPECT_LT(worst_grad, 3e-7) << "at x = " << at_grad;
  std::printf("gelu: worst %.3g at %g; gelu': worst %.3g at %g (%d inputs)\n", worst_gelu, at_gelu,
              worst_grad, at_grad, checked);
}

TEST(GeluFast, LimitsInfinitiesAndNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(gf::gelu(inf), inf);
  EXPECT_EQ(gf::gelu(1e30f), 1e30f);
  EXPECT_EQ(gf::gelu(-1e30f), 0.0f);
  EXPECT_EQ(gf::gelu(-100.0f), 0.0f);
  EXPECT_EQ(gf::gelu(0.0f), 0.0f);
  EXPECT_TRUE(std::isnan(gf::gelu(nan)));
  EXPECT_EQ(gf::gelu_grad(inf), 1.0f);
  EXPECT_EQ(gf::gelu_grad(-inf), 0.0f);
  EXPECT_EQ(gf::gelu_grad(3e38f), 1.0f);
  EXPECT_EQ(gf::gelu_grad(-3e38f), 0.0f);
  EXPECT_EQ(gf::gelu_grad(0.0f), 0.5f);
  EXPECT_EQ(gf::gelu_grad(-0.0f), 0.5f);
  EXPECT_TRUE(std::isnan(gf::gelu_grad(nan)));
  EXPECT_TRUE(std::isnan(gf::gelu_grad(-nan)));
}

TEST(GeluFast, ReferenceGradientIsTheDerivativeOfTheReference) {
  // The float64 gradient above against a central difference of the float64 GELU: a slip in the
  // reference would otherwise pass with a matching slip in gelu_fast.h.
  for (double x = -8.0; x <= 8.0; x += 0.0625) {
    const double h = 1e-5;
    const double fd = (gelu_ref(x + h) - gelu_ref(x - h)) / (2 * h);
    EXPECT_NEAR(gelu_grad_ref(x), fd, 1e-8) << "x = " << x;
  }
}

}  // namespace
