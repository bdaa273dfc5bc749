// Multi-tensor AdamW and the global gradient norm against float64: many tensors of odd sizes
// (vector and scalar paths, several launches' worth of tensors), f32 and bf16 grads, per-tensor
// weight decay, bf16 copies, clipping through the device-side scale, bitwise determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "blublas/adamw.h"
#include "common/gpu_test.h"
#include "fused_test_util.h"

namespace {

using blu::test::all_close;
using blu::test::DeviceMem;
using blu::test::download;
using blu::test::random_values;
using blu::test::upload;
using blublas::Dtype;

void run_adamw_case(Dtype gdt, int count, bool clip) {
  SCOPED_TRACE(std::string("grad ") + blublas::dtype_name(gdt) + " tensors=" +
               std::to_string(count) + (clip ? " clip" : ""));
  std::vector<int64_t> sizes;
  for (int i = 0; i < count; ++i) sizes.push_back(i % 3 == 0 ? 4 * (1 + (i * 37) % 3000) : 1 + (i * 7919) % 9001);
  sizes[0] = 100003;
  std::vector<std::vector<float>> p0, g, m0, v0;
  std::vector<DeviceMem> dp, dg, dm, dv, dbf;
  std::vector<blublas::AdamWTensor> list(count);
  for (int i = 0; i < count; ++i) {
    const std::size_t n = sizes[i];
    p0.push_back(random_values(n, -1.0f, 1.0f, 100 + i));
    g.push_back(random_values(n, -0.5f, 0.5f, 200 + i, gdt));
    m0.push_back(random_values(n, -0.1f, 0.1f, 300 + i));
    v0.push_back(random_values(n, 0.0f, 0.01f, 400 + i));
    dp.push_back(upload(p0[i], Dtype::kF32));
    dg.push_back(upload(g[i], gdt));
    dm.push_back(upload(m0[i], Dtype::kF32));
    dv.push_back(upload(v0[i], Dtype::kF32));
    dbf.push_back(DeviceMem(n * 2));
    dbf.back().poison();
    list[i].param = dp[i].as<float>();
    list[i].grad = dg[i].get();
    list[i].m = dm[i].as<float>();
    list[i].v = dv[i].as<float>();
    list[i].param_bf16 = i % 2 == 0 ? dbf[i].get() : nullptr;
    list[i].numel = static_cast<int64_t>(n);
    list[i].weight_decay = i % 4 == 1 ? 0.0f : 0.1f;
  }
  // Norm.
  double sumsq = 0;
  for (int i = 0; i < count; ++i)
    for (float x : g[i]) sumsq += static_cast<double>(x) * x;
  const double ref_norm = std::sqrt(sumsq);
  const float max_norm = clip ? static_cast<float>(ref_norm * 0.5) : 0.0f;
  std::size_t ws_bytes = 0;
  BLU_ASSERT_OK(blublas::grad_global_norm_workspace_size(list.data(), count, &ws_bytes));
  DeviceMem ws(ws_bytes), dnorm(4), dscale(4);
  std::vector<uint8_t> first_norm;
  for (int rep = 0; rep < 2; ++rep) {
    ws.poison();
    dnorm.poison();
    BLU_ASSERT_OK(blublas::grad_global_norm(dnorm.as<float>(), dscale.as<float>(), max_norm,
                                            list.data(), count, gdt, ws.get(), ws_bytes, nullptr));
    BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
    auto b = blu::test::download_bytes(dnorm.get(), 4);
    if (rep == 0) first_norm = b;
    EXPECT_EQ(b, first_norm) << "norm not bitwise deterministic";
  }
  EXPECT_TRUE(all_close("grad norm", download(dnorm.get(), 1, Dtype::kF32), {ref_norm}, 0, 1e-5));
  const double scale = clip ? std::min(1.0, max_norm / (ref_norm + 1e-6)) : 1.0;
  EXPECT_TRUE(all_close("clip scale", download(dscale.get(), 1, Dtype::kF32), {scale}, 0, 1e-5));

  blublas::AdamWHyper h;
  h.lr = 3e-3f;
  h.beta1 = 0.9f;
  h.beta2 = 0.95f;
  h.eps = 1e-8f;
  h.step = 7;
  BLU_ASSERT_OK(blublas::adamw_update(list.data(), count, gdt, h, clip ? dscale.as<float>() : nullptr,
                                      nullptr));
  BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
  const double bc1 = 1.0 - std::pow(0.9, 7), bc2 = 1.0 - std::pow(0.95, 7);
  for (int i = 0; i < count; ++i) {
    SCOPED_TRACE("tensor " + std::to_string(i) + " numel " + std::to_string(sizes[i]));
    const std::size_t n = sizes[i];
    std::vector<double> rp(n), rm(n), rv(n);
    for (std::size_t j = 0; j < n; ++j) {
      const double gg = g[i][j] * scale;
      rm[j] = 0.9 * m0[i][j] + 0.1 * gg;
      rv[j] = 0.95 * v0[i][j] + 0.05 * gg * gg;
      const double denom = std::sqrt(rv[j]) / std::sqrt(bc2) + 1e-8;
      rp[j] = p0[i][j] * (1.0 - 3e-3 * list[i].weight_decay) - (3e-3 / bc1) * rm[j] / denom;
    }
    ASSERT_TRUE(all_close("param", download(dp[i].get(), n, Dtype::kF32), rp, 2e-6, 1e-5));
    // m = b1 m0 + (1 - b1) g cancels: bound the error by the terms' size (f32 rounding of each).
    ASSERT_TRUE(all_close("m", download(dm[i].get(), n, Dtype::kF32), rm, 6e-8, 1e-5));
    ASSERT_TRUE(all_close("v", download(dv[i].get(), n, Dtype::kF32), rv, 1e-10, 1e-5));
    if (list[i].param_bf16 != nullptr) {
      ASSERT_TRUE(all_close("param_bf16", download(dbf[i].get(), n, Dtype::kBF16), rp, 1e-5, 8e-3));
    }
  }
}

TEST(AdamW, MultiTensorMatchesFloat64F32Grads) {
  BLU_REQUIRE_GPU();
  run_adamw_case(Dtype::kF32, 11, false);
}

TEST(AdamW, MultiTensorMatchesFloat64Bf16GradsClipped) {
  BLU_REQUIRE_GPU();
  run_adamw_case(Dtype::kBF16, 13, true);
}

TEST(AdamW, MoreTensorsThanOneLaunch) {
  BLU_REQUIRE_GPU();
  run_adamw_case(Dtype::kF32, blublas::kAdamWTensorsPerLaunch + 37, true);
}

// bf16_weight_copy writes the bits adamw_update's copy holds for the same f32 weights (blutrain's
// per-layer copy relies on it: Note [Per-layer bf16 weight copy]). First on the initial weights
// against a host round-to-nearest-even (ties, subnormals, huge values, NaN and infinities among
// them), then after an update: the update writes its copy, bf16_weight_copy recasts the updated
// weights into a second, poisoned buffer, and the two must agree bit for bit. Sizes that are
// multiples of 4 over several 4096-element blocks take the vector path, odd sizes and an offset
// pointer the scalar path; a tensor without a copy is left alone.
uint16_t host_bf16_rne(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

TEST(AdamW, Bf16WeightCopyMatchesTheUpdatesCopy) {
  BLU_REQUIRE_GPU();
  const std::vector<int64_t> sizes = {100003, 4096, 4 * 3001, 1, 4097, 64, 4 * 5000};
  const int count = static_cast<int>(sizes.size());
  const int no_copy = 5;
  std::vector<std::vector<float>> p0;
  std::vector<DeviceMem> dp, dg, dm, dv, dbf, dcopy;
  std::vector<blublas::AdamWTensor> list(count), copies(count);
  for (int i = 0; i < count; ++i) {
    const std::size_t n = sizes[i];
    std::vector<float> p = random_values(n, -3.0f, 3.0f, 500 + i);
    const float edges[] = {1.00390625f, 1.01171875f, -1.00390625f, 1e-38f, -2e-39f, 3e38f, -3.3e38f,
                           std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f};
    for (std::size_t j = 0; j < n; j += 97) p[j] = edges[(j / 97) % (sizeof(edges) / sizeof(edges[0]))];
    p0.push_back(p);
    dp.push_back(upload(p, Dtype::kF32));
    dg.push_back(upload(random_values(n, -0.5f, 0.5f, 600 + i), Dtype::kF32));
    dm.push_back(upload(std::vector<float>(n, 0.0f), Dtype::kF32));
    dv.push_back(upload(std::vector<float>(n, 0.0f), Dtype::kF32));
    dbf.push_back(DeviceMem(n * 2 + 2));
    dcopy.push_back(DeviceMem(n * 2 + 2));
    dbf.back().poison();
    dcopy.back().poison();
    const std::size_t off = i == 4 ? 2 : 0;  // tensor 4's copies start 2 bytes in: the scalar path
    list[i].param = dp[i].as<float>();
    list[i].grad = dg[i].get();
    list[i].m = dm[i].as<float>();
    list[i].v = dv[i].as<float>();
    list[i].param_bf16 = static_cast<char*>(dbf[i].get()) + off;
    list[i].numel = sizes[i];
    list[i].weight_decay = 0.1f;
    copies[i] = list[i];
    copies[i].grad = nullptr;
    copies[i].m = copies[i].v = nullptr;
    copies[i].param_bf16 = i == no_copy ? nullptr : static_cast<char*>(dcopy[i].get()) + off;
  }
  // The initial weights against the host rounding.
  BLU_ASSERT_OK(blublas::bf16_weight_copy(copies.data(), count, nullptr));
  BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < count; ++i) {
    if (i == no_copy) continue;
    SCOPED_TRACE("initial, tensor " + std::to_string(i) + " numel " + std::to_string(sizes[i]));
    const std::size_t off = i == 4 ? 2 : 0, n = sizes[i];
    const auto got = blu::test::download_bytes(static_cast<char*>(dcopy[i].get()) + off, n * 2);
    int bad = 0;
    for (std::size_t j = 0; j < n && bad < 5; ++j) {
      uint16_t g;
      std::memcpy(&g, got.data() + 2 * j, 2);
      const uint16_t want = host_bf16_rne(p0[i][j]);
      const bool both_nan = (want & 0x7f80) == 0x7f80 && (want & 0x7f) && (g & 0x7f80) == 0x7f80 && (g & 0x7f);
      if (g != want && !both_nan) {
        ADD_FAILURE() << "element " << j << " of " << p0[i][j] << ": 0x" << std::hex << g << " want 0x" << want;
        ++bad;
      }
    }
  }
  // After an update (finite weights only: the update of inf / NaN is not the question here).
  for (int i = 0; i < count; ++i) {
    std::vector<float> p = p0[i];
    for (float& x : p) if (!std::isfinite(x)) x = 0.5f;
    BLU_CUDA_TEST_CHECK(cudaMemcpy(dp[i].get(), p.data(), p.size() * 4, cudaMemcpyHostToDevice));
    dcopy[i].poison();
  }
  blublas::AdamWHyper h;
  h.lr = 1e-2f;
  BLU_ASSERT_OK(blublas::adamw_update(list.data(), count, Dtype::kF32, h, nullptr, nullptr));
  BLU_ASSERT_OK(blublas::bf16_weight_copy(copies.data(), count, nullptr));
  BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < count; ++i) {
    SCOPED_TRACE("updated, tensor " + std::to_string(i) + " numel " + std::to_string(sizes[i]));
    const std::size_t off = i == 4 ? 2 : 0, bytes = sizes[i] * 2;
    const auto from_update = blu::test::download_bytes(static_cast<char*>(dbf[i].get()) + off, bytes);
    const auto from_copy = blu::test::download_bytes(static_cast<char*>(dcopy[i].get()) + off, bytes);
    if (i == no_copy) {
      EXPECT_EQ(from_copy, std::vector<uint8_t>(bytes, 0xFF)) << "a tensor without a copy was written";
    } else {
      EXPECT_EQ(from_copy, from_update);
    }
  }
}

