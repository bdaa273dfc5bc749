// Softmax forward/backward against float64: the streamed path (Note [Row streaming through a
// shared-memory ring]: clusters of 1-4 CTAs, ring wrap-around, a 16-byte last chunk, masked -inf
// chunks, misaligned rows, every tuning variant the profiler sweeps), the resident paths (1-8 block clusters;
// vector and scalar), the generic online path (rows too long for residency), f32 and bf16, in
// place, determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../../blublas/src/softmax/row_stream_tuning.h"  // internal: tuned launchers
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
using blublas::fused::RowStreamTuning;

// Sets -inf on every row r % 3 == 1: a leading run of 3000 elements (a whole 8 KiB chunk for
// f32) and every 5th element after it.
void mask_rows(std::vector<float>& x, int rows, int64_t cols) {
  for (int r = 1; r < rows; r += 3) {
    for (int64_t j = 0; j < cols; ++j) {
      if (j < 3000 || j % 5 == 0) x[r * cols + j] = -INFINITY;
    }
  }
}

// Runs forward, backward (twice, bitwise compared) and an in-place forward with `tu` (nullptr:
// the public launchers) and checks every element against float64.
void check_softmax(Dtype dt, int R, int64_t C, bool masked, const RowStreamTuning* tu) {
  const std::size_t n = static_cast<std::size_t>(R) * C;
  const std::size_t es = blublas::dtype_size(dt);
  const std::string path =
      blublas::fused::row_path_name(R, C, 1, dt, tu ? *tu : RowStreamTuning{}) + " / bwd " +
      blublas::fused::row_path_name(R, C, 2, dt, tu ? *tu : RowStreamTuning{});
  SCOPED_TRACE("path: " + path);
  auto x = random_values(n, -8.0f, 8.0f, 41 + C, dt);
  if (masked) mask_rows(x, R, C);
  auto dy = random_values(n, -1.0f, 1.0f, 42 + C, dt);
  std::vector<double> ry(n), rdx(n);
  for (int r = 0; r < R; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < C; ++j) m = std::max(m, static_cast<double>(x[r * C + j]));
    for (int64_t j = 0; j < C; ++j) s += std::exp(x[r * C + j] - m);
    for (int64_t j = 0; j < C; ++j) ry[r * C + j] = std::exp(x[r * C + j] - m) / s;
  }
  auto fwd = [&](void* y, const void* xin) {
    return tu ? blublas::fused::softmax_forward_tuned(y, xin, R, C, dt, nullptr, *tu)
              : blublas::softmax_forward(y, xin, R, C, dt, nullptr);
  };
  auto bwd = [&](void* dxo, const void* dyi, const void* yi) {
    return tu ? blublas::fused::softmax_backward_tuned(dxo, dyi, yi, R, C, dt, nullptr, *tu)
              : blublas::softmax_backward(dxo, dyi, yi, R, C, dt, nullptr);
  };
  DeviceMem dx = upload(x, dt), ddy = upload(dy, dt), dyv(n * es), dgrad(n * es);
  std::vector<std::vector<uint8_t>> runs_y, runs_dx;
  std::vector<float> y;
  for (int rep = 0; rep < 2; ++rep) {
    dyv.poison();
    dgrad.poison();
    BLU_ASSERT_OK(fwd(dyv.get(), dx.get()));
    BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
    y = download(dyv.get(), n, dt);
    // Backward reference on the y the GPU produced (what a caller would pass).
    if (rep == 0) {
      for (int r = 0; r < R; ++r) {
        double dot = 0;
        for (int64_t j = 0; j < C; ++j) dot += static_cast<double>(y[r * C + j]) * dy[r * C + j];
        for (int64_t j = 0; j < C; ++j) rdx[r * C + j] = y[r * C + j] * (dy[r * C + j] - dot);
      }
    }
    BLU_ASSERT_OK(bwd(dgrad.get(), ddy.get(), dyv.get()));
    BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
    runs_y.push_back(blu::test::download_bytes(dyv.get(), n * es));
    runs_dx.push_back(blu::test::download_bytes(dgrad.get(), n * es));
  }
  const double rt = dt == Dtype::kBF16 ? 8e-3 : 1e-4;
  EXPECT_TRUE(all_close("softmax fwd", y, ry, 1e-7, rt));
  EXPECT_TRUE(all_close("softmax bwd", download(dgrad.get(), n, dt), rdx,
                        dt == Dtype::kBF16 ? 1e-5 : 1e-7, rt));
  EXPECT_EQ(runs_y[0], runs_y[1]) << "forward not bitwise deterministic";
  EXPECT_EQ(runs_dx[0], runs_dx[1]) << "backward not bitwise deterministic";
  // In place forward: x <- softmax(x).
  BLU_ASSERT_OK(fwd(dx.get(), dx.get()));
  BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(blu::test::download_bytes(dx.get(), n * es), runs_y[0]) << "in-place forward differs";
  // In place backward: dy <- dx.
  BLU_ASSERT_OK(bwd(ddy.get(), ddy.get(), dyv.get()));
  BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(blu::test::download_bytes(ddy.get(), n * es), runs_dx[0])
      << "in-place backward differs";
}

