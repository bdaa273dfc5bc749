// blutensor/src/cpu/cpu_math.h: branch-free float exp that GCC vectorises (softmax and
// cross-entropy rows spend most of their time in exp), plus a fixed-order vector-friendly sum.
//
// Note [CPU exp]
// exp(x) = 2^n e^r with n = round(x log2 e), r = x - n ln 2 (ln 2 split in two for exactness), e^r
// by its degree-7 Taylor polynomial on |r| <= ln2/2 (truncation < 6e-9 relative, so ~1 ulp overall).
// x < -87.3 gives exactly 0 (masked logits at -inf), x > 88.7 gives +inf, NaN propagates.
// Double precision keeps std::exp.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace blu::cpu {

__attribute__((always_inline)) inline float exp_fast(float x) {
  const float kLog2e = 1.44269504088896341f;
  const float kLn2Hi = 0.693145751953125f;
  const float kLn2Lo = 1.428606765330187045e-06f;
  float xc = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  float n = (xc * kLog2e + 12582912.0f) - 12582912.0f;  // round to nearest (2^23 + 2^22 trick)
  float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  float y = p * scale;
  y = x < -87.3f ? 0.0f : y;
  y = x > 88.7f ? INFINITY : y;
  return x != x ? x : y;
}

template <typename C> __attribute__((always_inline)) inline C exp_any(C x) {
  if constexpr (std::is_same_v<C, float>) {
    return exp_fast(x);
  } else {
    return std::exp(x);
  }
}

// Sum of n floats with 8 interleaved partial sums (vectorises; fixed order, deterministic).
template <typename C> __attribute__((always_inline)) inline C sum_fixed(const C* v, int64_t n) {
  C acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += v[i + j];
  C tail = 0;
  for (; i < n; ++i) tail += v[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

// Max of n > 0 values with 8 interleaved lanes (vectorises; NaN-insensitive like std::max).
template <typename C> __attribute__((always_inline)) inline C max_fixed(const C* v, int64_t n) {
  C acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = v[0];
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] = acc[j] > v[i + j] ? acc[j] : v[i + j];
  C m = acc[0];
  for (int j = 1; j < 8; ++j) m = m > acc[j] ? m : acc[j];
  for (; i < n; ++i) m = m > v[i] ? m : v[i];
  return m;
}

// tanh(u) = 1 - 2 / (exp(2u) + 1) through exp_fast (float; absolute error ~1e-7, which is what
// GELU needs); double keeps std::tanh.
template <typename C> __attribute__((always_inline)) inline C tanh_any(C u) {
  if constexpr (std::is_same_v<C, float>) {
    return 1.0f - 2.0f / (exp_fast(2.0f * u) + 1.0f);
  } else {
    return std::tanh(u);
  }
}

// Float row kernels compiled for AVX2+FMA and for the baseline, picked at run time (the exp
// loops are most of a CPU cross-entropy over a 50k vocabulary).
bool cpu_has_avx2();
// lse of row x[0, n) (buf: n floats of scratch).
float row_logsumexp_f32(const float* x, int64_t n, float* buf);
// out[i] = g * exp(x[i] - lse).
void row_scaled_softmax_f32(float* out, const float* x, int64_t n, float lse, float g);

}  // namespace blu::cpu
