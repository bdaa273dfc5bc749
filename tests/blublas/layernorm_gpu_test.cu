// LayerNorm forward (with and without the fused residual) and backward against a float64 CPU
// reference: vector and generic paths, f32 and bf16, accumulate modes, bitwise determinism, and
// row counts large enough that the balanced backward grid gives every warp several rows.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "blublas/layernorm.h"
#include "common/gpu_test.h"
#include "fused_test_util.h"

namespace {

using blu::test::all_close;
using blu::test::DeviceMem;
using blu::test::download;
using blu::test::random_values;
using blu::test::upload;
using blublas::Dtype;

struct LnCase {
  Dtype dt;
  int rows, cols;
  bool residual;
};

std::string name_of(const LnCase& c) {
  return std::string(blublas::dtype_name(c.dt)) + " " + std::to_string(c.rows) + "x" +
         std::to_string(c.cols) + (c.residual ? " +residual" : "");
}

class LayerNormTest : public ::testing::TestWithParam<LnCase> {};

TEST_P(LayerNormTest, ForwardBackwardMatchFloat64) {
  BLU_REQUIRE_GPU();
  const LnCase c = GetParam();
  SCOPED_TRACE(name_of(c));
  const int R = c.rows, C = c.cols;
  const std::size_t n = static_cast<std::size_t>(R) * C;
  const float eps = 1e-5f;
  auto x = random_values(n, -2.0f, 3.0f, 11 + C, c.dt);
  auto res = random_values(n, -1.0f, 1.0f, 12 + C, c.dt);
  auto w = random_values(C, 0.5f, 1.5f, 13 + C, c.dt);
  auto b = random_values(C, -0.5f, 0.5f, 14 + C, c.dt);
  auto dout = random_values(n, -1.0f, 1.0f, 15 + C, c.dt);
  DeviceMem dx_ = upload(x, c.dt), dres = upload(res, c.dt), dw = upload(w, c.dt),
            db = upload(b, c.dt), ddout = upload(dout, c.dt);
  DeviceMem dout_y(n * blublas::dtype_size(c.dt)), dh(n * blublas::dtype_size(c.dt)),
      dmean(R * 4), drstd(R * 4);
  dout_y.poison();
  dh.poison();
  dmean.poison();
  drstd.poison();
  BLU_ASSERT_OK(blublas::layernorm_forward(
      dout_y.get(), dmean.as<float>(), drstd.as<float>(), c.residual ? dh.get() : nullptr,
      dx_.get(), c.residual ? dres.get() : nullptr, dw.get(), db.get(), R, C, eps, c.dt, nullptr));
  BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());

  // Reference forward.
  std::vector<float> h(n);
  for (std::size_t i = 0; i < n; ++i) h[i] = c.residual ? blu::test::round_to(c.dt, x[i] + res[i]) : x[i];
  std::vector<double> ref_y(n), ref_mean(R), ref_rstd(R), ref_h(h.begin(), h.end());
  for (int r = 0; r < R; ++r) {
    double s = 0, sq = 0;
    for (int j = 0; j < C; ++j) s += h[r * C + j];
    const double mu = s / C;
    for (int j = 0; j < C; ++j) sq += (h[r * C + j] - mu) * (h[r * C + j] - mu);
    const double rs = 1.0 / std::sqrt(sq / C + eps);
    ref_mean[r] = mu;
    ref_rstd[r] = rs;
    for (int j = 0; j < C; ++j) ref_y[r * C + j] = (h[r * C + j] - mu) * rs * w[j] + b[j];
  }
  const double rt = blu::test::storage_rtol(c.dt);
  const double at = c.dt == Dtype::kBF16 ? 4e-3 : 5e-5;
  EXPECT_TRUE(all_close("out", download(dout_y.get(), n, c.dt), ref_y, at, rt));
  EXPECT_TRUE(all_close("mean", download(dmean.get(), R, Dtype::kF32), ref_mean, 1e-5, 1e-5));
  EXPECT_TRUE(all_close("rstd", download(drstd.get(), R, Dtype::kF32), ref_rstd, 1e-5, 1e-4));
  if (c.residual) {
    EXPECT_TRUE(all_close("residual_out", download(dh.get(), n, c.dt), ref_h, 0, 0));
  }

