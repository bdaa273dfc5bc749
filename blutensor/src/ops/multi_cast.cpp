// multi_cast.cpp: to_dtype_all (ops.h), the differentiable multi-tensor cast.
#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "dispatch.h"
#include "ops/op_helpers.h"

namespace blu {

// Note [Multi-tensor cast]
// A bf16 step of the autograd / captured / compiled engines cast each fp32 master weight to bf16
// where a block used it and each bf16 gradient back: 351 launches of small cast kernels a GPT-2 d12
// step (H100, session 18, compiled engine: 1.4 ms of kernels plus a launch gap each), where the
// fused engine keeps bf16 shadow weights. to_dtype_all casts a list in one backend call
// (copy_tensors_: one multi-tensor kernel on CUDA, a loop on the CPU) and records one autograd node
// whose backward casts every gradient that arrived back in one call; the values are those of
// t.to(dtype) one by one, bit for bit. GPT2::block casts its 12 tensors this way, so the node's
// backward runs when the block's backward is done and the weight gradients still become ready
// block by block (the data-parallel hooks keep their overlap). Tensors already of `dtype`, or
// non-contiguous, or on another device than the first, or not floating, take t.to(dtype).
namespace {

// Casts into out[i] the tensors of `ts` that one copy_tensors_ call takes (defined, floating,
// contiguous, not already `dtype`, on the first such one's device with its dtype) and returns
// their indices; the others are left to the caller. No autograd node of its own.
std::vector<std::size_t> cast_batch(const std::vector<Tensor>& ts, DType dtype, std::vector<Tensor>& out) {
  std::vector<Tensor> srcs, dsts;
  std::vector<std::size_t> where;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    if (!t.defined() || t.dtype() == dtype || !is_floating(t.dtype()) || !is_floating(dtype) || !t.is_contiguous() ||
        (!srcs.empty() && (t.device() != srcs[0].device() || t.dtype() != srcs[0].dtype()))) {
      continue;
    }
    srcs.push_back(t);
    dsts.push_back(detail::new_empty(t.sizes(), dtype, t.device()));
    where.push_back(i);
  }
  if (!srcs.empty()) BLU_DISPATCH(srcs[0].device(), copy_tensors_, dsts, srcs);
  for (std::size_t k = 0; k < where.size(); ++k) out[where[k]] = dsts[k];
  return where;
}

}  // namespace

std::vector<Tensor> to_dtype_all(const std::vector<Tensor>& ts, DType dtype) {
  for (std::size_t i = 0; i < ts.size(); ++i) {
    BLU_CHECK(ts[i].defined(), "to_dtype_all: tensor ", i, " of ", ts.size(), " is undefined");
  }
  std::vector<Tensor> out(ts.size());
  const std::vector<std::size_t> where = cast_batch(ts, dtype, out);
  for (std::size_t i = 0; i < ts.size(); ++i) {
    if (!out[i].defined()) out[i] = ts[i].to(dtype);
  }
  if (where.empty()) return out;
  std::vector<Tensor> srcs, dsts;
  for (std::size_t i : where) srcs.push_back(ts[i]), dsts.push_back(out[i]);
  const DType from = srcs[0].dtype();
  std::vector<Tensor> cast = autograd::record_multi(
      "to_dtype_all", dsts, srcs, {}, [from](const std::vector<Tensor>& grads, const BackwardContext&) {
        // The gradients arrive in the outputs' dtype; the contiguous ones go back in one call.
        std::vector<Tensor> back(grads.size());
        cast_batch(grads, from, back);
        for (std::size_t i = 0; i < grads.size(); ++i) {
          if (grads[i].defined() && !back[i].defined()) back[i] = grads[i].to(from);
        }
        return back;
      });
  for (std::size_t k = 0; k < where.size(); ++k) out[where[k]] = cast[k];
  return out;
}

}  // namespace blu
