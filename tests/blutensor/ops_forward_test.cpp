// Forward values of the CPU ops against naive float64 references on random inputs at odd sizes,
// bounded per element (GEMM: |c - ref| <= tol * sum_k |a_ik b_kj|). Outputs are poisoned first
// where the op writes into a preallocated tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "blutensor/blutensor.h"

namespace {

using namespace blu;

struct GemmShape {
  int64_t m, n, k;
  bool ta, tb;
};

// C = op(A) op(B) in float64 from row-major data.
std::vector<double> ref_gemm(const std::vector<double>& a, const std::vector<double>& b, const GemmShape& s,
                             std::vector<double>* abs_bound) {
  std::vector<double> c(s.m * s.n, 0.0);
  abs_bound->assign(s.m * s.n, 0.0);
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      double acc = 0, bound = 0;
      for (int64_t p = 0; p < s.k; ++p) {
        double av = s.ta ? a[p * s.m + i] : a[i * s.k + p];
        double bv = s.tb ? b[j * s.k + p] : b[p * s.n + j];
        acc += av * bv;
        bound += std::fabs(av * bv);
      }
      c[i * s.n + j] = acc;
      (*abs_bound)[i * s.n + j] = bound;
    }
  return c;
}

// Runs for the default CPU GEMM (OpenBLAS where the build found it) and the built-in one.
class MatmulPaths : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) setenv("BLU_CPU_GEMM", "builtin", 1);
  }
  void TearDown() override { unsetenv("BLU_CPU_GEMM"); }
};

TEST_P(MatmulPaths, MatchesFloat64ReferencePerElement) {
  Generator gen(3);
  std::vector<GemmShape> shapes = {{1, 1, 1, false, false},   {7, 5, 3, false, false},  {37, 53, 29, false, true},
                                   {101, 67, 259, true, false}, {13, 300, 17, true, true}, {97, 1001, 131, false, true},
                                   {257, 129, 513, false, false}};
  for (DType dt : {kFloat64, kFloat32, kBFloat16}) {
    for (const GemmShape& s : shapes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                   " k=" + std::to_string(s.k) + " ta=" + std::to_string(s.ta) + " tb=" + std::to_string(s.tb));
      Tensor a = randn(s.ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, dt, &gen);
      Tensor b = randn(s.tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, dt, &gen);
      Tensor c = matmul(s.ta ? a.t() : a, s.tb ? b.t() : b);
      ASSERT_EQ(c.sizes(), (Shape{s.m, s.n}));
      std::vector<double> bound;
      std::vector<double> ref = ref_gemm(a.to_double_vector(), b.to_double_vector(), s, &bound);
      std::vector<double> got = c.to_double_vector();
      double tol = dt == kFloat64 ? 1e-13 : (dt == kFloat32 ? 2e-6 : 1e-2);
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_LE(std::fabs(got[i] - ref[i]), tol * bound[i] + 1e-30)
            << "element " << i << " (" << i / s.n << ", " << i % s.n << "): got " << got[i] << " expected " << ref[i];
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OpsForward, MatmulPaths, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "builtin" : "default"; });

