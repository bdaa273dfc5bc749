// The op registry (op_registry.h): one entry per op and variant (broadcasting, dims, masks).
#include "blutensor/op_registry.h"

#include <cmath>

#include "blutensor/autograd.h"
#include "blutensor/llama.h"
#include "blutensor/ops.h"
#include "blutensor/random.h"

namespace blu {

namespace {

using Inputs = std::vector<Tensor>;
enum class Dist { kNormal, kPositive, kAwayFromZero };

// One input description: shape and distribution (floating), or an integer tensor of indices.
struct In {
  Shape shape;
  Dist dist = Dist::kNormal;
  bool differentiable = true;
  int64_t index_high = 0;  // > 0: an i64 index tensor in [0, index_high)
};

Shape scaled(const Shape& s, int scale) {
  Shape out = s;
  if (scale > 1) {
    for (int64_t& d : out) d = d == 1 ? 1 : d * scale + 1;  // stays odd when d is even/odd mixed
  }
  return out;
}

// scalable = false: the op constrains its shapes (even head sizes, tables of a given length), so
// the inputs keep their sizes whatever spec.size_scale asks (the CPU-vs-CUDA test uses 2).
OpCase make_case(std::string name, std::vector<In> ins, std::function<Tensor(const Inputs&)> fwd,
                 bool gradcheck = true, double tol_scale = 1.0, bool scalable = true) {
  OpCase c;
  c.name = std::move(name);
  for (const In& in : ins) c.differentiable.push_back(in.index_high == 0 && in.differentiable);
  c.make_inputs = [ins, scalable](const OpInputSpec& spec_in) {
    OpInputSpec spec = spec_in;
    if (!scalable) spec.size_scale = 1;
    Generator gen(spec.seed * 7919 + 17);
    Inputs out;
    for (const In& in : ins) {
      Shape s = scaled(in.shape, spec.size_scale);
      Tensor t;
      if (in.index_high > 0) {
        int64_t high = in.index_high * (spec.size_scale > 1 ? spec.size_scale : 1);
        t = randint(0, high, s, TensorOptions(kInt64), &gen);
      } else {
        t = randn(s, TensorOptions(kFloat64), &gen);
        NoGradGuard ng;
        if (in.dist == Dist::kPositive) t = add(t.pow(2.0), 0.5);
        if (in.dist == Dist::kAwayFromZero) {
          // |x| >= 0.2: kinks (relu, clamp) are far from finite-difference steps.
          std::vector<double> v = t.to_double_vector();
          for (double& x : v) x = x >= 0 ? x + 0.2 : x - 0.2;
          t = from_vector(v, s, kFloat64);
        }
        t = t.to(spec.dtype);
      }
      t = t.to(spec.device);
      if (in.index_high == 0 && in.differentiable) t.requires_grad_(true);
      out.push_back(t);
    }
    return out;
  };
  c.forward = std::move(fwd);
  c.gradcheck = gradcheck;
  c.tolerance_scale = tol_scale;
  return c;
}

std::vector<OpCase> build() {
  std::vector<OpCase> r;
  const Dist P = Dist::kPositive, A = Dist::kAwayFromZero;
  // ---- elementwise binary with broadcasting
  r.push_back(make_case("add_broadcast", {{{5, 7}}, {{7}}}, [](const Inputs& x) { return x[0] + x[1]; }));
  r.push_back(make_case("add_alpha", {{{3, 5}}, {{3, 5}}}, [](const Inputs& x) { return add(x[0], x[1], -0.75); }));
  r.push_back(make_case("sub_broadcast", {{{5, 7}}, {{5, 1}}}, [](const Inputs& x) { return x[0] - x[1]; }));
  r.push_back(make_case("mul_broadcast", {{{3, 5, 7}}, {{5, 7}}}, [](const Inputs& x) { return x[0] * x[1]; }));
  r.push_back(make_case("div_broadcast", {{{3, 5}}, {{3, 1}, P}}, [](const Inputs& x) { return x[0] / x[1]; }));
  // ---- scalar variants and unary
  r.push_back(make_case("add_scalar", {{{5, 3}}}, [](const Inputs& x) { return x[0] + 1.5; }));
  r.push_back(make_case("mul_scalar", {{{5, 3}}}, [](const Inputs& x) { return x[0] * -2.5; }));
  r.push_back(make_case("rsub_scalar", {{{5, 3}}}, [](const Inputs& x) { return 2.0 - x[0]; }));
  r.push_back(make_case("rdiv_scalar", {{{5, 3}, P}}, [](const Inputs& x) { return 3.0 / x[0]; }));
  r.push_back(make_case("neg", {{{7, 3}}}, [](const Inputs& x) { return -x[0]; }));
  r.push_back(make_case("exp", {{{7, 3}}}, [](const Inputs& x) { return exp(x[0]); }));
  r.push_back(make_case("log", {{{7, 3}, P}}, [](const Inputs& x) { return log(x[0]); }));
  r.push_back(make_case("sqrt", {{{7, 3}, P}}, [](const Inputs& x) { return sqrt(x[0]); }));
  r.push_back(make_case("pow_3", {{{7, 3}}}, [](const Inputs& x) { return pow(x[0], 3.0); }));
  r.push_back(make_case("pow_1_5", {{{7, 3}, P}}, [](const Inputs& x) { return pow(x[0], 1.5); }));
  r.push_back(make_case("tanh", {{{7, 3}}}, [](const Inputs& x) { return tanh(x[0]); }));
  r.push_back(make_case("relu", {{{7, 3}, A}}, [](const Inputs& x) { return relu(x[0]); }));
  r.push_back(make_case("gelu", {{{7, 9}}}, [](const Inputs& x) { return gelu(x[0]); }));
  r.push_back(make_case("clamp_max", {{{7, 3}, A}}, [](const Inputs& x) { return clamp_max(x[0], 0.1); }));
  // ---- reductions
  r.push_back(make_case("sum_all", {{{5, 7}}}, [](const Inputs& x) { return sum(x[0]); }));
  r.push_back(make_case("sum_dims_keepdim", {{{3, 5, 7}}}, [](const Inputs& x) { return sum(x[0], {0, 2}, true); }));
  r.push_back(make_case("sum_dim0", {{{9, 5}}}, [](const Inputs& x) { return sum(x[0], {0}); }));
  r.push_back(make_case("mean_dim", {{{3, 5, 7}}}, [](const Inputs& x) { return mean(x[0], {-1}); }));
  r.push_back(make_case("amax_dim", {{{5, 7}}}, [](const Inputs& x) { return amax(x[0], {1}, true); }));
  r.push_back(make_case("amax_dim0", {{{5, 7}}}, [](const Inputs& x) { return amax(x[0], {0}); }));
  // ---- linear algebra
  r.push_back(make_case("matmul_2d", {{{5, 7}}, {{7, 3}}}, [](const Inputs& x) { return matmul(x[0], x[1]); }));
  // The broadcast operand's gradient sums GEMM outputs over the batch (rounded per GEMM in bf16).
  r.push_back(make_case("matmul_batched_broadcast", {{{2, 1, 5, 7}}, {{3, 7, 4}}},
                        [](const Inputs& x) { return matmul(x[0], x[1]); }, true, 4.0));
  r.push_back(make_case("matmul_transposed", {{{7, 5}}, {{3, 7}}},
                        [](const Inputs& x) { return matmul(x[0].t(), x[1].t()); }));
  r.push_back(make_case("matmul_vec", {{{5, 7}}, {{7}}}, [](const Inputs& x) { return matmul(x[0], x[1]); }));
  r.push_back(make_case("linear_bias", {{{2, 5, 7}}, {{3, 7}}, {{3}}},
                        [](const Inputs& x) { return linear(x[0], x[1], x[2]); }));
  r.push_back(make_case("linear_nobias", {{{5, 7}}, {{3, 7}}}, [](const Inputs& x) { return linear(x[0], x[1]); }));
  // ---- normalisation and activations over rows
  r.push_back(make_case("layer_norm", {{{5, 7}}, {{7}}, {{7}}},
                        [](const Inputs& x) { return layer_norm(x[0], x[1], x[2], 1e-5); }));
  r.push_back(make_case("layer_norm_3d", {{{2, 3, 9}}, {{9}}, {{9}}},
                        [](const Inputs& x) { return layer_norm(x[0], x[1], x[2], 1e-5); }));
  r.push_back(make_case("softmax_last", {{{5, 7}}}, [](const Inputs& x) { return softmax(x[0], -1); }));
  r.push_back(make_case("softmax_dim0", {{{5, 7}}}, [](const Inputs& x) { return softmax(x[0], 0); }));
  r.push_back(make_case("log_softmax", {{{5, 7}}}, [](const Inputs& x) { return log_softmax(x[0], -1); }));
  r.push_back(make_case("sdpa_causal", {{{2, 3, 5, 4}}, {{2, 3, 5, 4}}, {{2, 3, 5, 4}}},
                        [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); }));
  r.push_back(make_case("sdpa_cross", {{{2, 3, 4}}, {{2, 5, 4}}, {{2, 5, 3}}},
                        [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], false); }));
  r.push_back(make_case("masked_fill_causal", {{{2, 3, 5}}},
                        [](const Inputs& x) { return masked_fill_causal(x[0], -1.5); }));
  // ---- indexing and losses
  r.push_back(make_case("embedding", {{{11, 5}}, {{2, 7}, Dist::kNormal, false, 11}},
                        [](const Inputs& x) { return embedding(x[0], x[1]); }));
  r.push_back(make_case("cross_entropy", {{{9, 11}}, {{9}, Dist::kNormal, false, 11}},
                        [](const Inputs& x) { return cross_entropy(x[0], x[1]); }, true, 4.0));
  r.push_back(make_case("cross_entropy_ignore", {{{9, 11}}, {{9}, Dist::kNormal, false, 11}},
                        [](const Inputs& x) {
                          // Targets equal to 3 are ignored (some rows drop out of the mean).
                          return cross_entropy(x[0], x[1], 3);
                        }, true, 4.0));
  // ---- shape and views
  r.push_back(make_case("cat_dim1", {{{3, 2}}, {{3, 5}}}, [](const Inputs& x) { return cat({x[0], x[1]}, 1); }));
  r.push_back(make_case("split_weighted", {{{7, 3}}}, [](const Inputs& x) {
    int64_t n = x[0].size(0);
    std::vector<Tensor> parts = x[0].split((n + 2) / 3, 0);  // 3, 3, 1 rows at scale 1
    return cat({parts[0] * 2.0, parts[1], parts[2] * -0.5}, 0);
  }));
  r.push_back(make_case("split_partial_use", {{{3, 11}}}, [](const Inputs& x) {
    // Only two of the three pieces reach the output (the unused one gets a zero gradient).
    std::vector<Tensor> parts = x[0].chunk(3, 1);
    return parts[0] * parts[2].sum();
  }));
  r.push_back(make_case("transpose_contiguous", {{{3, 5, 7}}},
                        [](const Inputs& x) { return x[0].transpose(0, 2).contiguous() * 1.5; }));
  r.push_back(make_case("permute_reshape", {{{3, 5, 7}}},
                        [](const Inputs& x) { return x[0].permute({2, 0, 1}).reshape({x[0].size(2), -1}) * 1.5; }));
  r.push_back(make_case("slice_step", {{{9, 5}}}, [](const Inputs& x) { return x[0].slice(0, 1, 8, 2) * 2.0; }));
  r.push_back(make_case("select_narrow", {{{5, 7}}},
                        [](const Inputs& x) { return x[0].select(1, 3) + x[0].narrow(1, 0, 1).squeeze(1); }));
  r.push_back(make_case("expand_unsqueeze", {{{5}}},
                        [](const Inputs& x) { return x[0].unsqueeze(0).expand({3, x[0].size(0)}) * x[0].unsqueeze(1).sum(); }));
  r.push_back(make_case("dropout", {{{7, 9}}}, [](const Inputs& x) {
    Generator g(1234);
    return dropout(x[0], 0.3, true, &g);
  }));
  // ---- the Llama-style block's composites (blutensor/llama.h, Note [Llama block])
  r.push_back(make_case("rms_norm", {{{2, 3, 7}}, {{7}}}, [](const Inputs& x) { return nn::rms_norm(x[0], x[1]); }));
  r.push_back(make_case("swiglu", {{{5, 7}}, {{5, 7}}}, [](const Inputs& x) { return nn::swiglu(x[0], x[1]); }));
  r.push_back(make_case("rotary", {{{2, 3, 5, 6}}}, [](const Inputs& x) {
    auto [c, s] = nn::rotary_tables(5, 6, 100.0, TensorOptions(x[0].dtype()).device(x[0].device()));
    return nn::rotary(x[0], c, s);
  }, true, 1.0, false));
  r.push_back(make_case("llama_block",
                        {{{2, 5, 8}}, {{8}}, {{8, 8}}, {{8, 8}}, {{8, 8}}, {{8, 8}}, {{8}}, {{12, 8}}, {{12, 8}}, {{8, 12}}},
                        [](const Inputs& x) {
                          nn::LlamaWeights w{x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9]};
                          auto [c, s] = nn::rotary_tables(5, 4, 100.0, TensorOptions(x[0].dtype()).device(x[0].device()));
                          return nn::llama_block(x[0], w, 2, c, s);
                        }, true, 4.0, false));
  r.push_back(make_case("cast_f32_roundtrip", {{{5, 7}}},
                        [](const Inputs& x) { return x[0].to(kFloat32).to(x[0].dtype()) * 2.0; }, false));
  return r;
}

}  // namespace

const std::vector<OpCase>& op_registry() {
  static const std::vector<OpCase> registry = build();
  return registry;
}

}  // namespace blu
