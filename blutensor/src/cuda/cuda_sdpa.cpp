// The differentiable fused scaled-dot-product attention on CUDA: blublas flash attention
// (cuda_ops::attention_forward / attention_backward) recorded as one autograd node that saves
// q, k, v, the output and the f32 log-sum-exp: no [B, H, T, T] tensor is ever materialised
// (Note [Fused attention on CUDA] in cuda_attention.cu). blu::scaled_dot_product_attention
// calls it first for CUDA tensors and keeps its composite path for everything it declines.
#include <array>
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

// Note [Packed attention gradients]
// GPT-2 takes q, k, v as head views of one [B, T, 3, H, D] projection (split + reshape +
// transpose): q [B, H, T, D] with strides (T*3*H*D, D, 3*H*D, 1) and k, v H*D and 2*H*D elements
// after it. Their gradients then go back through those views to split's backward, which
// concatenated three separate [B, T, H*D] buffers into the [B, T, 3*H*D] one the projection's
// backward reads: 3 copies a layer (36 strided-copy launches, 0.64 ms of a d12 bf16 B16 step on
// the H100, session 19). When the inputs have that layout, the backward writes dq, dk, dv as the
// same views of one fresh [B, T, 3, H, D] buffer instead; split's backward sees gradients that
// are adjacent views of one storage and returns their union as a view (Note [Split of adjacent
// gradients] in tensor.cpp): no copy. Any other layout keeps a buffer per gradient.
bool packed_qkv(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t h = q.size(1), t = q.size(2), d = q.size(3);
  const Shape want{t * 3 * h * d, d, 3 * h * d, 1};
  const int64_t at = q.storage_offset();
  return q.strides() == want && k.strides() == want && v.strides() == want && q.storage() == k.storage() &&
         q.storage() == v.storage() && k.storage_offset() == at + h * d && v.storage_offset() == at + 2 * h * d;
}

// dq, dk, dv laid out as q, k, v are in packed_qkv: views of one [B, T, 3, H, D] buffer.
std::array<Tensor, 3> empty_packed_grads(const Tensor& q) {
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3);
  Tensor base = detail::new_empty({b, t, 3, h, d}, q.dtype(), q.device());
  const Shape strides{t * 3 * h * d, d, 3 * h * d, 1};
  return {detail::make_alias(base, q.sizes(), strides, 0), detail::make_alias(base, q.sizes(), strides, h * d),
          detail::make_alias(base, q.sizes(), strides, 2 * h * d)};
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
        Tensor dq, dk, dv;
        if (packed_qkv(sq, sk, sv)) {  // Note [Packed attention gradients]
          std::array<Tensor, 3> d = empty_packed_grads(sq);
          dq = d[0], dk = d[1], dv = d[2];
        } else {
          dq = empty_bthd(sq), dk = empty_bthd(sq), dv = empty_bthd(sq);
        }
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