TEST(OpsForward, BatchedBroadcastMatmul) {
  Generator gen(4);
  Tensor a = randn({3, 1, 5, 7}, kFloat64, &gen);
  Tensor b = randn({4, 7, 6}, kFloat64, &gen);
  Tensor c = matmul(a, b);
  ASSERT_EQ(c.sizes(), (Shape{3, 4, 5, 6}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      Tensor ref = matmul(a.select(0, i).select(0, 0), b.select(0, j));
      EXPECT_LT(max_abs_diff(c.select(0, i).select(0, j), ref), 1e-12);
    }
}

TEST(OpsForward, RowOpsMatchReference) {
  Generator gen(8);
  const int64_t rows = 13, cols = 37;
  Tensor x = randn({rows, cols}, kFloat64, &gen);
  Tensor w = randn({cols}, kFloat64, &gen), bias = randn({cols}, kFloat64, &gen);
  std::vector<double> xv = x.to_double_vector(), wv = w.to_double_vector(), bv = bias.to_double_vector();
  std::vector<double> ln = layer_norm(x, w, bias, 1e-5).to_double_vector();
  std::vector<double> sm = softmax(x, -1).to_double_vector();
  std::vector<double> lsm = log_softmax(x, -1).to_double_vector();
  std::vector<double> ge = gelu(x).to_double_vector();
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0, mx = -1e300, se = 0;
    for (int64_t c = 0; c < cols; ++c) mean += xv[r * cols + c];
    mean /= cols;
    for (int64_t c = 0; c < cols; ++c) var += (xv[r * cols + c] - mean) * (xv[r * cols + c] - mean);
    var /= cols;
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, xv[r * cols + c]);
    for (int64_t c = 0; c < cols; ++c) se += std::exp(xv[r * cols + c] - mx);
    for (int64_t c = 0; c < cols; ++c) {
      int64_t i = r * cols + c;
      double xi = xv[i];
      EXPECT_NEAR(ln[i], (xi - mean) / std::sqrt(var + 1e-5) * wv[c] + bv[c], 1e-12);
      EXPECT_NEAR(sm[i], std::exp(xi - mx) / se, 1e-15);
      EXPECT_NEAR(lsm[i], xi - mx - std::log(se), 1e-12);
      EXPECT_NEAR(ge[i], 0.5 * xi * (1 + std::tanh(std::sqrt(2 / M_PI) * (xi + 0.044715 * xi * xi * xi))), 1e-15);
    }
  }
}

// The float32 CPU paths (vectorised exp, AVX2 row kernels, fast tanh) against float64 ones.
TEST(OpsForward, Float32FastPathsMatchFloat64) {
  Generator gen(12);
  Tensor x = mul(randn({37, 1001}, kFloat64, &gen), 4.0);
  Tensor x32 = x.to(kFloat32);
  auto rel = [](const Tensor& got, const Tensor& ref) { return max_abs_diff(got.to(kFloat64), ref); };
  EXPECT_LT(rel(softmax(x32, -1), softmax(x, -1)), 1e-6);
  EXPECT_LT(rel(log_softmax(x32, -1), log_softmax(x, -1)), 2e-5);
  EXPECT_LT(rel(gelu(x32), gelu(x)), 5e-6);
  EXPECT_LT(rel(exp(x32.narrow(1, 0, 50)), exp(x.narrow(1, 0, 50))) , 1e-1);  // values up to e^16
  std::vector<int64_t> t(37);
  for (int64_t i = 0; i < 37; ++i) t[i] = (i * 31) % 1001;
  Tensor tt = from_vector(t);
  Tensor l32 = x32.detach().requires_grad_(), l64 = x.detach().requires_grad_();
  Tensor loss32 = cross_entropy(l32, tt), loss64 = cross_entropy(l64, tt);
  EXPECT_NEAR(loss32.item(), loss64.item(), 1e-5 * std::fabs(loss64.item()));
  loss32.backward();
  loss64.backward();
  EXPECT_LT(rel(l32.grad(), l64.grad()), 1e-7);
  // Masked (-inf) entries give exact zeros; extreme logits stay finite.
  Tensor masked = masked_fill_causal(zeros({3, 3}), -INFINITY);
  std::vector<double> p = softmax(masked, -1).to_double_vector();
  EXPECT_EQ(p[1], 0.0);
  EXPECT_EQ(p[2], 0.0);
  EXPECT_DOUBLE_EQ(p[0], 1.0);
  Tensor big = from_vector(std::vector<float>{1000.0f, -1000.0f, 0.0f}, {1, 3});
  std::vector<double> q = softmax(big, -1).to_double_vector();
  EXPECT_EQ(q[0], 1.0);
  EXPECT_EQ(q[1], 0.0);
}

