// capture_position_grad.cpp: the position table's gradient of an embedding backward whose indices
// are 0, 1, ..., T-1, run as a widening copy instead (Note [Position gradient as a copy]).
#include <cstdint>

#include "blutensor/capture.h"
#include "capture/capture_internal.h"
#include "dispatch.h"
#include "kernel_args.h"

namespace blu::capture {

// Note [Position gradient as a copy]
// GPT-2's position table wpe [T, C] is read at positions 0..T-1, so its gradient is the batch sum
// R [T, C] of the input gradient scattered by the identity. The record runs that as
//   E = embedding_backward(dweight [T, C], dout R, indices P)      (zero, then one sum per row)
//   G = f32(E)                                                     copy_ into the fp32 gradient
// which on CUDA is eight small kernels plus the cast (~30 us in the session 25 bf16 profile, on the
// main stream just before the token table's embedding backward, at the end of the backward). With
// one index per row E[t] = rnd(0 + R[t]) = R[t] except that -0 becomes +0, so
//   G = f32(R) + 0                                                 (a copy_, then add 0 in place)
// gives the same bits (and E = R + 0 where E itself is the gradient: fp32 records; a table of more
// than T rows gets zeros below, as the embedding backward's zeroing left them). The pattern,
// exactly or nothing: dweight is contiguous [P, C]; dout contiguous [T, C] of its dtype, T <= P;
// the indices a step input (not written by the step) whose values, read once here from the live
// buffer, are 0..T-1 in order. When dweight is a temporary read only by a later copy_ of all of it
// into a contiguous fp32 tensor, with no call in between writing dout, that copy_ is folded too. The position ids are the model's constant
// (blutrain's GPT-2 keeps them on the device); a caller that rewrites that buffer between runs must
// not use this rewrite. Off by default until measured (BLU_CAPTURE_POSITION_GRAD=1 in blutrain).
int Executable::fold_position_grads() {
  const int n = static_cast<int>(graph_.nodes.size());
  const std::vector<int> uses = detail::use_counts(graph_);
  const auto node = [&](int i) -> const Node& { return graph_.nodes[static_cast<size_t>(i)]; };
  const auto writes = [&](int i, int buffer) {
    for (const Arg& a : node(i).args) {
      if (!a.write) continue;
      for (const TensorRef& t : a.tensors) {
        if (t.defined() && t.buffer == buffer) return true;
      }
    }
    return false;
  };
  const auto touches = [&](int i, int buffer) {
    for (const Arg& a : node(i).args) {
      for (const TensorRef& t : a.tensors) {
        if (t.defined() && t.buffer == buffer) return true;
      }
    }
    return false;
  };
  // Whether the live index buffer behind `idx` holds 0..rows-1.
  const auto is_identity = [&](const TensorRef& idx, int64_t rows) {
    const std::shared_ptr<Storage>& s = live_[static_cast<size_t>(idx.buffer)];
    if (s == nullptr || !idx.contiguous()) return false;
    if (idx.dtype != DType::I64 && idx.dtype != DType::I32) return false;
    const Tensor host = detail::view_of(s, idx).to(Device::cpu());
    for (int64_t k = 0; k < rows; ++k) {
      const int64_t v = idx.dtype == DType::I64 ? host.data_ptr<int64_t>()[k] : host.data_ptr<int32_t>()[k];
      if (v != k) return false;
    }
    return true;
  };
  int folded = 0;
  for (int i = 0; i < n; ++i) {
    const Node& e = node(i);
    if (e.op != "embedding_backward" || replaced(i)) continue;
    const TensorRef& dw = e.arg("dweight").tensors.at(0);
    const TensorRef& dout = e.arg("dout").tensors.at(0);
    const TensorRef& idx = e.arg("indices").tensors.at(0);
    if (dw.sizes.size() != 2 || !dw.contiguous() || idx.sizes.size() != 1) continue;
    const int64_t rows = idx.sizes[0], cols = dw.sizes[1];  // positions read: 0..rows-1 of dw.sizes[0]
    if (rows < 1 || rows > dw.sizes[0]) continue;
    if (!dout.contiguous() || dout.dtype != dw.dtype || dout.numel() != rows * cols || dout.buffer == dw.buffer) continue;
    const Buffer& ib = graph_.buffers[static_cast<size_t>(idx.buffer)];
    if (ib.origin != Origin::kInput || ib.written || idx.buffer == dout.buffer) continue;
    if (!is_identity(idx, rows)) continue;
    // With the widening copy_: dweight a temporary read by that copy_ alone, which then takes dout.
    const Buffer& wb = graph_.buffers[static_cast<size_t>(dw.buffer)];
    int c = i + 1;
    while (c < n && !touches(c, dw.buffer)) ++c;
    bool widen = c < n && node(c).op == "copy_" && !replaced(c) && wb.origin == Origin::kInternal && !wb.output() &&
                 uses[static_cast<size_t>(dw.buffer)] == 2;
    TensorRef dst = dw;
    if (widen) {
      const TensorRef& to = node(c).arg("dst").tensors.at(0);
      const TensorRef& src = node(c).arg("src").tensors.at(0);
      widen = detail::same_view(src, dw) && to.dtype == DType::F32 && to.contiguous() && to.numel() == dw.numel() &&
              to.buffer != dout.buffer && to.buffer != dw.buffer;
      for (int k = i + 1; k < c && widen; ++k) widen = !writes(k, dout.buffer);
      if (widen) dst = to;
    }
    // dst's first `rows` rows take dout; the rows no position reads are zero (a table longer than T).
    TensorRef head = dst;
    head.sizes = {rows, cols};
    head.strides = {cols, 1};
    TensorRef from = dout;  // read with the destination rows' shape (both contiguous)
    from.sizes = head.sizes;
    from.strides = head.strides;
    const bool zero_rest = rows < dw.sizes[0];
    const Device dev = e.device;
    const auto launch = [dst, head, from, zero_rest, dev](const ViewFn& view) {
      if (zero_rest) BLU_DISPATCH(dev, fill_, view(dst), 0.0);
      const Tensor g = view(head);
      BLU_DISPATCH(dev, copy_, g, view(from));
      BLU_DISPATCH(dev, unary, UnaryOp::kAddScalar, g, g, 0.0);  // -0 -> +0, as the sum from zero did
    };
    if (widen) {
      replace({i, c}, launch);
    } else {
      replace({i}, launch);
    }
    ++folded;
  }
  return folded;
}

}  // namespace blu::capture
