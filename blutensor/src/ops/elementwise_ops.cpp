// Elementwise ops with broadcasting and their backward (gradients are summed back to each input's
// shape with sum_to). Backward formulas use differentiable ops (run under no_grad by the engine).
#include <cmath>

#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "dispatch.h"
#include "ops/op_helpers.h"

namespace blu {

namespace detail {

Tensor unary_kernel(const char* op, UnaryOp kind, const Tensor& a, double alpha) {
  check_defined(op, a, "input");
  check_same_float_dtype(op, {a});
  Tensor out = new_empty(a.sizes(), a.dtype(), a.device());
  BLU_DISPATCH(a.device(), unary, kind, out, a, alpha);
  return out;
}

Tensor binary_kernel(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b, double alpha) {
  check_defined(op, a, "first input");
  check_defined(op, b, "second input");
  check_same_device(op, {a, b});
  check_same_float_dtype(op, {a, b});
  Shape s = broadcast_shapes(op, a.sizes(), b.sizes());
  Tensor out = new_empty(s, a.dtype(), a.device());
  BLU_DISPATCH(a.device(), binary, kind, out, broadcast_alias(a, s), broadcast_alias(b, s), alpha);
  return out;
}

}  // namespace detail

namespace {
using detail::binary_kernel;
using detail::unary_kernel;
using Grads = std::vector<Tensor>;

Tensor maybe_sum_to(bool needed, const Tensor& g, const Shape& shape) {
  return needed ? sum_to(g, shape) : Tensor();
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  Tensor out = binary_kernel("add", BinaryOp::kAdd, a, b, alpha);
  return autograd::record("add", out, {a, b}, {},
                          [as = a.sizes(), bs = b.sizes(), alpha](const Tensor& g, const BackwardContext& c) {
                            Tensor gb;
                            if (c.needs_input_grad[1]) gb = sum_to(alpha == 1.0 ? g : g * alpha, bs);
                            return Grads{maybe_sum_to(c.needs_input_grad[0], g, as), gb};
                          });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_kernel("sub", BinaryOp::kSub, a, b, 1.0);
  return autograd::record("sub", out, {a, b}, {},
                          [as = a.sizes(), bs = b.sizes()](const Tensor& g, const BackwardContext& c) {
                            Tensor gb;
                            if (c.needs_input_grad[1]) gb = sum_to(neg(g), bs);
                            return Grads{maybe_sum_to(c.needs_input_grad[0], g, as), gb};
                          });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_kernel("mul", BinaryOp::kMul, a, b, 1.0);
  return autograd::record("mul", out, {a, b}, {a, b},
                          [as = a.sizes(), bs = b.sizes()](const Tensor& g, const BackwardContext& c) {
                            Tensor ga, gb;
                            if (c.needs_input_grad[0]) ga = sum_to(mul(g, c.saved[1]), as);
                            if (c.needs_input_grad[1]) gb = sum_to(mul(g, c.saved[0]), bs);
                            return Grads{ga, gb};
                          });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_kernel("div", BinaryOp::kDiv, a, b, 1.0);
  return autograd::record("div", out, {a, b}, {a, b},
                          [as = a.sizes(), bs = b.sizes()](const Tensor& g, const BackwardContext& c) {
                            Tensor ga, gb;
                            if (c.needs_input_grad[0]) ga = sum_to(div(g, c.saved[1]), as);
                            if (c.needs_input_grad[1]) {
                              gb = sum_to(neg(div(mul(g, c.saved[0]), mul(c.saved[1], c.saved[1]))), bs);
                            }
                            return Grads{ga, gb};
                          });
}

Tensor add(const Tensor& a, double b) {
  Tensor out = unary_kernel("add", UnaryOp::kAddScalar, a, b);
  return autograd::record("add_scalar", out, {a}, {},
                          [](const Tensor& g, const BackwardContext&) { return Grads{g}; });
}

Tensor mul(const Tensor& a, double b) {
  Tensor out = unary_kernel("mul", UnaryOp::kMulScalar, a, b);
  return autograd::record("mul_scalar", out, {a}, {},
                          [b](const Tensor& g, const BackwardContext&) { return Grads{mul(g, b)}; });
}

Tensor rsub(const Tensor& a, double b) {
  Tensor out = unary_kernel("rsub", UnaryOp::kRSubScalar, a, b);
  return autograd::record("rsub_scalar", out, {a}, {},
                          [](const Tensor& g, const BackwardContext&) { return Grads{neg(g)}; });
}

Tensor rdiv(const Tensor& a, double b) {
  Tensor out = unary_kernel("rdiv", UnaryOp::kRDivScalar, a, b);
  return autograd::record("rdiv_scalar", out, {a}, {a}, [b](const Tensor& g, const BackwardContext& c) {
    const Tensor& x = c.saved[0];
    return Grads{mul(div(g, mul(x, x)), -b)};
  });
}

Tensor neg(const Tensor& a) {
  Tensor out = unary_kernel("neg", UnaryOp::kNeg, a, 0.0);
  return autograd::record("neg", out, {a}, {},
                          [](const Tensor& g, const BackwardContext&) { return Grads{neg(g)}; });
}

Tensor exp(const Tensor& a) {
  Tensor out = unary_kernel("exp", UnaryOp::kExp, a, 0.0);
  return autograd::record("exp", out, {a}, {out}, [](const Tensor& g, const BackwardContext& c) {
    return Grads{mul(g, c.saved[0])};
  });
}

Tensor log(const Tensor& a) {
  Tensor out = unary_kernel("log", UnaryOp::kLog, a, 0.0);
  return autograd::record("log", out, {a}, {a}, [](const Tensor& g, const BackwardContext& c) {
    return Grads{div(g, c.saved[0])};
  });
}

Tensor sqrt(const Tensor& a) {
  Tensor out = unary_kernel("sqrt", UnaryOp::kSqrt, a, 0.0);
  return autograd::record("sqrt", out, {a}, {out}, [](const Tensor& g, const BackwardContext& c) {
    return Grads{div(mul(g, 0.5), c.saved[0])};
  });
}

Tensor pow(const Tensor& a, double e) {
  Tensor out = unary_kernel("pow", UnaryOp::kPowScalar, a, e);
  return autograd::record("pow", out, {a}, {a}, [e](const Tensor& g, const BackwardContext& c) {
    return Grads{binary_kernel("pow_backward", BinaryOp::kPowBackward, g, c.saved[0], e)};
  });
}

Tensor tanh(const Tensor& a) {
  Tensor out = unary_kernel("tanh", UnaryOp::kTanh, a, 0.0);
  return autograd::record("tanh", out, {a}, {out}, [](const Tensor& g, const BackwardContext& c) {
    return Grads{binary_kernel("tanh_backward", BinaryOp::kTanhBackward, g, c.saved[0], 0.0)};
  });
}

Tensor relu(const Tensor& a) {
  Tensor out = unary_kernel("relu", UnaryOp::kRelu, a, 0.0);
  return autograd::record("relu", out, {a}, {a}, [](const Tensor& g, const BackwardContext& c) {
    return Grads{binary_kernel("relu_backward", BinaryOp::kReluBackward, g, c.saved[0], 0.0)};
  });
}

Tensor gelu(const Tensor& a) {
  Tensor out = unary_kernel("gelu", UnaryOp::kGelu, a, 0.0);
  return autograd::record("gelu", out, {a}, {a}, [](const Tensor& g, const BackwardContext& c) {
    return Grads{binary_kernel("gelu_backward", BinaryOp::kGeluBackward, g, c.saved[0], 0.0)};
  });
}

Tensor clamp_max(const Tensor& a, double max_value) {
  Tensor out = unary_kernel("clamp_max", UnaryOp::kClampMax, a, max_value);
  return autograd::record("clamp_max", out, {a}, {a, out}, [](const Tensor& g, const BackwardContext& c) {
    Tensor pass = binary_kernel("clamp_max_backward", BinaryOp::kEqMask, c.saved[0], c.saved[1], 0.0);
    return Grads{mul(g, pass)};
  });
}

// ---------------------------------------------------------------- operators
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return add(a, -b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return mul(a, 1.0 / b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return rsub(b, a); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) { return rdiv(b, a); }
Tensor operator-(const Tensor& a) { return neg(a); }

// ---------------------------------------------------------------- comparisons
double max_abs_diff(const Tensor& a, const Tensor& b) {
  BLU_CHECK(a.sizes() == b.sizes(), "max_abs_diff: shapes differ: ", a.describe(), " vs ", b.describe());
  std::vector<double> x = a.to_double_vector(), y = b.to_double_vector();
  double m = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    double d = std::fabs(x[i] - y[i]);
    if (std::isnan(d)) return d;
    m = std::max(m, d);
  }
  return m;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.sizes() != b.sizes()) return false;
  std::vector<double> x = a.to_double_vector(), y = b.to_double_vector();
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!(std::fabs(x[i] - y[i]) <= atol + rtol * std::fabs(y[i]))) return false;
  }
  return true;
}

}  // namespace blu
