// The process-wide float32 matmul precision (Note [Matmul precision] in blutensor/cuda_stream.h).
// Here rather than in src/cuda so that a CPU-only build (which reads it as kHighest) has it too.
#include <atomic>

#include "blutensor/cuda_stream.h"

namespace blu {
namespace {
std::atomic<int> g_matmul_precision{static_cast<int>(MatmulPrecision::kHighest)};
}

void set_matmul_precision(MatmulPrecision precision) noexcept {
  g_matmul_precision.store(static_cast<int>(precision), std::memory_order_relaxed);
}

MatmulPrecision matmul_precision() noexcept {
  return static_cast<MatmulPrecision>(g_matmul_precision.load(std::memory_order_relaxed));
}

}  // namespace blu
