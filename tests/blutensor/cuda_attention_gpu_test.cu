// GPU tests of blu::cuda_ops::attention_forward / attention_backward (blublas flash attention
// behind Tensor views) against a float64 naive attention computed on the host: causal and full,
// f32 strict and bf16, q/k/v as views into one fused [B, T, 3, H, D] activation, odd sequence
// lengths; and the refusal (false, nothing launched) for a head_dim blublas does not take.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../../blutensor/src/cuda/cuda_ops.h"
#include "blutensor/autograd.h"
#include "blutensor/cuda_stream.h"
#include "blutensor/ops.h"
#include "blutensor/tensor.h"
#include "common/gpu_test.h"

namespace {

using namespace blu;
namespace co = blu::cuda_ops;

const Device kGpu = Device::cuda(0);

std::vector<double> values(const Tensor& t) {
  Tensor host = empty(t.sizes(), TensorOptions(DType::F64));
  co::copy_(host, t);  // casts to f64 on the way (CUDA -> CPU with a dtype change)
  const double* p = static_cast<const double*>(host.data_ptr());
  return std::vector<double>(p, p + host.numel());
}

Tensor random_gpu(const Shape& shape, DType dt, uint64_t seed) {
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (double& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<double>(s >> 11) * (2.0 / 9007199254740992.0) - 1.0;
  }
  Tensor host = from_vector(v, shape, TensorOptions(dt));
  Tensor dev = empty(shape, TensorOptions(dt).device(kGpu));
  co::copy_(dev, host);
  return dev;
}

Tensor poisoned(const Shape& shape, DType dt) {
  Tensor t = empty(shape, TensorOptions(dt).device(kGpu));
  co::fill_(t, std::nan(""));
  return t;
}

// Reference for one (b, h): o = softmax(scale q k^T [+ causal mask]) v, and the gradients.
struct Ref {
  std::vector<double> o, lse, dq, dk, dv;
};

// x[b, h, t, d] from the row-major values of a [B, H, T, D] tensor.
Ref reference(const std::vector<double>& q, const std::vector<double>& k,
              const std::vector<double>& v, const std::vector<double>& dout, int64_t B, int64_t H,
              int64_t T, int64_t D, bool causal, double scale) {
  Ref r;
  r.o.assign(q.size(), 0);
  r.dq.assign(q.size(), 0);
  r.dk.assign(q.size(), 0);
  r.dv.assign(q.size(), 0);
  r.lse.assign(static_cast<std::size_t>(B * H * T), 0);
  std::vector<double> p(static_cast<std::size_t>(T * T)), dp(p.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t base = (b * H + h) * T * D;
      auto at = [&](const std::vector<double>& x, int64_t t, int64_t d) {
        return x[static_cast<std::size_t>(base + t * D + d)];
      };
      for (int64_t i = 0; i < T; ++i) {
        double m = -INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += at(q, i, d) * at(k, j, d);
          s *= scale;
          if (causal && j > i) s = -INFINITY;
          p[static_cast<std::size_t>(i * T + j)] = s;
          m = std::max(m, s);
        }
        double sum = 0;
        for (int64_t j = 0; j < T; ++j) sum += std::exp(p[static_cast<std::size_t>(i * T + j)] - m);
        r.lse[static_cast<std::size_t>((b * H + h) * T + i)] = m + std::log(sum);
        for (int64_t j = 0; j < T; ++j) {
          double& x = p[static_cast<std::size_t>(i * T + j)];
          x = std::exp(x - m) / sum;
        }
        for (int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (int64_t j = 0; j < T; ++j) o += p[static_cast<std::size_t>(i * T + j)] * at(v, j, d);
          r.o[static_cast<std::size_t>(base + i * D + d)] = o;
        }
      }
      // Backward: dV = P^T dO; dP = dO V^T; dS = P (dP - rowsum(dO o)); dQ = scale dS K; dK = scale dS^T Q.
      for (int64_t i = 0; i < T; ++i) {
        double delta = 0;
        for (int64_t d = 0; d < D; ++d) delta += at(dout, i, d) * r.o[static_cast<std::size_t>(base + i * D + d)];
        for (int64_t j = 0; j < T; ++j) {
          double x = 0;
          for (int64_t d = 0; d < D; ++d) x += at(dout, i, d) * at(v, j, d);
          dp[static_cast<std::size_t>(i * T + j)] = p[static_cast<std::size_t>(i * T + j)] * (x - delta);
        }
      }
      for (int64_t i = 0; i < T; ++i)
        for (int64_t d = 0; d < D; ++d) {
          double gq = 0, gk = 0, gv = 0;
          for (int64_t j = 0; j < T; ++j) {
            gq += dp[static_cast<std::size_t>(i * T + j)] * at(k, j, d);
            gk += dp[static_cast<std::size_t>(j * T + i)] * at(q, j, d);
            gv += p[static_cast<std::size_t>(j * T + i)] * at(dout, j, d);
          }
          r.dq[static_cast<std::size_t>(base + i * D + d)] = scale * gq;
          r.dk[static_cast<std::size_t>(base + i * D + d)] = scale * gk;
          r.dv[static_cast<std::size_t>(base + i * D + d)] = gv;
        }
    }
  return r;
}

