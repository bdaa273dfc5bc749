// tf32 rounding by integer add (blublas/src/common/tf32_round.h, Note [tf32 rounding by integer
// add]) against an independent reference: frexp / round-half-away / ldexp in double for normal
// values, and the cvt.rna.tf32 semantics for infinities, NaN, zeros, subnormals and overflow.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "../../blublas/src/common/tf32_round.h"  // internal (src is private)

namespace {

using blublas::detail::tf32_rna_bits;

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }
float value(uint32_t b) { return std::bit_cast<float>(b); }

// x rounded to 11 significant bits (1 + 10 stored), nearest, ties away from zero, in double.
double reference(float x) {
  int e = 0;
  const double m = std::frexp(static_cast<double>(x), &e);  // |m| in [0.5, 1)
  return std::ldexp(std::round(std::ldexp(m, 11)), e - 11);   // std::round: ties away
}

TEST(Tf32Round, RandomNormalValuesMatchTheReference) {
  std::mt19937 rng(20261126);
  std::uniform_int_distribution<uint32_t> any;
  int checked = 0;
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t b = any(rng);
    const float x = value(b);
    if (!std::isnormal(x) || std::fabs(x) > 3.0e38f) continue;  // overflow checked below
    const double want = reference(x);
    const uint32_t got = tf32_rna_bits(b);
    ASSERT_EQ(static_cast<double>(value(got)), want)
        << "x = " << x << " (bits 0x" << std::hex << b << ")";
    ASSERT_EQ(got & 0x1fffu, 0u);
    ++checked;
  }
  EXPECT_GT(checked, 1500000);
}

TEST(Tf32Round, TiesGoAwayFromZero) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: rounds up in magnitude, for both signs.
  EXPECT_EQ(value(tf32_rna_bits(bits(1.0f + 0x1p-11f))), 1.0f + 0x1p-10f);
  EXPECT_EQ(value(tf32_rna_bits(bits(-1.0f - 0x1p-11f))), -1.0f - 0x1p-10f);
  // Just below the tie rounds down.
  EXPECT_EQ(value(tf32_rna_bits(bits(std::nextafter(1.0f + 0x1p-11f, 0.0f)))), 1.0f);
  // A carry out of the mantissa moves to the next binade.
  EXPECT_EQ(value(tf32_rna_bits(bits(std::nextafter(2.0f, 0.0f)))), 2.0f);
}

TEST(Tf32Round, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(value(tf32_rna_bits(bits(inf))), inf);
  EXPECT_EQ(value(tf32_rna_bits(bits(-inf))), -inf);
  EXPECT_TRUE(std::isnan(value(tf32_rna_bits(bits(std::numeric_limits<float>::quiet_NaN())))));
  EXPECT_EQ(tf32_rna_bits(bits(0.0f)), bits(0.0f));
  EXPECT_EQ(tf32_rna_bits(bits(-0.0f)), bits(-0.0f));
  // The largest finite floats round to infinity (past the largest tf32, 0x7f7fe000, by a tie or
  // more).
  EXPECT_EQ(value(tf32_rna_bits(bits(std::numeric_limits<float>::max()))), inf);
  EXPECT_EQ(tf32_rna_bits(0x7f7fe000u), 0x7f7fe000u);
  // Subnormals round their encoding the same way (cvt.rna.tf32 applies the same add and mask).
  EXPECT_EQ(tf32_rna_bits(0x00001000u), 0x00002000u);
  EXPECT_EQ(tf32_rna_bits(0x00000fffu), 0x00000000u);
}

}  // namespace
