// The process-wide float32 matmul precision and strict-fp32 attention (Notes [Matmul precision],
// [Strict-fp32 attention] in blutensor/cuda_stream.h).
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

namespace {
std::atomic<int> g_fp32_attention{static_cast<int>(Fp32Attention::kComposite)};
}

void set_fp32_attention(Fp32Attention mode) noexcept {
  g_fp32_attention.store(static_cast<int>(mode), std::memory_order_relaxed);
}

Fp32Attention fp32_attention() noexcept {
  return static_cast<Fp32Attention>(g_fp32_attention.load(std::memory_order_relaxed));
}

}  // namespace blu