::testing::AssertionResult close(const std::vector<double>& got, const std::vector<double>& ref,
                                 double atol, double rtol, const std::string& what) {
  int bad = 0;
  double worst = 0;
  std::string msg;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    double err = std::fabs(got[i] - ref[i]);
    if (!(err <= atol + rtol * std::fabs(ref[i]))) {
      if (bad < 5) msg += "\n  [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " expected " + std::to_string(ref[i]);
      ++bad;
    }
    if (!std::isnan(err)) worst = std::max(worst, err);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << ref.size()
                                       << " out of tolerance (max abs err " << worst << ")" << msg;
}

void run_case(DType dt, bool causal, int64_t B, int64_t H, int64_t T, int64_t D, uint64_t seed) {
  // q, k, v as views of one fused activation [B, T, 3, H, D] (what a qkv linear produces).
  Tensor qkv = random_gpu({B, T, 3, H, D}, dt, seed);
  auto part = [&](int64_t which) { return qkv.select(2, which).permute({0, 2, 1, 3}); };  // [B, H, T, D]
  Tensor q = part(0), k = part(1), v = part(2);
  Tensor o = poisoned({B, H, T, D}, dt), lse = poisoned({B, H, T}, DType::F32);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  ASSERT_TRUE(co::attention_forward(o, lse, q, k, v, causal, 0.0)) << "blublas refused the forward";
  Tensor dout = random_gpu({B, H, T, D}, dt, seed + 1);
  Tensor dq = poisoned({B, H, T, D}, dt), dk = poisoned({B, H, T, D}, dt), dv = poisoned({B, H, T, D}, dt);
  ASSERT_TRUE(co::attention_backward(dq, dk, dv, dout, q, k, v, o, lse, causal, 0.0))
      << "blublas refused the backward";
  Ref r = reference(values(q), values(k), values(v), values(dout), B, H, T, D, causal, scale);
  const bool bf16 = dt == DType::BF16;
  const double atol = bf16 ? 2e-2 : 2e-5, rtol = bf16 ? 2e-2 : 1e-4;
  std::string what = std::string(dtype_name(dt)) + (causal ? " causal" : " full") + " B" +
                     std::to_string(B) + " H" + std::to_string(H) + " T" + std::to_string(T) +
                     " D" + std::to_string(D);
  EXPECT_TRUE(close(values(o), r.o, atol, rtol, what + " o"));
  EXPECT_TRUE(close(values(lse), r.lse, bf16 ? 1e-2 : 1e-5, 1e-4, what + " lse"));
  EXPECT_TRUE(close(values(dq), r.dq, 2 * atol, 2 * rtol, what + " dq"));
  EXPECT_TRUE(close(values(dk), r.dk, 2 * atol, 2 * rtol, what + " dk"));
  EXPECT_TRUE(close(values(dv), r.dv, 2 * atol, 2 * rtol, what + " dv"));
}

