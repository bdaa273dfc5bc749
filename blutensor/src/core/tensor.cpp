// Tensor: metadata, views (with their backward), conversions, in-place ops and autograd accessors.
// Views share storage and the version counter (Note [Tensor layout], Note [Version counter]).
#include "blutensor/tensor.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <sstream>

#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "dispatch.h"
#include "ops/op_helpers.h"

namespace blu {

TensorImpl::TensorImpl() = default;
TensorImpl::~TensorImpl() = default;

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

namespace {
void check_defined_self(const Tensor& t, const char* what) {
  BLU_CHECK(t.defined(), what, ": called on an undefined tensor");
}

// Strides that make `new_sizes` a view of (sizes, strides), or nullopt (then reshape copies).
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& new_sizes) {
  Shape out(new_sizes.size(), 1);
  if (shape_numel(sizes) == 0 || sizes.empty()) return contiguous_strides(new_sizes);
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    bool chunk_ends = d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
      out[view_d] = view_numel * chunk_stride;
      view_numel *= new_sizes[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_stride = strides[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

Shape infer_shape(const char* op, const Shape& shape, int64_t numel, const Shape& from) {
  Shape out = shape;
  int64_t infer = -1, known = 1;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      BLU_CHECK(infer < 0, op, ": more than one -1 in ", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      BLU_CHECK(out[i] >= 0, op, ": negative size in ", shape_str(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    BLU_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape),
              " is invalid for input of shape ", shape_str(from));
    out[infer] = numel / known;
  }
  BLU_CHECK(shape_numel(out) == numel, op, ": shape ", shape_str(shape),
            " is invalid for input of shape ", shape_str(from), " (", numel, " elements)");
  return out;
}

Tensor reshape_grad(const Tensor& g, const Shape& sizes) { return g.reshape(sizes); }
}  // namespace

// ---------------------------------------------------------------- metadata
const Shape& Tensor::sizes() const { check_defined_self(*this, "sizes"); return impl_->sizes; }
const Shape& Tensor::strides() const { check_defined_self(*this, "strides"); return impl_->strides; }
int64_t Tensor::dim() const { return static_cast<int64_t>(sizes().size()); }
int64_t Tensor::numel() const { return shape_numel(sizes()); }
int64_t Tensor::size(int64_t d) const { return sizes()[detail::wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[detail::wrap_dim(d, dim(), "stride")]; }
int64_t Tensor::storage_offset() const { check_defined_self(*this, "storage_offset"); return impl_->storage_offset; }
DType Tensor::dtype() const { check_defined_self(*this, "dtype"); return impl_->dtype; }
Device Tensor::device() const { check_defined_self(*this, "device"); return impl_->storage->device(); }
const std::shared_ptr<Storage>& Tensor::storage() const { check_defined_self(*this, "storage"); return impl_->storage; }
uint64_t Tensor::version() const { return storage()->version(); }
void Tensor::bump_version() const { storage()->bump_version(); }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (impl_->sizes[i] == 1) continue;
    if (impl_->strides[i] != expected) return false;
    expected *= impl_->sizes[i];
  }
  return true;
}

std::string Tensor::shape_str() const { return defined() ? blu::shape_str(sizes()) : "(undefined)"; }

std::string Tensor::describe() const {
  if (!defined()) return "(undefined tensor)";
  return std::string(dtype_name(dtype())) + blu::shape_str(sizes()) + " on " + device().str();
}

void* Tensor::data_ptr() const {
  check_defined_self(*this, "data_ptr");
  return static_cast<char*>(impl_->storage->data()) +
         impl_->storage_offset * static_cast<int64_t>(element_size());
}

// ---------------------------------------------------------------- views
Tensor Tensor::view(const Shape& shape) const {
  Shape new_sizes = infer_shape("view", shape, numel(), sizes());
  std::optional<Shape> st = view_strides(sizes(), strides(), new_sizes);
  BLU_CHECK(st.has_value(), "view: shape ", blu::shape_str(new_sizes),
            " is not compatible with the strides of ", describe(), " (strides ",
            blu::shape_str(strides()), "); use reshape()");
  Tensor out = detail::make_alias(*this, new_sizes, *st, storage_offset());
  Shape in_sizes = sizes();
  return autograd::record("view", out, {*this}, {},
                          [in_sizes](const Tensor& g, const BackwardContext&) {
                            return std::vector<Tensor>{reshape_grad(g, in_sizes)};
                          });
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape new_sizes = infer_shape("reshape", shape, numel(), sizes());
  if (view_strides(sizes(), strides(), new_sizes).has_value()) return view(new_sizes);
  return contiguous().view(new_sizes);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  int64_t s = detail::wrap_dim(start_dim, dim(), "flatten");
  int64_t e = detail::wrap_dim(end_dim, dim(), "flatten");
  BLU_CHECK(s <= e, "flatten: start_dim ", start_dim, " > end_dim ", end_dim, " for ", describe());
  Shape ns(sizes().begin(), sizes().begin() + s);
  int64_t m = 1;
  for (int64_t i = s; i <= e; ++i) m *= sizes()[i];
  ns.push_back(m);
  ns.insert(ns.end(), sizes().begin() + e + 1, sizes().end());
  return reshape(ns);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  int64_t a = detail::wrap_dim(d0, dim(), "transpose");
  int64_t b = detail::wrap_dim(d1, dim(), "transpose");
  Shape ns = sizes(), nst = strides();
  std::swap(ns[a], ns[b]);
  std::swap(nst[a], nst[b]);
  Tensor out = detail::make_alias(*this, ns, nst, storage_offset());
  return autograd::record("transpose", out, {*this}, {},
                          [a, b](const Tensor& g, const BackwardContext&) {
                            return std::vector<Tensor>{g.transpose(a, b)};
                          });
}

Tensor Tensor::t() const {
  BLU_CHECK(dim() <= 2, "t: expects a tensor with <= 2 dims, got ", describe());
  if (dim() < 2) return *this;
  return transpose(0, 1);
}

Tensor Tensor::permute(const Shape& dims) const {
  BLU_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute: ", blu::shape_str(dims),
            " does not match the rank of ", describe());
  Shape ns(dims.size()), nst(dims.size()), inverse(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    int64_t d = detail::wrap_dim(dims[i], dim(), "permute");
    BLU_CHECK(!seen[d], "permute: repeated dim in ", blu::shape_str(dims));
    seen[d] = true;
    ns[i] = sizes()[d];
    nst[i] = strides()[d];
    inverse[d] = static_cast<int64_t>(i);
  }
  Tensor out = detail::make_alias(*this, ns, nst, storage_offset());
  return autograd::record("permute", out, {*this}, {},
                          [inverse](const Tensor& g, const BackwardContext&) {
                            return std::vector<Tensor>{g.permute(inverse)};
                          });
}

namespace {
// Gradient of a view that picks a region: zeros of the input's shape with g copied into the region.
Tensor scatter_into_zeros(const Tensor& g, const Shape& in_sizes,
                          const std::function<Tensor(const Tensor&)>& region) {
  Tensor gi = zeros(in_sizes, TensorOptions(g.dtype()).device(g.device()));
  NoGradGuard ng;
  region(gi).copy_(g);
  return gi;
}
}  // namespace

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  int64_t dd = detail::wrap_dim(d, dim(), "slice");
  BLU_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t n = sizes()[dd];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape ns = sizes(), nst = strides();
  ns[dd] = (end - start + step - 1) / step;
  nst[dd] = strides()[dd] * step;
  Tensor out = detail::make_alias(*this, ns, nst, storage_offset() + start * strides()[dd]);
  Shape in_sizes = sizes();
  return autograd::record("slice", out, {*this}, {},
                          [in_sizes, dd, start, end, step](const Tensor& g, const BackwardContext&) {
                            return std::vector<Tensor>{scatter_into_zeros(
                                g, in_sizes,
                                [&](const Tensor& z) { return z.slice(dd, start, end, step); })};
                          });
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  int64_t dd = detail::wrap_dim(d, dim(), "narrow");
  BLU_CHECK(start >= 0 && length >= 0 && start + length <= sizes()[dd], "narrow: start ", start,
            " length ", length, " out of range for dim ", d, " of ", describe());
  return slice(dd, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  int64_t dd = detail::wrap_dim(d, dim(), "select");
  int64_t n = sizes()[dd];
  BLU_CHECK(index >= -n && index < n, "select: index ", index, " out of range for dim ", d,
            " of ", describe());
  if (index < 0) index += n;
  Shape ns = sizes(), nst = strides();
  ns.erase(ns.begin() + dd);
  nst.erase(nst.begin() + dd);
  Tensor out = detail::make_alias(*this, ns, nst, storage_offset() + index * strides()[dd]);
  Shape in_sizes = sizes();
  return autograd::record("select", out, {*this}, {},
                          [in_sizes, dd, index](const Tensor& g, const BackwardContext&) {
                            return std::vector<Tensor>{scatter_into_zeros(
                                g, in_sizes, [&](const Tensor& z) { return z.select(dd, index); })};
                          });
}

Tensor Tensor::expand(const Shape& shape) const {
  BLU_CHECK(static_cast<int64_t>(shape.size()) >= dim(), "expand: target ", blu::shape_str(shape),
            " has fewer dims than ", describe());
  int64_t lead = static_cast<int64_t>(shape.size()) - dim();
  Shape ns(shape.size()), nst(shape.size());
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    if (i < lead) {
      BLU_CHECK(shape[i] >= 0, "expand: -1 not allowed for a new leading dim in ",
                blu::shape_str(shape));
      ns[i] = shape[i];
      nst[i] = 0;
      continue;
    }
    int64_t src = sizes()[i - lead];
    int64_t want = shape[i] == -1 ? src : shape[i];
    if (src == want) {
      ns[i] = src;
      nst[i] = strides()[i - lead];
    } else {
      BLU_CHECK(src == 1, "expand: cannot expand ", describe(), " to ", blu::shape_str(shape),
                " (dim ", i, ": ", src, " vs ", want, ")");
      ns[i] = want;
      nst[i] = 0;
    }
  }
  if (ns == sizes()) return *this;
  Tensor out = detail::make_alias(*this, ns, nst, storage_offset());
  Shape in_sizes = sizes();
  return autograd::record("expand", out, {*this}, {},
                          [in_sizes](const Tensor& g, const BackwardContext&) {
                            return std::vector<Tensor>{sum_to(g, in_sizes)};
                          });
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  int64_t dd = detail::wrap_dim(d, dim(), "squeeze");
  if (sizes()[dd] != 1) return *this;
  Shape ns = sizes();
  ns.erase(ns.begin() + dd);
  return view(ns);
}

