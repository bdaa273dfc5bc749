// step_launcher.cpp: the blublas calls of the fused GPT-2 step (see step_launcher.h).
#include "engine/step_launcher.h"

#include <algorithm>
#include <cmath>

#include "blublas/cross_entropy.h"
#include "blublas/elementwise.h"
#include "blublas/embedding.h"
#include "blublas/layernorm.h"
#include "blublas/reduce.h"
#include "blutensor/error.h"

namespace blu::train {
namespace {

constexpr float kLayerNormEps = 1e-5f;

void check(const blublas::Status& s, const char* what) {
  if (!s.ok()) BLU_THROW("fused GPT-2 step: ", what, ": ", s.to_string());
}

blublas::AttnOutput qkv_out_view(void* dqkv, int which, int seq_len, int heads, int head_dim, std::size_t elem) {
  const blublas::AttnInput in = blublas::attn_qkv_view(dqkv, which, seq_len, heads, head_dim, elem);
  blublas::AttnOutput out;
  out.ptr = const_cast<void*>(in.ptr);
  out.batch_stride = in.batch_stride;
  out.seq_stride = in.seq_stride;
  out.head_stride = in.head_stride;
  return out;
}

}  // namespace

void StepLauncher::need(std::size_t bytes) { workspace_needed = std::max(workspace_needed, bytes); }

void StepLauncher::mark(const std::string& what) {
  ++launches;
  if (!timing || marks == nullptr) return;
  cudaEvent_t e = nullptr;
  if (cudaEventCreate(&e) != cudaSuccess || cudaEventRecord(e, stream) != cudaSuccess) {
    BLU_THROW("fused GPT-2 step: recording a timing event after ", what);
  }
  marks->emplace_back(what, e);
}

void StepLauncher::gemm(const char* what, int m, int n, int k, const void* a, bool trans_a, int64_t lda,
                        const void* b, bool trans_b, int64_t ldb, void* d, int64_t ldd, bool d_f32, float beta,
                        blublas::Epilogue epilogue, const void* bias, void* aux, float* bias_grad) {
  blublas::GemmDesc g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.op_a = trans_a ? blublas::Op::kT : blublas::Op::kN;
  g.op_b = trans_b ? blublas::Op::kT : blublas::Op::kN;
  g.layout = blublas::Layout::kRowMajor;
  g.ab_type = act;
  g.cd_type = d_f32 ? blublas::Dtype::kF32 : act;
  g.compute = act == blublas::Dtype::kF32 ? compute : blublas::ComputeMode::kDefault;
  g.a = a;
  g.lda = lda;
  g.b = b;
  g.ldb = ldb;
  g.c = beta != 0.0f ? d : nullptr;
  g.ldc = ldd;
  g.d = d;
  g.ldd = ldd;
  g.beta = beta;
  g.epilogue = epilogue;
  g.bias = bias;
  g.aux = aux;
  g.ld_aux = aux != nullptr ? ldd : 0;
  g.bias_grad = bias_grad;
  g.max_ctas = max_ctas;
  if (sizing) {
    std::size_t bytes = 0;
    check(blublas::gemm_workspace_size(g, &bytes), what);
    need(bytes);
    return;
  }
  check(blublas::gemm(g, workspace, workspace_bytes, stream), what);
  mark(what);
}

void StepLauncher::linear(const char* what, void* y, const void* x, const void* w, const void* bias, int out,
                          int in, blublas::Epilogue epilogue, void* aux) {
  gemm(what, static_cast<int>(rows), out, in, x, false, in, w, true, in, y, out, false, 0.0f, epilogue, bias, aux);
}

void StepLauncher::linear_dx(const char* what, void* dx, const void* dy, const void* w, int out, int in,
                             const void* gelu_pre) {
  gemm(what, static_cast<int>(rows), in, out, dy, false, out, w, false, in, dx, in, false, 0.0f,
       gelu_pre != nullptr ? blublas::Epilogue::kGeluGrad : blublas::Epilogue::kNone, nullptr,
       const_cast<void*>(gelu_pre));
}

void StepLauncher::linear_dw(const char* what, float* dw, float* dbias, const void* dy, const void* x, int out,
                             int in, bool first) {
  // The bias-gradient epilogue overwrites, so it serves the first micro-batch only; later ones
  // add a column sum (Note [Gradient accumulation] in fused_step.cpp).
  const bool fused_bias = first && dbias != nullptr;
  gemm(what, out, in, static_cast<int>(rows), dy, true, out, x, false, in, dw, in, true, first ? 0.0f : 1.0f,
       fused_bias ? blublas::Epilogue::kBiasGradA : blublas::Epilogue::kNone, nullptr, nullptr,
       fused_bias ? dbias : nullptr);
  if (!first && dbias != nullptr) column_sum(dbias, dy, rows, out, act, true);
}

void StepLauncher::layernorm(void* out, float* mean, float* rstd, void* residual_out, const void* x,
                             const void* residual, const void* w, const void* b) {
  if (sizing) return;
  check(blublas::layernorm_forward(out, mean, rstd, residual_out, x, residual, w, b, rows, channels, kLayerNormEps,
                                   act, stream),
        "layernorm_forward");
  mark("layernorm fwd");
}

void StepLauncher::layernorm_backward(void* dx, float* dw, float* db, const void* dout, const void* x,
                                      const float* mean, const float* rstd, const void* w, bool accumulate_dx,
                                      bool accumulate_params) {
  if (sizing) {
    std::size_t bytes = 0;
    check(blublas::layernorm_backward_workspace_size(rows, channels, &bytes), "layernorm_backward");
    need(bytes);
    return;
  }
  check(blublas::layernorm_backward(dx, dw, db, dout, x, mean, rstd, w, rows, channels, act, accumulate_dx,
                                    accumulate_params, workspace, workspace_bytes, stream),
        "layernorm_backward");
  mark("layernorm bwd");
}

void StepLauncher::gelu(void* out, const void* x, int64_t cols) {
  if (sizing) return;
  check(blublas::gelu_forward(out, x, nullptr, rows, cols, act, stream), "gelu_forward");
  mark("gelu fwd (recompute)");
}

void StepLauncher::gelu_backward(void* dx, const void* dout, const void* x, int64_t cols) {
  if (sizing) return;
  check(blublas::gelu_backward(dx, dout, x, nullptr, rows, cols, act, stream), "gelu_backward");
  mark("gelu bwd");
}

blublas::AttentionDesc StepLauncher::attention_desc(const void* qkv, const void* out, const float* lse) const {
  blublas::AttentionDesc a;
  a.batch = batch;
  a.seq_len = seq_len;
  a.heads = heads;
  a.head_dim = head_dim;
  a.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  a.causal = true;
  a.precision = attn_precision;
  a.path = blublas::AttnPath::kAuto;
  const std::size_t e = act_size();
  a.q = blublas::attn_qkv_view(qkv, 0, seq_len, heads, head_dim, e);
  a.k = blublas::attn_qkv_view(qkv, 1, seq_len, heads, head_dim, e);
  a.v = blublas::attn_qkv_view(qkv, 2, seq_len, heads, head_dim, e);
  a.o.ptr = const_cast<void*>(out);
  blublas::attn_dense_strides(seq_len, heads, head_dim, &a.o.batch_stride, &a.o.seq_stride, &a.o.head_stride);
  a.lse = const_cast<float*>(lse);
  return a;
}

void StepLauncher::attention(const void* qkv, void* out, float* lse) {
  if (sizing) return;
  check(blublas::attention_forward(attention_desc(qkv, out, lse), stream), "attention_forward");
  mark("attention fwd");
}

void StepLauncher::attention_backward(const void* qkv, const void* out, const float* lse, const void* dout,
                                      void* dqkv) {
  blublas::AttentionDesc a = attention_desc(qkv, out, lse);
  a.d_o.ptr = dout;
  blublas::attn_dense_strides(seq_len, heads, head_dim, &a.d_o.batch_stride, &a.d_o.seq_stride,
                              &a.d_o.head_stride);
  const std::size_t e = act_size();
  a.dq = qkv_out_view(dqkv, 0, seq_len, heads, head_dim, e);
  a.dk = qkv_out_view(dqkv, 1, seq_len, heads, head_dim, e);
  a.dv = qkv_out_view(dqkv, 2, seq_len, heads, head_dim, e);
  if (sizing) {
    std::size_t bytes = 0;
    check(blublas::attention_backward_workspace_size(a, &bytes), "attention_backward");
    need(bytes);
    return;
  }
  check(blublas::attention_backward(a, workspace, workspace_bytes, stream), "attention_backward");
  mark("attention bwd");
}

void StepLauncher::cross_entropy(float* row_losses, void* logits_inout, const int32_t* targets, int64_t n_rows,
                                 int64_t vocab, float dloss, int* error_flag) {
  if (sizing) {
    std::size_t bytes = 0;
    check(blublas::cross_entropy_workspace_size(n_rows, &bytes), "cross_entropy_fused");
    need(bytes);
    return;
  }
  check(blublas::cross_entropy_fused(row_losses, nullptr, logits_inout, logits_inout, targets, n_rows, vocab, -1,
                                     dloss, error_flag, act, workspace, workspace_bytes, stream),
        "cross_entropy_fused");
  mark("cross entropy");
}

void StepLauncher::column_sum(float* out, const void* in, int64_t n_rows, int64_t cols, blublas::Dtype dtype,
                              bool accumulate) {
  if (sizing) {
    std::size_t bytes = 0;
    check(blublas::column_sum_workspace_size(n_rows, cols, &bytes), "column_sum");
    need(bytes);
    return;
  }
  check(blublas::column_sum(out, in, n_rows, cols, dtype, accumulate, workspace, workspace_bytes, stream),
        "column_sum");
  mark("column sum");
}

void StepLauncher::embedding(void* out, const int32_t* tokens, const void* wte, const void* wpe, int64_t vocab,
                             int* error_flag) {
  if (sizing) return;
  check(blublas::embedding_forward(out, tokens, wte, wpe, batch, seq_len, channels, vocab, error_flag, act, stream),
        "embedding_forward");
  mark("embedding fwd");
}

void StepLauncher::embedding_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens,
                                      int64_t vocab, int* error_flag, int batch_rows) {
  const int64_t nb = batch_rows > 0 ? batch_rows : batch;
  if (sizing) {
    std::size_t bytes = 0;
    check(blublas::embedding_backward_workspace_size(nb, seq_len, vocab, &bytes), "embedding_backward");
    need(bytes);
    return;
  }
  check(blublas::embedding_backward(dwte, dwpe, dout, tokens, nb, seq_len, channels, vocab, error_flag, act,
                                    workspace, workspace_bytes, stream),
        "embedding_backward");
  mark("embedding bwd");
}

void StepLauncher::bf16_weights(const blublas::AdamWTensor* list, int count, cudaStream_t on) {
  if (sizing) return;
  check(blublas::bf16_weight_copy(list, count, on != nullptr ? on : stream), "bf16_weight_copy");
  mark("weights bf16 copy");
}

void StepLauncher::memset_async(void* p, std::size_t bytes) {
  if (sizing) return;
  const cudaError_t e = cudaMemsetAsync(p, 0, bytes, stream);
  if (e != cudaSuccess) BLU_THROW("fused GPT-2 step: cudaMemsetAsync of ", bytes, " bytes: ", cudaGetErrorString(e));
  mark("memset");
}

}  // namespace blu::train
