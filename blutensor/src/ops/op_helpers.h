// blutensor/src/ops/op_helpers.h: shared argument checks and small builders for the op files.
#pragma once

#include <string>
#include <vector>

#include "blutensor/autograd.h"
#include "blutensor/tensor.h"

namespace blu::detail {

// "f32[2, 3] on cpu" for each tensor, comma separated.
std::string describe_all(const std::vector<Tensor>& ts);
// Normalises a possibly negative dim; throws naming `op`.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// All defined tensors on one device; throws naming the op and listing them.
void check_same_device(const char* op, const std::vector<Tensor>& ts);
// All defined tensors floating and the same dtype.
void check_same_float_dtype(const char* op, const std::vector<Tensor>& ts);
void check_defined(const char* op, const Tensor& t, const char* what);
// A linear layer's operands: input [..., in], weight [out, in], optional bias [out], one device
// and float dtype; throws naming the op and the shapes (linear, gelu_linear, linear_cross_entropy).
void check_linear_args(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias);
// In-place ops refuse tensors that take part in autograd while grad mode is on.
void check_inplace(const char* op, const Tensor& self, const Tensor& other = Tensor());
// NumPy broadcasting of two shapes; throws naming the op.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

// A new tensor impl over t's storage with the given geometry (no autograd).
Tensor make_alias(const Tensor& t, Shape sizes, Shape strides, int64_t offset);
// Uninitialised contiguous tensor (no autograd).
Tensor new_empty(const Shape& shape, DType dtype, Device device);
// t expanded (stride-0) to shape without autograd (shape must be a broadcast of t's).
Tensor broadcast_alias(const Tensor& t, const Shape& shape);
// Contiguous copy without autograd (self when already contiguous).
Tensor contiguous_nograd(const Tensor& t);

}  // namespace blu::detail

#include "kernel_args.h"

namespace blu::detail {
// Kernel calls without autograd: fresh contiguous output of a's dtype/device (binary: broadcast).
Tensor unary_kernel(const char* op, UnaryOp kind, const Tensor& a, double alpha);
Tensor binary_kernel(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b, double alpha);
// Reduction to the keepdim shape, no autograd. dims already normalised (sorted, unique).
Tensor reduce_kernel(ReduceOp kind, const Tensor& a, const std::vector<int64_t>& dims);
// Sorted unique non-negative dims; empty input = all dims.
std::vector<int64_t> normalize_dims(const char* op, const Shape& dims, int64_t ndim);
}  // namespace blu::detail