Tensor Tensor::squeeze() const {
  Shape ns;
  for (int64_t s : sizes()) if (s != 1) ns.push_back(s);
  if (ns.size() == sizes().size()) return *this;
  return view(ns);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  int64_t dd = detail::wrap_dim(d, dim() + 1, "unsqueeze");
  Shape ns = sizes(), nst = strides();
  int64_t st = dd < dim() ? strides()[dd] * sizes()[dd] : 1;
  ns.insert(ns.begin() + dd, 1);
  nst.insert(nst.begin() + dd, st);
  Tensor out = detail::make_alias(*this, ns, nst, storage_offset());
  Shape in_sizes = sizes();
  return autograd::record("unsqueeze", out, {*this}, {},
                          [in_sizes](const Tensor& g, const BackwardContext&) {
                            return std::vector<Tensor>{reshape_grad(g, in_sizes)};
                          });
}

namespace {
// Note [Split of adjacent gradients]
// split's backward concatenates its pieces' gradients. When they already are the pieces of one
// tensor, i.e. views of one storage with one dtype and the same strides, each starting where the
// previous one ends along the split dim (an op wrote them into one buffer on purpose: Note
// [Packed attention gradients] in cuda_sdpa.cpp), their union is a view of that storage with the
// input's sizes and those strides: it addresses exactly the pieces' elements, so it is returned
// without a copy. Anything else (a missing gradient, separate buffers, another order) is
// concatenated as before.
Tensor union_of_adjacent(const std::vector<Tensor>& grads, int64_t dd, const Shape& in_sizes) {
  if (grads.empty() || !grads[0].defined()) return Tensor();
  const Tensor& g0 = grads[0];
  int64_t next = g0.storage_offset(), total = 0;
  for (const Tensor& g : grads) {
    if (!g.defined() || g.storage() != g0.storage() || g.dtype() != g0.dtype() || g.strides() != g0.strides() ||
        g.storage_offset() != next || g.dim() != static_cast<int64_t>(in_sizes.size())) {
      return Tensor();
    }
    for (int64_t i = 0; i < g.dim(); ++i) {
      if (i != dd && g.size(i) != in_sizes[static_cast<size_t>(i)]) return Tensor();
    }
    next += g.size(dd) * g.stride(dd);
    total += g.size(dd);
  }
  if (total != in_sizes[static_cast<size_t>(dd)]) return Tensor();
  return detail::make_alias(g0, in_sizes, g0.strides(), g0.storage_offset());
}
}  // namespace

