// Column sums (bias gradients) against float64: one chunk and many chunks, vector and scalar
// paths, f32 and bf16 input, accumulate, bitwise determinism.
#include <gtest/gtest.h>

#include <vector>

#include "blublas/reduce.h"
#include "common/gpu_test.h"
#include "fused_test_util.h"

namespace {

using blu::test::all_close;
using blu::test::DeviceMem;
using blu::test::download;
using blu::test::random_values;
using blu::test::upload;
using blublas::Dtype;

TEST(ColumnSum, MatchesFloat64) {
  BLU_REQUIRE_GPU();
  struct Case { Dtype dt; int rows, cols; bool acc; };
  for (const Case c : {Case{Dtype::kF32, 37, 771, false}, Case{Dtype::kF32, 5000, 768, true},
                       Case{Dtype::kBF16, 3001, 3072, false}, Case{Dtype::kBF16, 63, 999, true},
                       Case{Dtype::kF32, 20000, 5, false}, Case{Dtype::kF32, 1, 1, true}}) {
    SCOPED_TRACE(std::string(blublas::dtype_name(c.dt)) + " " + std::to_string(c.rows) + "x" +
                 std::to_string(c.cols));
    const std::size_t n = static_cast<std::size_t>(c.rows) * c.cols;
    auto in = random_values(n, -1.0f, 1.0f, 81 + c.cols, c.dt);
    auto out0 = random_values(c.cols, -1.0f, 1.0f, 82 + c.cols);
    std::vector<double> ref(c.cols, 0.0);
    for (int r = 0; r < c.rows; ++r)
      for (int j = 0; j < c.cols; ++j) ref[j] += in[static_cast<std::size_t>(r) * c.cols + j];
    if (c.acc)
      for (int j = 0; j < c.cols; ++j) ref[j] += out0[j];
    DeviceMem din = upload(in, c.dt);
    std::size_t ws_bytes = 0;
    BLU_ASSERT_OK(blublas::column_sum_workspace_size(c.rows, c.cols, &ws_bytes));
    DeviceMem ws(ws_bytes);
    std::vector<std::vector<uint8_t>> runs;
    for (int rep = 0; rep < 2; ++rep) {
      DeviceMem dout = upload(out0, Dtype::kF32);
      if (!c.acc) dout.poison();
      ws.poison();
      BLU_ASSERT_OK(blublas::column_sum(dout.as<float>(), din.get(), c.rows, c.cols, c.dt, c.acc,
                                        ws.get(), ws_bytes, nullptr));
      BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
      EXPECT_TRUE(all_close("column_sum", download(dout.get(), c.cols, Dtype::kF32), ref,
                            2e-6 * c.rows + 1e-6, 1e-5));
      runs.push_back(blu::test::download_bytes(dout.get(), c.cols * 4));
    }
    EXPECT_EQ(runs[0], runs[1]);
  }
}

}  // namespace
