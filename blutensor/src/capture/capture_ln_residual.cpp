// capture_ln_residual.cpp: the captured step's LayerNorm backward with the residual gradient added
// in the same kernel (Note [LayerNorm backward with the residual gradient]).
#include <algorithm>
#include <initializer_list>
#include <string>

#include "blutensor/capture.h"
#include "capture/capture_internal.h"
#include "dispatch.h"
#ifndef BLU_TENSOR_NO_CUDA_BACKEND
#include "cuda/cuda_ops.h"
#endif

namespace blu::capture {

// Note [LayerNorm backward with the residual gradient]
// In a pre-LayerNorm transformer a block's input x feeds both the residual add and the LayerNorm,
// so autograd gives x two gradients and adds them: the record holds layer_norm_backward writing
// dx into a temporary, then binary kAdd(out, dx, g) with the gradient g that came down the
// residual path (25 of them in GPT-2 d12; 0.58 ms of a compiled bf16 B16 step on the H100,
// session 20). The fused engine adds g inside its LayerNorm backward kernel (blublas's
// accumulate_dx). Here the two calls are replaced by one launch of the same bf16 LayerNorm
// backward kernels with the residual read in their store loop: dx = bf16(bf16(dx) + g), exactly
// what the two calls computed (the add widens both bf16 values to f32, adds once, rounds once),
// so the step's bits do not change; the dx temporary gets no bytes, and the add's read and write
// of it and its launch are gone. The pattern, or nothing: the add right after the LayerNorm
// backward (the next call), kAdd with alpha 1, dx one operand exactly (same buffer and view) and
// used by no other call, internal to the step (not an input or output), every tensor bf16 and
// contiguous with x's shape, the output not a partial overlap of g, neither call already replaced
// (blu-plan's kernels come first), on CUDA. fp32 LayerNorm backward runs blublas's kernel, whose
// accumulate path would round differently: not taken.
// Status: ON by default since session 24 (BLU_CAPTURE_LN_RESIDUAL=0 turns it off; blutrain's
// captured_step.cpp). Measured (H100, session 24, one call, d42d7d8, compiled bf16 B16, 30-step
// medians): pairs fused 469.1K tok/s against 463.7K unfused (+1.2%; busy 33.48 against 34.06 ms,
// the fused engine's 33.51), and 459.6K with the pairs under the old gap rule (two streams at once
// 1.70 ms against 6.85: the critical path behind the side stream). Before that, measured
// slower (H100, session 22, GPT-2 d12 bf16 B16 compiled step, same call): 443.65K tok/s with the
// slower (H100, session 22, GPT-2 d12 bf16 B16 compiled step, same call): 443.65K tok/s with the
// pairs fused against 453.45K without, though the LayerNorm kernels summed 1.5 ms less. The kernel
// trace shows the side stream's plan changing with it: unfused, a block's fc dX GEMM ran beside the
// fc_proj dW GEMM and its split-K reduction; fused, the two ran one after the other (backward layer
// period 1.460 against 1.442 ms, and more in the head). Session 24 found why (side_plan_dump
// --ln-residual): the side plan's gap rule took a set's position at its launch node, so each
// block's qkv and fc data-gradient GEMM, read by the pair's set 3 nodes later, became a side call
// joined at once; Note [Side gaps from a set's first node] fixed it (the plan with the pairs is now
// the plan without them), and the pairs were measured again.
// Note [One-pass LayerNorm backward]
// blutensor's bf16 LayerNorm backward (the kernels above, autograd's bits) is three launches: dx
// (+ the residual) one warp per row, then the parameter gradients as column sums that read dy and
// x a second time, then the chunk sums. The fused engine runs blublas's kernel instead: dx, the
// residual add and per-block parameter partials in one pass over dy and x, then a small finish
// (H200, session 26, compiled bf16 B16 profile: a block's two LayerNorm backwards 56 + 46 us on the
// side stream against the fused engine's ~35 each, the second right before the attention
// backward). The compiled step (blu-plan bound, so not autograd's bits anyway) takes blublas's
// kernel for every bf16 LayerNorm backward: a pair's add is its residual operand, a lone one (ln_f)
// runs without one, dweight / dbias are written in the record's dtype (the f32 sums rounded once,
// as blutensor's kernel rounds its own differently ordered sums). f32 records already run
// blublas's kernel for the LayerNorm; their pairs (the add fused as the residual) were tried
// (session 26): not the record's bits in the captured engine's device test, and tf32 219.9K tok/s
// against 221.5K without: bf16 only. Measured (H200, session 26, 7e5d581, compiled bf16 B16, 3
// rounds pooled): 502.9K tok/s against 498.3K with BLU_CAPTURE_LN_ONE_PASS=0 (+0.9%), the fused
// engine 501.6K in the same call. BLU_CAPTURE_LN_ONE_PASS=0: the pairs as above, no lone ones.
std::vector<LnResidualPair> find_ln_residual_pairs(const Graph& g, const std::vector<int>& override_of) {
  std::vector<LnResidualPair> out;
  const int n = static_cast<int>(g.nodes.size());
  const std::vector<int> uses = detail::use_counts(g);
  const auto replaced = [&](int i) { return detail::replaced_in(override_of, i); };
  using detail::same_view;
  for (int i = 0; i + 1 < n; ++i) {
    const Node& ln = g.nodes[static_cast<size_t>(i)];
    const Node& add = g.nodes[static_cast<size_t>(i + 1)];
    if (ln.op != "layer_norm_backward" || add.op != "binary" || !ln.device.is_cuda() || !(add.device == ln.device) ||
        replaced(i) || replaced(i + 1))
      continue;
    if (add.arg("op").enum_name != "kAdd" || add.arg("alpha").number != 1.0) continue;
    const TensorRef *dx = &ln.arg("dx").tensors.at(0), *x = &ln.arg("x").tensors.at(0),
                    *dy = &ln.arg("dy").tensors.at(0);
    const TensorRef *a = &add.arg("a").tensors.at(0), *b = &add.arg("b").tensors.at(0),
                    *o = &add.arg("out").tensors.at(0);
    if (!dx->defined()) continue;
    // The add's operand that is the residual gradient (0 = a, 1 = b). Two uses of dx (its write
    // and this read) also rule out the add reading it twice or writing into it.
    const int which = same_view(*a, *dx) ? 1 : same_view(*b, *dx) ? 0 : -1;
    const Buffer& xb = g.buffers[static_cast<size_t>(dx->buffer)];
    if (which < 0 || uses[static_cast<size_t>(dx->buffer)] != 2 || xb.origin != Origin::kInternal || xb.output())
      continue;
    const TensorRef& res = which == 0 ? *a : *b;
    bool ok = true;
    for (const TensorRef* t : {dx, x, dy, &res, o}) {
      ok = ok && t->dtype == DType::BF16 && t->contiguous() && t->sizes == x->sizes;
    }
    if (!ok) continue;
    if (o->buffer == res.buffer && !same_view(*o, res)) continue;  // a partial overlap
    out.push_back({i, i + 1, which});
  }
  return out;
}

#ifndef BLU_TENSOR_NO_CUDA_BACKEND
namespace {

// The distinct buffers of the defined tensors, in order (a replace()d launch's views).
std::vector<int> buffers_of(std::initializer_list<const TensorRef*> tensors) {
  std::vector<int> out;
  for (const TensorRef* t : tensors)
    if (t->defined() && std::find(out.begin(), out.end(), t->buffer) == out.end()) out.push_back(t->buffer);
  return out;
}

}  // namespace
#endif

int Executable::fuse_ln_residual_grads(bool one_pass) {
#ifdef BLU_TENSOR_NO_CUDA_BACKEND
  static_cast<void>(one_pass);
  return 0;
#else
  const std::vector<LnResidualPair> pairs = find_ln_residual_pairs(graph_, override_of_);
  int lone = 0;
  if (one_pass) {
    // Every other bf16 LayerNorm backward on CUDA with dweight (blublas's kernel needs it): one pass,
    // no residual. The paired ones are taken below.
    for (int i = 0; i < static_cast<int>(graph_.nodes.size()); ++i) {
      const Node& ln = graph_.nodes[static_cast<size_t>(i)];
      if (ln.op != "layer_norm_backward" || !ln.device.is_cuda() || detail::replaced_in(override_of_, i) ||
          std::any_of(pairs.begin(), pairs.end(), [&](const LnResidualPair& p) { return p.ln == i; }))
        continue;
      const TensorRef dx = ln.arg("dx").tensors.at(0), dweight = ln.arg("dweight").tensors.at(0),
                      dbias = ln.arg("dbias").tensors.at(0), dy = ln.arg("dy").tensors.at(0),
                      x = ln.arg("x").tensors.at(0), weight = ln.arg("weight").tensors.at(0),
                      mean = ln.arg("mean").tensors.at(0), rstd = ln.arg("rstd").tensors.at(0);
      if (!dx.defined() || !dweight.defined() || !weight.defined() || x.dtype != DType::BF16) continue;
      const int device = ln.device.index;
      const std::vector<int> views = buffers_of({&dx, &dweight, &dbias, &dy, &x, &weight, &mean, &rstd});
      replace({i},
              [=](const ViewFn& view) {
                cuda::DeviceGuard guard(device);
                // Not a fit (a layout blublas refuses): the recorded call, as autograd ran it.
                if (cuda_ops::layer_norm_backward_one_pass(view(dx), view(dweight), view(dbias), view(dy), view(x),
                                                           view(weight), view(mean), view(rstd), Tensor()))
                  return;
                cuda_ops::layer_norm_backward(view(dx), view(dweight), view(dbias), view(dy), view(x), view(weight),
                                              view(mean), view(rstd));
              },
              views);
      ++lone;
    }
  }
  for (const LnResidualPair& p : pairs) {
    const Node& ln = graph_.nodes[static_cast<size_t>(p.ln)];
    const Node& add = graph_.nodes[static_cast<size_t>(p.add)];
    const TensorRef dweight = ln.arg("dweight").tensors.at(0), dbias = ln.arg("dbias").tensors.at(0),
                    dy = ln.arg("dy").tensors.at(0), x = ln.arg("x").tensors.at(0),
                    weight = ln.arg("weight").tensors.at(0), mean = ln.arg("mean").tensors.at(0),
                    rstd = ln.arg("rstd").tensors.at(0), out = add.arg("out").tensors.at(0),
                    res = add.arg(p.residual == 0 ? "a" : "b").tensors.at(0);
    const int device = ln.device.index;
    const std::vector<int> views = buffers_of({&dweight, &dbias, &dy, &x, &weight, &mean, &rstd, &out, &res});
    replace({p.ln, p.add},
            [=](const ViewFn& view) {
              cuda::DeviceGuard guard(device);
              if (one_pass && cuda_ops::layer_norm_backward_one_pass(view(out), view(dweight), view(dbias), view(dy),
                                                                     view(x), view(weight), view(mean), view(rstd),
                                                                     view(res)))
                return;
              BLU_CHECK(cuda_ops::layer_norm_backward_add(view(out), view(dweight), view(dbias), view(dy), view(x),
                                                              view(weight), view(mean), view(rstd), view(res)),
                        "capture: the LayerNorm backward with the residual gradient refused its tensors (",
                        dtype_name(x.dtype), " ", shape_str(x.sizes), ")");
            },
            views);
  }
  return static_cast<int>(pairs.size()) + lone;
#endif
}

}  // namespace blu::capture
