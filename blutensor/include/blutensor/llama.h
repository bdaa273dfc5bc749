// blutensor/llama.h: a Llama-style transformer block (RMSNorm, rotary embeddings, SwiGLU MLP,
// causal attention, no biases) composed from blutensor's ops. Note [Llama block].
//
// Note [Llama block]
// None of these has a kernel of its own: RMSNorm is mean/pow/mul, SiLU exp/add/div, rotary
// narrow/mul/cat, so the eager block launches one kernel per elementwise op and materialises
// every intermediate. That is the point: it is the pattern set blucomp must fuse without new CUDA
// code (issue 13, "generality"), and its eager version is the baseline. Conventions follow
// Hugging Face's LlamaModel so that PyTorch can check it on the device: rms_norm(x) = x /
// sqrt(mean(x^2) + eps) * w; rotary on the last dim D of [..., T, D] with the half split (x1 =
// x[..., :D/2], x2 = x[..., D/2:]; out = [x1 cos - x2 sin, x2 cos + x1 sin], the angle of position t,
// pair i being t / base^(2i/D)); MLP w_down(silu(w_gate x) * w_up x).
#pragma once

#include <utility>

#include "blutensor/nn.h"
#include "blutensor/ops.h"
#include "blutensor/tensor.h"

namespace blu::nn {

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);
Tensor silu(const Tensor& x);                            // x / (1 + exp(-x))
Tensor swiglu(const Tensor& gate, const Tensor& up);     // silu(gate) * up
// cos, sin: [T, D/2] (rotary_tables); x: [..., T, D], D even.
Tensor rotary(const Tensor& x, const Tensor& cos, const Tensor& sin);
std::pair<Tensor, Tensor> rotary_tables(int64_t seq_len, int64_t head_dim, double base = 10000.0,
                                        TensorOptions options = {});

struct LlamaWeights {
  Tensor attn_norm, wq, wk, wv, wo;  // [C], then [C, C] (y = x W^T)
  Tensor mlp_norm, w_gate, w_up, w_down;  // [C], [H, C], [H, C], [C, H]
};
// One block on x [B, T, C]: x + attn(rms_norm(x)), then + mlp(rms_norm(.)); heads divide C.
Tensor llama_block(const Tensor& x, const LlamaWeights& w, int64_t heads, const Tensor& cos, const Tensor& sin);

class LlamaBlock : public Module {
 public:
  LlamaBlock(int64_t dim, int64_t heads, int64_t hidden, TensorOptions options = {}, Generator* gen = nullptr);
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin) const {
    return llama_block(x, w, heads, cos, sin);
  }
  LlamaWeights w;
  int64_t heads;
};

}  // namespace blu::nn
