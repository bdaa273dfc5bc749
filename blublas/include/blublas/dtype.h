// blublas/dtype.h: the element types blublas kernels take. Storage types only; how products are
// computed (strict fp32, tf32, fp32 accumulate) is a separate choice of each op.
#pragma once

#include <cstddef>

namespace blublas {

enum class Dtype : int {
  kF32 = 0,   // IEEE float32
  kBF16 = 1,  // bfloat16 (__nv_bfloat16)
  kF16 = 2,   // IEEE half (__half)
  kE4M3 = 3,  // FP8 E4M3 (__nv_fp8_e4m3: 4 exponent bits, 3 mantissa, max 448, no infinities)
  kE5M2 = 4,  // FP8 E5M2 (__nv_fp8_e5m2: 5 exponent bits, 2 mantissa, max 57344)
};
// FP8 types are GEMM inputs only (blublas/gemm.h: sm_90a); every other op takes f32/bf16(/f16).

constexpr bool dtype_is_fp8(Dtype t) { return t == Dtype::kE4M3 || t == Dtype::kE5M2; }
constexpr std::size_t dtype_size(Dtype t) {
  return t == Dtype::kF32 ? 4 : dtype_is_fp8(t) ? 1 : 2;
}
const char* dtype_name(Dtype t) noexcept;  // "f32", "bf16", "f16", "e4m3", "e5m2"

}  // namespace blublas
