// gelu_fast.h (internal): the short GELU(tanh) and GELU-gradient forms the 16-bit TMA-store
// epilogues of the sm90 GEMM use (Note [Fast GELU for 16-bit outputs], Note [Fast GELU gradient
// for 16-bit outputs] in epilogue.cuh). Host and device: on the device the hardware tanh, exp2 and
// reciprocal (MUFU); on the host the libm functions, so a CPU test checks the algebra, the limits
// and the NaN / infinity behaviour over every bf16 input (tests/blublas/gelu_fast_test.cpp).
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define BLU_GELU_FN __host__ __device__ __forceinline__
#else
#define BLU_GELU_FN inline
#endif

namespace blublas::gemm_detail::gelu_fast {

inline constexpr float kSqrt2OverPi = 0.7978845608028654f;
inline constexpr float kCubic = 0.044715f;
inline constexpr float kLog2e = 1.4426950408889634f;

BLU_GELU_FN float tanh_hw(float x) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 750)
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(x));
  return t;
#else
  return std::tanh(x);
#endif
}

BLU_GELU_FN float exp2_hw(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return std::exp2(x);
#endif
}

BLU_GELU_FN float rcp_hw(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return 1.0f / x;
#endif
}

// gelu(x) = 0.5 x (1 + tanh(u)), u = k (x + c x^3) = x (k + k c x^2): five FP32 operations and one
// MUFU (the earlier form took eight and one). -inf gives NaN, as 0.5 x (1 + t) does.
BLU_GELU_FN float gelu(float x) {
  const float u = x * std::fma(kSqrt2OverPi * kCubic, x * x, kSqrt2OverPi);
  const float hx = 0.5f * x;
  return std::fma(hx, tanh_hw(u), hx);
}

// gelu'(x) = s + 2 x u' s (1 - s), with s = sigmoid(2u) = 0.5 (1 + tanh u) and s (1 - s) =
// (1 - tanh^2 u) / 4, u' = k (1 + 3 c x^2). From one exponential of -2|u| (never overflows):
// with e = exp(-2|u|) and r = 1 / (1 + e), the larger of s and 1 - s is r and the smaller e r, so
// s (1 - s) = e r^2 keeps its relative precision where tanh^2 is near 1 (no 1 - t^2). x is clamped
// to +-16 in the 2 x u' factor only (there e r^2 is 0 and the factor would overflow for |x| >~ 1e13,
// 0 * inf = NaN); a NaN x still makes s NaN. +-inf give the limits 1 and 0. 15 FP32 operations and
// two MUFU (the earlier form: 21 and two).
BLU_GELU_FN float gelu_grad(float x) {
  const float u = x * std::fma(kSqrt2OverPi * kCubic, x * x, kSqrt2OverPi);
  const float e = exp2_hw(std::fabs(u) * (-2.0f * kLog2e));
  const float r = rcp_hw(1.0f + e);
  const float er = e * r;
  const float s = u >= 0.0f ? r : er;
  const float xc = std::fmin(std::fmax(x, -16.0f), 16.0f);
  const float q = xc * std::fma(6.0f * kSqrt2OverPi * kCubic, xc * xc, 2.0f * kSqrt2OverPi);
  return std::fma(q, er * r, s);
}

}  // namespace blublas::gemm_detail::gelu_fast

#undef BLU_GELU_FN
