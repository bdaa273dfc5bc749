// step_launcher.h: thin wrappers over the blublas launchers used by the fused GPT-2 step, in
// the step's terms (rows = B*T, row-major activations, weights [out, in]). One object serves two
// passes over the same launch sequence: a sizing pass that only asks each launcher for its
// workspace (so the step's single workspace is sized before anything runs) and the real pass.
// Every blublas status is checked; a failure throws blu::Error naming the op and the step.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "blublas/adamw.h"
#include "blublas/attention.h"
#include "blublas/dtype.h"
#include "blublas/gemm.h"

namespace blu::train {

struct StepLauncher {
  // Configuration.
  blublas::Dtype act = blublas::Dtype::kBF16;  // activation / weight-copy dtype
  blublas::ComputeMode compute = blublas::ComputeMode::kDefault;
  blublas::AttnPrecision attn_precision = blublas::AttnPrecision::kBF16;
  int64_t rows = 0;  // B*T
  int batch = 0, seq_len = 0, heads = 0, head_dim = 0, channels = 0;
  cudaStream_t stream = nullptr;
  int max_ctas = 0;  // GEMMs on at most this many CTAs (blublas Note [GEMM CTA budget]; 0: all SMs)
  // Sizing pass: no launches, workspace_needed grows to the largest request.
  bool sizing = false;
  std::size_t workspace_needed = 0;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  int64_t launches = 0;  // blublas calls + memsets issued (real pass)
  // Op timing (eager steps only): an event after every launch, labelled with the op; the time of
  // an op is the time between its event and the previous one (Note [Op timing] in fused_step.cpp).
  bool timing = false;
  std::vector<std::pair<std::string, cudaEvent_t>>* marks = nullptr;  // shared by the launchers
  void mark(const std::string& what);

  std::size_t act_size() const { return blublas::dtype_size(act); }

  // D[M,N] = op(A) op(B) (+ beta D), row-major; d_f32: D is f32 (weight gradients), else `act`.
  void gemm(const char* what, int m, int n, int k, const void* a, bool trans_a, int64_t lda, const void* b,
            bool trans_b, int64_t ldb, void* d, int64_t ldd, bool d_f32, float beta,
            blublas::Epilogue epilogue = blublas::Epilogue::kNone, const void* bias = nullptr, void* aux = nullptr,
            float* bias_grad = nullptr);
  // y[rows, out] = x[rows, in] W^T (+ bias; kBiasGelu: y = gelu(pre), aux = pre).
  void linear(const char* what, void* y, const void* x, const void* w, const void* bias, int out, int in,
              blublas::Epilogue epilogue = blublas::Epilogue::kBias, void* aux = nullptr);
  // dx[rows, in] = dy[rows, out] W; with gelu_pre, dx = (dy W) * gelu'(gelu_pre) (kGeluGrad).
  void linear_dx(const char* what, void* dx, const void* dy, const void* w, int out, int in,
                 const void* gelu_pre = nullptr);
  // dW[out, in] (+)= dy^T x and dbias[out] (+)= colsum(dy): overwrite when `first`, else add.
  void linear_dw(const char* what, float* dw, float* dbias, const void* dy, const void* x, int out, int in,
                 bool first);

  void layernorm(void* out, float* mean, float* rstd, void* residual_out, const void* x, const void* residual,
                 const void* w, const void* b);
  void layernorm_backward(void* dx, float* dw, float* db, const void* dout, const void* x, const float* mean,
                          const float* rstd, const void* w, bool accumulate_dx, bool accumulate_params);
  void gelu(void* out, const void* x, int64_t cols);
  void gelu_backward(void* dx, const void* dout, const void* x, int64_t cols);
  void attention(const void* qkv, void* out, float* lse);
  void attention_backward(const void* qkv, const void* out, const float* lse, const void* dout, void* dqkv);
  void cross_entropy(float* row_losses, void* logits_inout, const int32_t* targets, int64_t n_rows, int64_t vocab,
                     float dloss, int* error_flag);
  void column_sum(float* out, const void* in, int64_t n_rows, int64_t cols, blublas::Dtype dtype, bool accumulate);
  void embedding(void* out, const int32_t* tokens, const void* wte, const void* wpe, int64_t vocab,
                 int* error_flag);
  // batch_rows > 0: dout / tokens hold that many sequences of seq_len (default: batch).
  void embedding_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens, int64_t vocab,
                          int* error_flag, int batch_rows = 0);
  void memset_async(void* p, std::size_t bytes);
  // bf16 copies of f32 weights (blublas::bf16_weight_copy) on `on` (null: the launcher's stream).
  void bf16_weights(const blublas::AdamWTensor* list, int count, cudaStream_t on);

 private:
  blublas::AttentionDesc attention_desc(const void* qkv, const void* out, const float* lse) const;
  void need(std::size_t bytes);
};

}  // namespace blu::train
