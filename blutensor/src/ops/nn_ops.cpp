// NN ops: layer_norm, softmax / log_softmax, scaled dot-product attention (math version),
// causal masking, embedding, cross-entropy with ignore_index, dropout. Each checks its arguments,
// makes its inputs contiguous, calls one kernel through the dispatch and records its backward.
#include <cmath>
#include <limits>

#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "blutensor/philox.h"
#include "dispatch.h"
#if BLU_HAVE_CUDA_OPS
#include "blutensor/cuda_stream.h"
#endif
#include "ops/op_helpers.h"

namespace blu {

namespace {
using Grads = std::vector<Tensor>;
using detail::contiguous_nograd;
using detail::new_empty;

DType stats_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

Tensor softmax_last(const Tensor& x, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  Tensor xc = contiguous_nograd(x);
  Tensor y = new_empty(x.sizes(), x.dtype(), x.device());
  BLU_DISPATCH(x.device(), softmax_forward, y, xc, log);
  return autograd::record(op, y, {x}, {y}, [log](const Tensor& g, const BackwardContext& c) {
    const Tensor& yy = c.saved[0];
    Tensor dx = new_empty(yy.sizes(), yy.dtype(), yy.device());
    BLU_DISPATCH(yy.device(), softmax_backward, dx, contiguous_nograd(g), yy, log);
    return Grads{dx};
  });
}

Tensor softmax_any(const Tensor& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  detail::check_defined(op, x, "input");
  detail::check_same_float_dtype(op, {x});
  if (x.dim() == 0) return softmax_last(x.reshape({1}), log).reshape({});
  int64_t d = detail::wrap_dim(dim, x.dim(), op);
  if (d == x.dim() - 1) return softmax_last(x, log);
  return softmax_last(x.transpose(d, -1), log).transpose(d, -1);
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_any(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_any(x, dim, true); }

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  detail::check_defined("layer_norm", x, "input");
  detail::check_same_device("layer_norm", {x, weight, bias});
  detail::check_same_float_dtype("layer_norm", {x, weight, bias});
  BLU_CHECK(x.dim() >= 1, "layer_norm: input must have at least 1 dim, got ", x.describe());
  const int64_t c = x.size(-1);
  for (const Tensor* p : {&weight, &bias}) {
    if (p->defined()) {
      BLU_CHECK(p->dim() == 1 && p->size(0) == c, "layer_norm: weight/bias ", p->describe(),
                " does not match the last dim of ", x.describe());
    }
  }
  Tensor xc = contiguous_nograd(x);
  Tensor wc = weight.defined() ? contiguous_nograd(weight) : Tensor();
  Tensor bc = bias.defined() ? contiguous_nograd(bias) : Tensor();
  const int64_t rows = c == 0 ? 0 : x.numel() / c;
  Tensor y = new_empty(x.sizes(), x.dtype(), x.device());
  Tensor mean = new_empty({rows}, stats_dtype(x.dtype()), x.device());
  Tensor rstd = new_empty({rows}, stats_dtype(x.dtype()), x.device());
  BLU_DISPATCH(x.device(), layer_norm_forward, y, mean, rstd, xc, wc, bc, eps);
  return autograd::record("layer_norm", y, {x, weight, bias}, {xc, wc, mean, rstd},
                          [](const Tensor& g, const BackwardContext& c) {
                            const Tensor &xs = c.saved[0], &ws = c.saved[1], &ms = c.saved[2], &rs = c.saved[3];
                            Tensor dx = c.needs_input_grad[0] ? new_empty(xs.sizes(), xs.dtype(), xs.device()) : Tensor();
                            Tensor dw = c.needs_input_grad[1] ? new_empty(ws.sizes(), ws.dtype(), ws.device()) : Tensor();
                            Tensor db = c.needs_input_grad[2] ? new_empty({xs.size(-1)}, xs.dtype(), xs.device()) : Tensor();
                            BLU_DISPATCH(xs.device(), layer_norm_backward, dx, dw, db, contiguous_nograd(g), xs, ws,
                                         ms, rs);
                            return Grads{dx, dw, db};
                          });
}

Tensor masked_fill_causal(const Tensor& x, double value) {
  detail::check_defined("masked_fill_causal", x, "input");
  detail::check_same_float_dtype("masked_fill_causal", {x});
  BLU_CHECK(x.dim() >= 2, "masked_fill_causal: needs at least 2 dims, got ", x.describe());
  Tensor out = new_empty(x.sizes(), x.dtype(), x.device());
  BLU_DISPATCH(x.device(), causal_fill, out, contiguous_nograd(x), value);
  return autograd::record("masked_fill_causal", out, {x}, {}, [](const Tensor& g, const BackwardContext&) {
    Tensor gi = new_empty(g.sizes(), g.dtype(), g.device());
    BLU_DISPATCH(g.device(), causal_fill, gi, contiguous_nograd(g), 0.0);
    return Grads{gi};
  });
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                                    double scale) {
  const char* op = "scaled_dot_product_attention";
  detail::check_defined(op, q, "q");
  detail::check_defined(op, k, "k");
  detail::check_defined(op, v, "v");
  detail::check_same_device(op, {q, k, v});
  detail::check_same_float_dtype(op, {q, k, v});
  BLU_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim() && q.size(-1) == k.size(-1) &&
                k.size(-2) == v.size(-2),
            op, ": expected q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv], got ",
            detail::describe_all({q, k, v}));
  double s = scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  // Note [Fused attention on CUDA]
  // On CUDA, bf16 and tf32 attention run as one autograd node over blublas flash attention (no
  // [B,H,T,T] intermediates: less memory and time). Strict fp32 takes the composite path unless
  // Note [Strict-fp32 attention] asks for a flash kernel (blublas's strict one is SIMT, ~5 TFLOP/s,
  // slower than SIMT GEMMs + softmax; the 3xTF32 one is fp32-accurate on tensor cores).
  // The fused function returns an undefined tensor for shapes it does not take (head dim, layout).
#if BLU_HAVE_CUDA_OPS
  if (q.is_cuda() && !(q.dtype() == DType::F32 && matmul_precision() == MatmulPrecision::kHighest &&
                       fp32_attention() == Fp32Attention::kComposite)) {
    Tensor y = cuda_ops::fused_scaled_dot_product_attention(q, k, v, is_causal, s);
    if (y.defined()) return y;
  }
#endif
  Tensor scores = mul(matmul(q, k.transpose(-2, -1)), s);
  if (is_causal) scores = masked_fill_causal(scores, -std::numeric_limits<double>::infinity());
  return matmul(softmax(scores, -1), v);
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  detail::check_defined("embedding", weight, "weight");
  detail::check_defined("embedding", indices, "indices");
  detail::check_same_device("embedding", {weight, indices});
  BLU_CHECK(weight.dim() == 2 && is_floating(weight.dtype()), "embedding: weight must be a 2-D floating tensor [V, C], got ",
            weight.describe());
  BLU_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32 || indices.dtype() == kUInt16,
            "embedding: indices must be i64, i32 or u16, got ", indices.describe());
  Tensor idx = contiguous_nograd(indices);
  const int64_t vocab = weight.size(0), c = weight.size(1);
  if (idx.is_cpu()) {
    std::vector<double> v = idx.to_double_vector();
    for (std::size_t i = 0; i < v.size(); ++i) {
      BLU_CHECK(v[i] >= 0 && v[i] < static_cast<double>(vocab), "embedding: index ", static_cast<int64_t>(v[i]),
                " at position ", i, " is out of range for weight ", weight.describe());
    }
  }
  Shape out_shape = indices.sizes();
  out_shape.push_back(c);
  Tensor out = new_empty(out_shape, weight.dtype(), weight.device());
  Tensor w = contiguous_nograd(weight);
  BLU_DISPATCH(weight.device(), embedding_forward, out, w, idx);
  return autograd::record("embedding", out, {weight}, {idx}, [vocab, c, wd = weight.dtype()](const Tensor& g, const BackwardContext& ctx) {
    Tensor dw = new_empty({vocab, c}, wd, g.device());
    BLU_DISPATCH(g.device(), embedding_backward, dw, contiguous_nograd(g), ctx.saved[0]);
    return Grads{dw};
  });
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  detail::check_defined("cross_entropy", logits, "logits");
  detail::check_defined("cross_entropy", targets, "targets");
  detail::check_same_device("cross_entropy", {logits, targets});
  detail::check_same_float_dtype("cross_entropy", {logits});
  BLU_CHECK(targets.dtype() == kInt64 || targets.dtype() == kInt32 || targets.dtype() == kUInt16,
            "cross_entropy: targets must be i64, i32 or u16, got ", targets.describe());
  BLU_CHECK(logits.dim() >= 1 && logits.numel() / std::max<int64_t>(1, logits.size(-1)) == targets.numel(),
            "cross_entropy: logits ", logits.describe(), " and targets ", targets.describe(),
            " disagree (expected logits [..., V] and targets [...] with the same leading size)");
  const int64_t v = logits.size(-1), n = targets.numel();
  Tensor x = contiguous_nograd(logits).view({n, v});
  Tensor t = contiguous_nograd(targets).view({n});
  DType sd = stats_dtype(logits.dtype());
  Tensor losses = new_empty({n}, sd, logits.device());
  Tensor lse = new_empty({n}, sd, logits.device());
  Tensor valid = new_empty({n}, sd, logits.device());
  BLU_DISPATCH(logits.device(), cross_entropy_forward, losses, lse, valid, x, t, ignore_index);
  // Per-row losses are differentiable w.r.t. the logits; the mean divides by the valid count.
  Shape in_shape = logits.sizes();
  losses = autograd::record("cross_entropy", losses, {logits}, {x, lse, t},
                            [ignore_index, in_shape](const Tensor& g, const BackwardContext& c) {
                              const Tensor &xs = c.saved[0], &ls = c.saved[1], &ts = c.saved[2];
                              Tensor dx = new_empty(xs.sizes(), xs.dtype(), xs.device());
                              BLU_DISPATCH(xs.device(), cross_entropy_backward, dx, contiguous_nograd(g), xs, ls, ts,
                                           ignore_index);
                              return Grads{dx.view(in_shape)};
                            });
  Tensor count = detail::reduce_kernel(ReduceOp::kSum, valid, {0}).view({});
  return div(sum(losses), count);
}

Tensor dropout(const Tensor& x, double p, bool train, Generator* gen) {
  detail::check_defined("dropout", x, "input");
  detail::check_same_float_dtype("dropout", {x});
  BLU_CHECK(p >= 0.0 && p <= 1.0, "dropout: p must be in [0, 1], got ", p);
  if (!train || p == 0.0) return x;
  if (p == 1.0) return mul(x, 0.0);
  Generator& g = gen ? *gen : default_generator();
  const uint64_t seed = g.seed();
  const uint64_t offset = g.reserve(philox::uniform_counters(static_cast<uint64_t>(x.numel())));
  Tensor out = new_empty(x.sizes(), x.dtype(), x.device());
  BLU_DISPATCH(x.device(), dropout, out, contiguous_nograd(x), p, seed, offset);
  return autograd::record("dropout", out, {x}, {}, [p, seed, offset](const Tensor& gr, const BackwardContext&) {
    Tensor gi = new_empty(gr.sizes(), gr.dtype(), gr.device());
    BLU_DISPATCH(gr.device(), dropout, gi, contiguous_nograd(gr), p, seed, offset);
    return Grads{gi};
  });
}

}  // namespace blu