TEST(CudaAttention, MatchesFloat64ReferenceF32Strict) {
  BLU_REQUIRE_GPU();
  set_matmul_precision(MatmulPrecision::kHighest);
  run_case(DType::F32, true, 2, 3, 67, 64, 1);
  run_case(DType::F32, false, 1, 2, 45, 64, 2);
  run_case(DType::F32, true, 1, 1, 33, 128, 3);
}

TEST(CudaAttention, MatchesFloat64ReferenceBf16) {
  BLU_REQUIRE_GPU();
  run_case(DType::BF16, true, 2, 3, 130, 64, 4);
  run_case(DType::BF16, false, 1, 2, 77, 128, 5);
}

TEST(CudaAttention, RefusesWhatBlublasCannotTake) {
  BLU_REQUIRE_GPU();
  Tensor q = random_gpu({1, 2, 9, 32}, DType::F32, 6);  // head_dim 32
  Tensor o = poisoned({1, 2, 9, 32}, DType::F32), lse = poisoned({1, 2, 9}, DType::F32);
  EXPECT_FALSE(co::attention_forward(o, lse, q, q, q, true, 0.0));
  Tensor q64 = random_gpu({1, 2, 9, 64}, DType::F64, 7);  // f64
  Tensor o64 = poisoned({1, 2, 9, 64}, DType::F64);
  EXPECT_FALSE(co::attention_forward(o64, lse, q64, q64, q64, true, 0.0));
  // o untouched (still NaN): nothing was launched.
  std::vector<double> ov = values(o);
  EXPECT_TRUE(std::isnan(ov[0]));
}

TEST(CudaAttention, FusedSdpaAutogradMatchesReference) {
  BLU_REQUIRE_GPU();
  set_matmul_precision(MatmulPrecision::kHighest);
  const int64_t B = 2, H = 3, T = 61, D = 64;
  Tensor q = random_gpu({B, H, T, D}, DType::F32, 11).requires_grad_(true);
  Tensor k = random_gpu({B, H, T, D}, DType::F32, 12).requires_grad_(true);
  Tensor v = random_gpu({B, H, T, D}, DType::F32, 13).requires_grad_(true);
  Tensor y = co::fused_scaled_dot_product_attention(q, k, v, true, 0.0);
  ASSERT_TRUE(y.defined()) << "fused path declined a [2, 3, 61, 64] f32 problem";
  EXPECT_TRUE(y.requires_grad());
  EXPECT_EQ(y.sizes(), (Shape{B, H, T, D}));
  Tensor dout = random_gpu({B, H, T, D}, DType::F32, 14);
  y.backward(dout);
  Ref r = reference(values(q), values(k), values(v), values(dout), B, H, T, D, true,
                    1.0 / std::sqrt(static_cast<double>(D)));
  EXPECT_TRUE(close(values(y), r.o, 2e-5, 1e-4, "fused sdpa output"));
  ASSERT_TRUE(q.grad().defined() && k.grad().defined() && v.grad().defined());
  EXPECT_TRUE(close(values(q.grad()), r.dq, 4e-5, 2e-4, "fused sdpa dq"));
  EXPECT_TRUE(close(values(k.grad()), r.dk, 4e-5, 2e-4, "fused sdpa dk"));
  EXPECT_TRUE(close(values(v.grad()), r.dv, 4e-5, 2e-4, "fused sdpa dv"));
  // Declined cases return an undefined tensor (the composite path takes them).
  Tensor q32 = random_gpu({1, 1, 5, 32}, DType::F32, 15);
  EXPECT_FALSE(co::fused_scaled_dot_product_attention(q32, q32, q32, true, 0.0).defined());
}