std::vector<Tensor> Tensor::split(int64_t split_size, int64_t d) const {
  int64_t dd = detail::wrap_dim(d, dim(), "split");
  BLU_CHECK(split_size > 0, "split: split_size must be positive, got ", split_size);
  const int64_t n = sizes()[dd];
  if (n == 0) return {*this};
  // One node for all pieces: backward concatenates their gradients (zeros where none arrived)
  // instead of scattering each piece into a zero tensor of the full size.
  std::vector<Tensor> pieces;
  std::vector<int64_t> lengths;
  for (int64_t s = 0; s < n; s += split_size) {
    const int64_t len = std::min(split_size, n - s);
    Shape ns = sizes();
    ns[dd] = len;
    pieces.push_back(detail::make_alias(*this, ns, strides(), storage_offset() + s * strides()[dd]));
    lengths.push_back(len);
  }
  Shape in_sizes = sizes();
  return autograd::record_multi(
      "split", pieces, {*this}, {},
      [dd, lengths, in_sizes](const std::vector<Tensor>& grads, const BackwardContext&) {
        if (Tensor whole = union_of_adjacent(grads, dd, in_sizes); whole.defined()) return std::vector<Tensor>{whole};
        std::vector<Tensor> parts;
        for (std::size_t i = 0; i < grads.size(); ++i) {
          if (grads[i].defined()) {
            parts.push_back(grads[i]);
          } else {
            const Tensor& any = *std::find_if(grads.begin(), grads.end(), [](const Tensor& t) { return t.defined(); });
            Shape ps = in_sizes;
            ps[dd] = lengths[i];
            parts.push_back(zeros(ps, TensorOptions(any.dtype()).device(any.device())));
          }
        }
        return std::vector<Tensor>{cat(parts, dd)};
      });
}