TEST(OpsForward, CrossEntropyAndEmbedding) {
  Generator gen(9);
  const int64_t n = 11, v = 23;
  Tensor logits = randn({n, v}, kFloat64, &gen);
  std::vector<int64_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = (i * 7) % v;
  t[3] = -100;
  t[8] = -100;
  Tensor loss = cross_entropy(logits, from_vector(t));
  std::vector<double> lv = logits.to_double_vector();
  double total = 0;
  int count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == -100) continue;
    double mx = -1e300, se = 0;
    for (int64_t c = 0; c < v; ++c) mx = std::max(mx, lv[i * v + c]);
    for (int64_t c = 0; c < v; ++c) se += std::exp(lv[i * v + c] - mx);
    total += mx + std::log(se) - lv[i * v + t[i]];
    ++count;
  }
  EXPECT_NEAR(loss.item(), total / count, 1e-12);
  Tensor w = randn({v, 5}, kFloat32, &gen);
  Tensor idx = from_vector(std::vector<int32_t>{4, 0, 22, 4}, {2, 2});
  Tensor e = embedding(w, idx);
  ASSERT_EQ(e.sizes(), (Shape{2, 2, 5}));
  EXPECT_EQ(max_abs_diff(e.select(0, 1).select(0, 0), w.select(0, 22)), 0.0);
  EXPECT_EQ(max_abs_diff(e.select(0, 0).select(0, 0), w.select(0, 4)), 0.0);
}

TEST(OpsForward, AttentionMatchesNaive) {
  Generator gen(10);
  const int64_t b = 2, h = 3, t = 7, d = 5;
  Tensor q = randn({b, h, t, d}, kFloat64, &gen), k = randn({b, h, t, d}, kFloat64, &gen),
         v = randn({b, h, t, d}, kFloat64, &gen);
  Tensor out = scaled_dot_product_attention(q, k, v, true);
  std::vector<double> qv = q.to_double_vector(), kv = k.to_double_vector(), vv = v.to_double_vector(),
                      ov = out.to_double_vector();
  for (int64_t bh = 0; bh < b * h; ++bh)
    for (int64_t i = 0; i < t; ++i) {
      std::vector<double> s(i + 1);
      double mx = -1e300, se = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += qv[(bh * t + i) * d + c] * kv[(bh * t + j) * d + c];
        s[j] = dot / std::sqrt(static_cast<double>(d));
        mx = std::max(mx, s[j]);
      }
      for (double& x : s) se += std::exp(x - mx);
      for (int64_t c = 0; c < d; ++c) {
        double acc = 0;
        for (int64_t j = 0; j <= i; ++j) acc += std::exp(s[j] - mx) / se * vv[(bh * t + j) * d + c];
        EXPECT_NEAR(ov[(bh * t + i) * d + c], acc, 1e-12);
      }
    }
}

TEST(OpsForward, ReductionsAndCat) {
  Tensor x = arange(24, kFloat64).view({2, 3, 4});
  EXPECT_EQ(sum(x, {1}).to_vector<double>(),
            (std::vector<double>{12, 15, 18, 21, 48, 51, 54, 57}));
  EXPECT_EQ(sum(x, {0, 2}, true).sizes(), (Shape{1, 3, 1}));
  EXPECT_EQ(sum(x, {0, 2}, true).to_vector<double>(), (std::vector<double>{60, 92, 124}));
  EXPECT_EQ(amax(x, {-1}).to_vector<double>(), (std::vector<double>{3, 7, 11, 15, 19, 23}));
  EXPECT_EQ(amax(x.transpose(0, 2), {2}).to_vector<double>()[0], 12.0);
  EXPECT_DOUBLE_EQ(mean(x).item(), 11.5);
  Tensor c = cat({x.narrow(2, 0, 1), x.narrow(2, 3, 1)}, 2);
  EXPECT_EQ(c.sizes(), (Shape{2, 3, 2}));
  EXPECT_EQ(c.to_vector<double>()[1], 3.0);
  Tensor big = randn({1001, 67}, kFloat32);
  std::vector<double> bv = big.to_double_vector();
  double s = 0;
  for (double v : bv) s += v;
  EXPECT_NEAR(sum(big).item(), s, 1e-3);
}

TEST(OpsForward, DropoutMaskAndScale) {
  Generator g1(77), g2(77);
  Tensor x = ones({100, 101});
  Tensor a = dropout(x, 0.25, true, &g1);
  Tensor b = dropout(x, 0.25, true, &g2);
  EXPECT_EQ(max_abs_diff(a, b), 0.0);
  int64_t kept = 0;
  for (double v : a.to_double_vector()) {
    ASSERT_TRUE(v == 0.0 || std::fabs(v - 1.0 / 0.75) < 1e-6);
    kept += v != 0.0;
  }
  EXPECT_NEAR(static_cast<double>(kept) / x.numel(), 0.75, 0.02);
  EXPECT_TRUE(dropout(x, 0.25, false).is_same(x));
}

}  // namespace
