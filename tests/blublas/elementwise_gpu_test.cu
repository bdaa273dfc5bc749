// GELU forward/backward (with and without the fused bias) and the residual add against float64
// references: vector and scalar paths (odd sizes, misaligned pointers), f32 and bf16, in place,
// determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "blublas/elementwise.h"
#include "common/gpu_test.h"
#include "fused_test_util.h"

namespace {

using blu::test::all_close;
using blu::test::DeviceMem;
using blu::test::download;
using blu::test::random_values;
using blu::test::upload;
using blublas::Dtype;

double gelu_ref(double u) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * u * (1.0 + std::tanh(k * (u + 0.044715 * u * u * u)));
}
double gelu_grad_ref(double u) {
  const double k = std::sqrt(2.0 / M_PI);
  const double z = k * (u + 0.044715 * u * u * u);
  const double t = std::tanh(z);
  return 0.5 * (1.0 + t) + 0.5 * u * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * u * u);
}

struct EwCase {
  Dtype dt;
  int rows, cols;
  bool bias;
  int offset_elems;  // shifts every pointer by this many elements (misalignment -> scalar path)
};

class GeluTest : public ::testing::TestWithParam<EwCase> {};

TEST_P(GeluTest, ForwardBackwardMatchFloat64) {
  BLU_REQUIRE_GPU();
  const EwCase c = GetParam();
  const std::size_t n = static_cast<std::size_t>(c.rows) * c.cols;
  const std::size_t es = blublas::dtype_size(c.dt);
  const int off = c.offset_elems;
  auto x = random_values(n + off, -6.0f, 6.0f, 21 + c.cols, c.dt);
  auto bias = random_values(c.cols + off, -1.0f, 1.0f, 22 + c.cols, c.dt);
  auto dy = random_values(n + off, -1.0f, 1.0f, 23 + c.cols, c.dt);
  DeviceMem dxin = upload(x, c.dt), dbias = upload(bias, c.dt), ddy = upload(dy, c.dt);
  DeviceMem dout((n + off) * es), dgrad((n + off) * es);
  auto at = [&](const DeviceMem& m) { return static_cast<char*>(m.get()) + off * es; };
  const void* bias_p = c.bias ? at(dbias) : nullptr;
  std::vector<double> ry(n), rdx(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(x[off + i]) + (c.bias ? bias[off + i % c.cols] : 0.0);
    ry[i] = gelu_ref(u);
    rdx[i] = dy[off + i] * gelu_grad_ref(u);
  }
  const double rt = blu::test::storage_rtol(c.dt);
  const double atf = c.dt == Dtype::kBF16 ? 2e-3 : 1e-6;
  std::vector<std::vector<uint8_t>> runs;
  for (int rep = 0; rep < 2; ++rep) {
    dout.poison();
    dgrad.poison();
    BLU_ASSERT_OK(blublas::gelu_forward(at(dout), at(dxin), bias_p, c.rows, c.cols, c.dt, nullptr));
    BLU_ASSERT_OK(blublas::gelu_backward(at(dgrad), at(ddy), at(dxin), bias_p, c.rows, c.cols, c.dt,
                                nullptr));
    BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
    EXPECT_TRUE(all_close("gelu fwd", download(at(dout), n, c.dt), ry, atf, rt));
    EXPECT_TRUE(all_close("gelu bwd", download(at(dgrad), n, c.dt), rdx, atf, rt));
    runs.push_back(blu::test::download_bytes(at(dgrad), n * es));
  }
  EXPECT_EQ(runs[0], runs[1]);
  // In place: dy <- dy * gelu'(x + b).
  BLU_ASSERT_OK(blublas::gelu_backward(at(ddy), at(ddy), at(dxin), bias_p, c.rows, c.cols,
                                              c.dt, nullptr));
  BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(all_close("gelu bwd in place", download(at(ddy), n, c.dt), rdx, atf, rt));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GeluTest,
    ::testing::Values(EwCase{Dtype::kF32, 37, 3072, true, 0}, EwCase{Dtype::kF32, 41, 771, true, 0},
                      EwCase{Dtype::kF32, 13, 1001, false, 0}, EwCase{Dtype::kF32, 9, 256, true, 1},
                      EwCase{Dtype::kBF16, 33, 3072, true, 0}, EwCase{Dtype::kBF16, 7, 999, false, 0},
                      EwCase{Dtype::kBF16, 5, 64, true, 3}),
    [](const ::testing::TestParamInfo<EwCase>& i) {
      return std::string(blublas::dtype_name(i.param.dt)) + "_" + std::to_string(i.param.rows) +
             "x" + std::to_string(i.param.cols) + (i.param.bias ? "_bias" : "") + "_off" +
             std::to_string(i.param.offset_elems);
    });

TEST(ResidualAdd, MatchesAndHandlesTails) {
  BLU_REQUIRE_GPU();
  for (Dtype dt : {Dtype::kF32, Dtype::kBF16}) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1023}, int64_t{100003}}) {
      SCOPED_TRACE(std::string(blublas::dtype_name(dt)) + " n=" + std::to_string(n));
      auto a = random_values(n, -3.0f, 3.0f, 31 + n, dt);
      auto b = random_values(n, -3.0f, 3.0f, 32 + n, dt);
      DeviceMem da = upload(a, dt), db = upload(b, dt), dout(n * blublas::dtype_size(dt));
      dout.poison();
      BLU_ASSERT_OK(blublas::residual_add(dout.get(), da.get(), db.get(), n, dt, nullptr));
      BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
      std::vector<double> ref(n);
      for (int64_t i = 0; i < n; ++i) ref[i] = static_cast<double>(a[i]) + b[i];
      EXPECT_TRUE(all_close("residual", download(dout.get(), n, dt), ref,
                            dt == Dtype::kBF16 ? 1e-2 : 1e-6, blu::test::storage_rtol(dt)));
      // In place: a <- a + b.
      BLU_ASSERT_OK(blublas::residual_add(da.get(), da.get(), db.get(), n, dt, nullptr));
      BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
      EXPECT_TRUE(all_close("residual in place", download(da.get(), n, dt), ref,
                            dt == Dtype::kBF16 ? 1e-2 : 1e-6, blu::test::storage_rtol(dt)));
    }
  }
}

}  // namespace
