// blutensor/ops.h: the differentiable ops on Tensors (CPU and CUDA, with autograd), PyTorch names.
//
// Conventions: every op checks dtypes (floating ops need equal floating dtypes; no silent
// promotion), shapes and devices (all inputs on one device) and throws blu::Error naming the op,
// the shapes and the dtypes. Elementwise binary ops broadcast like NumPy/PyTorch. Reductions take
// a list of dims (negative allowed; empty = all) and keepdim. Ops run on the inputs' device:
// CPU kernels in src/cpu, CUDA kernels in src/cuda (tensorcuda), same names (src/cpu/cpu_ops.h).
#pragma once

#include <cstdint>
#include <vector>

#include "blutensor/random.h"
#include "blutensor/tensor.h"

namespace blu {

// ---- elementwise (broadcasting)
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor rsub(const Tensor& a, double b);  // b - a
Tensor rdiv(const Tensor& a, double b);  // b / a
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor pow(const Tensor& a, double exponent);
Tensor tanh(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor gelu(const Tensor& a);  // tanh approximation (GPT-2's)
Tensor clamp_max(const Tensor& a, double max_value);

// ---- reductions
Tensor sum(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& a, const Shape& dims = {}, bool keepdim = false);  // max values
inline Tensor max(const Tensor& a, int64_t dim, bool keepdim = false) {
  return amax(a, {dim}, keepdim);
}
// Sums `a` down to `shape` (the reverse of broadcasting; used by backward).
Tensor sum_to(const Tensor& a, const Shape& shape);

// ---- linear algebra
// matmul like torch.matmul: 1-D/2-D/batched (>2-D, batch dims broadcast).
Tensor matmul(const Tensor& a, const Tensor& b);
// x [..., in] @ weight[out, in]^T + bias[out] (bias may be undefined).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// linear(gelu(pre), weight, bias), bit for bit, saving pre instead of gelu(pre): the backward
// computes the GELU again (Note [GELU recompute]).
Tensor gelu_linear(const Tensor& pre, const Tensor& weight, const Tensor& bias = Tensor());

// ---- normalisation, activations, attention
// Over the last dim; weight/bias [C] (either may be undefined).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);
// q [..., Tq, D], k, v [..., Tk, D]; scale 1/sqrt(D) unless given (>0). Math version on CPU.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool is_causal = false, double scale = 0.0);
// Sets the strict upper triangle (col > row + (cols - rows)) of the last two dims to `value`
// (differentiable: the gradient there is zero). Used for causal masks.
Tensor masked_fill_causal(const Tensor& x, double value);

// ---- indexing, losses
// weight [V, C], indices (i32/i64/u16) [...] -> [..., C]. Bad indices throw (checked on the CPU;
// on CUDA the kernel clamps and the op reports through a device flag where tensorcuda supports it).
Tensor embedding(const Tensor& weight, const Tensor& indices);
// logits [N, V] (or [..., V]), targets [N] (or [...]) integer; mean over targets != ignore_index.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);
// cross_entropy(linear(x, weight, bias), targets) without the [N, V] logits or their gradient:
// row chunks of chunk_rows (<= 0: 512 MiB of fp32 logits), the gradient made in the forward and
// scaled in the backward (Note [Linear cross-entropy]); bias (optional) gets no gradient.
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& targets,
                            int64_t ignore_index = -100, int64_t chunk_rows = 0);

// ---- shape
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
inline std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim = 0) {
  return t.split(split_size, dim);
}
// Materialises a broadcast / strided tensor (differentiable copy).
Tensor copy(const Tensor& t);

// ---- dropout: keeps each element with probability 1 - p (mask from the Philox stream of `gen`,
// Note [Random streams]), scales kept ones by 1 / (1 - p). Identity when !train or p == 0.
Tensor dropout(const Tensor& x, double p, bool train = true, Generator* gen = nullptr);

// ---- casts (differentiable between floating dtypes)
inline Tensor to_dtype(const Tensor& t, DType dtype) { return t.to(dtype); }
// Each tensor to `dtype` as t.to(dtype) would (itself when already that dtype), the casts of one
// source dtype in one backend call forward and one backward (Note [Multi-tensor cast]).
std::vector<Tensor> to_dtype_all(const std::vector<Tensor>& ts, DType dtype);

// ---- comparisons used by tests and tools (no autograd)
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
double max_abs_diff(const Tensor& a, const Tensor& b);

}  // namespace blu
