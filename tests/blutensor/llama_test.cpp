// llama_test.cpp: the Llama-style block (blutensor/llama.h, Note [Llama block]) against plain
// float64 loops written from the formulas (Hugging Face LlamaModel's conventions): rms_norm, silu,
// rotary (and its properties: position 0 is the identity, each rotated pair keeps its length) and
// the whole block, on odd sizes. The gradients are the op registry's gradcheck cases (rms_norm,
// swiglu, rotary, llama_block), and CPU vs CUDA runs them on the device.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "blutensor/llama.h"
#include "blutensor/random.h"

namespace {

using namespace blu;
using V = std::vector<double>;

V values(const Tensor& t) { return t.to_double_vector(); }

Tensor randn64(Shape s, uint64_t seed, double scale = 1.0) {
  Generator g(seed);
  return mul(randn(s, TensorOptions(kFloat64), &g), scale);
}

// y = x W^T for row-major x [n, in], W [out, in].
V matmul_t(const V& x, const V& w, int n, int in, int out) {
  V y(static_cast<size_t>(n * out), 0.0);
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < out; ++o)
      for (int k = 0; k < in; ++k) y[i * out + o] += x[i * in + k] * w[o * in + k];
  return y;
}

V rms_rows(const V& x, const V& w, int n, int c, double eps) {
  V y(x.size());
  for (int i = 0; i < n; ++i) {
    double ss = 0;
    for (int k = 0; k < c; ++k) ss += x[i * c + k] * x[i * c + k];
    const double r = 1.0 / std::sqrt(ss / c + eps);
    for (int k = 0; k < c; ++k) y[i * c + k] = x[i * c + k] * r * w[k];
  }
  return y;
}

// Rotary on head vectors laid out [T, H, hd] within one batch row (x: [T, C] with C = H * hd).
void rotate(V& x, int t_len, int heads, int hd, double base) {
  for (int t = 0; t < t_len; ++t)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < hd / 2; ++i) {
        const double a = t / std::pow(base, 2.0 * i / hd);
        double& x1 = x[(t * heads + h) * hd + i];
        double& x2 = x[(t * heads + h) * hd + i + hd / 2];
        const double r1 = x1 * std::cos(a) - x2 * std::sin(a), r2 = x2 * std::cos(a) + x1 * std::sin(a);
        x1 = r1;
        x2 = r2;
      }
}

void expect_near_all(const V& got, const V& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " at " << i;
}

TEST(Llama, RmsNormSiluAndRotaryMatchTheFormulas) {
  const Tensor x = randn64({3, 5, 7}, 1), w = randn64({7}, 2);
  expect_near_all(values(nn::rms_norm(x, w, 1e-6)), rms_rows(values(x), values(w), 15, 7, 1e-6), 1e-14, "rms_norm");
  V s = values(x);
  for (double& v : s) v = v / (1 + std::exp(-v));
  expect_near_all(values(nn::silu(x)), s, 1e-14, "silu");

  const Tensor q = randn64({2, 3, 9, 6}, 3);  // [B, H, T, D]
  auto [c, sn] = nn::rotary_tables(9, 6, 10000.0, TensorOptions(kFloat64));
  const V r = values(nn::rotary(q, c, sn)), in = values(q);
  V want(in.size());
  for (int bh = 0; bh < 6; ++bh) {
    V head(in.begin() + bh * 54, in.begin() + (bh + 1) * 54);  // [T=9, 1 head, D=6]
    rotate(head, 9, 1, 6, 10000.0);
    std::copy(head.begin(), head.end(), want.begin() + bh * 54);
  }
  expect_near_all(r, want, 1e-14, "rotary");
  for (int bh = 0; bh < 6; ++bh)
    for (int t = 0; t < 9; ++t)
      for (int i = 0; i < 3; ++i) {
        const size_t a = static_cast<size_t>(bh * 54 + t * 6 + i), b = a + 3;
        EXPECT_NEAR(std::hypot(r[a], r[b]), std::hypot(in[a], in[b]), 1e-14);  // a rotation
        if (t == 0) {
          EXPECT_EQ(r[a], in[a]);  // angle 0
        }
      }
  EXPECT_THROW(nn::rotary(randn64({2, 9, 5}, 4), c, sn), Error);  // odd D
}

TEST(Llama, BlockMatchesAFloat64Reference) {
  const int B = 2, T = 7, C = 12, H = 3, hd = 4, F = 20;
  const Tensor x = randn64({B, T, C}, 10);
  nn::LlamaWeights w{randn64({C}, 11, 0.3), randn64({C, C}, 12, 0.3), randn64({C, C}, 13, 0.3),
                     randn64({C, C}, 14, 0.3), randn64({C, C}, 15, 0.3), randn64({C}, 16, 0.3),
                     randn64({F, C}, 17, 0.3), randn64({F, C}, 18, 0.3), randn64({C, F}, 19, 0.3)};
  w.attn_norm = add(w.attn_norm, 1.0);
  w.mlp_norm = add(w.mlp_norm, 1.0);
  auto [c, s] = nn::rotary_tables(T, hd, 500.0, TensorOptions(kFloat64));
  const V got = values(nn::llama_block(x, w, H, c, s));

  const V X = values(x);
  V out(X.size());
  for (int b = 0; b < B; ++b) {
    const V xb(X.begin() + b * T * C, X.begin() + (b + 1) * T * C);
    const V h = rms_rows(xb, values(w.attn_norm), T, C, 1e-6);
    V q = matmul_t(h, values(w.wq), T, C, C), k = matmul_t(h, values(w.wk), T, C, C);
    const V v = matmul_t(h, values(w.wv), T, C, C);
    rotate(q, T, H, hd, 500.0);
    rotate(k, T, H, hd, 500.0);
    V att(static_cast<size_t>(T * C), 0.0);
    for (int hh = 0; hh < H; ++hh)
      for (int i = 0; i < T; ++i) {
        std::vector<double> p(static_cast<size_t>(i + 1));
        double mx = -1e300, sum = 0;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += q[(i * H + hh) * hd + d] * k[(j * H + hh) * hd + d];
          p[j] = dot / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, p[j]);
        }
        for (double& e : p) sum += (e = std::exp(e - mx));
        for (int j = 0; j <= i; ++j)
          for (int d = 0; d < hd; ++d) att[(i * H + hh) * hd + d] += p[j] / sum * v[(j * H + hh) * hd + d];
      }
    const V o = matmul_t(att, values(w.wo), T, C, C);
    V x2(xb.size());
    for (size_t i = 0; i < x2.size(); ++i) x2[i] = xb[i] + o[i];
    const V m = rms_rows(x2, values(w.mlp_norm), T, C, 1e-6);
    const V g = matmul_t(m, values(w.w_gate), T, C, F), u = matmul_t(m, values(w.w_up), T, C, F);
    V a(g.size());
    for (size_t i = 0; i < a.size(); ++i) a[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
    const V d = matmul_t(a, values(w.w_down), T, F, C);
    for (size_t i = 0; i < x2.size(); ++i) out[b * T * C + i] = x2[i] + d[i];
  }
  expect_near_all(got, out, 1e-12, "llama_block");

  // The module holds the same weights under its parameter names.
  nn::LlamaBlock blk(C, H, F, TensorOptions(kFloat64));
  EXPECT_EQ(blk.named_parameters().size(), 9u);
  EXPECT_EQ(blk.forward(x, c, s).sizes(), (Shape{B, T, C}));
}

}  // namespace
