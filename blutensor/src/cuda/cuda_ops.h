// blutensor/src/cuda/cuda_ops.h: the kernel-level CUDA backend, blu::cuda_ops: the functions listed
// in backend_ops.def (contracts there, Note [Backend mirror]; the same list cpu/cpu_ops.h declares
// in blu::cpu_ops), then the CUDA-only extras below.
// Everything runs asynchronously on blu::cuda::current_stream(device) of the tensors' device (the
// dispatcher made it current); nothing synchronises the host except copy_ to the CPU.
// Which kernels run: blutensor's generic kernels (src/cuda/*.cu) for every dtype and layout, and
// the blublas launchers on the hot paths they take (gemm; f32/bf16 softmax, layernorm, GELU,
// AdamW, gradient norm), each noted in its cuda_*.cu file.
#pragma once

#include <cstdint>
#include <vector>

#include "blutensor/tensor.h"
#include "../kernel_args.h"  // relative: also found from tests that include this header by path

namespace blu::cuda_ops {

#define BLU_BACKEND_OP(ret, name, params) ret name params;
#include "../backend_ops.def"

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
// layer_norm_backward with dx = bf16(bf16(dx) + residual) written to `out` (Note [LayerNorm
// backward with the residual gradient], src/capture/capture_ln_residual.cpp): the same bits as
// layer_norm_backward into a temporary and binary kAdd(out, temporary, residual). bf16 tensors,
// out / residual / dy / x contiguous with x's element count (out may be residual itself);
// false, having launched nothing, otherwise.
// adamw_step (f32 parameters and gradients, blublas's kernel) that also writes bf16(p) into
// copies[i] (bf16, p's size, contiguous; undefined: none) after the update, in the same pass: the
// bits of adamw_step followed by a cast of each parameter (Note [Weight copies from the update],
// capture). False, having launched nothing, when the lists do not fit that.
bool adamw_step_bf16_copies(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                            const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                            const Tensor& grad_scale, const AdamWParams& hp, const std::vector<Tensor>& copies);
// dweight (f32 [vocab, C], contiguous) += the embedding backward of dout (f32/bf16/f16, [.., C],
// contiguous; one row per index) through blublas's deterministic kernels (each token's rows summed
// in position order, the sum added once), without zeroing dweight first. False (nothing done)
// when the tensors do not fit that. Note [Classifier gradient scaling] (capture).
bool embedding_backward_accumulate_f32(const Tensor& dweight, const Tensor& dout, const Tensor& indices);
bool layer_norm_backward_add(const Tensor& out, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                             const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                             const Tensor& residual);
// Note [One-pass LayerNorm backward] (src/capture/capture_ln_residual.cpp): out = the LayerNorm
// backward's dx (+ residual when defined), dweight / dbias (f32 or x's dtype) from blublas's
// one-pass kernel. False (nothing done) when the tensors do not fit it.
bool layer_norm_backward_one_pass(const Tensor& out, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                                  const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                  const Tensor& residual);

}  // namespace blu::cuda_ops
