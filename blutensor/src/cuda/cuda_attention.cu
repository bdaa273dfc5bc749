// CUDA-only fused attention for blutensor's scaled_dot_product_attention: blublas flash attention
// (blublas/attention.h) behind Tensor arguments, forward and backward.
//
// Note [Fused attention on CUDA]
// The composite SDPA (matmul, scale, causal fill, softmax, matmul) materialises several
// [B, H, T, T] tensors per layer and keeps them for backward: at GPT-2 124M, B16 T1024 that is
// 0.8 GB per fp32 tensor per layer. blublas's flash attention keeps only O and the log-sum-exp
// L [B, H, T] (fp32), recomputing P in the backward. These entry points take [B, H, T, D] views
// with the last dim contiguous (the head split of a fused qkv activation is such a view, no copy)
// and return false without launching anything when blublas cannot take the problem (head_dim
// not 64/128, f64/f16, query and key lengths that differ, ...): the caller then runs the
// composite path, so every case still works. Precision follows the dtype and, for f32,
// blu::matmul_precision() (strict fp32 or TF32).
#include <cmath>

#include "blublas/attention.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernel_utils.cuh"

namespace blu::cuda_ops {
namespace {

using namespace detail;

bool fits_int(int64_t v) { return v >= 0 && v <= 2147483647; }

// [B, H, T, D] with D contiguous -> blublas's (batch, seq, head) strides.
bool view_of(const Tensor& t, int64_t b, int64_t h, int64_t s, int64_t d) {
  return t.defined() && t.is_cuda() && t.dim() == 4 && t.size(0) == b && t.size(1) == h &&
         t.size(2) == s && t.size(3) == d && t.stride(3) == 1;
}
blublas::AttnInput in_view(const Tensor& t) {
  blublas::AttnInput v;
  v.ptr = t.data_ptr();
  v.batch_stride = t.stride(0);
  v.head_stride = t.stride(1);
  v.seq_stride = t.stride(2);
  return v;
}
blublas::AttnOutput out_view(const Tensor& t) {
  blublas::AttnOutput v;
  v.ptr = t.data_ptr();
  v.batch_stride = t.stride(0);
  v.head_stride = t.stride(1);
  v.seq_stride = t.stride(2);
  return v;
}

// Fills the common part of the descriptor; false when blublas cannot take the problem.
bool make_desc(blublas::AttentionDesc* desc, const Tensor& q, const Tensor& k, const Tensor& v,
               const Tensor& o, const Tensor& lse, bool causal, double scale) {
  if (!q.defined() || q.dim() != 4) return false;
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3);
  if (!view_of(q, b, h, t, d) || !view_of(k, b, h, t, d) || !view_of(v, b, h, t, d) ||
      !view_of(o, b, h, t, d)) {
    return false;
  }
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype() || q.dtype() != o.dtype()) return false;
  if (!lse.defined() || lse.dtype() != DType::F32 || !lse.is_contiguous() ||
      lse.numel() != b * h * t) {
    return false;
  }
  if (!fits_int(b) || !fits_int(h) || !fits_int(t) || !fits_int(d)) return false;
  if (q.dtype() == DType::BF16) {
    desc->precision = blublas::AttnPrecision::kBF16;
  } else if (q.dtype() == DType::F32) {
    // Note [Strict-fp32 attention]: kHighest runs the strict (SIMT) or the 3xTF32 kernel.
    desc->precision = matmul_precision() != MatmulPrecision::kHighest   ? blublas::AttnPrecision::kF32TF32
                      : fp32_attention() == Fp32Attention::kSplit3TF32 ? blublas::AttnPrecision::kF32Split3TF32
                                                                         : blublas::AttnPrecision::kF32Strict;
  } else {
    return false;
  }
  desc->batch = static_cast<int>(b);
  desc->heads = static_cast<int>(h);
  desc->seq_len = static_cast<int>(t);
  desc->head_dim = static_cast<int>(d);
  desc->softmax_scale = static_cast<float>(scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(d)));
  desc->causal = causal;
  desc->q = in_view(q);
  desc->k = in_view(k);
  desc->v = in_view(v);
  desc->lse = static_cast<float*>(lse.data_ptr());
  return true;
}

}  // namespace

bool attention_forward(const Tensor& o, const Tensor& lse, const Tensor& q, const Tensor& k,
                       const Tensor& v, bool causal, double scale) {
  blublas::AttentionDesc desc;
  if (!make_desc(&desc, q, k, v, o, lse, causal, scale)) return false;
  desc.o = out_view(o);
  if (q.numel() == 0) return true;
  return blublas_ok(blublas::attention_forward(desc, stream_of(q)), "attention_forward");
}

bool attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                        const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                        const Tensor& lse, bool causal, double scale) {
  blublas::AttentionDesc desc;
  if (!make_desc(&desc, q, k, v, o, lse, causal, scale)) return false;
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3);
  if (!view_of(dq, b, h, t, d) || !view_of(dk, b, h, t, d) || !view_of(dv, b, h, t, d) ||
      !view_of(dout, b, h, t, d)) {
    return false;
  }
  if (dq.dtype() != q.dtype() || dk.dtype() != q.dtype() || dv.dtype() != q.dtype() ||
      dout.dtype() != q.dtype()) {
    return false;
  }
  desc.o = out_view(o);
  desc.d_o = in_view(dout);
  desc.dq = out_view(dq);
  desc.dk = out_view(dk);
  desc.dv = out_view(dv);
  if (q.numel() == 0) return true;
  std::size_t ws_bytes = 0;
  if (!blublas_ok(blublas::attention_backward_workspace_size(desc, &ws_bytes),
                  "attention_backward")) {
    return false;
  }
  cudaStream_t stream = stream_of(q);
  DeviceBuffer ws(ws_bytes, q.device().index, stream);
  return blublas_ok(blublas::attention_backward(desc, ws.get(), ws_bytes, stream),
                    "attention_backward");
}

}  // namespace blu::cuda_ops