std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t d) const {
  BLU_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  int64_t n = size(d);
  return split(std::max<int64_t>(1, (n + chunks - 1) / chunks), d);
}

// ---------------------------------------------------------------- copies, conversions
Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return blu::copy(*this);
}

Tensor Tensor::clone() const { return blu::copy(*this); }

Tensor Tensor::detach() const {
  check_defined_self(*this, "detach");
  return detail::make_alias(*this, sizes(), strides(), storage_offset());
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor src = detail::contiguous_nograd(*this);
  Tensor out = detail::new_empty(sizes(), dtype(), device);
  Device backend = device.is_cuda() ? device : src.device();
  BLU_DISPATCH(backend, copy_, out, src);
  Device from = this->device();
  return autograd::record("to_device", out, {*this}, {},
                          [from](const Tensor& g, const BackwardContext&) {
                            return std::vector<Tensor>{g.to(from)};
                          });
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype()) return *this;
  Tensor out = detail::new_empty(sizes(), dt, device());
  BLU_DISPATCH(device(), copy_, out, *this);
  if (!is_floating(dt) || !is_floating(dtype())) return out;
  DType from = dtype();
  return autograd::record("to_dtype", out, {*this}, {},
                          [from](const Tensor& g, const BackwardContext&) {
                            return std::vector<Tensor>{g.to(from)};
                          });
}

