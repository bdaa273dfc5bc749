// Float row kernels of cpu_math.h in two builds (AVX2+FMA and baseline), chosen at run time.
#include "cpu/cpu_math.h"

namespace blu::cpu {

namespace {

__attribute__((always_inline)) inline float logsumexp_body(const float* x, int64_t n, float* buf) {
  float m = max_fixed<float>(x, n);
  if (m == -INFINITY) return -INFINITY;
  for (int64_t i = 0; i < n; ++i) buf[i] = exp_fast(x[i] - m);
  return m + std::log(sum_fixed<float>(buf, n));
}

__attribute__((always_inline)) inline void scaled_softmax_body(float* out, const float* x, int64_t n, float lse,
                                                               float g) {
  for (int64_t i = 0; i < n; ++i) out[i] = g * exp_fast(x[i] - lse);
}

__attribute__((target("avx2,fma"))) float logsumexp_avx2(const float* x, int64_t n, float* buf) {
  return logsumexp_body(x, n, buf);
}
float logsumexp_generic(const float* x, int64_t n, float* buf) { return logsumexp_body(x, n, buf); }
__attribute__((target("avx2,fma"))) void scaled_softmax_avx2(float* out, const float* x, int64_t n, float lse,
                                                             float g) {
  scaled_softmax_body(out, x, n, lse, g);
}
void scaled_softmax_generic(float* out, const float* x, int64_t n, float lse, float g) {
  scaled_softmax_body(out, x, n, lse, g);
}

}  // namespace

bool cpu_has_avx2() {
  static const bool v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return v;
}

float row_logsumexp_f32(const float* x, int64_t n, float* buf) {
  return cpu_has_avx2() ? logsumexp_avx2(x, n, buf) : logsumexp_generic(x, n, buf);
}

void row_scaled_softmax_f32(float* out, const float* x, int64_t n, float lse, float g) {
  if (cpu_has_avx2()) {
    scaled_softmax_avx2(out, x, n, lse, g);
  } else {
    scaled_softmax_generic(out, x, n, lse, g);
  }
}

}  // namespace blu::cpu