  // Backward (x = h), accumulate into prefilled dx / dparams on the residual cases.
  const bool acc = c.residual;
  auto dx0 = random_values(n, -1.0f, 1.0f, 16 + C, c.dt);
  auto dw0 = random_values(C, -1.0f, 1.0f, 17 + C);
  auto db0 = random_values(C, -1.0f, 1.0f, 18 + C);
  DeviceMem hin = upload(h, c.dt);
  std::size_t ws_bytes = 0;
  ASSERT_TRUE(blublas::layernorm_backward_workspace_size(R, C, &ws_bytes).ok());
  DeviceMem ws(ws_bytes + 16);
  std::vector<std::vector<uint8_t>> runs_dx, runs_dw;
  for (int rep = 0; rep < 2; ++rep) {
    DeviceMem ddx = acc ? upload(dx0, c.dt) : DeviceMem(n * blublas::dtype_size(c.dt));
    DeviceMem ddw = acc ? upload(dw0, Dtype::kF32) : DeviceMem(C * 4);
    DeviceMem ddb = acc ? upload(db0, Dtype::kF32) : DeviceMem(C * 4);
    if (!acc) {
      ddx.poison();
      ddw.poison();
      ddb.poison();
    }
    ws.poison();
    BLU_ASSERT_OK(blublas::layernorm_backward(ddx.get(), ddw.as<float>(), ddb.as<float>(), ddout.get(),
                                     hin.get(), dmean.as<float>(), drstd.as<float>(), dw.get(), R,
                                     C, c.dt, acc, acc, ws.get(), ws_bytes, nullptr));
    BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
    runs_dx.push_back(blu::test::download_bytes(ddx.get(), n * blublas::dtype_size(c.dt)));
    runs_dw.push_back(blu::test::download_bytes(ddw.get(), C * 4));
    if (rep > 0) continue;
    std::vector<double> rdx(n), rdw(C, 0.0), rdb(C, 0.0);
    for (int r = 0; r < R; ++r) {
      double s1 = 0, s2 = 0;
      for (int j = 0; j < C; ++j) {
        const double xh = (h[r * C + j] - ref_mean[r]) * ref_rstd[r];
        const double g = static_cast<double>(dout[r * C + j]) * w[j];
        s1 += g;
        s2 += g * xh;
        rdw[j] += dout[r * C + j] * xh;
        rdb[j] += dout[r * C + j];
      }
      for (int j = 0; j < C; ++j) {
        const double xh = (h[r * C + j] - ref_mean[r]) * ref_rstd[r];
        const double g = static_cast<double>(dout[r * C + j]) * w[j];
        rdx[r * C + j] = ref_rstd[r] * (g - s1 / C - xh * s2 / C) + (acc ? dx0[r * C + j] : 0.0);
      }
    }
    if (acc) {
      for (int j = 0; j < C; ++j) {
        rdw[j] += dw0[j];
        rdb[j] += db0[j];
      }
    }
    EXPECT_TRUE(all_close("dx", download(ddx.get(), n, c.dt), rdx,
                          c.dt == Dtype::kBF16 ? 1e-2 : 2e-4, rt));
    const double pat = (c.dt == Dtype::kBF16 ? 2e-3 : 2e-5) * R;
    EXPECT_TRUE(all_close("dweight", download(ddw.get(), C, Dtype::kF32), rdw, pat, 1e-4));
    EXPECT_TRUE(all_close("dbias", download(ddb.get(), C, Dtype::kF32), rdb, pat, 1e-4));
  }
  EXPECT_EQ(runs_dx[0], runs_dx[1]) << "dx differs between two identical runs";
  EXPECT_EQ(runs_dw[0], runs_dw[1]) << "dweight differs between two identical runs";
}

