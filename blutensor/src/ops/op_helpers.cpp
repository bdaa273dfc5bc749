// Shared argument checks of the ops (messages name the op, the shapes, dtypes and devices).
#include "ops/op_helpers.h"

#include <sstream>

#include "dispatch.h"

namespace blu::detail {

std::string describe_all(const std::vector<Tensor>& ts) {
  std::ostringstream os;
  for (std::size_t i = 0; i < ts.size(); ++i) os << (i ? ", " : "") << ts[i].describe();
  return os.str();
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = ndim == 0 ? 1 : ndim;
  BLU_CHECK(dim >= -n && dim < n, op, ": dim ", dim, " out of range for a tensor with ", ndim,
            " dims");
  return dim < 0 ? dim + n : dim;
}

void check_defined(const char* op, const Tensor& t, const char* what) {
  BLU_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

void check_same_device(const char* op, const std::vector<Tensor>& ts) {
  const Tensor* first = nullptr;
  for (const Tensor& t : ts) {
    if (!t.defined()) continue;
    if (first == nullptr) {
      first = &t;
      continue;
    }
    BLU_CHECK(t.device() == first->device(), op, ": expected all tensors on one device, got ",
              describe_all(ts));
  }
}

void check_linear_args(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_defined(op, x, "input");
  check_defined(op, weight, "weight");
  check_same_device(op, {x, weight, bias});
  check_same_float_dtype(op, {x, weight, bias});
  BLU_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), op, ": input ", x.describe(),
            " does not match weight ", weight.describe(), " (expected input [..., ",
            weight.dim() == 2 ? weight.size(1) : -1, "] and weight [out, in])");
  if (bias.defined()) {
    BLU_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), op, ": bias ", bias.describe(),
              " does not match weight ", weight.describe());
  }
}

void check_same_float_dtype(const char* op, const std::vector<Tensor>& ts) {
  const Tensor* first = nullptr;
  for (const Tensor& t : ts) {
    if (!t.defined()) continue;
    BLU_CHECK(is_floating(t.dtype()), op, ": expected floating tensors, got ", describe_all(ts));
    if (first == nullptr) {
      first = &t;
      continue;
    }
    BLU_CHECK(t.dtype() == first->dtype(), op, ": dtypes differ (no implicit promotion; cast with .to()): ",
              describe_all(ts));
  }
}

void check_inplace(const char* op, const Tensor& self, const Tensor& other) {
  BLU_CHECK(self.defined(), op, ": called on an undefined tensor");
  if (!GradMode::is_enabled()) return;
  BLU_CHECK(!self.requires_grad(), op, ": in-place operation on ", self.describe(),
            " which requires grad (", self.is_leaf() ? "a leaf" : "produced by an op",
            "); use the out-of-place op or a NoGradGuard");
  BLU_CHECK(!other.defined() || !other.requires_grad(), op, ": in-place operation with an operand ",
            other.describe(), " that requires grad; use the out-of-place op or a NoGradGuard");
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    BLU_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
              " are not broadcastable (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor make_alias(const Tensor& t, Shape sizes, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.storage();
  impl->dtype = t.dtype();
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->storage_offset = offset;
  return Tensor(std::move(impl));
}

Tensor new_empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t s : shape) BLU_CHECK(s >= 0, "empty: negative size in ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype),
                                            device);
  impl->dtype = dtype;
  impl->sizes = shape;
  impl->strides = contiguous_strides(shape);
  return Tensor(std::move(impl));
}

Tensor broadcast_alias(const Tensor& t, const Shape& shape) {
  if (t.sizes() == shape) return t;
  int64_t lead = static_cast<int64_t>(shape.size()) - t.dim();
  BLU_CHECK(lead >= 0, "broadcast: cannot broadcast ", t.describe(), " to ", shape_str(shape));
  Shape st(shape.size(), 0);
  for (int64_t i = 0; i < t.dim(); ++i) {
    int64_t s = t.sizes()[i];
    BLU_CHECK(s == shape[i + lead] || s == 1, "broadcast: cannot broadcast ", t.describe(), " to ",
              shape_str(shape));
    st[i + lead] = s == 1 && shape[i + lead] != 1 ? 0 : t.strides()[i];
  }
  return make_alias(t, shape, st, t.storage_offset());
}

Tensor contiguous_nograd(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = new_empty(t.sizes(), t.dtype(), t.device());
  BLU_DISPATCH(t.device(), copy_, out, t);
  return out;
}

}  // namespace blu::detail
