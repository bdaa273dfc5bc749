// Fused classifier (loss, mean loss, dlogits) against float64: vocab 50304 and odd sizes, f32 and
// bf16, ignore_index, bad targets (error flag), in place and separate dlogits, determinism; the
// streamed path (Note [Row streaming through a shared-memory ring]) with every tuning variant the
// profiler sweeps, targets at chunk edges, forward-only (no dlogits) calls.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../../blublas/src/softmax/row_stream_tuning.h"  // internal: tuned launchers
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
using blublas::fused::RowStreamTuning;

struct XentCase {
  Dtype dt;
  int rows;
  int64_t vocab;
  bool in_place;
  float dloss = 1.5f;
};

// Row r's max and sum of exp(x - max) in float64 (the references' log-sum-exp is m + log(s)).
template <typename V>
void row_max_sum(const std::vector<float>& logits, int r, V vocab, double* m, double* s) {
  const int64_t v = static_cast<int64_t>(vocab), base = static_cast<int64_t>(r) * v;
  *m = -INFINITY;
  *s = 0;
  for (int64_t j = 0; j < v; ++j) *m = std::max(*m, static_cast<double>(logits[base + j]));
  for (int64_t j = 0; j < v; ++j) *s += std::exp(logits[base + j] - *m);
}

// The targets on the device, and a workspace of cross_entropy_workspace_size(rows) bytes.
DeviceMem upload_targets(const std::vector<int32_t>& targets) {
  DeviceMem d(targets.size() * 4);
  EXPECT_EQ(cudaMemcpy(d.get(), targets.data(), targets.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}
DeviceMem xent_workspace(int rows, std::size_t* bytes) {
  EXPECT_TRUE(blublas::cross_entropy_workspace_size(rows, bytes).ok());
  return DeviceMem(*bytes);
}

// Runs the fused classifier twice (bitwise compared) with `tu` (nullptr: the public launcher) and
// checks losses, the mean and every dlogit against float64; then a forward-only call (no
// dlogits) must give the same losses.
void check_xent(const XentCase& c, const RowStreamTuning* tu) {
  const int R = c.rows;
  const int64_t V = c.vocab;
  SCOPED_TRACE("path: " + blublas::fused::row_path_name(R, V, 1, c.dt, tu ? *tu : RowStreamTuning{}));
  auto call = [&](float* losses, float* mean, void* grad, const void* logits, const int32_t* t,
                  int* flag, void* ws, std::size_t ws_bytes, float dloss) {
    return tu ? blublas::fused::cross_entropy_fused_tuned(losses, mean, grad, logits, t, R, V, -100,
                                                          dloss, flag, c.dt, ws, ws_bytes, nullptr,
                                                          *tu)
              : blublas::cross_entropy_fused(losses, mean, grad, logits, t, R, V, -100, dloss,
                                             flag, c.dt, ws, ws_bytes, nullptr);
  };
  const std::size_t n = static_cast<std::size_t>(R) * V;
  const std::size_t es = blublas::dtype_size(c.dt);
  const int kIgnore = -100;
  const float dloss = c.dloss;
  auto logits = random_values(n, -6.0f, 6.0f, 51 + V, c.dt);
  std::vector<int32_t> targets(R);
  for (int r = 0; r < R; ++r) targets[r] = static_cast<int32_t>((r * 7919LL + 13) % V);
  // Chunk and slice edges of the streamed path (f32: 2048 elements per 8 KiB chunk).
  const int64_t edges[] = {0, V - 1, 2047, 2048, 1023, 1024, 4095, 4096, V / 2, V / 2 - 1};
  for (int r = 5, e = 0; r < R && e < 10; r += 3, ++e) targets[r] = static_cast<int32_t>(edges[e] % V);
  targets[1 % R] = kIgnore;  // an ignored row
  if (R > 4) targets[4] = kIgnore;
  int count = 0;
  for (int r = 0; r < R; ++r) count += targets[r] != kIgnore;
  std::vector<double> rloss(R), rgrad(n);
  double total = 0;
  for (int r = 0; r < R; ++r) {
    double m, s;
    row_max_sum(logits, r, V, &m, &s);
    const bool valid = targets[r] != kIgnore;
    rloss[r] = valid ? std::log(s) + m - logits[r * V + targets[r]] : 0.0;
    total += rloss[r];
    const double g = valid ? static_cast<double>(dloss) / count : 0.0;
    for (int64_t j = 0; j < V; ++j) {
      rgrad[r * V + j] = (std::exp(logits[r * V + j] - m) / s - (j == targets[r] ? 1.0 : 0.0)) * g;
    }
  }
  DeviceMem dlog = upload(logits, c.dt), dgrad(n * es), dloss_rows(R * 4), dmean(4), dflag(4);
  DeviceMem dtargets = upload_targets(targets);
  std::size_t ws_bytes = 0;
  DeviceMem ws = xent_workspace(R, &ws_bytes);
  std::vector<std::vector<uint8_t>> runs;
  for (int rep = 0; rep < 2; ++rep) {
    DeviceMem fresh = upload(logits, c.dt);
    dgrad.poison();
    dloss_rows.poison();
    dmean.poison();
    ws.poison();
    BLU_CUDA_TEST_CHECK(cudaMemset(dflag.get(), 0, 4));
    void* grad_out = c.in_place ? fresh.get() : dgrad.get();
    BLU_ASSERT_OK(call(dloss_rows.as<float>(), dmean.as<float>(), grad_out, fresh.get(),
                       dtargets.as<int32_t>(), dflag.as<int>(), ws.get(), ws_bytes, dloss));
    BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
    const double lt = c.dt == Dtype::kBF16 ? 1e-4 : 1e-5;
    EXPECT_TRUE(all_close("losses", download(dloss_rows.get(), R, Dtype::kF32), rloss, lt, 1e-5));
    EXPECT_TRUE(all_close("mean loss", download(dmean.get(), 1, Dtype::kF32), {total / count},
                          lt, 1e-5));
    const double gscale = std::fabs(static_cast<double>(dloss)) / count;
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
  // Forward only: same row losses and mean, no dlogits written.
  const auto losses_with_grad = blu::test::download_bytes(dloss_rows.get(), R * 4);
  const auto mean_with_grad = blu::test::download_bytes(dmean.get(), 4);
  dloss_rows.poison();
  dmean.poison();
  BLU_ASSERT_OK(call(dloss_rows.as<float>(), dmean.as<float>(), nullptr, dlog.get(),
                     dtargets.as<int32_t>(), nullptr, ws.get(), ws_bytes, dloss));
  BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(blu::test::download_bytes(dloss_rows.get(), R * 4), losses_with_grad)
      << "forward-only losses differ";
  EXPECT_EQ(blu::test::download_bytes(dmean.get(), 4), mean_with_grad) << "forward-only mean differs";
}

class CrossEntropyTest : public ::testing::TestWithParam<XentCase> {};

TEST_P(CrossEntropyTest, LossAndGradMatchFloat64) {
  BLU_REQUIRE_GPU();
  check_xent(GetParam(), nullptr);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CrossEntropyTest,
    ::testing::Values(XentCase{Dtype::kF32, 7, 50304, false}, XentCase{Dtype::kF32, 6, 50304, true},
                      XentCase{Dtype::kF32, 5, 50257, false}, XentCase{Dtype::kBF16, 7, 50304, true},
                      XentCase{Dtype::kBF16, 9, 777, false}, XentCase{Dtype::kF32, 33, 10, true},
                      XentCase{Dtype::kF32, 3, 150001, false},
                      // More rows than co-resident clusters / blocks: the persistent loop.
                      XentCase{Dtype::kF32, 70, 50304, true}, XentCase{Dtype::kBF16, 66, 50304, false},
                      XentCase{Dtype::kF32, 9001, 1000, false}, XentCase{Dtype::kF32, 20000, 333, true},
                      // Streamed: 300 rows wrap the ring; 49168-byte rows end in a 16-byte chunk;
                      // 32784-byte bf16 rows (just over the threshold).
                      XentCase{Dtype::kF32, 300, 50304, true}, XentCase{Dtype::kBF16, 300, 50304, false},
                      XentCase{Dtype::kF32, 700, 12292, false}, XentCase{Dtype::kBF16, 401, 16392, true},
                      // Streamed with slot reuse at a size racecheck finishes (tests/sanitize).
                      XentCase{Dtype::kF32, 257, 8196, false},
                      // Streamed misaligned rows; odd row counts leave the last row resident.
                      XentCase{Dtype::kF32, 301, 50257, true}, XentCase{Dtype::kBF16, 157, 50257, false},
                      XentCase{Dtype::kBF16, 8, 50257, true},
                      // A negative upstream gradient (the bf16 path folds |g| into the exponent).
                      XentCase{Dtype::kBF16, 40, 16392, false, -0.75f},
                      XentCase{Dtype::kF32, 40, 16392, true, -0.75f}),
    [](const ::testing::TestParamInfo<XentCase>& i) {
      return std::string(blublas::dtype_name(i.param.dt)) + "_" + std::to_string(i.param.rows) +
             "x" + std::to_string(i.param.vocab) + (i.param.in_place ? "_inplace" : "") +
             (i.param.dloss < 0 ? "_negdloss" : "");
    });

// Variants the profiler sweeps (a variant that does not fit falls back).
struct XentVariant {
  XentCase c;
  int cluster, chunk, warps;
  int keep_exp = 0;
};

class CrossEntropyVariantTest : public ::testing::TestWithParam<XentVariant> {};

TEST_P(CrossEntropyVariantTest, LossAndGradMatchFloat64) {
  BLU_REQUIRE_GPU();
  const XentVariant v = GetParam();
  RowStreamTuning tu;
  tu.cluster = v.cluster;
  tu.chunk_bytes = v.chunk;
  tu.consumer_warps = v.warps;
  tu.keep_exp = v.keep_exp;
  check_xent(v.c, &tu);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, CrossEntropyVariantTest,
    ::testing::Values(XentVariant{{Dtype::kF32, 150, 50304, true}, 1, 8192, 16},
                      XentVariant{{Dtype::kF32, 150, 50304, false}, 4, 4096, 8},
                      XentVariant{{Dtype::kBF16, 150, 50304, true}, 2, 16384, 16},
                      XentVariant{{Dtype::kBF16, 150, 50304, false}, 1, 4096, 8},
                      XentVariant{{Dtype::kF32, 150, 50257, true}, 1, 16384, 16},
                      XentVariant{{Dtype::kBF16, 151, 50257, false}, 4, 4096, 16},
                      // Pass-1 exps kept in the slot (the target logit captured before).
                      XentVariant{{Dtype::kF32, 150, 50304, true}, 1, 8192, 16, 1},
                      XentVariant{{Dtype::kBF16, 150, 50304, false}, 1, 8192, 16, 1},
                      XentVariant{{Dtype::kF32, 151, 50257, false, -0.5f}, 1, 4096, 8, 1},
                      XentVariant{{Dtype::kBF16, 151, 50257, true}, 2, 8192, 16, 1},
                      // 8 and 12 warps: each warp's first chunk held in registers.
                      XentVariant{{Dtype::kF32, 150, 50304, true}, 1, 8192, 12, 1},
                      XentVariant{{Dtype::kBF16, 150, 50304, false}, 1, 8192, 12, 1},
                      XentVariant{{Dtype::kF32, 151, 50257, false, -0.5f}, 1, 8192, 8, 1},
                      XentVariant{{Dtype::kBF16, 151, 50257, true}, 1, 8192, 8, 1}),
    [](const ::testing::TestParamInfo<XentVariant>& i) {
      const XentVariant& v = i.param;
      return std::string(blublas::dtype_name(v.c.dt)) + "_" + std::to_string(v.c.rows) + "x" +
             std::to_string(v.c.vocab) + (v.c.in_place ? "_inplace" : "") + "_c" +
             std::to_string(v.cluster) + "k" + std::to_string(v.chunk) + "w" +
             std::to_string(v.warps) + (v.keep_exp ? "e1" : "") + (v.c.dloss < 0 ? "_neg" : "");
    });

// A target outside [0, vocab) that is not ignore_index: the row is ignored (loss 0, dlogits 0),
// the flag is set, nothing faults, the mean covers the valid rows. Short rows (block-per-row
// kernel) and long ones (streamed), f32 and bf16.
void check_bad_targets(Dtype dt, int V) {
  const int R = 5;
  SCOPED_TRACE(std::string(blublas::dtype_name(dt)) + " vocab " + std::to_string(V) + ", path " +
               blublas::fused::row_path_name(R, V, 1, dt, RowStreamTuning{}));
  auto logits = random_values(static_cast<std::size_t>(R) * V, -3.0f, 3.0f, 61, dt);
  std::vector<int32_t> targets = {3, V + 5, -7, V - 1, -100};
  const std::size_t es = blublas::dtype_size(dt);
  DeviceMem dlog = upload(logits, dt), dloss_rows(R * 4), dmean(4), dflag(4), dt_dev = upload_targets(targets),
            dgrad(static_cast<std::size_t>(R) * V * es);
  dgrad.poison();
  BLU_CUDA_TEST_CHECK(cudaMemset(dflag.get(), 0, 4));
  std::size_t ws_bytes = 0;
  DeviceMem ws = xent_workspace(R, &ws_bytes);
  BLU_ASSERT_OK(blublas::cross_entropy_fused(dloss_rows.as<float>(), dmean.as<float>(), dgrad.get(),
                                             dlog.get(), dt_dev.as<int32_t>(), R, V, -100, 1.0f,
                                             dflag.as<int>(), dt, ws.get(), ws_bytes, nullptr));
  BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
  int flag = 0;
  BLU_CUDA_TEST_CHECK(cudaMemcpy(&flag, dflag.get(), 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(flag, 1);
  auto loss = download(dloss_rows.get(), R, Dtype::kF32);
  auto grad = download(dgrad.get(), static_cast<std::size_t>(R) * V, dt);
  for (int r : {1, 2, 4}) {
    EXPECT_EQ(loss[r], 0.0f) << "row " << r;
    for (int j = 0; j < V; ++j) ASSERT_EQ(grad[r * V + j], 0.0f) << "row " << r << " col " << j;
  }
  for (int r : {0, 3}) {
    double m, s;
    row_max_sum(logits, r, V, &m, &s);
    const double ref = std::log(s) + m - logits[r * V + targets[r]];
    EXPECT_NEAR(loss[r], ref, 1e-4 * std::max(1.0, ref)) << "row " << r;
  }
  float mean = 0;
  BLU_CUDA_TEST_CHECK(cudaMemcpy(&mean, dmean.get(), 4, cudaMemcpyDeviceToHost));
  EXPECT_NEAR(mean, (loss[0] + loss[3]) / 2.0, 1e-5 * std::max(1.0f, mean));
}

TEST(CrossEntropy, BadTargetSetsFlagAndIsIgnored) {
  BLU_REQUIRE_GPU();
  check_bad_targets(Dtype::kF32, 1003);
  check_bad_targets(Dtype::kF32, 16392);
  check_bad_targets(Dtype::kBF16, 50304);
  check_bad_targets(Dtype::kF32, 50257);
}

// Note [Cross-entropy rows]: cross_entropy_rows against float64: per-row losses (NaN for a bad
// target, 0 for an ignored row), lse, valid, and the unscaled gradient (dloss per valid row, no
// count; 0 rows for ignored and bad targets), in place and not, on the streamed path (rows of
// 32 KiB and more; 157 misaligned rows leave the last one resident), the resident and the
// block-per-row kernels; bitwise the same twice; its loss of a valid row is cross_entropy_fused's.
struct RowsCase {
  Dtype dt;
  int rows;
  int64_t vocab;
  bool in_place;
};

class CrossEntropyRowsTest : public ::testing::TestWithParam<RowsCase> {};

TEST_P(CrossEntropyRowsTest, RowsMatchFloat64) {
  BLU_REQUIRE_GPU();
  const RowsCase c = GetParam();
  const int R = c.rows;
  const int64_t V = c.vocab;
  SCOPED_TRACE("path: " + blublas::fused::row_path_name(R, V, 1, c.dt, RowStreamTuning{}));
  const std::size_t n = static_cast<std::size_t>(R) * V, es = blublas::dtype_size(c.dt);
  const int kIgnore = -100;
  const float dloss = 0.8125f;
  auto logits = random_values(n, -6.0f, 6.0f, 71 + V, c.dt);
  std::vector<int32_t> targets(R);
  for (int r = 0; r < R; ++r) targets[r] = static_cast<int32_t>((r * 7919LL + 5) % V);
  targets[1] = kIgnore;
  targets[2] = static_cast<int32_t>(V + 3);  // bad: NaN loss
  if (R > 4) targets[4] = -9;                // bad
  std::vector<double> rloss(R), rlse(R), rvalid(R), rgrad(n, 0.0);
  for (int r = 0; r < R; ++r) {
    double m, s;
    row_max_sum(logits, r, V, &m, &s);
    rlse[r] = m + std::log(s);
    const int t = targets[r];
    const bool ok = t >= 0 && t < V;
    rvalid[r] = t == kIgnore ? 0.0 : 1.0;
    rloss[r] = t == kIgnore ? 0.0 : ok ? rlse[r] - logits[r * V + t] : NAN;
    if (!ok) continue;
    for (int64_t j = 0; j < V; ++j)
      rgrad[r * V + j] = (std::exp(logits[r * V + j] - m) / s - (j == t ? 1.0 : 0.0)) * dloss;
  }
  DeviceMem dgrad(n * es), dl(R * 4), de(R * 4), dv(R * 4), dtargets = upload_targets(targets);
  std::size_t ws_bytes = 0;
  DeviceMem ws = xent_workspace(R, &ws_bytes);
  std::vector<std::vector<uint8_t>> runs;
  for (int rep = 0; rep < 2; ++rep) {
    DeviceMem fresh = upload(logits, c.dt);
    for (DeviceMem* m : {&dgrad, &dl, &de, &dv, &ws}) m->poison();
    void* grad_out = c.in_place ? fresh.get() : dgrad.get();
    BLU_ASSERT_OK(blublas::cross_entropy_rows(dl.as<float>(), de.as<float>(), dv.as<float>(), grad_out,
                                              fresh.get(), dtargets.as<int32_t>(), R, V, kIgnore, dloss,
                                              c.dt, ws.get(), ws_bytes, nullptr));
    BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
    const double lt = c.dt == Dtype::kBF16 ? 1e-4 : 1e-5;
    auto loss = download(dl.get(), R, Dtype::kF32);
    for (int r = 0; r < R; ++r) {
      if (std::isnan(rloss[r])) {
        EXPECT_TRUE(std::isnan(loss[r])) << "row " << r << " (bad target " << targets[r] << "): " << loss[r];
        rloss[r] = 0.0;  // all_close below compares the rest
        loss[r] = 0.0f;
      }
    }
    EXPECT_TRUE(all_close("losses", loss, rloss, lt, 1e-5));
    for (int r = 0; r < R; ++r) {
      const int t = targets[r];
      if (t != kIgnore && (t < 0 || t >= V)) rloss[r] = NAN;  // restore for the next rep
    }
    EXPECT_TRUE(all_close("lse", download(de.get(), R, Dtype::kF32), rlse, lt, 1e-5));
    EXPECT_TRUE(all_close("valid", download(dv.get(), R, Dtype::kF32), rvalid, 0.0, 0.0));
    EXPECT_TRUE(all_close("dlogits", download(grad_out, n, c.dt), rgrad,
                          (c.dt == Dtype::kBF16 ? 1e-5 : 1e-8) * dloss, c.dt == Dtype::kBF16 ? 8e-3 : 1e-4));
    runs.push_back(blu::test::download_bytes(grad_out, n * es));
    for (const DeviceMem* m : {&dl, &de, &dv}) {
      const auto b = blu::test::download_bytes(m->get(), R * 4);
      runs.back().insert(runs.back().end(), b.begin(), b.end());
    }
  }
  EXPECT_EQ(runs[0], runs[1]) << "cross_entropy_rows not bitwise deterministic";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CrossEntropyRowsTest,
    ::testing::Values(RowsCase{Dtype::kF32, 7, 50304, false}, RowsCase{Dtype::kBF16, 7, 50304, true},
                      RowsCase{Dtype::kBF16, 300, 50304, false}, RowsCase{Dtype::kF32, 70, 50304, true},
                      RowsCase{Dtype::kBF16, 157, 50257, false}, RowsCase{Dtype::kF32, 257, 8196, true},
                      RowsCase{Dtype::kBF16, 9, 777, false}, RowsCase{Dtype::kF32, 33, 10, true},
                      RowsCase{Dtype::kF32, 5, 150001, false}),
    [](const ::testing::TestParamInfo<RowsCase>& i) {
      return std::string(blublas::dtype_name(i.param.dt)) + "_" + std::to_string(i.param.rows) +
             "x" + std::to_string(i.param.vocab) + (i.param.in_place ? "_inplace" : "");
    });

TEST(CrossEntropy, RowsRefuseNullLossesAndBadDtype) {
  std::size_t ws_bytes = 0;
  BLU_ASSERT_OK(blublas::cross_entropy_workspace_size(4, &ws_bytes));
  const blublas::Status a = blublas::cross_entropy_rows(nullptr, nullptr, nullptr, nullptr, nullptr,
                                                        nullptr, 4, 10, -100, 1.0f, Dtype::kF32,
                                                        nullptr, ws_bytes, nullptr);
  EXPECT_FALSE(a.ok());
  EXPECT_NE(a.message().find("cross_entropy_rows: losses must not be null"), std::string::npos) << a.message();
  float dummy = 0;
  const blublas::Status b = blublas::cross_entropy_rows(&dummy, nullptr, nullptr, nullptr, &dummy,
                                                        nullptr, 4, 10, -100, 1.0f, Dtype::kF16,
                                                        &dummy, ws_bytes, nullptr);
  EXPECT_FALSE(b.ok());
  EXPECT_NE(b.message().find("cross_entropy_rows: dtype"), std::string::npos) << b.message();
}

}  // namespace
