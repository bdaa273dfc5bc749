// Fused classifier (loss, mean loss, dlogits) against float64: vocab 50304 and odd sizes, f32 and
// bf16, ignore_index, bad targets (error flag), in place and separate dlogits, determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "blublas/cross_entropy.h"
#include "common/gpu_test.h"
#include "fused_test_util.h"

namespace {

using blu::test::all_close;
using blu::test::DeviceMem;
using blu::test::download;
using blu::test::random_values;
using blu::test::upload;
using blublas::Dtype;

struct XentCase {
  Dtype dt;
  int rows;
  int64_t vocab;
  bool in_place;
};

class CrossEntropyTest : public ::testing::TestWithParam<XentCase> {};

TEST_P(CrossEntropyTest, LossAndGradMatchFloat64) {
  BLU_REQUIRE_GPU();
  const XentCase c = GetParam();
  const int R = c.rows;
  const int64_t V = c.vocab;
  const std::size_t n = static_cast<std::size_t>(R) * V;
  const std::size_t es = blublas::dtype_size(c.dt);
  const int kIgnore = -100;
  const float dloss = 1.5f;
  auto logits = random_values(n, -6.0f, 6.0f, 51 + V, c.dt);
  std::vector<int32_t> targets(R);
  for (int r = 0; r < R; ++r) targets[r] = static_cast<int32_t>((r * 7919LL + 13) % V);
  targets[1 % R] = kIgnore;  // an ignored row
  if (R > 4) targets[4] = kIgnore;
  int count = 0;
  for (int r = 0; r < R; ++r) count += targets[r] != kIgnore;
  std::vector<double> rloss(R), rgrad(n);
  double total = 0;
  for (int r = 0; r < R; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < V; ++j) m = std::max(m, static_cast<double>(logits[r * V + j]));
    for (int64_t j = 0; j < V; ++j) s += std::exp(logits[r * V + j] - m);
    const bool valid = targets[r] != kIgnore;
    rloss[r] = valid ? std::log(s) + m - logits[r * V + targets[r]] : 0.0;
    total += rloss[r];
    const double g = valid ? static_cast<double>(dloss) / count : 0.0;
    for (int64_t j = 0; j < V; ++j) {
      rgrad[r * V + j] = (std::exp(logits[r * V + j] - m) / s - (j == targets[r] ? 1.0 : 0.0)) * g;
    }
  }
  DeviceMem dlog = upload(logits, c.dt), dgrad(n * es), dloss_rows(R * 4), dmean(4), dflag(4);
  DeviceMem dtargets(R * 4);
  BLU_CUDA_TEST_CHECK(cudaMemcpy(dtargets.get(), targets.data(), R * 4, cudaMemcpyHostToDevice));
  std::size_t ws_bytes = 0;
  BLU_ASSERT_OK(blublas::cross_entropy_workspace_size(R, &ws_bytes));
  DeviceMem ws(ws_bytes);
  std::vector<std::vector<uint8_t>> runs;
  for (int rep = 0; rep < 2; ++rep) {
    DeviceMem fresh = upload(logits, c.dt);
    dgrad.poison();
    dloss_rows.poison();
    dmean.poison();
    ws.poison();
    BLU_CUDA_TEST_CHECK(cudaMemset(dflag.get(), 0, 4));
    void* grad_out = c.in_place ? fresh.get() : dgrad.get();
    BLU_ASSERT_OK(blublas::cross_entropy_fused(dloss_rows.as<float>(), dmean.as<float>(), grad_out,
                                               fresh.get(), dtargets.as<int32_t>(), R, V, kIgnore,
                                               dloss, dflag.as<int>(), c.dt, ws.get(), ws_bytes,
                                               nullptr));
    BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
    const double lt = c.dt == Dtype::kBF16 ? 1e-4 : 1e-5;
    EXPECT_TRUE(all_close("losses", download(dloss_rows.get(), R, Dtype::kF32), rloss, lt, 1e-5));
    EXPECT_TRUE(all_close("mean loss", download(dmean.get(), 1, Dtype::kF32), {total / count},
                          lt, 1e-5));
    const double gscale = static_cast<double>(dloss) / count;
    EXPECT_TRUE(all_close("dlogits", download(grad_out, n, c.dt), rgrad,
                          (c.dt == Dtype::kBF16 ? 1e-5 : 1e-8) * gscale,
                          c.dt == Dtype::kBF16 ? 8e-3 : 1e-4));
    int flag = -1;
    BLU_CUDA_TEST_CHECK(cudaMemcpy(&flag, dflag.get(), 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(flag, 0) << "error flag set for valid targets";
    runs.push_back(blu::test::download_bytes(grad_out, n * es));
    auto mean_bytes = blu::test::download_bytes(dmean.get(), 4);
    runs.back().insert(runs.back().end(), mean_bytes.begin(), mean_bytes.end());
  }
  EXPECT_EQ(runs[0], runs[1]) << "dlogits / mean loss not bitwise deterministic";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CrossEntropyTest,
    ::testing::Values(XentCase{Dtype::kF32, 7, 50304, false}, XentCase{Dtype::kF32, 6, 50304, true},
                      XentCase{Dtype::kF32, 5, 50257, false}, XentCase{Dtype::kBF16, 7, 50304, true},
                      XentCase{Dtype::kBF16, 9, 777, false}, XentCase{Dtype::kF32, 33, 10, true},
                      XentCase{Dtype::kF32, 3, 150001, false},
                      // More rows than co-resident clusters / blocks: the persistent loop.
                      XentCase{Dtype::kF32, 70, 50304, true}, XentCase{Dtype::kBF16, 66, 50304, false},
                      XentCase{Dtype::kF32, 9001, 1000, false}, XentCase{Dtype::kF32, 20000, 333, true}),
    [](const ::testing::TestParamInfo<XentCase>& i) {
      return std::string(blublas::dtype_name(i.param.dt)) + "_" + std::to_string(i.param.rows) +
             "x" + std::to_string(i.param.vocab) + (i.param.in_place ? "_inplace" : "");
    });

TEST(CrossEntropy, BadTargetSetsFlagAndIsIgnored) {
  BLU_REQUIRE_GPU();
  const int R = 5, V = 1003;
  auto logits = random_values(static_cast<std::size_t>(R) * V, -3.0f, 3.0f, 61);
  std::vector<int32_t> targets = {3, V + 5, -7, 1002, -100};
  DeviceMem dlog = upload(logits, Dtype::kF32), dloss_rows(R * 4), dmean(4), dflag(4), dt(R * 4),
            dgrad(static_cast<std::size_t>(R) * V * 4);
  BLU_CUDA_TEST_CHECK(cudaMemcpy(dt.get(), targets.data(), R * 4, cudaMemcpyHostToDevice));
  BLU_CUDA_TEST_CHECK(cudaMemset(dflag.get(), 0, 4));
  std::size_t ws_bytes = 0;
  BLU_ASSERT_OK(blublas::cross_entropy_workspace_size(R, &ws_bytes));
  DeviceMem ws(ws_bytes);
  BLU_ASSERT_OK(blublas::cross_entropy_fused(dloss_rows.as<float>(), dmean.as<float>(), dgrad.get(),
                                             dlog.get(), dt.as<int32_t>(), R, V, -100, 1.0f,
                                             dflag.as<int>(), Dtype::kF32, ws.get(), ws_bytes,
                                             nullptr));
  BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
  int flag = 0;
  BLU_CUDA_TEST_CHECK(cudaMemcpy(&flag, dflag.get(), 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(flag, 1);
  auto loss = download(dloss_rows.get(), R, Dtype::kF32);
  auto grad = download(dgrad.get(), static_cast<std::size_t>(R) * V, Dtype::kF32);
  for (int r : {1, 2, 4}) {
    EXPECT_EQ(loss[r], 0.0f) << "row " << r;
    for (int j = 0; j < V; ++j) ASSERT_EQ(grad[r * V + j], 0.0f) << "row " << r << " col " << j;
  }
  EXPECT_GT(loss[0], 0.0f);
  float mean = 0;
  BLU_CUDA_TEST_CHECK(cudaMemcpy(&mean, dmean.get(), 4, cudaMemcpyDeviceToHost));
  EXPECT_NEAR(mean, (loss[0] + loss[3]) / 2.0, 1e-5);
}

}  // namespace
