// matmul (1-D/2-D/batched with broadcast batch dims) and linear, on one differentiable primitive:
// bmm over [B, M, K] x [B, K, N]. A 2-D right operand folds the left operand's batch dims into M
// (one large GEMM for x @ W^T), which is the shape every Linear layer takes.
#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "dispatch.h"
#include "ops/op_helpers.h"

namespace blu {

namespace {

// The GEMM kernels take matrices with a unit stride in one of the two matrix dims.
Tensor gemm_operand(const Tensor& t) {
  const int64_t r = t.size(1), c = t.size(2);
  const bool row_major = t.stride(2) == 1 && (t.stride(1) >= c || r == 1);
  const bool col_major = t.stride(1) == 1 && (t.stride(2) >= r || c == 1);
  if (row_major || col_major) return t;
  return detail::contiguous_nograd(t);
}

Tensor bmm_kernel(const Tensor& a, const Tensor& b) {
  Tensor out = detail::new_empty({a.size(0), a.size(1), b.size(2)}, a.dtype(), a.device());
  BLU_DISPATCH(a.device(), gemm, out, gemm_operand(a), gemm_operand(b), false);
  return out;
}

// Differentiable [B, M, K] x [B, K, N] (equal B).
Tensor bmm(const Tensor& a, const Tensor& b) {
  Tensor out = bmm_kernel(a, b);
  return autograd::record("matmul", out, {a, b}, {a, b}, [](const Tensor& g, const BackwardContext& c) {
    Tensor ga, gb;
    if (c.needs_input_grad[0]) ga = bmm_kernel(g, c.saved[1].transpose(1, 2));
    if (c.needs_input_grad[1]) gb = bmm_kernel(c.saved[0].transpose(1, 2), g);
    return std::vector<Tensor>{ga, gb};
  });
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  detail::check_defined("matmul", a_in, "first input");
  detail::check_defined("matmul", b_in, "second input");
  detail::check_same_device("matmul", {a_in, b_in});
  detail::check_same_float_dtype("matmul", {a_in, b_in});
  BLU_CHECK(a_in.dim() >= 1 && b_in.dim() >= 1, "matmul: both inputs need at least 1 dim, got ",
            a_in.describe(), " and ", b_in.describe());
  Tensor a = a_in.dim() == 1 ? a_in.unsqueeze(0) : a_in;
  Tensor b = b_in.dim() == 1 ? b_in.unsqueeze(1) : b_in;
  const int64_t m = a.size(-2), k = a.size(-1), kb = b.size(-2), n = b.size(-1);
  BLU_CHECK(k == kb, "matmul: inner sizes differ: ", a_in.describe(), " x ", b_in.describe(), " (", k,
            " vs ", kb, ")");
  Shape out_shape;
  Tensor out;
  if (b.dim() == 2) {
    Shape batch(a.sizes().begin(), a.sizes().end() - 2);
    Tensor a3 = a.reshape({1, -1, k});
    out = bmm(a3, b.unsqueeze(0));
    out_shape = batch;
  } else {
    Shape ab(a.sizes().begin(), a.sizes().end() - 2), bb(b.sizes().begin(), b.sizes().end() - 2);
    Shape batch = detail::broadcast_shapes("matmul", ab, bb);
    Shape ae = batch, be = batch;
    ae.insert(ae.end(), {m, k});
    be.insert(be.end(), {k, n});
    Tensor a3 = a.expand(ae).reshape({-1, m, k});
    Tensor b3 = b.expand(be).reshape({-1, k, n});
    out = bmm(a3, b3);
    out_shape = batch;
  }
  if (a_in.dim() != 1) out_shape.push_back(m);
  if (b_in.dim() != 1) out_shape.push_back(n);
  return out.reshape(out_shape);
}

namespace {
// y = x3 W^T (+ b) for x3 [1, N, in], viewed as out_shape: the forward of linear and gelu_linear
// (no autograd: the callers record their own nodes).
Tensor linear_rows(const Tensor& x3, const Tensor& weight, const Tensor& bias, const Shape& out_shape) {
  Tensor y = bmm_kernel(x3, weight.detach().t().unsqueeze(0));
  if (bias.defined()) {
    BLU_DISPATCH(y.device(), binary, BinaryOp::kAdd, y, y, detail::broadcast_alias(bias.detach(), y.sizes()), 1.0);
  }
  return y.view(out_shape);
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  detail::check_linear_args("linear", x, weight, bias);
  // One primitive over x2 [N, in] (Note: the weight gradient comes out [out, in] directly, no
  // transposed copy): y = x2 W^T + b; dx = g W; dW = g^T x2; db = sum_rows(g).
  const int64_t in = weight.size(1), out_f = weight.size(0);
  Shape out_shape = x.sizes();
  out_shape.back() = out_f;
  Tensor x2 = detail::contiguous_nograd(x.detach()).view({1, -1, in});
  Tensor y = linear_rows(x2, weight, bias, out_shape);
  return autograd::record(
      "linear", y, {x, weight, bias}, {x2, weight},
      [in, out_f, x_shape = x.sizes()](const Tensor& g, const BackwardContext& c) {
        const Tensor &xs = c.saved[0], &w = c.saved[1];
        Tensor g3 = detail::contiguous_nograd(g).view({1, -1, out_f});
        Tensor dx, dw, db;
        if (c.needs_input_grad[0]) dx = bmm_kernel(g3, w.unsqueeze(0)).view(x_shape);
        if (c.needs_input_grad[1]) dw = bmm_kernel(g3.transpose(1, 2), xs).view({out_f, in});
        if (c.needs_input_grad[2]) db = detail::reduce_kernel(ReduceOp::kSum, g3, {0, 1}).view({out_f});
        return std::vector<Tensor>{dx, dw, db};
      });
}

// Note [GELU recompute]
// linear(gelu(pre), weight, bias) that saves pre, not gelu(pre): the backward computes the GELU
// again for the weight gradient (one elementwise pass over [N, in]) instead of holding it from the
// forward (GPT-2's MLP: 4 C values a token, 1.2 GB at d12 B8 T1024 in fp32, across the 12 layers).
// The same kernels in the same order as linear over gelu: results bit for bit equal. Backward
// order: dx = g W, dpre = gelu'(pre) dx (blu-plan's gelu_grad epilogue fuses the pair), then the
// GELU recomputed, dW = g^T gelu(pre), db = sum(g) (its bias_grad epilogue fuses the last two).
Tensor gelu_linear(const Tensor& pre, const Tensor& weight, const Tensor& bias) {
  detail::check_linear_args("gelu_linear", pre, weight, bias);
  const int64_t in = weight.size(1), out_f = weight.size(0);
  Shape out_shape = pre.sizes();
  out_shape.back() = out_f;
  const Tensor pre_c = detail::contiguous_nograd(pre.detach());
  Tensor y;
  {
    const Tensor act = detail::unary_kernel("gelu", UnaryOp::kGelu, pre_c, 0.0).view({1, -1, in});
    y = linear_rows(act, weight, bias, out_shape);
  }  // the activation is freed here: nothing saves it
  return autograd::record(
      "gelu_linear", y, {pre, weight, bias}, {pre_c, weight},
      [in, out_f, pre_shape = pre.sizes()](const Tensor& g, const BackwardContext& c) {
        const Tensor &p = c.saved[0], &w = c.saved[1];
        Tensor g3 = detail::contiguous_nograd(g).view({1, -1, out_f});
        Tensor dpre, dw, db;
        if (c.needs_input_grad[0]) {
          const Tensor dact = bmm_kernel(g3, w.unsqueeze(0)).view(pre_shape);
          dpre = detail::binary_kernel("gelu_backward", BinaryOp::kGeluBackward, dact, p, 0.0);
        }
        if (c.needs_input_grad[1]) {
          const Tensor act = detail::unary_kernel("gelu", UnaryOp::kGelu, p, 0.0).view({1, -1, in});
          dw = bmm_kernel(g3.transpose(1, 2), act).view({out_f, in});
        }
        if (c.needs_input_grad[2]) db = detail::reduce_kernel(ReduceOp::kSum, g3, {0, 1}).view({out_f});
        return std::vector<Tensor>{dpre, dw, db};
      });
}

}  // namespace blu