TEST(AdamW, BitwiseDeterministic) {
  BLU_REQUIRE_GPU();
  const int n = 77777;
  auto p = random_values(n, -1.0f, 1.0f, 1), g = random_values(n, -1.0f, 1.0f, 2);
  std::vector<std::vector<uint8_t>> runs;
  for (int rep = 0; rep < 2; ++rep) {
    DeviceMem dp = upload(p, Dtype::kF32), dg = upload(g, Dtype::kF32), dm(n * 4), dv(n * 4);
    BLU_CUDA_TEST_CHECK(cudaMemset(dm.get(), 0, n * 4));
    BLU_CUDA_TEST_CHECK(cudaMemset(dv.get(), 0, n * 4));
    blublas::AdamWTensor t;
    t.param = dp.as<float>();
    t.grad = dg.get();
    t.m = dm.as<float>();
    t.v = dv.as<float>();
    t.numel = n;
    t.weight_decay = 0.01f;
    BLU_ASSERT_OK(blublas::adamw_update(&t, 1, Dtype::kF32, blublas::AdamWHyper{}, nullptr, nullptr));
    BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
    runs.push_back(blu::test::download_bytes(dp.get(), n * 4));
  }
  EXPECT_EQ(runs[0], runs[1]);
}

// The device-scalar variant (Note [AdamW step scalars on the device]) equals adamw_update bit for
// bit, also when captured once in a CUDA graph and replayed with a new lr and step each time.
TEST(AdamW, DeviceScalarsInGraphMatchStaticUpdate) {
  BLU_REQUIRE_GPU();
  const int n = 50021;  // odd: the scalar path for one tensor
  const int n2 = 4096 * 3;
  auto p = random_values(n, -1.0f, 1.0f, 11), g = random_values(n, -1.0f, 1.0f, 12);
  auto p2 = random_values(n2, -1.0f, 1.0f, 13), g2 = random_values(n2, -1.0f, 1.0f, 14);
  struct Set {
    DeviceMem p, g, m, v, p2, g2, m2, v2;
    std::vector<blublas::AdamWTensor> list;
  };
  auto make = [&](Set& s) {
    s.p = upload(p, Dtype::kF32);
    s.g = upload(g, Dtype::kF32);
    s.p2 = upload(p2, Dtype::kF32);
    s.g2 = upload(g2, Dtype::kF32);
    s.m = DeviceMem(n * 4);
    s.v = DeviceMem(n * 4);
    s.m2 = DeviceMem(n2 * 4);
    s.v2 = DeviceMem(n2 * 4);
    BLU_CUDA_TEST_CHECK(cudaMemset(s.m.get(), 0, n * 4));
    BLU_CUDA_TEST_CHECK(cudaMemset(s.v.get(), 0, n * 4));
    BLU_CUDA_TEST_CHECK(cudaMemset(s.m2.get(), 0, n2 * 4));
    BLU_CUDA_TEST_CHECK(cudaMemset(s.v2.get(), 0, n2 * 4));
    s.list.resize(2);
    s.list[0] = {s.p.as<float>(), s.g.get(), s.m.as<float>(), s.v.as<float>(), nullptr, n, 0.1f};
    s.list[1] = {s.p2.as<float>(), s.g2.get(), s.m2.as<float>(), s.v2.as<float>(), nullptr, n2, 0.0f};
  };
  Set a, b;
  make(a);
  make(b);
  const double lrs[3] = {6e-4, 3.3e-4, 1.7e-5};
  // Reference: three static updates.
  for (int t = 1; t <= 3; ++t) {
    blublas::AdamWHyper h;
    h.lr = static_cast<float>(lrs[t - 1]);
    h.beta1 = 0.9f;
    h.beta2 = 0.95f;
    h.eps = 1e-8f;
    h.step = t;
    BLU_ASSERT_OK(blublas::adamw_update(a.list.data(), 2, Dtype::kF32, h, nullptr, nullptr));
  }
  // Graph: capture once, replay three times with new scalars copied from pinned memory.
  cudaStream_t stream;
  BLU_CUDA_TEST_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  blublas::AdamWStepScalars* host = nullptr;
  BLU_CUDA_TEST_CHECK(cudaMallocHost(&host, sizeof(*host)));
  DeviceMem dev(sizeof(blublas::AdamWStepScalars));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  BLU_CUDA_TEST_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  BLU_CUDA_TEST_CHECK(cudaMemcpyAsync(dev.get(), host, sizeof(*host), cudaMemcpyHostToDevice, stream));
  BLU_ASSERT_OK(blublas::adamw_update_device_scalars(b.list.data(), 2, Dtype::kF32, 0.9f, 0.95f, 1e-8f,
                                                     static_cast<const blublas::AdamWStepScalars*>(dev.get()),
                                                     nullptr, stream));
  BLU_CUDA_TEST_CHECK(cudaStreamEndCapture(stream, &graph));
  BLU_CUDA_TEST_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int t = 1; t <= 3; ++t) {
    *host = blublas::adamw_step_scalars(static_cast<float>(lrs[t - 1]), 0.9f, 0.95f, t);
    BLU_CUDA_TEST_CHECK(cudaGraphLaunch(exec, stream));
    BLU_CUDA_TEST_CHECK(cudaStreamSynchronize(stream));
  }
  BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(blu::test::download_bytes(a.p.get(), n * 4), blu::test::download_bytes(b.p.get(), n * 4));
  EXPECT_EQ(blu::test::download_bytes(a.p2.get(), n2 * 4), blu::test::download_bytes(b.p2.get(), n2 * 4));
  EXPECT_EQ(blu::test::download_bytes(a.v.get(), n * 4), blu::test::download_bytes(b.v.get(), n * 4));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFreeHost(host);
  cudaStreamDestroy(stream);
}

}  // namespace