// layernorm_backward_residual (blublas/layernorm.h) against layernorm_backward, bit for bit: dx =
// result + residual from a separate residual (and from residual == dout) equals the accumulate
// form with dx prefilled by the residual; dweight / dbias in the activations' dtype equal the f32
// ones rounded once; no residual equals the plain form.
TEST_P(LayerNormTest, ResidualAndParameterDtypeMatchTheAccumulateForm) {
  BLU_REQUIRE_GPU();
  const LnCase c = GetParam();
  SCOPED_TRACE(name_of(c));
  const int R = c.rows, C = c.cols;
  const std::size_t n = static_cast<std::size_t>(R) * C, es = blublas::dtype_size(c.dt);
  auto h = random_values(n, -2.0f, 3.0f, 21 + C, c.dt);
  auto w = random_values(C, 0.5f, 1.5f, 23 + C, c.dt);
  auto dout = random_values(n, -1.0f, 1.0f, 25 + C, c.dt);
  auto res = random_values(n, -1.0f, 1.0f, 26 + C, c.dt);
  DeviceMem dh = upload(h, c.dt), dw = upload(w, c.dt), ddout = upload(dout, c.dt), dres = upload(res, c.dt);
  DeviceMem dy(n * es), dmean(R * 4), drstd(R * 4);
  BLU_ASSERT_OK(blublas::layernorm_forward(dy.get(), dmean.as<float>(), drstd.as<float>(), nullptr, dh.get(),
                                           nullptr, dw.get(), nullptr, R, C, 1e-5f, c.dt, nullptr));
  std::size_t ws_bytes = 0;
  ASSERT_TRUE(blublas::layernorm_backward_workspace_size(R, C, &ws_bytes).ok());
  DeviceMem ws(ws_bytes + 16);
  const auto bytes = [](const DeviceMem& m, std::size_t nb) { return blu::test::download_bytes(m.get(), nb); };
  // The reference forms: accumulate into dx = residual (and = dout), and no add.
  DeviceMem ref_dx = upload(res, c.dt), ref_dx_dout = upload(dout, c.dt), ref_plain(n * es);
  DeviceMem ref_dw(C * 4), ref_db(C * 4);
  for (DeviceMem* d : {&ref_dx, &ref_dx_dout, &ref_plain}) {
    const bool acc = d != &ref_plain;
    BLU_ASSERT_OK(blublas::layernorm_backward(d->get(), ref_dw.as<float>(), ref_db.as<float>(), ddout.get(),
                                              dh.get(), dmean.as<float>(), drstd.as<float>(), dw.get(), R, C, c.dt,
                                              acc, false, ws.get(), ws_bytes, nullptr));
  }
  BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
  // dweight / dbias in the activations' dtype: the f32 values rounded once.
  const std::vector<float> f32_dw = download(ref_dw.get(), C, Dtype::kF32), f32_db = download(ref_db.get(), C, Dtype::kF32);
  for (const bool param_f32 : {true, false}) {
    const Dtype pt = param_f32 ? Dtype::kF32 : c.dt;
    SCOPED_TRACE(param_f32 ? "f32 parameters" : "parameters in the activations' dtype");
    DeviceMem ddx(n * es), ddw(C * 4), ddb(C * 4), ddx2 = upload(dout, c.dt), ddx3(n * es);
    ddx.poison();
    ddx3.poison();
    ddw.poison();
    ddb.poison();
    const auto params_bad = [&]() -> int {  // dweight / dbias not the f32 sums (rounded once to pt)
      if (cudaDeviceSynchronize() != cudaSuccess) return -1;
      const std::vector<float> got_dw = download(ddw.get(), C, pt), got_db = download(ddb.get(), C, pt);
      int bad = 0;
      for (int j = 0; j < C; ++j) {
        const float want_w = param_f32 ? f32_dw[j] : blu::test::round_to(c.dt, f32_dw[j]);
        const float want_b = param_f32 ? f32_db[j] : blu::test::round_to(c.dt, f32_db[j]);
        bad += (got_dw[j] != want_w) + (got_db[j] != want_b);
      }
      ddw.poison();
      ddb.poison();
      return bad;
    };
    BLU_ASSERT_OK(blublas::layernorm_backward_residual(ddx.get(), dres.get(), ddw.get(), ddb.get(), pt, ddout.get(),
                                                       dh.get(), dmean.as<float>(), drstd.as<float>(), dw.get(), R,
                                                       C, c.dt, false, ws.get(), ws_bytes, nullptr));
    EXPECT_EQ(params_bad(), 0) << "separate residual";
    // residual == dout == dx (all three one buffer)
    BLU_ASSERT_OK(blublas::layernorm_backward_residual(ddx2.get(), ddx2.get(), ddw.get(), ddb.get(), pt, ddx2.get(),
                                                       dh.get(), dmean.as<float>(), drstd.as<float>(), dw.get(), R,
                                                       C, c.dt, false, ws.get(), ws_bytes, nullptr));
    EXPECT_EQ(params_bad(), 0) << "dx, residual and dout one buffer";
    BLU_ASSERT_OK(blublas::layernorm_backward_residual(ddx3.get(), nullptr, ddw.get(), ddb.get(), pt, ddout.get(),
                                                       dh.get(), dmean.as<float>(), drstd.as<float>(), dw.get(), R,
                                                       C, c.dt, false, ws.get(), ws_bytes, nullptr));
    EXPECT_EQ(params_bad(), 0) << "no residual";
    EXPECT_EQ(bytes(ddx, n * es), bytes(ref_dx, n * es)) << "dx = result + residual";
    EXPECT_EQ(bytes(ddx2, n * es), bytes(ref_dx_dout, n * es)) << "dx = result + dout, in place";
    EXPECT_EQ(bytes(ddx3, n * es), bytes(ref_plain, n * es)) << "dx = result";
  }
  // A parameter dtype that is neither f32 nor the activations': refused, naming both.
  if (c.dt == Dtype::kF32) {
    DeviceMem ddx(n * es), ddw(C * 2);
    const blublas::Status st = blublas::layernorm_backward_residual(
        ddx.get(), nullptr, ddw.get(), nullptr, Dtype::kBF16, ddout.get(), dh.get(), dmean.as<float>(),
        drstd.as<float>(), dw.get(), R, C, c.dt, false, ws.get(), ws_bytes, nullptr);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.to_string().find("bf16"), std::string::npos) << st.to_string();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LayerNormTest,
    ::testing::Values(LnCase{Dtype::kF32, 37, 771, false}, LnCase{Dtype::kF32, 45, 768, true},
                      LnCase{Dtype::kF32, 301, 768, false}, LnCase{Dtype::kBF16, 29, 768, true},
                      LnCase{Dtype::kBF16, 33, 1000, false}, LnCase{Dtype::kF32, 17, 3001, true},
                      LnCase{Dtype::kF32, 9, 2048, false}, LnCase{Dtype::kBF16, 7, 77, true},
                      LnCase{Dtype::kF32, 2100, 96, true},
                      // Enough rows that every warp of the balanced backward grid walks several
                      // rows (the register prefetch path) on any GPU size.
                      LnCase{Dtype::kF32, 20011, 768, false},
                      LnCase{Dtype::kBF16, 12007, 768, true},
                      LnCase{Dtype::kF32, 9001, 512, true},
                      // 16-bit rows of 1025..2048 columns: the packed wide-row backward (Note
                      // [Packed wide rows]): GPT-2 d48's 1600, a partly filled last pack column,
                      // the widest, and one past it (the generic path).
                      LnCase{Dtype::kBF16, 3001, 1600, true}, LnCase{Dtype::kBF16, 45, 1544, false},
                      LnCase{Dtype::kBF16, 9, 2048, true}, LnCase{Dtype::kBF16, 13, 2056, false}),
    [](const ::testing::TestParamInfo<LnCase>& i) {
      return std::string(blublas::dtype_name(i.param.dt)) + "_" + std::to_string(i.param.rows) +
             "x" + std::to_string(i.param.cols) + (i.param.residual ? "_res" : "");
    });

}  // namespace
