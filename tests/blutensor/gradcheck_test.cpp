// Finite-difference gradient check (float64, CPU) of every op in the op registry: the analytic
// gradient of L = sum(op(inputs) * R), R fixed random, against central differences per element.
#include <gtest/gtest.h>

#include <cmath>

#include "blutensor/autograd.h"
#include "blutensor/op_registry.h"
#include "blutensor/ops.h"

namespace {

using blu::Tensor;

double loss_value(const blu::OpCase& c, const std::vector<Tensor>& inputs, const Tensor& r) {
  blu::NoGradGuard ng;
  return blu::sum(blu::mul(c.forward(inputs), r)).item();
}

class GradcheckTest : public ::testing::TestWithParam<std::size_t> {};

TEST_P(GradcheckTest, MatchesFiniteDifferences) {
  const blu::OpCase& c = blu::op_registry()[GetParam()];
  if (!c.gradcheck) GTEST_SKIP() << c.name << " is excluded from finite differences";
  SCOPED_TRACE(c.name);
  blu::OpInputSpec spec;
  spec.seed = 11 + GetParam();
  std::vector<Tensor> inputs = c.make_inputs(spec);
  Tensor out = c.forward(inputs);
  blu::Generator gen(99);
  Tensor r = blu::randn(out.sizes(), blu::kFloat64, &gen);
  Tensor loss = blu::sum(blu::mul(out, r));
  loss.backward();
  constexpr double kEps = 1e-6;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!c.differentiable[i]) continue;
    Tensor& x = inputs[i];
    ASSERT_TRUE(x.grad().defined()) << c.name << ": input " << i << " got no gradient";
    ASSERT_EQ(x.grad().sizes(), x.sizes());
    std::vector<double> analytic = x.grad().to_double_vector();
    double* p = x.data_ptr<double>();
    for (int64_t e = 0; e < x.numel(); ++e) {
      double saved = p[e];
      p[e] = saved + kEps;
      double lp = loss_value(c, inputs, r);
      p[e] = saved - kEps;
      double lm = loss_value(c, inputs, r);
      p[e] = saved;
      double numeric = (lp - lm) / (2 * kEps);
      double tol = 1e-5 + 1e-4 * std::fabs(numeric);
      ASSERT_NEAR(analytic[e], numeric, tol) << c.name << ": input " << i << " element " << e;
    }
  }
}

std::string case_name(const ::testing::TestParamInfo<std::size_t>& info) {
  return blu::op_registry()[info.param].name;
}

INSTANTIATE_TEST_SUITE_P(AllOps, GradcheckTest,
                         ::testing::Range<std::size_t>(0, blu::op_registry().size()), case_name);

TEST(Gradcheck, RegistryCoversTheOps) {
  // The families the registry must keep covering (a removed entry fails here).
  std::vector<std::string> required = {"add_broadcast", "matmul_batched_broadcast", "linear_bias", "layer_norm",
                                       "softmax_last", "log_softmax", "sdpa_causal", "embedding",
                                       "cross_entropy_ignore", "cat_dim1", "split_weighted", "dropout", "gelu",
                                       "amax_dim", "sum_dims_keepdim", "mean_dim"};
  for (const std::string& name : required) {
    bool found = false;
    for (const blu::OpCase& c : blu::op_registry()) found = found || c.name == name;
    EXPECT_TRUE(found) << name;
  }
}

// The CPU-vs-CUDA test (ops_cpu_vs_cuda_gpu_test) draws every case at size_scale 2 in f32 and
// bf16; each case must run its forward and backward there too (session 13: rotary and llama_block
// refused the scaled sizes on the device, which no CPU test saw).
TEST(Gradcheck, EveryCaseRunsAtTheDeviceTestsSizes) {
  for (const blu::OpCase& c : blu::op_registry()) {
    for (blu::DType dt : {blu::kFloat32, blu::kBFloat16}) {
      blu::OpInputSpec spec;
      spec.dtype = dt;
      spec.size_scale = 2;
      try {
        std::vector<blu::Tensor> in = c.make_inputs(spec);
        blu::Tensor out = c.forward(in);
        out.sum().backward();
      } catch (const std::exception& e) {
        ADD_FAILURE() << c.name << " (" << blu::dtype_name(dt) << ", size_scale 2): " << e.what();
      }
    }
  }
}

}  // namespace
