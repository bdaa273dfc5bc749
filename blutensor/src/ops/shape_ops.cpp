// Shape ops with copies: cat (copies each input into a narrow view of the output) and the
// differentiable copy behind contiguous() and clone().
#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "dispatch.h"
#include "ops/op_helpers.h"

namespace blu {

Tensor copy(const Tensor& t) {
  detail::check_defined("copy", t, "input");
  Tensor out = detail::new_empty(t.sizes(), t.dtype(), t.device());
  BLU_DISPATCH(t.device(), copy_, out, t);
  return autograd::record("copy", out, {t}, {}, [](const Tensor& g, const BackwardContext&) {
    return std::vector<Tensor>{g};
  });
}

Tensor cat(const std::vector<Tensor>& ts, int64_t dim) {
  BLU_CHECK(!ts.empty(), "cat: expects a non-empty list of tensors");
  for (const Tensor& t : ts) detail::check_defined("cat", t, "an input");
  detail::check_same_device("cat", ts);
  const Tensor& first = ts[0];
  for (const Tensor& t : ts) {
    BLU_CHECK(t.dtype() == first.dtype(), "cat: dtypes differ: ", detail::describe_all(ts));
  }
  const int64_t d = detail::wrap_dim(dim, first.dim(), "cat");
  Shape out_shape = first.sizes();
  out_shape[d] = 0;
  for (const Tensor& t : ts) {
    BLU_CHECK(t.dim() == first.dim(), "cat: ranks differ: ", detail::describe_all(ts));
    for (int64_t i = 0; i < t.dim(); ++i) {
      BLU_CHECK(i == d || t.size(i) == first.size(i), "cat: sizes differ outside dim ", d, ": ",
                detail::describe_all(ts));
    }
    out_shape[d] += t.size(d);
  }
  Tensor out = detail::new_empty(out_shape, first.dtype(), first.device());
  std::vector<int64_t> lengths;
  int64_t offset = 0;
  for (const Tensor& t : ts) {
    Shape region_sizes = t.sizes();
    Tensor region = detail::make_alias(out, region_sizes, out.strides(), offset * out.stride(d));
    BLU_DISPATCH(out.device(), copy_, region, t);
    lengths.push_back(t.size(d));
    offset += t.size(d);
  }
  return autograd::record("cat", out, ts, {}, [d, lengths](const Tensor& g, const BackwardContext& c) {
    std::vector<Tensor> grads;
    int64_t off = 0;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      grads.push_back(c.needs_input_grad[i] ? g.narrow(d, off, lengths[i]) : Tensor());
      off += lengths[i];
    }
    return grads;
  });
}

}  // namespace blu