std::vector<double> Tensor::to_double_vector() const {
  check_defined_self(*this, "to_double_vector");
  capture::detail::record_host_read(*this);  // Note [Step capture]
  NoGradGuard ng;
  Tensor host = detail::contiguous_nograd(detach()).to(kCPU);
  Tensor d = detail::new_empty(sizes(), DType::F64, kCPU);
  cpu_ops::copy_(d, host);
  const double* p = static_cast<const double*>(d.data_ptr());
  return std::vector<double>(p, p + numel());
}

double Tensor::item() const {
  BLU_CHECK(defined() && numel() == 1, "item: expects a tensor with one element, got ", describe());
  return to_double_vector()[0];
}

// ---------------------------------------------------------------- in-place
Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  detail::check_inplace("fill_", *this);
  BLU_DISPATCH(device(), fill_, *this, value);
  bump_version();
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  detail::check_defined("copy_", src, "src");
  detail::check_inplace("copy_", *this, src);
  Tensor s = src;
  if (s.sizes() != sizes()) {
    Shape b = detail::broadcast_shapes("copy_", sizes(), s.sizes());
    BLU_CHECK(b == sizes(), "copy_: cannot broadcast ", src.describe(), " into ", describe());
    s = detail::broadcast_alias(s, sizes());
  }
  if (s.device() == device()) {
    BLU_DISPATCH(device(), copy_, *this, s);
  } else {
    // Cross-device: same dtype, contiguous on both sides (cpu_ops.h contract), then finish here.
    Tensor staged = detail::contiguous_nograd(s.dtype() == dtype() ? s : s.detach().to(dtype()));
    Tensor landed = is_contiguous() ? *this : detail::new_empty(sizes(), dtype(), device());
    Device backend = device().is_cuda() ? device() : staged.device();
    BLU_DISPATCH(backend, copy_, landed, staged);
    if (!landed.is_same(*this)) BLU_DISPATCH(device(), copy_, *this, landed);
  }
  bump_version();
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  detail::check_defined("add_", other, "other");
  detail::check_inplace("add_", *this, other);
  detail::check_same_device("add_", {*this, other});
  detail::check_same_float_dtype("add_", {*this, other});
  Shape b = detail::broadcast_shapes("add_", sizes(), other.sizes());
  BLU_CHECK(b == sizes(), "add_: cannot broadcast ", other.describe(), " into ", describe());
  BLU_DISPATCH(device(), binary, BinaryOp::kAdd, *this, *this,
               detail::broadcast_alias(other, sizes()), alpha);
  bump_version();
  return *this;
}

Tensor& Tensor::add_(double value) {
  detail::check_inplace("add_", *this);
  detail::check_same_float_dtype("add_", {*this});
  BLU_DISPATCH(device(), unary, UnaryOp::kAddScalar, *this, *this, value);
  bump_version();
  return *this;
}

