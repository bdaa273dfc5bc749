// CUDA unary and binary elementwise ops (kernel_args.h's UnaryOp / BinaryOp) over any strides and
// broadcasts, through launch_map (elementwise_engine.cuh): the vectorised contiguous path or the
// strided one. Arithmetic in float for f32/bf16/f16 and double for f64, formulas identical to the
// CPU backend's (cpu/elementwise.cpp). GELU on contiguous f32/bf16 uses blublas::gelu_forward /
// gelu_backward (Note [blublas fast paths]).
//
// Note [blublas fast paths]
// blutensor's generic kernels handle every dtype and layout; where a blublas launcher computes
// the same function on a layout it accepts (contiguous f32/bf16 here), the op calls it instead.
// A launcher that returns a non-ok Status for a layout (alignment, ...) is not an error: the
// generic kernel runs. Results agree with the generic path within the dtype's rounding.
#include <cmath>

#include "blublas/elementwise.h"
#include "cuda/cuda_ops.h"
#include "cuda/elementwise_engine.cuh"

namespace blu::cuda_ops {
namespace {

using namespace detail;

constexpr double kGeluK = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluC = 0.044715;

template <typename C> __device__ __forceinline__ C gelu_fwd(C x) {
  C u = static_cast<C>(kGeluK) * (x + static_cast<C>(kGeluC) * x * x * x);
  return static_cast<C>(0.5) * x * (static_cast<C>(1) + tanh(u));
}
template <typename C> __device__ __forceinline__ C gelu_grad(C x) {
  C x2 = x * x;
  C u = static_cast<C>(kGeluK) * (x + static_cast<C>(kGeluC) * x2 * x);
  C t = tanh(u);
  C du = static_cast<C>(kGeluK) * (static_cast<C>(1) + static_cast<C>(3 * kGeluC) * x2);
  return static_cast<C>(0.5) * (static_cast<C>(1) + t) +
         static_cast<C>(0.5) * x * (static_cast<C>(1) - t * t) * du;
}

template <typename T, UnaryOp kOp>
struct UnaryFn {
  compute_t<T> alpha;
  __device__ __forceinline__ T operator()(T xs) const {
    using C = compute_t<T>;
    const C x = load_c(xs);
    C y;
    if constexpr (kOp == UnaryOp::kNeg) y = -x;
    else if constexpr (kOp == UnaryOp::kExp) y = exp(x);
    else if constexpr (kOp == UnaryOp::kLog) y = log(x);
    else if constexpr (kOp == UnaryOp::kSqrt) y = sqrt(x);
    else if constexpr (kOp == UnaryOp::kTanh) y = tanh(x);
    else if constexpr (kOp == UnaryOp::kRelu) y = x > C(0) ? x : C(0);
    else if constexpr (kOp == UnaryOp::kGelu) y = gelu_fwd<C>(x);
    else if constexpr (kOp == UnaryOp::kAddScalar) y = x + alpha;
    else if constexpr (kOp == UnaryOp::kMulScalar) y = x * alpha;
    else if constexpr (kOp == UnaryOp::kPowScalar) y = pow(x, alpha);
    else if constexpr (kOp == UnaryOp::kRSubScalar) y = alpha - x;
    else if constexpr (kOp == UnaryOp::kRDivScalar) y = alpha / x;
    else y = x > alpha ? alpha : x;  // kClampMax
    return store_c<T>(y);
  }
};

template <typename T>
struct SquareFn {
  __device__ __forceinline__ T operator()(T xs) const {
    const compute_t<T> x = load_c(xs);
    return store_c<T>(x * x);
  }
};

template <typename T, BinaryOp kOp>
struct BinaryFn {
  compute_t<T> alpha;
  __device__ __forceinline__ T operator()(T as, T bs) const {
    using C = compute_t<T>;
    const C a = load_c(as), b = load_c(bs);
    C y;
    if constexpr (kOp == BinaryOp::kAdd) y = a + alpha * b;
    else if constexpr (kOp == BinaryOp::kSub) y = a - b;
    else if constexpr (kOp == BinaryOp::kMul) y = a * b;
    else if constexpr (kOp == BinaryOp::kDiv) y = a / b;
    else if constexpr (kOp == BinaryOp::kReluBackward) y = b > C(0) ? a : C(0);
    else if constexpr (kOp == BinaryOp::kGeluBackward) y = a * gelu_grad<C>(b);
    else if constexpr (kOp == BinaryOp::kTanhBackward) y = a * (C(1) - b * b);
    else if constexpr (kOp == BinaryOp::kPowBackward) y = a * alpha * pow(b, alpha - C(1));
    else y = a == b ? C(1) : C(0);  // kEqMask
    return store_c<T>(y);
  }
};

template <typename T>
struct AddFn {  // alpha == 1: exactly a + b, as the CPU does
  __device__ __forceinline__ T operator()(T as, T bs) const {
    return store_c<T>(load_c(as) + load_c(bs));
  }
};

template <typename T, UnaryOp kOp>
void run_unary(const Tensor& out, const Tensor& a, double alpha) {
  launch_map<T, T, 1>(out, {&a}, UnaryFn<T, kOp>{static_cast<compute_t<T>>(alpha)}, "unary");
}

template <typename T>
void unary_typed(UnaryOp op, const Tensor& out, const Tensor& a, double alpha) {
  switch (op) {
    case UnaryOp::kNeg: run_unary<T, UnaryOp::kNeg>(out, a, alpha); break;
    case UnaryOp::kExp: run_unary<T, UnaryOp::kExp>(out, a, alpha); break;
    case UnaryOp::kLog: run_unary<T, UnaryOp::kLog>(out, a, alpha); break;
    case UnaryOp::kSqrt: run_unary<T, UnaryOp::kSqrt>(out, a, alpha); break;
    case UnaryOp::kTanh: run_unary<T, UnaryOp::kTanh>(out, a, alpha); break;
    case UnaryOp::kRelu: run_unary<T, UnaryOp::kRelu>(out, a, alpha); break;
    case UnaryOp::kGelu: run_unary<T, UnaryOp::kGelu>(out, a, alpha); break;
    case UnaryOp::kAddScalar: run_unary<T, UnaryOp::kAddScalar>(out, a, alpha); break;
    case UnaryOp::kMulScalar: run_unary<T, UnaryOp::kMulScalar>(out, a, alpha); break;
    case UnaryOp::kPowScalar:
      if (alpha == 2.0) {
        launch_map<T, T, 1>(out, {&a}, SquareFn<T>{}, "unary(pow 2)");
      } else {
        run_unary<T, UnaryOp::kPowScalar>(out, a, alpha);
      }
      break;
    case UnaryOp::kRSubScalar: run_unary<T, UnaryOp::kRSubScalar>(out, a, alpha); break;
    case UnaryOp::kRDivScalar: run_unary<T, UnaryOp::kRDivScalar>(out, a, alpha); break;
    case UnaryOp::kClampMax: run_unary<T, UnaryOp::kClampMax>(out, a, alpha); break;
  }
}

template <typename T, BinaryOp kOp>
void run_binary(const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  launch_map<T, T, 2>(out, {&a, &b}, BinaryFn<T, kOp>{static_cast<compute_t<T>>(alpha)},
                      "binary");
}

template <typename T>
void binary_typed(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b,
                  double alpha) {
  switch (op) {
    case BinaryOp::kAdd:
      if (alpha == 1.0) {
        launch_map<T, T, 2>(out, {&a, &b}, AddFn<T>{}, "binary(add)");
      } else {
        run_binary<T, BinaryOp::kAdd>(out, a, b, alpha);
      }
      break;
    case BinaryOp::kSub: run_binary<T, BinaryOp::kSub>(out, a, b, alpha); break;
    case BinaryOp::kMul: run_binary<T, BinaryOp::kMul>(out, a, b, alpha); break;
    case BinaryOp::kDiv: run_binary<T, BinaryOp::kDiv>(out, a, b, alpha); break;
    case BinaryOp::kReluBackward: run_binary<T, BinaryOp::kReluBackward>(out, a, b, alpha); break;
    case BinaryOp::kGeluBackward: run_binary<T, BinaryOp::kGeluBackward>(out, a, b, alpha); break;
    case BinaryOp::kTanhBackward: run_binary<T, BinaryOp::kTanhBackward>(out, a, b, alpha); break;
    case BinaryOp::kPowBackward: run_binary<T, BinaryOp::kPowBackward>(out, a, b, alpha); break;
    case BinaryOp::kEqMask: run_binary<T, BinaryOp::kEqMask>(out, a, b, alpha); break;
  }
}

// blublas GELU on contiguous f32/bf16 (Note [blublas fast paths]); false: not taken.
bool blublas_dtype(DType t, blublas::Dtype* out) {
  if (t == DType::F32) {
    *out = blublas::Dtype::kF32;
    return true;
  }
  if (t == DType::BF16) {
    *out = blublas::Dtype::kBF16;
    return true;
  }
  return false;
}

bool contiguous_same(const Tensor& out, std::initializer_list<const Tensor*> ins) {
  if (!out.is_contiguous()) return false;
  for (const Tensor* t : ins) {
    if (!t->is_contiguous() || t->sizes() != out.sizes()) return false;
  }
  return true;
}

}  // namespace

void unary(UnaryOp op, const Tensor& out, const Tensor& a, double alpha) {
  if (out.numel() == 0) return;
  blublas::Dtype bt;
  if (op == UnaryOp::kGelu && blublas_dtype(out.dtype(), &bt) && contiguous_same(out, {&a})) {
    if (blublas_ok(blublas::gelu_forward(out.data_ptr(), a.data_ptr(), nullptr, 1, out.numel(),
                                         bt, stream_of(out)),
                   "unary(gelu)")) {
      return;
    }
  }
  BLU_CUDA_SWITCH_FLOAT(out.dtype(), T, "unary", unary_typed<T>(op, out, a, alpha));
}

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  if (out.numel() == 0) return;
  blublas::Dtype bt;
  if (op == BinaryOp::kGeluBackward && blublas_dtype(out.dtype(), &bt) &&
      contiguous_same(out, {&a, &b})) {
    if (blublas_ok(blublas::gelu_backward(out.data_ptr(), a.data_ptr(), b.data_ptr(), nullptr, 1,
                                          out.numel(), bt, stream_of(out)),
                   "binary(gelu_backward)")) {
      return;
    }
  }
  BLU_CUDA_SWITCH_FLOAT(out.dtype(), T, "binary", binary_typed<T>(op, out, a, b, alpha));
}

}  // namespace blu::cuda_ops
