// blutensor/src/cuda/cuda_ops.h: the kernel-level CUDA backend, the mirror of cpu/cpu_ops.h (same
// functions, same signatures, same contracts: Note [Backend mirror] there), in blu::cuda_ops.
// Everything runs asynchronously on blu::cuda::current_stream(device) of the tensors' device (the
// dispatcher made it current); nothing synchronises the host except copy_ to the CPU.
// Which kernels run: blutensor's generic kernels (src/cuda/*.cu) for every dtype and layout, and
// the blublas launchers on the hot paths they take (gemm; f32/bf16 softmax, layernorm, GELU,
// AdamW), each noted in its cuda_*.cu file.
#pragma once

#include <cstdint>
#include <vector>

#include "blutensor/tensor.h"
#include "../kernel_args.h"  // relative: also found from tests that include this header by path

namespace blu::cuda_ops {

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

}  // namespace blu::cuda_ops

// ---- CUDA-only extras (no CPU mirror; called by the ops when the tensors are on CUDA) --------

namespace blu::cuda_ops {

// Fused (flash) attention through blublas (Note [Fused attention on CUDA], cuda_attention.cu).
// q, k, v, o, dout, dq, dk, dv: [B, H, T, D] views with the last dim contiguous, one dtype (bf16 or
// f32); lse: f32 [B, H, T] contiguous, natural log, written by forward and read by backward.
// scale <= 0 means 1/sqrt(D). dq, dk, dv are overwritten. Returns false, having launched nothing,
// when blublas cannot take the problem (head_dim not 64/128, f64/f16, ...): use the composite path.
// attention_backward takes every problem attention_forward took when dq, dk, dv are laid out like
// q or contiguous and dout has its last dim contiguous (so a caller that saved O and L can rely
// on it; check the result anyway and recompute through the composite path if it is false).
bool attention_forward(const Tensor& o, const Tensor& lse, const Tensor& q, const Tensor& k,
                       const Tensor& v, bool causal, double scale);
bool attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                        const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                        const Tensor& lse, bool causal, double scale);

// Differentiable SDPA on CUDA (cuda_sdpa.cpp): q, k, v [B, H, T, D] of one dtype (f32 or bf16),
// D 64 or 128, equal sequence lengths; one autograd node over attention_forward/backward, output
// stored as [B, T, H, D] (returned as its [B, H, T, D] permutation). Returns an undefined Tensor
// when it cannot take the inputs: blu::scaled_dot_product_attention then runs its composite path.
//   #if BLU_HAVE_CUDA_OPS
//   if (q.is_cuda()) { Tensor y = cuda_ops::fused_scaled_dot_product_attention(q, k, v, c, s);
//                      if (y.defined()) return y; }
//   #endif
Tensor fused_scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                          bool is_causal, double scale);

}  // namespace blu::cuda_ops
