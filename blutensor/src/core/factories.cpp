// Tensor factories (empty/zeros/ones/full/arange/from_vector/from_blob) and random draws. Values are
// produced on the CPU or directly by the device kernels (fill_, random_*); from_vector copies up.
#include <cmath>

#include "blutensor/autograd.h"
#include "blutensor/philox.h"
#include "blutensor/random.h"
#include "dispatch.h"
#include "ops/op_helpers.h"

namespace blu {

namespace {
Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad_) t.requires_grad_(true);
  return t;
}
}  // namespace

Tensor empty(const Shape& shape, TensorOptions o) {
  return finish(detail::new_empty(shape, o.dtype_, o.device_), o);
}

Tensor full(const Shape& shape, double value, TensorOptions o) {
  Tensor t = detail::new_empty(shape, o.dtype_, o.device_);
  BLU_DISPATCH(o.device_, fill_, t, value);
  return finish(t, o);
}

Tensor zeros(const Shape& shape, TensorOptions o) { return full(shape, 0.0, o); }
Tensor ones(const Shape& shape, TensorOptions o) { return full(shape, 1.0, o); }
Tensor scalar_tensor(double value, TensorOptions o) { return full({}, value, o); }

Tensor arange(double end, TensorOptions o) { return arange(0.0, end, 1.0, o); }

Tensor arange(double start, double end, double step, TensorOptions o) {
  BLU_CHECK(step != 0.0, "arange: step must be nonzero");
  double count = std::ceil((end - start) / step);
  int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<double>(i) * step;
  return from_vector(v, {n}, o);
}

Tensor empty_like(const Tensor& t) { return empty(t.sizes(), TensorOptions(t.dtype()).device(t.device())); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), TensorOptions(t.dtype()).device(t.device())); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), TensorOptions(t.dtype()).device(t.device())); }
Tensor full_like(const Tensor& t, double value) {
  return full(t.sizes(), value, TensorOptions(t.dtype()).device(t.device()));
}

namespace {
template <typename T>
Tensor from_host_values(const std::vector<T>& data, const Shape& shape, const TensorOptions& o) {
  Shape s = shape.empty() ? Shape{static_cast<int64_t>(data.size())} : shape;
  BLU_CHECK(shape_numel(s) == static_cast<int64_t>(data.size()), "from_vector: ", data.size(),
            " values do not fill shape ", shape_str(s));
  Tensor src = detail::new_empty(s, dtype_of<T>(), kCPU);
  if (!data.empty()) std::memcpy(src.data_ptr(), data.data(), data.size() * sizeof(T));
  Tensor host = src;
  if (o.dtype_ != dtype_of<T>()) {
    host = detail::new_empty(s, o.dtype_, kCPU);
    cpu_ops::copy_(host, src);
  }
  Tensor out = host;
  if (o.device_.is_cuda()) {
    out = detail::new_empty(s, o.dtype_, o.device_);
    BLU_DISPATCH(o.device_, copy_, out, host);
  }
  return finish(out, o);
}
}  // namespace

Tensor from_vector(const std::vector<double>& d, const Shape& s, TensorOptions o) { return from_host_values(d, s, o); }
Tensor from_vector(const std::vector<float>& d, const Shape& s, TensorOptions o) { return from_host_values(d, s, o); }
Tensor from_vector(const std::vector<int64_t>& d, const Shape& s, TensorOptions o) { return from_host_values(d, s, o); }
Tensor from_vector(const std::vector<int32_t>& d, const Shape& s, TensorOptions o) { return from_host_values(d, s, o); }

Tensor from_blob(void* data, const Shape& shape, TensorOptions o) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(data, static_cast<std::size_t>(shape_numel(shape)) * dtype_size(o.dtype_),
                                            o.device_, nullptr);
  impl->dtype = o.dtype_;
  impl->sizes = shape;
  impl->strides = contiguous_strides(shape);
  return finish(Tensor(std::move(impl)), o);
}

// ---------------------------------------------------------------- random
Generator& default_generator() {
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

Tensor randn(const Shape& shape, TensorOptions o, Generator* gen) {
  Tensor t = detail::new_empty(shape, o.dtype_, o.device_);
  { NoGradGuard ng; t.normal_(0.0, 1.0, gen); }
  return finish(t, o);
}

Tensor rand(const Shape& shape, TensorOptions o, Generator* gen) {
  Tensor t = detail::new_empty(shape, o.dtype_, o.device_);
  { NoGradGuard ng; t.uniform_(0.0, 1.0, gen); }
  return finish(t, o);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions o, Generator* gen) {
  BLU_CHECK(high > low, "randint: empty range [", low, ", ", high, ")");
  Generator& g = gen ? *gen : default_generator();
  int64_t n = shape_numel(shape);
  uint64_t offset = g.reserve(philox::uniform_counters(static_cast<uint64_t>(n)));
  std::vector<int64_t> v(static_cast<std::size_t>(n));
  double range = static_cast<double>(high - low);
  for (int64_t i = 0; i < n; ++i) {
    double u = philox::uniform_at(g.seed(), offset, static_cast<uint64_t>(i));
    v[i] = std::min(high - 1, low + static_cast<int64_t>(u * range));
  }
  return from_vector(v, shape.empty() ? Shape{} : shape, o).view(shape);
}

Tensor& Tensor::uniform_(double low, double high, Generator* gen) {
  detail::check_inplace("uniform_", *this);
  detail::check_same_float_dtype("uniform_", {*this});
  Generator& g = gen ? *gen : default_generator();
  uint64_t offset = g.reserve(philox::uniform_counters(static_cast<uint64_t>(numel())));
  Tensor c = is_contiguous() ? *this : detail::new_empty(sizes(), dtype(), device());
  BLU_DISPATCH(device(), random_uniform, c, g.seed(), offset, low, high);
  if (!c.is_same(*this)) BLU_DISPATCH(device(), copy_, *this, c);
  bump_version();
  return *this;
}

Tensor& Tensor::normal_(double mean, double stddev, Generator* gen) {
  detail::check_inplace("normal_", *this);
  detail::check_same_float_dtype("normal_", {*this});
  Generator& g = gen ? *gen : default_generator();
  uint64_t offset = g.reserve(philox::normal_counters(static_cast<uint64_t>(numel())));
  Tensor c = is_contiguous() ? *this : detail::new_empty(sizes(), dtype(), device());
  BLU_DISPATCH(device(), random_normal, c, g.seed(), offset, mean, stddev);
  if (!c.is_same(*this)) BLU_DISPATCH(device(), copy_, *this, c);
  bump_version();
  return *this;
}

}  // namespace blu
