// Reductions (sum, mean, amax) over dims with keepdim, sum_to (the reverse of broadcasting).
#include <algorithm>

#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "dispatch.h"
#include "ops/op_helpers.h"

namespace blu {

namespace detail {

std::vector<int64_t> normalize_dims(const char* op, const Shape& dims, int64_t ndim) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  BLU_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": repeated dim in ",
            shape_str(dims));
  if (ndim == 0) out.clear();
  return out;
}

Tensor reduce_kernel(ReduceOp kind, const Tensor& a, const std::vector<int64_t>& dims) {
  Shape keep = a.sizes();
  for (int64_t d : dims) keep[d] = 1;
  Tensor out = new_empty(keep, a.dtype(), a.device());
  if (a.numel() == 0) {
    BLU_CHECK(kind == ReduceOp::kSum, "amax: reduction over an empty tensor ", a.describe());
    BLU_DISPATCH(a.device(), fill_, out, 0.0);
    return out;
  }
  BLU_DISPATCH(a.device(), reduce, kind, out, a);
  return out;
}

}  // namespace detail

namespace {
Shape drop_dims(const Shape& keep, const std::vector<int64_t>& dims) {
  Shape s;
  for (int64_t d = 0; d < static_cast<int64_t>(keep.size()); ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) s.push_back(keep[d]);
  }
  return s;
}
Tensor squeeze_alias(const Tensor& t, const Shape& shape) {
  return detail::make_alias(t, shape, contiguous_strides(shape), t.storage_offset());
}
}  // namespace

Tensor sum(const Tensor& a, const Shape& dims_in, bool keepdim) {
  detail::check_defined("sum", a, "input");
  detail::check_same_float_dtype("sum", {a});
  std::vector<int64_t> dims = detail::normalize_dims("sum", dims_in, a.dim());
  Tensor keep = detail::reduce_kernel(ReduceOp::kSum, a, dims);
  Tensor out = keepdim ? keep : squeeze_alias(keep, drop_dims(keep.sizes(), dims));
  return autograd::record("sum", out, {a}, {},
                          [in = a.sizes(), ks = keep.sizes()](const Tensor& g, const BackwardContext&) {
                            return std::vector<Tensor>{g.reshape(ks).expand(in)};
                          });
}

Tensor mean(const Tensor& a, const Shape& dims_in, bool keepdim) {
  detail::check_defined("mean", a, "input");
  std::vector<int64_t> dims = detail::normalize_dims("mean", dims_in, a.dim());
  int64_t count = 1;
  for (int64_t d : dims) count *= a.sizes()[d];
  return mul(sum(a, dims_in, keepdim), 1.0 / static_cast<double>(std::max<int64_t>(count, 1)));
}

Tensor amax(const Tensor& a, const Shape& dims_in, bool keepdim) {
  detail::check_defined("amax", a, "input");
  detail::check_same_float_dtype("amax", {a});
  std::vector<int64_t> dims = detail::normalize_dims("amax", dims_in, a.dim());
  Tensor keep = detail::reduce_kernel(ReduceOp::kMax, a, dims);
  Tensor out = keepdim ? keep : squeeze_alias(keep, drop_dims(keep.sizes(), dims));
  // Gradient flows to every element equal to the max (ties each get the full gradient).
  return autograd::record("amax", out, {a}, {a, keep},
                          [in = a.sizes(), ks = keep.sizes()](const Tensor& g, const BackwardContext& c) {
                            Tensor mask = detail::binary_kernel("amax_backward", BinaryOp::kEqMask, c.saved[0],
                                                                c.saved[1], 0.0);
                            return std::vector<Tensor>{mul(mask, g.reshape(ks))};
                          });
}

Tensor sum_to(const Tensor& a, const Shape& shape) {
  if (a.sizes() == shape) return a;
  int64_t lead = a.dim() - static_cast<int64_t>(shape.size());
  BLU_CHECK(lead >= 0, "sum_to: cannot reduce ", a.describe(), " to ", shape_str(shape));
  Shape dims;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (d < lead) {
      dims.push_back(d);
    } else if (shape[d - lead] == 1 && a.sizes()[d] != 1) {
      dims.push_back(d);
    } else {
      BLU_CHECK(shape[d - lead] == a.sizes()[d], "sum_to: cannot reduce ", a.describe(), " to ",
                shape_str(shape));
    }
  }
  if (dims.empty()) return a.reshape(shape);
  return sum(a, dims, true).reshape(shape);
}

}  // namespace blu
