// blutensor/tensor.h: Storage, Tensor, TensorOptions and the tensor factories.
//
// Note [Tensor layout]
// A Tensor is a handle (shared_ptr) to a TensorImpl: dtype, sizes, strides (in elements), a storage
// offset (in elements) and a shared, reference-counted Storage (bytes + device + deleter). Views
// (view/reshape, transpose/permute, slice/narrow, select, expand, squeeze/unsqueeze, detach) make a
// new TensorImpl over the same Storage. Copying a Tensor copies the handle (like PyTorch).
//
// Note [Version counter]
// The version counter lives in the Storage, so every view (and detach()) shares it. In-place ops
// (add_, mul_, zero_, fill_, copy_, optimizer updates) bump it. Autograd records the version of each
// tensor it saves and backward throws "a tensor saved for backward was modified in place: ..."
// naming the op when it changed.
//
// Note [CUDA storage]
// CUDA bytes come from blu::cuda::CachingAllocator (cuda_allocator.h) on the device's current
// stream (cuda_stream.h); CPU bytes are 64-byte aligned malloc. Storage never synchronises.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "blutensor/device.h"
#include "blutensor/dtype.h"
#include "blutensor/error.h"

namespace blu {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& shape);  // "[2, 3]"
int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);

class Node;            // autograd.h
class Generator;       // random.h
struct AutogradMeta;   // autograd.h
class Tensor;

// Reference-counted bytes on one device. Owns them through a deleter.
class Storage {
 public:
  Storage(std::size_t nbytes, Device device);  // allocates (uninitialised)
  Storage(void* data, std::size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_;
  std::function<void(void*)> deleter_;
  uint64_t version_ = 0;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  DType dtype = DType::F32;
  Shape sizes;
  Shape strides;
  int64_t storage_offset = 0;
  std::unique_ptr<AutogradMeta> autograd;  // null until requires_grad or produced by a graph op
  TensorImpl();
  ~TensorImpl();
};

// What a factory makes: dtype, device, requires_grad. Implicit from a DType or a Device, so
// zeros({2, 3}, kFloat64) and zeros({2, 3}, Device::cuda()) both work.
struct TensorOptions {
  DType dtype_ = DType::F32;
  Device device_ = kCPU;
  bool requires_grad_ = false;

  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d) {}     // NOLINT
  TensorOptions(Device d) : device_(d) {}   // NOLINT
  TensorOptions dtype(DType d) const { TensorOptions o = *this; o.dtype_ = d; return o; }
  TensorOptions device(Device d) const { TensorOptions o = *this; o.device_ = d; return o; }
  TensorOptions requires_grad(bool r = true) const {
    TensorOptions o = *this; o.requires_grad_ = r; return o;
  }
};

// Called with the parameter once its .grad is final for the current backward (bludist buckets).
using GradReadyHook = std::function<void(Tensor& param)>;

class Tensor {
 public:
  Tensor() = default;  // undefined (like an empty torch.Tensor handle)
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- metadata
  const Shape& sizes() const;
  const Shape& shape() const { return sizes(); }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  const Shape& strides() const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const;
  int64_t numel() const;
  int64_t storage_offset() const;
  DType dtype() const;
  Device device() const;
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_floating_point() const { return is_floating(dtype()); }
  bool is_contiguous() const;
  std::size_t element_size() const { return dtype_size(dtype()); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * element_size(); }
  std::string shape_str() const;   // "[2, 3]"
  std::string describe() const;    // "f32[2, 3] on cuda:0" (used in error messages)
  const std::shared_ptr<Storage>& storage() const;
  uint64_t version() const;        // Note [Version counter]
  void bump_version() const;

  // Address of element 0 (storage data + offset * element size).
  void* data_ptr() const;
  template <typename T> T* data_ptr() const {
    BLU_CHECK(dtype() == dtype_of<T>(), "data_ptr<T>: tensor is ", describe(),
              ", requested ", dtype_name(dtype_of<T>()));
    return static_cast<T*>(data_ptr());
  }

