// The Llama-style block (blutensor/llama.h, Note [Llama block]): composites of blutensor ops.
#include "blutensor/llama.h"

#include <cmath>
#include <vector>

#include "blutensor/autograd.h"
#include "blutensor/random.h"

namespace blu::nn {

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  BLU_CHECK(x.defined() && weight.defined() && weight.dim() == 1 && x.dim() >= 1 &&
                weight.size(0) == x.size(x.dim() - 1),
            "rms_norm: expected x [..., C] and weight [C], got ", x.describe(), " and ", weight.describe());
  return x * pow(add(mean(x * x, {-1}, true), eps), -0.5) * weight;
}

Tensor silu(const Tensor& x) { return x / add(exp(neg(x)), 1.0); }

Tensor swiglu(const Tensor& gate, const Tensor& up) { return silu(gate) * up; }

Tensor rotary(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  BLU_CHECK(x.defined() && x.dim() >= 2 && x.size(x.dim() - 1) % 2 == 0, "rotary: expected x [..., T, D] with D even, got ",
            x.defined() ? x.describe() : std::string("undefined"));
  const int64_t d = x.size(x.dim() - 1), t = x.size(x.dim() - 2);
  BLU_CHECK(cos.dim() == 2 && cos.size(0) == t && cos.size(1) == d / 2 && sin.sizes() == cos.sizes(),
            "rotary: expected cos and sin [", t, ", ", d / 2, "] for x ", x.describe(), ", got ", cos.describe(),
            " and ", sin.describe());
  const Tensor x1 = x.narrow(-1, 0, d / 2), x2 = x.narrow(-1, d / 2, d / 2);
  return cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

std::pair<Tensor, Tensor> rotary_tables(int64_t seq_len, int64_t head_dim, double base, TensorOptions options) {
  BLU_CHECK(seq_len > 0 && head_dim > 0 && head_dim % 2 == 0, "rotary_tables: seq_len ", seq_len, ", head_dim ",
            head_dim, " (positive, head_dim even)");
  std::vector<double> c, s;
  for (int64_t t = 0; t < seq_len; ++t) {
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      const double angle = static_cast<double>(t) / std::pow(base, 2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
      c.push_back(std::cos(angle));
      s.push_back(std::sin(angle));
    }
  }
  const Shape shape{seq_len, head_dim / 2};
  return {from_vector(c, shape, options.requires_grad(false)), from_vector(s, shape, options.requires_grad(false))};
}

Tensor llama_block(const Tensor& x, const LlamaWeights& w, int64_t heads, const Tensor& cos, const Tensor& sin) {
  BLU_CHECK(x.defined() && x.dim() == 3 && heads > 0 && x.size(2) % heads == 0, "llama_block: expected x [B, T, C] with C a multiple of ",
            heads, " heads, got ", x.defined() ? x.describe() : std::string("undefined"));
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2), hd = c / heads;
  auto split_heads = [&](const Tensor& y) { return y.reshape({b, t, heads, hd}).transpose(1, 2); };  // [B, H, T, hd]
  const Tensor h = rms_norm(x, w.attn_norm);
  const Tensor q = rotary(split_heads(linear(h, w.wq)), cos, sin);
  const Tensor k = rotary(split_heads(linear(h, w.wk)), cos, sin);
  const Tensor v = split_heads(linear(h, w.wv));
  const Tensor a = scaled_dot_product_attention(q, k, v, true).transpose(1, 2).reshape({b, t, c});
  const Tensor x2 = x + linear(a, w.wo);
  const Tensor m = rms_norm(x2, w.mlp_norm);
  return x2 + linear(swiglu(linear(m, w.w_gate), linear(m, w.w_up)), w.w_down);
}

LlamaBlock::LlamaBlock(int64_t dim, int64_t heads_, int64_t hidden, TensorOptions o, Generator* gen) : heads(heads_) {
  BLU_CHECK(dim > 0 && hidden > 0 && heads_ > 0 && dim % heads_ == 0, "LlamaBlock: dim ", dim, ", heads ", heads_,
            ", hidden ", hidden, " (positive, dim a multiple of heads)");
  auto mat = [&](const char* name, int64_t out, int64_t in) {
    Tensor t;
    {
      NoGradGuard ng;
      t = mul(randn({out, in}, o.requires_grad(false), gen), 1.0 / std::sqrt(static_cast<double>(in)));
    }
    return register_parameter(name, t);
  };
  w.attn_norm = register_parameter("attn_norm", ones({dim}, o.requires_grad(false)));
  w.wq = mat("wq", dim, dim);
  w.wk = mat("wk", dim, dim);
  w.wv = mat("wv", dim, dim);
  w.wo = mat("wo", dim, dim);
  w.mlp_norm = register_parameter("mlp_norm", ones({dim}, o.requires_grad(false)));
  w.w_gate = mat("w_gate", hidden, dim);
  w.w_up = mat("w_up", hidden, dim);
  w.w_down = mat("w_down", dim, hidden);
}

}  // namespace blu::nn
