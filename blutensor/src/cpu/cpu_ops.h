// blutensor/src/cpu/cpu_ops.h: the kernel-level CPU backend: no autograd, no allocation of
// outputs (the caller preallocates them), no argument checks beyond internal asserts (the public
// ops in ops.h check dtype/shape/device first).
//
// Note [Backend mirror]
// blutensor/src/cuda/cuda_ops.h (tensorcuda) declares exactly these functions, same names and
// signatures, in namespace blu::cuda_ops; dispatch.h calls blu::cpu_ops::f or blu::cuda_ops::f by the
// device of the tensors. A CUDA function not written yet must still be defined (throwing blu::Error
// "cuda_ops::<name>: not implemented") so that everything links. Contracts common to both:
//   - Tensors passed are defined and on the backend's device (except copy_, which may cross).
//   - "strided" means any strides, including 0 (broadcast inputs); "contiguous" is guaranteed by
//     the caller. Outputs of elementwise kernels may be strided views (in-place ops on views) but
//     never overlap their inputs except by being exactly the same tensor (a.add_(b): out is a).
//   - Floating dtypes f64, f32, bf16, f16; bf16/f16 compute in float. f64 computes in double.
//   - Reductions and GEMM accumulate in float (double for f64); deterministic order. f32 GEMM is
//     strict fp32 (no TF32: the CPU-vs-CUDA test holds f32 to ~1e-4 absolute per element).
#pragma once

#include <cstdint>
#include <vector>

#include "blutensor/tensor.h"
#include "kernel_args.h"

namespace blu::cpu_ops {

// dst[i] = cast(src[i]); same shape, both strided, any dtypes (integer <-> floating included).
// cuda_ops::copy_ also copies CPU<->CUDA and CUDA<->CUDA(other device); blutensor requests those
// only between contiguous tensors of the same dtype and shape (a plain memcpy on the current stream;
// D2H must leave the host data valid when it returns: synchronise the stream in that case).
void copy_(const Tensor& dst, const Tensor& src);
// dst[i] = value (strided dst, any dtype).
void fill_(const Tensor& dst, double value);

// Elementwise, floating dtypes, all tensors the same dtype and shape (strided, a/b may broadcast).
void unary(UnaryOp op, const Tensor& out, const Tensor& a, double alpha);
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha);

// out has a's rank with size 1 on each reduced dim (keepdim form), contiguous; a strided.
void reduce(ReduceOp op, const Tensor& out, const Tensor& a);

// Batched GEMM: out[b] (+)= a[b] @ bm[b]. out [B, M, N] contiguous; a [B, M, K] and bm [B, K, N]
// strided with, per matrix, either the last stride 1 (row-major) or the second-to-last stride 1
// (a transposed view); batch strides may be 0 (broadcast). Same floating dtype.
// accumulate = true adds into out (beta = 1), else overwrites (beta = 0).
void gemm(const Tensor& out, const Tensor& a, const Tensor& bm, bool accumulate);

// Softmax over the last dim of contiguous [R, C] (any leading shape); log = log_softmax.
void softmax_forward(const Tensor& y, const Tensor& x, bool log);
// dx from dy and the forward output y (softmax: y (dy - sum(dy y)); log: dy - exp(y) sum(dy)).
void softmax_backward(const Tensor& dx, const Tensor& dy, const Tensor& y, bool log);

// LayerNorm over the last dim C of contiguous x [R, C]. mean and rstd [R] are float32 (float64 for
// f64 x). weight/bias [C] may be undefined (then 1 and 0).
void layer_norm_forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                        const Tensor& weight, const Tensor& bias, double eps);
// dx [R, C]; dweight/dbias [C] overwritten, each may be undefined (not wanted).
void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                         const Tensor& dy, const Tensor& x, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd);

// out [N, C] = weight[indices[n]], weight [V, C] contiguous, indices [N] contiguous i32/i64/u16
// (the caller checked 0 <= index < V on the CPU).
void embedding_forward(const Tensor& out, const Tensor& weight, const Tensor& indices);
// dweight [V, C] overwritten: zero, then rows accumulated in a fixed (index) order.
void embedding_backward(const Tensor& dweight, const Tensor& dout, const Tensor& indices);

// logits [N, V] contiguous floating; targets [N] contiguous i32/i64/u16. losses, lse, valid [N]
// float32 (float64 for f64 logits): losses[n] = lse[n] - logits[n, t], valid[n] = 1, or 0 and 0 when
// targets[n] == ignore_index. (CPU throws on a target out of [0, V); CUDA writes NaN losses.)
void cross_entropy_forward(const Tensor& losses, const Tensor& lse, const Tensor& valid,
                           const Tensor& logits, const Tensor& targets, int64_t ignore_index);
// dlogits[n, :] = dlosses[n] * (softmax(logits[n]) - onehot(t)), zero rows where ignored.
void cross_entropy_backward(const Tensor& dlogits, const Tensor& dlosses, const Tensor& logits,
                            const Tensor& lse, const Tensor& targets, int64_t ignore_index);

// out = x with the strict causal upper triangle of the last two dims [R, C] set to value
// (element (r, c) masked when c > r + C - R). Contiguous; out may be x.
void causal_fill(const Tensor& out, const Tensor& x, double value);

// out[i] = keep(i) ? x[i] / (1 - p) : 0 with keep from philox::dropout_keep(seed, offset, i, p),
// i the row-major index. Contiguous, same floating dtype.
void dropout(const Tensor& out, const Tensor& x, double p, uint64_t seed, uint64_t offset);

// Contiguous floating out; element i from philox::uniform_at / normal_at(seed, offset, i).
void random_uniform(const Tensor& out, uint64_t seed, uint64_t offset, double low, double high);
void random_normal(const Tensor& out, uint64_t seed, uint64_t offset, double mean, double stddev);

// AdamW (decoupled weight decay) over a list of parameters, each contiguous with its grad, exp_avg
// and exp_avg_sq of the same dtype (f32 or f64) and size:
//   p -= lr * wd * p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   p -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps)
void adamw_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                const AdamWParams& hp);

}  // namespace blu::cpu_ops
