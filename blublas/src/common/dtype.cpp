// Names of blublas element types (for messages).
#include "blublas/dtype.h"

namespace blublas {
const char* dtype_name(Dtype t) noexcept {
  switch (t) {
    case Dtype::kF32: return "f32";
    case Dtype::kBF16: return "bf16";
    case Dtype::kF16: return "f16";
    case Dtype::kE4M3: return "e4m3";
    case Dtype::kE5M2: return "e5m2";
  }
  return "unknown";
}
}  // namespace blublas