// Note [Packed attention gradients] (cuda_sdpa.cpp) + Note [Split of adjacent gradients]: q, k, v
// as GPT-2 makes them (split of one [B, T, 3C] projection, heads as views) get dq, dk, dv written
// into one buffer that reaches the projection as its gradient without a copy (the union itself
// is tested on the CPU: Autograd.SplitOfAdjacentGradientsIsTheirUnion); the values are bitwise
// those of the same attention on separate contiguous q, k, v (bf16 and f32).
TEST(CudaAttention, PackedQkvGradientsAreBitwiseTheSame) {
  BLU_REQUIRE_GPU();
  set_matmul_precision(MatmulPrecision::kHigh);
  const int64_t B = 2, H = 3, T = 77, D = 64, C = H * D;
  for (DType dt : {DType::BF16, DType::F32}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor qkv = random_gpu({B, T, 3 * C}, dt, 31).requires_grad_(true);
    std::vector<Tensor> parts = qkv.split(C, -1);
    auto heads = [&](const Tensor& t) { return t.reshape({B, T, H, D}).transpose(1, 2); };
    Tensor y = scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), true);
    Tensor dout = random_gpu({B, H, T, D}, dt, 32);
    y.backward(dout);
    ASSERT_TRUE(qkv.grad().defined());
    // Separate contiguous inputs with the same values: the unpacked path.
    std::vector<Tensor> sep;
    for (int i = 0; i < 3; ++i) sep.push_back(heads(qkv.detach().narrow(-1, i * C, C)).contiguous().requires_grad_(true));
    Tensor ys = scaled_dot_product_attention(sep[0], sep[1], sep[2], true);
    ys.backward(dout);
    EXPECT_EQ(values(y), values(ys));
    const std::vector<double> packed = values(qkv.grad());
    for (int i = 0; i < 3; ++i) {
      const std::vector<double> want = values(sep[static_cast<size_t>(i)].grad().transpose(1, 2).contiguous().view({B, T, C}));
      const std::vector<double> got = values(qkv.grad().narrow(-1, i * C, C).contiguous());
      EXPECT_EQ(got, want) << "gradient of part " << i;
    }
    EXPECT_EQ(packed.size(), static_cast<size_t>(B * T * 3 * C));
  }
  set_matmul_precision(MatmulPrecision::kHighest);
}

// Note [Strict-fp32 attention]: under kHighest, scaled_dot_product_attention takes the 3xTF32 flash
// kernel when asked (one fused node, the same reference bounds as the strict kernel) and the
// composite path by default.
TEST(CudaAttention, Split3Tf32SdpaMatchesReferenceWhenAsked) {
  BLU_REQUIRE_GPU();
  set_matmul_precision(MatmulPrecision::kHighest);
  struct Restore {
    ~Restore() { set_fp32_attention(Fp32Attention::kComposite); }
  } restore;
  const int64_t B = 2, H = 3, T = 61, D = 64;
  for (Fp32Attention mode : {Fp32Attention::kSplit3TF32, Fp32Attention::kComposite}) {
    set_fp32_attention(mode);
    Tensor q = random_gpu({B, H, T, D}, DType::F32, 21).requires_grad_(true);
    Tensor k = random_gpu({B, H, T, D}, DType::F32, 22).requires_grad_(true);
    Tensor v = random_gpu({B, H, T, D}, DType::F32, 23).requires_grad_(true);
    Tensor y = scaled_dot_product_attention(q, k, v, true);
    Tensor dout = random_gpu({B, H, T, D}, DType::F32, 24);
    y.backward(dout);
    Ref r = reference(values(q), values(k), values(v), values(dout), B, H, T, D, true,
                      1.0 / std::sqrt(static_cast<double>(D)));
    const std::string m = mode == Fp32Attention::kSplit3TF32 ? "3xtf32 " : "composite ";
    EXPECT_TRUE(close(values(y), r.o, 2e-5, 1e-4, m + "output"));
    EXPECT_TRUE(close(values(q.grad()), r.dq, 4e-5, 2e-4, m + "dq"));
    EXPECT_TRUE(close(values(k.grad()), r.dk, 4e-5, 2e-4, m + "dk"));
    EXPECT_TRUE(close(values(v.grad()), r.dv, 4e-5, 2e-4, m + "dv"));
  }
}

}  // namespace