  // ---- views (share storage; autograd-aware)
  Tensor view(const Shape& shape) const;      // one size may be -1; needs compatible strides
  Tensor reshape(const Shape& shape) const;   // view when possible, else a contiguous copy
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // 2-D transpose
  Tensor permute(const Shape& dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;  // Python-style clamps
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;    // -1 keeps a size; new leading dims allowed
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor squeeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor unsqueeze(int64_t dim) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;

  // ---- copies and conversions (autograd-aware)
  Tensor contiguous() const;  // self when already contiguous
  Tensor clone() const;
  Tensor to(Device device) const;  // self when already there
  Tensor to(DType dtype) const;    // self when already that dtype
  Tensor to(Device device, DType dtype) const { return to(device).to(dtype); }
  Tensor cpu() const { return to(kCPU); }
  Tensor cuda(int index = 0) const { return to(Device::cuda(index)); }
  Tensor detach() const;  // same storage and version counter, no autograd history

  // Element access (synchronises with the device for CUDA tensors).
  double item() const;  // numel must be 1
  template <typename T> T item() const { return static_cast<T>(item()); }
  std::vector<double> to_double_vector() const;  // row-major copy, any dtype/device
  template <typename T> std::vector<T> to_vector() const {
    std::vector<double> d = to_double_vector();
    return std::vector<T>(d.begin(), d.end());
  }

  // ---- in-place (bump the version; not allowed on a tensor that requires grad in grad mode)
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);  // broadcasts src, converts dtype, crosses devices
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(double value);
  Tensor& sub_(const Tensor& other) { return add_(other, -1.0); }
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& div_(double value) { return mul_(1.0 / value); }
  // Random fills from blu::default_generator() or `gen` (random.h): same numbers on CPU and CUDA.
  Tensor& uniform_(double low = 0.0, double high = 1.0, Generator* gen = nullptr);
  Tensor& normal_(double mean = 0.0, double stddev = 1.0, Generator* gen = nullptr);

  // ---- common ops as members (see ops.h for the full list)
  Tensor matmul(const Tensor& other) const;
  Tensor sum() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  Tensor pow(double exponent) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor tanh() const;
  Tensor relu() const;

  // ---- autograd (autograd.h has the engine)
  bool requires_grad() const;
  Tensor& requires_grad_(bool requires_grad = true);  // leaves only
  bool is_leaf() const;                               // no grad_fn
  const Tensor& grad() const;                         // undefined until a backward reached it
  void set_grad(const Tensor& grad);                  // e.g. undefined to clear (zero_grad)
  std::shared_ptr<Node> grad_fn() const;
  // Backward from this tensor: scalar (numel 1) without `gradient`, else `gradient` of its shape.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  // Leaves only: called after the leaf's .grad is final for a backward. Returns a handle id.
  int register_grad_ready_hook(GradReadyHook hook);
  void remove_grad_ready_hook(int id);

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// ---- operators (elementwise with broadcasting; see ops.h)
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);

// PyTorch-like printing: tensor([[ 1.0000, -2.5000], ...], dtype=f32, device=cuda:0, grad_fn=<Mul>)
// Tensors with more than 1000 elements print the first and last 3 entries of each dimension.
std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string to_string(const Tensor& t);

// ---- factories
Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor arange(double end, TensorOptions options = {});  // [0, end) step 1
Tensor arange(double start, double end, double step, TensorOptions options = {});
Tensor scalar_tensor(double value, TensorOptions options = {});  // 0-d
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
// Row-major values converted to options.dtype; shape {} means 1-D of data.size().
Tensor from_vector(const std::vector<double>& data, const Shape& shape = {},
                   TensorOptions options = {});
Tensor from_vector(const std::vector<float>& data, const Shape& shape = {},
                   TensorOptions options = {});
Tensor from_vector(const std::vector<int64_t>& data, const Shape& shape = {},
                   TensorOptions options = TensorOptions(kInt64));
Tensor from_vector(const std::vector<int32_t>& data, const Shape& shape = {},
                   TensorOptions options = TensorOptions(kInt32));
// Wrap existing CPU or CUDA memory (not owned, not freed); the caller keeps it alive.
Tensor from_blob(void* data, const Shape& shape, TensorOptions options = {});

}  // namespace blu
