// blublas/dtype.h: the element types blublas kernels take. Storage types only; how products are
// computed (strict fp32, tf32, fp32 accumulate) is a separate choice of each op.
#pragma once

#include <cstddef>

namespace blublas {

enum class Dtype : int {
  kF32 = 0,   // IEEE float32
  kBF16 = 1,  // bfloat16 (__nv_bfloat16)
  kF16 = 2,   // IEEE half (__half)
};

constexpr std::size_t dtype_size(Dtype t) { return t == Dtype::kF32 ? 4 : 2; }
const char* dtype_name(Dtype t) noexcept;  // "f32", "bf16", "f16"

}  // namespace blublas
