// Embedding forward / deterministic backward against float64: vector and scalar paths, f32 and
// bf16 dout, repeated tokens (small buckets and a > 32-position bucket), bad token ids (flag set,
// skipped, no fault), accumulation into existing gradients, bitwise determinism, null dwpe,
// GPT-2 widths and vocabularies above 64K ids.
#include <gtest/gtest.h>

#include <vector>

#include "blublas/embedding.h"
#include "common/gpu_test.h"
#include "fused_test_util.h"

namespace {

using blu::test::all_close;
using blu::test::DeviceMem;
using blu::test::download;
using blu::test::random_values;
using blu::test::upload;
using blublas::Dtype;

struct EmbCase {
  Dtype dt;
  int B, T, C, V;
  bool bad_tokens;
  bool no_dwpe = false;
};

class EmbeddingTest : public ::testing::TestWithParam<EmbCase> {};

TEST_P(EmbeddingTest, ForwardBackwardMatchFloat64) {
  BLU_REQUIRE_GPU();
  const EmbCase c = GetParam();
  const int N = c.B * c.T;
  const std::size_t es = blublas::dtype_size(c.dt);
  std::vector<int32_t> tok(N);
  for (int i = 0; i < N; ++i) tok[i] = static_cast<int32_t>((i * 2654435761u) % c.V);
  for (int i = 0; i < N; i += 3) tok[i] = 5 % c.V;  // one big bucket (> 32 positions)
  tok[N / 2] = 7 % c.V;
  if (c.bad_tokens) {
    tok[1] = c.V;
    tok[N - 1] = -3;
  }
  auto wte = random_values(static_cast<std::size_t>(c.V) * c.C, -1.0f, 1.0f, 71 + c.C, c.dt);
  auto wpe = random_values(static_cast<std::size_t>(c.T) * c.C, -1.0f, 1.0f, 72 + c.C, c.dt);
  auto dout = random_values(static_cast<std::size_t>(N) * c.C, -1.0f, 1.0f, 73 + c.C, c.dt);
  auto dwte0 = random_values(static_cast<std::size_t>(c.V) * c.C, -1.0f, 1.0f, 74 + c.C);
  auto dwpe0 = random_values(static_cast<std::size_t>(c.T) * c.C, -1.0f, 1.0f, 75 + c.C);
  DeviceMem dtok(N * 4), dflag(4), dwte_in = upload(wte, c.dt), dwpe_in = upload(wpe, c.dt),
            ddout = upload(dout, c.dt), dout_emb(static_cast<std::size_t>(N) * c.C * es);
  BLU_CUDA_TEST_CHECK(cudaMemcpy(dtok.get(), tok.data(), N * 4, cudaMemcpyHostToDevice));
  BLU_CUDA_TEST_CHECK(cudaMemset(dflag.get(), 0, 4));
  dout_emb.poison();
  BLU_ASSERT_OK(blublas::embedding_forward(dout_emb.get(), dtok.as<int32_t>(), dwte_in.get(),
                                           dwpe_in.get(), c.B, c.T, c.C, c.V, dflag.as<int>(),
                                           c.dt, nullptr));
  BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
  std::vector<double> ref_out(static_cast<std::size_t>(N) * c.C);
  for (int i = 0; i < N; ++i) {
    const bool ok = tok[i] >= 0 && tok[i] < c.V;
    for (int j = 0; j < c.C; ++j) {
      ref_out[i * c.C + j] = static_cast<double>(wpe[(i % c.T) * c.C + j]) +
                             (ok ? wte[static_cast<std::size_t>(tok[i]) * c.C + j] : 0.0);
    }
  }
  EXPECT_TRUE(all_close("forward", download(dout_emb.get(), ref_out.size(), c.dt), ref_out,
                        c.dt == Dtype::kBF16 ? 1e-2 : 1e-6, blu::test::storage_rtol(c.dt)));
  int flag = -1;
  BLU_CUDA_TEST_CHECK(cudaMemcpy(&flag, dflag.get(), 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(flag, c.bad_tokens ? 1 : 0) << "forward error flag";

  std::vector<double> rwte(dwte0.begin(), dwte0.end()), rwpe(dwpe0.begin(), dwpe0.end());
  for (int i = 0; i < N; ++i) {
    const bool ok = tok[i] >= 0 && tok[i] < c.V;
    for (int j = 0; j < c.C; ++j) {
      if (ok) rwte[static_cast<std::size_t>(tok[i]) * c.C + j] += dout[i * c.C + j];
      rwpe[(i % c.T) * c.C + j] += dout[i * c.C + j];
    }
  }
  std::size_t ws_bytes = 0;
  BLU_ASSERT_OK(blublas::embedding_backward_workspace_size(c.B, c.T, c.V, &ws_bytes));
  DeviceMem ws(ws_bytes);
  std::vector<std::vector<uint8_t>> runs;
  for (int rep = 0; rep < 2; ++rep) {
    DeviceMem dwte = upload(dwte0, Dtype::kF32), dwpe = upload(dwpe0, Dtype::kF32);
    ws.poison();
    BLU_CUDA_TEST_CHECK(cudaMemset(dflag.get(), 0, 4));
    BLU_ASSERT_OK(blublas::embedding_backward(dwte.as<float>(),
                                              c.no_dwpe ? nullptr : dwpe.as<float>(), ddout.get(),
                                              dtok.as<int32_t>(), c.B, c.T, c.C, c.V,
                                              dflag.as<int>(), c.dt, ws.get(), ws_bytes, nullptr));
    BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
    EXPECT_TRUE(all_close("dwte", download(dwte.get(), rwte.size(), Dtype::kF32), rwte, 1e-5 * N / 3 + 1e-6, 1e-5));
    if (c.no_dwpe) {
      EXPECT_EQ(blu::test::download_bytes(dwpe.get(), rwpe.size() * 4),
                blu::test::download_bytes(upload(dwpe0, Dtype::kF32).get(), rwpe.size() * 4))
          << "dwpe written although null was passed";
    } else {
      EXPECT_TRUE(all_close("dwpe", download(dwpe.get(), rwpe.size(), Dtype::kF32), rwpe,
                            1e-5 * c.B, 1e-5));
    }
    BLU_CUDA_TEST_CHECK(cudaMemcpy(&flag, dflag.get(), 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(flag, c.bad_tokens ? 1 : 0) << "backward error flag";
    runs.push_back(blu::test::download_bytes(dwte.get(), rwte.size() * 4));
  }
  EXPECT_EQ(runs[0], runs[1]) << "dwte not bitwise deterministic";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, EmbeddingTest,
    ::testing::Values(EmbCase{Dtype::kF32, 3, 37, 768, 1001, false},
                      EmbCase{Dtype::kF32, 2, 41, 77, 503, true},
                      EmbCase{Dtype::kBF16, 3, 29, 768, 997, true},
                      EmbCase{Dtype::kF32, 4, 50, 1600, 307, false},
                      EmbCase{Dtype::kBF16, 2, 33, 100, 50, false},
                      // GPT-2 width, several column chunks, many small buckets.
                      EmbCase{Dtype::kF32, 4, 257, 768, 50304, false},
                      EmbCase{Dtype::kBF16, 3, 301, 768, 50304, true},
                      // No position term.
                      EmbCase{Dtype::kF32, 3, 37, 768, 1001, false, true},
                      // Vocabularies above 64K ids (more scan tiles, sparse buckets).
                      EmbCase{Dtype::kF32, 3, 45, 8, 70001, true},
                      EmbCase{Dtype::kBF16, 2, 64, 264, 65537, false}),
    [](const ::testing::TestParamInfo<EmbCase>& i) {
      return std::string(blublas::dtype_name(i.param.dt)) + "_B" + std::to_string(i.param.B) +
             "T" + std::to_string(i.param.T) + "C" + std::to_string(i.param.C) + "V" +
             std::to_string(i.param.V) + (i.param.bad_tokens ? "_bad" : "") +
             (i.param.no_dwpe ? "_nodwpe" : "");
    });

}  // namespace