Tensor& Tensor::mul_(const Tensor& other) {
  detail::check_defined("mul_", other, "other");
  detail::check_inplace("mul_", *this, other);
  detail::check_same_device("mul_", {*this, other});
  detail::check_same_float_dtype("mul_", {*this, other});
  Shape b = detail::broadcast_shapes("mul_", sizes(), other.sizes());
  BLU_CHECK(b == sizes(), "mul_: cannot broadcast ", other.describe(), " into ", describe());
  BLU_DISPATCH(device(), binary, BinaryOp::kMul, *this, *this,
               detail::broadcast_alias(other, sizes()), 1.0);
  bump_version();
  return *this;
}

Tensor& Tensor::mul_(double value) {
  detail::check_inplace("mul_", *this);
  detail::check_same_float_dtype("mul_", {*this});
  BLU_DISPATCH(device(), unary, UnaryOp::kMulScalar, *this, *this, value);
  bump_version();
  return *this;
}

// ---------------------------------------------------------------- member shorthands
Tensor Tensor::matmul(const Tensor& other) const { return blu::matmul(*this, other); }
Tensor Tensor::sum() const { return blu::sum(*this); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return blu::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return blu::mean(*this); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const { return blu::mean(*this, dims, keepdim); }
Tensor Tensor::pow(double e) const { return blu::pow(*this, e); }
Tensor Tensor::exp() const { return blu::exp(*this); }
Tensor Tensor::log() const { return blu::log(*this); }
Tensor Tensor::sqrt() const { return blu::sqrt(*this); }
Tensor Tensor::tanh() const { return blu::tanh(*this); }
Tensor Tensor::relu() const { return blu::relu(*this); }

// ---------------------------------------------------------------- autograd accessors
bool Tensor::requires_grad() const {
  return defined() && impl_->autograd && (impl_->autograd->requires_grad || impl_->autograd->grad_fn);
}

Tensor& Tensor::requires_grad_(bool r) {
  check_defined_self(*this, "requires_grad_");
  BLU_CHECK(is_leaf(), "requires_grad_: only leaf tensors can change requires_grad (", describe(),
            " was produced by ", impl_->autograd->grad_fn->name(), "); use detach()");
  BLU_CHECK(!r || is_floating(dtype()), "requires_grad_: only floating tensors can require grad, got ",
            describe());
  if (!impl_->autograd) impl_->autograd = std::make_unique<AutogradMeta>();
  impl_->autograd->requires_grad = r;
  return *this;
}

bool Tensor::is_leaf() const { return !impl_->autograd || !impl_->autograd->grad_fn; }

const Tensor& Tensor::grad() const {
  static const Tensor kUndefined;
  check_defined_self(*this, "grad");
  return impl_->autograd ? impl_->autograd->grad : kUndefined;
}

void Tensor::set_grad(const Tensor& grad) {
  check_defined_self(*this, "set_grad");
  if (grad.defined()) {
    BLU_CHECK(grad.sizes() == sizes() && grad.dtype() == dtype() && grad.device() == device(),
              "set_grad: gradient ", grad.describe(), " does not match ", describe());
  }
  if (!impl_->autograd) impl_->autograd = std::make_unique<AutogradMeta>();
  impl_->autograd->grad = grad;
}

std::shared_ptr<Node> Tensor::grad_fn() const {
  return defined() && impl_->autograd ? impl_->autograd->grad_fn : nullptr;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph);
}

int Tensor::register_grad_ready_hook(GradReadyHook hook) {
  BLU_CHECK(requires_grad() && is_leaf(), "register_grad_ready_hook: needs a leaf that requires grad, got ",
            describe());
  int id = impl_->autograd->next_hook_id++;
  impl_->autograd->grad_ready_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::remove_grad_ready_hook(int id) {
  if (!defined() || !impl_->autograd) return;
  auto& hooks = impl_->autograd->grad_ready_hooks;
  hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [id](const auto& h) { return h.first == id; }),
              hooks.end());
}

}  // namespace blu
