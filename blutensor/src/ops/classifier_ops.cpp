// classifier_ops.cpp: linear_cross_entropy, a classifier's GEMM (+ bias) and mean cross-entropy
// in row chunks that never holds the [N, V] logits or their gradient (Note [Linear
// cross-entropy]).
#include <algorithm>

#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "dispatch.h"
#include "ops/op_helpers.h"

namespace blu {

// Note [Linear cross-entropy]
// mean_i CE(x_i W^T + b, t_i) over the rows whose target is not ignore_index, for x [..., C],
// W [V, C] and b [V] (no gradient: GPT-2's padded-vocabulary mask), without the [N, V] logits:
// R rows at a time (chunk_rows; <= 0: the rows whose fp32 logits fit 512 MiB, a multiple of 64)
//   S = x[r0:r0+R] W^T (+ b)             one [R, V] scratch for all chunks
//   losses[r0:], lse[r0:], valid[r0:] = cross_entropy_forward(S, t[r0:]), and in the same call
//   S = cross_entropy_backward(dlosses = 1) in place: softmax - onehot (0 on ignored rows)
//   dX_u[r0:] = S W;  dW_u (+)= S^T x[r0:]
// and the loss is sum(losses) / sum(valid). The gradient is linear in the upstream one, and a
// scalar loss gets one scalar G, so the backward only scales: dx = dX_u G / count, dW = dW_u G /
// count. Nothing is recomputed (the chunked capture override, Note [Chunked classifier], redoes the
// lm-head GEMM), so the flops equal linear + cross_entropy's; the memory is the scratch (R V), dX_u
// (N C) and dW_u (V C) where linear + cross_entropy hold the logits, their gradient (2 N V) and
// the saved input. GPT-2 d12 at B8 T1024 fp32: 2 x 1.65 GB -> 0.53 + 0.03 + 0.15 GB; bf16 at B16:
// the bf16 logits, their fp32 copy, its gradient and the bf16 gradient (9.9 GB) -> ~0.5 GB.
// Rounding: every row's logits, loss and lse are one GEMM row as before (up to the kernel's
// choice for another M); dW_u sums its chunks in fp32: the dW GEMM accumulates into it (beta = 1;
// bf16/f16 inputs with an fp32 output, so no chunk is rounded to bf16 before the sum and an f16
// unscaled sum cannot overflow), another order of an fp32 sum, then one rounding to the weight's
// dtype after the scaling; the unscaled gradient times G / count rounds once more than the scaled
// one (bf16 dX: one extra bf16 rounding; the scaling itself is in fp32). bf16 / f16 chunks go to
// the cross-entropy kernels as they are: those compute in fp32 (exact widening of each logit, the
// log-sum-exp and the gradient in fp32, one rounding of the gradient to the chunk's dtype), which
// is the arithmetic of the linear + .to(f32) + cross_entropy path without its two casts over the
// [R, V] chunk and its fp32 copy (CUDA: the same kernel loops; the CPU's fp32 log-sum-exp has its
// own vectorised sum, so there the loss agrees to fp32 rounding, not bit for bit). The casts cost
// ~3 ms of a 61 ms GPT-2 d12 bf16 B16 step on the H100 (session 17 profile).
// The gradient is computed in the forward: it costs the backward's work even when no backward
// follows (evaluation: call it under no_grad, which skips that part).
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& targets,
                            int64_t ignore_index, int64_t chunk_rows) {
  detail::check_linear_args("linear_cross_entropy", x, weight, bias);
  detail::check_defined("linear_cross_entropy", targets, "targets");
  detail::check_same_device("linear_cross_entropy", {x, targets});
  BLU_CHECK(targets.dtype() == kInt64 || targets.dtype() == kInt32 || targets.dtype() == kUInt16,
            "linear_cross_entropy: targets must be i64, i32 or u16, got ", targets.describe());
  const int64_t c = weight.size(1), v = weight.size(0), n = x.numel() / std::max<int64_t>(c, 1);
  BLU_CHECK(targets.numel() == n, "linear_cross_entropy: input ", x.describe(), " has ", n, " rows but targets ",
            targets.describe(), " has ", targets.numel());
  BLU_CHECK(!bias.defined() || !bias.requires_grad(), "linear_cross_entropy: bias ", bias.describe(),
            " needs a gradient, which this op does not give (use linear + cross_entropy)");
  BLU_CHECK(n > 0 && v > 0, "linear_cross_entropy: no rows or no classes (input ", x.describe(), ", weight ",
            weight.describe(), ")");
  const Device dev = x.device();
  const DType dt = x.dtype();
  const bool need_dx = GradMode::is_enabled() && x.requires_grad();
  const bool need_dw = GradMode::is_enabled() && weight.requires_grad();
  const bool grad = need_dx || need_dw;
  int64_t rows = chunk_rows;
  if (rows <= 0) {
    // 512 MiB, not 128: every chunk's weight-gradient GEMM reads and writes the whole fp32 dW_u
    // (beta = 1), ~0.46 ms a pass for GPT-2's 50304 x 768 on the H100 (session 17, bf16 d12 B16:
    // 26 chunks of 640 rows 214.8K tok/s, 8 of 2048 247.0K, 4 of 4096 254.2K, the whole logits
    // 262.2K at 12.34 GiB against 6.56 / 6.96 / 7.56). 2624 rows at d12: ~0.8 GB of bf16 + fp32
    // scratch, ~0.5 GB in fp32.
    rows = static_cast<int64_t>((std::size_t{512} << 20) / (static_cast<std::size_t>(v) * sizeof(float)));
    if (rows >= 64) rows = rows / 64 * 64;
  }
  rows = std::clamp<int64_t>(rows, 1, n);

  const Tensor x2 = detail::contiguous_nograd(x.detach()).view({n, c});
  const Tensor w = weight.detach();
  const Tensor wt = w.t().unsqueeze(0);  // [1, C, V], a transposed view
  const Tensor w3 = w.unsqueeze(0);      // [1, V, C]
  const Tensor t = detail::contiguous_nograd(targets).view({n});
  // bf16 / f16: the loss and the gradient from the chunk as it is (fp32 arithmetic inside the
  // kernels), dW summed over chunks in fp32.
  const bool low = dt == kBFloat16 || dt == kFloat16;
  const DType sd = dt == kFloat64 ? kFloat64 : kFloat32;
  Tensor losses = detail::new_empty({n}, sd, dev), lse = detail::new_empty({n}, sd, dev),
         valid = detail::new_empty({n}, sd, dev);
  Tensor scratch = detail::new_empty({rows * v}, dt, dev);
  Tensor dx_u, dw_u;
  if (grad) {
    if (need_dx) dx_u = detail::new_empty({n, c}, dt, dev);
    if (need_dw) dw_u = detail::new_empty({1, v, c}, low ? kFloat32 : dt, dev);
  }
  for (int64_t r0 = 0; r0 < n; r0 += rows) {
    const int64_t r = std::min(rows, n - r0);
    const Tensor s3 = scratch.narrow(0, 0, r * v).view({1, r, v}), s2 = s3.view({r, v});
    const Tensor xr = x2.narrow(0, r0, r).view({1, r, c});
    BLU_DISPATCH(dev, gemm, s3, xr, wt, false);
    if (bias.defined())
      BLU_DISPATCH(dev, binary, BinaryOp::kAdd, s3, s3, detail::broadcast_alias(bias.detach(), s3.sizes()), 1.0);
    if (!grad) {
      BLU_DISPATCH(dev, cross_entropy_forward, losses.narrow(0, r0, r), lse.narrow(0, r0, r),
                   valid.narrow(0, r0, r), s2, t.narrow(0, r0, r), ignore_index);
      continue;
    }
    // The loss and the unscaled gradient (dlosses = 1) in place, one call (Note [Cross-entropy in
    // one pass]: one read of the chunk on CUDA).
    BLU_DISPATCH(dev, cross_entropy_forward_backward, losses.narrow(0, r0, r), lse.narrow(0, r0, r),
                 valid.narrow(0, r0, r), s2, s2, t.narrow(0, r0, r), ignore_index);
    if (need_dx) BLU_DISPATCH(dev, gemm, dx_u.narrow(0, r0, r).view({1, r, c}), s3, w3, false);
    // dW (+)= chunk^T x: bf16/f16 inputs accumulate into the fp32 dw_u (a mixed-dtype GEMM).
    if (need_dw) BLU_DISPATCH(dev, gemm, dw_u, s3.transpose(1, 2), xr, r0 > 0);
  }
  scratch = Tensor();
  const Tensor count = detail::reduce_kernel(ReduceOp::kSum, valid, {0}).view({});
  Tensor loss = div(detail::reduce_kernel(ReduceOp::kSum, losses, {0}).view({}), count);
  if (!grad) return loss;
  // The backward divides by max(count, 1): with every target ignored the loss is 0 / 0 (NaN, as
  // cross_entropy's), but its gradient is 0 (the unscaled one is 0 on ignored rows), as
  // cross_entropy's backward gives, so one masked-out micro-batch does not poison an accumulation.
  const Tensor count_safe = neg(clamp_max(neg(count), -1.0));
  return autograd::record("linear_cross_entropy", loss, {x, weight}, {dx_u, dw_u, count_safe},
                          [x_shape = x.sizes(), v, c, dt](const Tensor& g, const BackwardContext& ctx) {
                            // Scaled in the loss's dtype (fp32 for bf16 inputs), then cast.
                            const Tensor scale = div(g, ctx.saved[2]);
                            const auto scaled = [&](const Tensor& u) {
                              Tensor r = mul(u.dtype() == scale.dtype() ? u : u.to(scale.dtype()), scale);
                              return r.dtype() == dt ? r : r.to(dt);
                            };
                            Tensor dx, dw;
                            if (ctx.needs_input_grad[0] && ctx.saved[0].defined()) dx = scaled(ctx.saved[0]).view(x_shape);
                            if (ctx.needs_input_grad[1] && ctx.saved[1].defined()) dw = scaled(ctx.saved[1]).view({v, c});
                            return std::vector<Tensor>{dx, dw};
                          });
}

}  // namespace blu