struct SmCase {
  Dtype dt;
  int rows;
  int64_t cols;
  bool masked = false;
};

class SoftmaxTest : public ::testing::TestWithParam<SmCase> {};

TEST_P(SoftmaxTest, ForwardBackwardMatchFloat64) {
  BLU_REQUIRE_GPU();
  const SmCase c = GetParam();
  check_softmax(c.dt, c.rows, c.cols, c.masked, nullptr);
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
                      SmCase{Dtype::kF32, 20000, 771}, SmCase{Dtype::kF32, 9001, 1024},
                      // Streamed: 49168-byte rows end in a 16-byte chunk; 1000 rows wrap the
                      // ring many times per CTA; 32784-byte rows (just over the threshold).
                      SmCase{Dtype::kF32, 1000, 12292}, SmCase{Dtype::kBF16, 401, 16392},
                      SmCase{Dtype::kF32, 257, 8196}, SmCase{Dtype::kF32, 300, 50304, true},
                      SmCase{Dtype::kBF16, 140, 50304, true},
                      // Streamed misaligned rows (16-byte windows, masked edge packs, element
                      // stores); an odd count leaves the last row to the resident kernel.
                      SmCase{Dtype::kF32, 301, 50257, true}, SmCase{Dtype::kBF16, 7, 50257, true},
                      SmCase{Dtype::kBF16, 260, 16411}, SmCase{Dtype::kF32, 129, 8199}),
    [](const ::testing::TestParamInfo<SmCase>& i) {
      return std::string(blublas::dtype_name(i.param.dt)) + "_" + std::to_string(i.param.rows) +
             "x" + std::to_string(i.param.cols) + (i.param.masked ? "_masked" : "");
    });

// Every variant the profiler sweeps must be correct (a variant that does not fit falls back).
struct VariantCase {
  Dtype dt;
  int rows;
  int64_t cols;
  int cluster, chunk, warps, hint;
  int keep_exp = 0;
};

class SoftmaxVariantTest : public ::testing::TestWithParam<VariantCase> {};

TEST_P(SoftmaxVariantTest, ForwardBackwardMatchFloat64) {
  BLU_REQUIRE_GPU();
  const VariantCase c = GetParam();
  RowStreamTuning tu;
  tu.cluster = c.cluster;
  tu.chunk_bytes = c.chunk;
  tu.consumer_warps = c.warps;
  tu.store_hint = c.hint;
  tu.keep_exp = c.keep_exp;
  check_softmax(c.dt, c.rows, c.cols, true, &tu);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, SoftmaxVariantTest,
    ::testing::Values(VariantCase{Dtype::kF32, 150, 50304, 1, 8192, 16, 1},
                      VariantCase{Dtype::kF32, 150, 50304, 2, 4096, 8, 0},
                      VariantCase{Dtype::kF32, 150, 50304, 4, 16384, 16, 1},
                      VariantCase{Dtype::kF32, 150, 50304, 4, 4096, 8, 1},
                      VariantCase{Dtype::kBF16, 150, 50304, 1, 4096, 16, 1},
                      VariantCase{Dtype::kBF16, 150, 50304, 2, 8192, 8, 0},
                      VariantCase{Dtype::kBF16, 150, 50304, 4, 16384, 16, 1},
                      VariantCase{Dtype::kF32, 33, 140000, 4, 8192, 16, 1},
                      VariantCase{Dtype::kF32, 151, 50257, 1, 4096, 8, 1},
                      VariantCase{Dtype::kBF16, 151, 50257, 2, 4096, 16, 0},
                      // Pass-1 exps kept in the slot (f32; fp16 for bf16 rows).
                      VariantCase{Dtype::kF32, 150, 50304, 1, 8192, 16, 1, 1},
                      VariantCase{Dtype::kBF16, 150, 50304, 1, 8192, 16, 1, 1},
                      VariantCase{Dtype::kBF16, 151, 50257, 1, 4096, 8, 1, 1},
                      VariantCase{Dtype::kF32, 151, 50257, 2, 8192, 16, 1, 1},
                      // 8 and 12 warps: each warp's first chunk held in registers.
                      VariantCase{Dtype::kF32, 150, 50304, 1, 8192, 12, 1, 1},
                      VariantCase{Dtype::kBF16, 150, 50304, 1, 8192, 12, 1, 1},
                      VariantCase{Dtype::kF32, 151, 50257, 1, 8192, 8, 1, 1},
                      VariantCase{Dtype::kBF16, 151, 50257, 1, 8192, 8, 0, 1},
                      VariantCase{Dtype::kF32, 300, 12292, 1, 8192, 12, 1, 1}),
    [](const ::testing::TestParamInfo<VariantCase>& i) {
      const VariantCase& c = i.param;
      return std::string(blublas::dtype_name(c.dt)) + "_" + std::to_string(c.rows) + "x" +
             std::to_string(c.cols) + "_c" + std::to_string(c.cluster) + "k" +
             std::to_string(c.chunk) + "w" + std::to_string(c.warps) + "h" +
             std::to_string(c.hint) + (c.keep_exp ? "e1" : "");
    });

}  // namespace
