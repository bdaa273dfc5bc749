// The process-wide float32 matmul precision and strict-fp32 attention (Notes [Matmul precision],
// [Strict-fp32 attention] in blutensor/cuda_stream.h).
// Here rather than in src/cuda so that a CPU-only build (which reads them as the defaults) has them too.
#include <atomic>

#include "blutensor/cuda_stream.h"

namespace blu {
namespace {

// One enum-valued process-wide setting, read and written without locks.
template <typename E>
class Setting {
 public:
  explicit constexpr Setting(E initial) : value_(static_cast<int>(initial)) {}
  void set(E v) noexcept { value_.store(static_cast<int>(v), std::memory_order_relaxed); }
  E get() const noexcept { return static_cast<E>(value_.load(std::memory_order_relaxed)); }

 private:
  std::atomic<int> value_;
};

Setting<MatmulPrecision> g_matmul_precision{MatmulPrecision::kHighest};
Setting<Fp32Attention> g_fp32_attention{Fp32Attention::kComposite};

}  // namespace

void set_matmul_precision(MatmulPrecision precision) noexcept { g_matmul_precision.set(precision); }
MatmulPrecision matmul_precision() noexcept { return g_matmul_precision.get(); }
void set_fp32_attention(Fp32Attention mode) noexcept { g_fp32_attention.set(mode); }
Fp32Attention fp32_attention() noexcept { return g_fp32_attention.get(); }

}  // namespace blu
