// Softmax forward/backward against float64: resident paths (1-8 block clusters; vector and scalar),
// the generic online path (rows too long for residency), f32 and bf16, in place, determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "blublas/softmax.h"
#include "common/gpu_test.h"
#include "fused_test_util.h"

namespace {

using blu::test::all_close;
using blu::test::DeviceMem;
using blu::test::download;
using blu::test::random_values;
using blu::test::upload;
using blublas::Dtype;

struct SmCase {
  Dtype dt;
  int rows;
  int64_t cols;
};

class SoftmaxTest : public ::testing::TestWithParam<SmCase> {};

TEST_P(SoftmaxTest, ForwardBackwardMatchFloat64) {
  BLU_REQUIRE_GPU();
  const SmCase c = GetParam();
  const int R = c.rows;
  const int64_t C = c.cols;
  const std::size_t n = static_cast<std::size_t>(R) * C;
  const std::size_t es = blublas::dtype_size(c.dt);
  auto x = random_values(n, -8.0f, 8.0f, 41 + C, c.dt);
  auto dy = random_values(n, -1.0f, 1.0f, 42 + C, c.dt);
  std::vector<double> ry(n), rdx(n);
  for (int r = 0; r < R; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < C; ++j) m = std::max(m, static_cast<double>(x[r * C + j]));
    for (int64_t j = 0; j < C; ++j) s += std::exp(x[r * C + j] - m);
    for (int64_t j = 0; j < C; ++j) ry[r * C + j] = std::exp(x[r * C + j] - m) / s;
  }
  DeviceMem dx = upload(x, c.dt), ddy = upload(dy, c.dt), dyv(n * es), dgrad(n * es);
  std::vector<std::vector<uint8_t>> runs_y, runs_dx;
  std::vector<float> y;
  for (int rep = 0; rep < 2; ++rep) {
    dyv.poison();
    dgrad.poison();
    BLU_ASSERT_OK(blublas::softmax_forward(dyv.get(), dx.get(), R, C, c.dt, nullptr));
    BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
    y = download(dyv.get(), n, c.dt);
    // Backward reference on the y the GPU produced (what a caller would pass).
    if (rep == 0) {
      for (int r = 0; r < R; ++r) {
        double dot = 0;
        for (int64_t j = 0; j < C; ++j) dot += static_cast<double>(y[r * C + j]) * dy[r * C + j];
        for (int64_t j = 0; j < C; ++j) rdx[r * C + j] = y[r * C + j] * (dy[r * C + j] - dot);
      }
    }
    BLU_ASSERT_OK(blublas::softmax_backward(dgrad.get(), ddy.get(), dyv.get(), R, C, c.dt, nullptr));
    BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
    runs_y.push_back(blu::test::download_bytes(dyv.get(), n * es));
    runs_dx.push_back(blu::test::download_bytes(dgrad.get(), n * es));
  }
  const double rt = c.dt == Dtype::kBF16 ? 8e-3 : 1e-4;
  EXPECT_TRUE(all_close("softmax fwd", y, ry, 1e-7, rt));
  EXPECT_TRUE(all_close("softmax bwd", download(dgrad.get(), n, c.dt), rdx,
                        c.dt == Dtype::kBF16 ? 1e-5 : 1e-7, rt));
  EXPECT_EQ(runs_y[0], runs_y[1]) << "forward not bitwise deterministic";
  EXPECT_EQ(runs_dx[0], runs_dx[1]) << "backward not bitwise deterministic";
  // In place forward: x <- softmax(x).
  BLU_ASSERT_OK(blublas::softmax_forward(dx.get(), dx.get(), R, C, c.dt, nullptr));
  BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(blu::test::download_bytes(dx.get(), n * es), runs_y[0]) << "in-place forward differs";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SoftmaxTest,
    ::testing::Values(SmCase{Dtype::kF32, 37, 771}, SmCase{Dtype::kF32, 19, 1024},
                      SmCase{Dtype::kF32, 5, 50304}, SmCase{Dtype::kF32, 4, 50257},
                      SmCase{Dtype::kF32, 3, 140001}, SmCase{Dtype::kF32, 2, 140000},
                      SmCase{Dtype::kF32, 11, 5}, SmCase{Dtype::kBF16, 6, 50304},
                      SmCase{Dtype::kBF16, 9, 3333}, SmCase{Dtype::kF32, 3, 20000},
                      // More rows than co-resident clusters / blocks: the persistent loop.
                      SmCase{Dtype::kF32, 70, 50304}, SmCase{Dtype::kBF16, 67, 50304},
                      SmCase{Dtype::kF32, 20000, 771}, SmCase{Dtype::kF32, 9001, 1024}),
    [](const ::testing::TestParamInfo<SmCase>& i) {
      return std::string(blublas::dtype_name(i.param.dt)) + "_" + std::to_string(i.param.rows) +
             "x" + std::to_string(i.param.cols);
    });

}  // namespace
