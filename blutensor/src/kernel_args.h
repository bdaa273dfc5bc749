// blutensor/src/kernel_args.h: the op kinds and parameter structs shared by the kernel-level
// backends (cpu/cpu_ops.h and cuda/cuda_ops.h declare the same functions over them).
#pragma once

#include <cstdint>

namespace blu {

// out = f(a, alpha)
enum class UnaryOp : int {
  kNeg,         // -a
  kExp,         // exp(a)
  kLog,         // log(a)
  kSqrt,        // sqrt(a)
  kTanh,        // tanh(a)
  kRelu,        // max(a, 0)
  kGelu,        // 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3)))
  kAddScalar,   // a + alpha
  kMulScalar,   // a * alpha
  kPowScalar,   // a ^ alpha
  kRSubScalar,  // alpha - a
  kRDivScalar,  // alpha / a
  kClampMax,    // min(a, alpha)
};

// out = f(a, b, alpha); a and b already broadcast to out's shape (stride-0 dims).
enum class BinaryOp : int {
  kAdd,           // a + alpha * b
  kSub,           // a - b
  kMul,           // a * b
  kDiv,           // a / b
  kReluBackward,  // a * (b > 0)              a = grad, b = relu input
  kGeluBackward,  // a * gelu'(b)             a = grad, b = gelu input
  kTanhBackward,  // a * (1 - b * b)          a = grad, b = tanh output
  kPowBackward,   // a * alpha * b^(alpha-1)  a = grad, b = pow input, alpha = exponent
  kEqMask,        // a == b ? 1 : 0           (amax backward)
};

enum class ReduceOp : int { kSum, kMax };

struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  int64_t step = 1;  // 1-based step count after this update (bias correction)
};

}  // namespace blu
