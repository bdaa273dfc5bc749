// The differentiable fused scaled-dot-product attention on CUDA: blublas flash attention
// (cuda_ops::attention_forward / attention_backward) recorded as one autograd node that saves
// q, k, v, the output and the f32 log-sum-exp: no [B, H, T, T] tensor is ever materialised
// (Note [Fused attention on CUDA] in cuda_attention.cu). blu::scaled_dot_product_attention
// calls it first for CUDA tensors and keeps its composite path for everything it declines.
#include <cmath>

#include "blutensor/autograd.h"
#include "blutensor/cuda_stream.h"
#include "capture/capture_hooks.h"
#include "cuda/cuda_ops.h"
#include "ops/op_helpers.h"

namespace blu::cuda_ops {
namespace {

// The tensor itself when its last dim is contiguous, else a contiguous copy (no autograd).
Tensor last_dim_contiguous(const Tensor& t) {
  return t.stride(-1) == 1 ? t : detail::contiguous_nograd(t);
}

// An uninitialised [B, H, T, D] tensor stored as [B, T, H, D] (the layout the output
// projection wants: transpose(1, 2) + reshape to [B, T, H * D] is then a view).
Tensor empty_bthd(const Tensor& like) {
  Tensor t = detail::new_empty({like.size(0), like.size(2), like.size(1), like.size(3)},
                               like.dtype(), like.device());
  return t.permute({0, 2, 1, 3});
}

}  // namespace

Tensor fused_scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in,
                                          const Tensor& v_in, bool is_causal, double scale) {
  if (!q_in.is_cuda() || q_in.dim() != 4 || k_in.dim() != 4 || v_in.dim() != 4) return Tensor();
  if (q_in.sizes() != k_in.sizes() || q_in.sizes() != v_in.sizes()) return Tensor();
  if (q_in.dtype() != DType::F32 && q_in.dtype() != DType::BF16) return Tensor();
  if (q_in.size(3) != 64 && q_in.size(3) != 128) return Tensor();
  cuda::DeviceGuard guard(q_in.device().index);
  Tensor out, lse;
  Tensor q, k, v;
  {
    NoGradGuard no_grad;
    q = last_dim_contiguous(q_in.detach());
    k = last_dim_contiguous(k_in.detach());
    v = last_dim_contiguous(v_in.detach());
    out = empty_bthd(q);
    lse = detail::new_empty({q.size(0), q.size(1), q.size(2)}, DType::F32, q.device());
    if (!attention_forward(out, lse, q, k, v, is_causal, scale)) return Tensor();
    capture::detail::RecordAs<decltype(&attention_forward)>::run("attention_forward", q.device(), out, lse, q, k,
                                                                 v, is_causal, scale);  // Note [Step capture]
  }
  return autograd::record(
      "scaled_dot_product_attention", out, {q_in, k_in, v_in}, {q, k, v, out, lse},
      [is_causal, scale](const Tensor& grad_out, const BackwardContext& ctx) {
        const Tensor& sq = ctx.saved[0];
        const Tensor& sk = ctx.saved[1];
        const Tensor& sv = ctx.saved[2];
        cuda::DeviceGuard g(sq.device().index);
        NoGradGuard no_grad;
        Tensor dout = last_dim_contiguous(grad_out);
        Tensor dq = empty_bthd(sq), dk = empty_bthd(sq), dv = empty_bthd(sq);
        BLU_CHECK(attention_backward(dq, dk, dv, dout, sq, sk, sv, ctx.saved[3], ctx.saved[4],
                                     is_causal, scale),
                  "scaled_dot_product_attention backward (CUDA): blublas refused a problem its "
                  "forward took: q ",
                  sq.describe(), ", dout ", dout.describe());
        capture::detail::RecordAs<decltype(&attention_backward)>::run(
            "attention_backward", sq.device(), dq, dk, dv, dout, sq, sk, sv, ctx.saved[3], ctx.saved[4], is_causal,
            scale);
        std::vector<Tensor> grads(3);
        if (ctx.needs_input_grad[0]) grads[0] = dq;
        if (ctx.needs_input_grad[1]) grads[1] = dk;
        if (ctx.needs_input_grad[2]) grads[2] = dv;
        return grads;
      });
}

}  // namespace blu::cuda_ops
