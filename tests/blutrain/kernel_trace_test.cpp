// kernel_trace_test.cpp: the kernel-family classifier and the breakdown JSON of KernelTrace
// (Note [Kernel trace]) on synthetic records (CPU), and, where a GPU and CUPTI are present, a
// trace of real copies, a memset and a CUDA-graph replay of them.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>

#include <string>
#include <vector>

#include "blutensor/json.h"
#include "blutrain/files.h"
#include "common/gpu_test.h"
// The tracer is private to blutrain (src/); the test reaches its header by path.
#include "../../blutrain/src/common/kernel_trace.h"

namespace blu::train {
namespace {

TEST(KernelTrace, BaseName) {
  EXPECT_EQ(kernel_base_name("void blublas::detail::sm90_gemm_kernel<float, 128>(Params, int)"), "sm90_gemm_kernel");
  EXPECT_EQ(kernel_base_name("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int)"),
            "vectorized_layer_norm_kernel");
  EXPECT_EQ(kernel_base_name("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT"), "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT");
}

TEST(KernelTrace, Families) {
  struct Case {
    const char* name;
    const char* family;
  };
  const Case cases[] = {
      {"void blublas::sm90_gemm_kernel<blublas::GeluEpilogue, 128>(Params)", "gemm"},  // epilogue name ignored
      {"void blublas::simt_f32_tiled_kernel<4>(float const*, float*)", "gemm"},
      {"nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "gemm"},
      {"fmha_cutlassB_f32_aligned_64x64_k64_sm80(Params)", "attention"},
      {"void blublas::flash_attn_bwd_sm90_kernel<bf16>(P)", "attention"},
      {"void blublas::attn_bwd_delta_kernel<float>(P)", "attention"},
      {"void blublas::ln_fwd_rows_kernel<float>(P)", "layernorm"},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(int)::{lambda(float)#1}>()",
       "gelu"},
      {"void blublas::xent_stream_kernel<bf16>(P)", "softmax/xent"},
      {"cunn_SoftMaxForward", "softmax/xent"},
      {"void blublas::adamw_kernel<float>(P)", "adamw"},
      {"void at::native::multi_tensor_apply_kernel<M, at::native::FusedAdamMathFunctor<float, 4>, double*>(M)", "adamw"},
      {"void blublas::elementwise_kernel<blublas::AddOp>(float*)", "elementwise/copy"},
      {"[memcpy HtoD]", "elementwise/copy"},
      {"[memset]", "elementwise/copy"},
      {"triton_per_fused_native_layer_norm_0", "layernorm"},
      {"some_unknown_kernel_xyz", "other"},
  };
  for (const Case& c : cases) EXPECT_STREQ(kernel_family(c.name), c.family) << c.name;
  const auto& fams = kernel_families();
  ASSERT_EQ(fams.size(), 8u);
  EXPECT_EQ(fams.front(), "attention");
  EXPECT_EQ(fams.back(), "other");
}

double member_number(const json::Value& v, const std::string& path) {
  return json_member(v, path, "breakdown").as_number();
}

TEST(KernelTrace, BreakdownOfSyntheticRecords) {
  // Two overlapping kernels on two streams [0, 2) ms and [1, 3) ms, a gap, a memcpy [5, 6) ms,
  // then the same GEMM again [6, 6.5) ms: busy 3.5 ms of a 6.5 ms span -> host gap 3 ms.
  const uint64_t ms = 1000000;
  std::vector<KernelRecord> recs = {
      {"void blublas::flash_attn_fwd_kernel<float>(P)", 0, 2 * ms, 7, {16, 12, 1}},
      {"void blublas::sm90_gemm_kernel<float>(P)", 1 * ms, 3 * ms, 8, {6, 128, 1}},
      {"[memcpy HtoD]", 5 * ms, 6 * ms, 7},
      {"void blublas::sm90_gemm_kernel<float>(P)", 6 * ms, 6 * ms + ms / 2, 7, {18, 128, 1}},
  };
  const json::Value v = parse_json(kernel_breakdown_json(recs, 10.0, 2), "breakdown");
  EXPECT_EQ(member_number(v, "launches"), 4);
  EXPECT_NEAR(member_number(v, "kernel_sum_ms"), 5.5, 1e-9);
  EXPECT_NEAR(member_number(v, "busy_ms"), 4.5, 1e-9);
  EXPECT_NEAR(member_number(v, "span_ms"), 6.5, 1e-9);
  EXPECT_NEAR(member_number(v, "host_gap_ms"), 2.0, 1e-9);
  EXPECT_NEAR(member_number(v, "step_wall_ms"), 10.0, 1e-9);
  EXPECT_NEAR(member_number(v, "wall_minus_busy_ms"), 5.5, 1e-9);
  const json::Value& fam = json_member(v, "families", "breakdown");
  EXPECT_NEAR(json_member(json_member(fam, "gemm", "f"), "ms", "f").as_number(), 2.5, 1e-9);
  EXPECT_EQ(json_member(json_member(fam, "gemm", "f"), "count", "f").as_number(), 2);
  EXPECT_EQ(json_member(json_member(fam, "attention", "f"), "count", "f").as_number(), 1);
  EXPECT_EQ(json_member(json_member(fam, "elementwise/copy", "f"), "count", "f").as_number(), 1);
  EXPECT_EQ(json_member(json_member(fam, "other", "f"), "count", "f").as_number(), 0);
  // Top 2 by time: the GEMM (2.5 ms over 2 launches), then the attention kernel (2 ms).
  const json::Value& top = json_member(v, "top", "breakdown");
  ASSERT_EQ(top.as_array().size(), 2u);
  EXPECT_EQ(json_member(top.as_array()[0], "family", "t").as_string(), "gemm");
  EXPECT_EQ(json_member(top.as_array()[0], "count", "t").as_number(), 2);
  EXPECT_EQ(json_member(top.as_array()[1], "family", "t").as_string(), "attention");
  // By launch shape (top 2): the GEMM on grid 6 x 128 and the attention kernel (2 ms each); the
  // GEMM's 18 x 128 launch (0.5 ms) is cut.
  const json::Value& shapes = json_member(v, "top_launches", "breakdown");
  ASSERT_EQ(shapes.as_array().size(), 2u);
  std::vector<std::string> got;
  for (const json::Value& x : shapes.as_array()) {
    const auto& g = json_member(x, "grid", "s").as_array();
    ASSERT_EQ(g.size(), 3u);
    got.push_back(json_member(x, "kernel", "s").as_string() + "@" + std::to_string(int(g[0].as_number())) + "x" +
                  std::to_string(int(g[1].as_number())));
    EXPECT_NEAR(json_member(x, "ms", "s").as_number(), 2.0, 1e-9);
    EXPECT_NEAR(json_member(x, "avg_us", "s").as_number(), 2000.0, 1e-6);
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"flash_attn_fwd_kernel@16x12", "sm90_gemm_kernel@6x128"}));
  // Note [Stream overlap]: streams 7 and 8 run together during [1, 2) ms; stream 7 has 3.5 ms of
  // kernels (busy 3.5), stream 8 2 ms, listed by kernel time; the timeline in start order.
  EXPECT_NEAR(member_number(v, "overlap_ms"), 1.0, 1e-9);
  const auto& streams = json_member(v, "streams", "breakdown").as_array();
  ASSERT_EQ(streams.size(), 2u);
  EXPECT_EQ(json_member(streams[0], "stream", "s").as_number(), 7);
  EXPECT_EQ(json_member(streams[0], "launches", "s").as_number(), 3);
  EXPECT_NEAR(json_member(streams[0], "kernel_ms", "s").as_number(), 3.5, 1e-9);
  EXPECT_NEAR(json_member(streams[0], "busy_ms", "s").as_number(), 3.5, 1e-9);
  EXPECT_EQ(json_member(streams[1], "stream", "s").as_number(), 8);
  EXPECT_NEAR(json_member(streams[1], "busy_ms", "s").as_number(), 2.0, 1e-9);
  const auto& tl = json_member(v, "timeline", "breakdown").as_array();
  ASSERT_EQ(tl.size(), 4u);
  const auto& second = tl[1].as_array();
  ASSERT_EQ(second.size(), 5u);
  EXPECT_NEAR(second[0].as_number(), 1000.0, 1e-6);  // start, us from the first record
  EXPECT_NEAR(second[1].as_number(), 2000.0, 1e-6);  // duration, us
  EXPECT_EQ(second[2].as_number(), 8);
  EXPECT_EQ(second[3].as_string(), "gemm");
  EXPECT_EQ(second[4].as_string(), "sm90_gemm_kernel");
  EXPECT_EQ(tl[3].as_array()[4].as_string(), "sm90_gemm_kernel");
}

TEST(KernelTrace, OverlapCountsStreamsNotKernels) {
  // Two kernels on one stream overlapping [0, 2) and [1, 3) (possible within a graph's branches
  // only across streams, but CUPTI reports what ran): no second stream, no overlap; a third
  // kernel on another stream [2.5, 4) overlaps the first stream during [2.5, 3).
  const uint64_t ms = 1000000;
  std::vector<KernelRecord> recs = {
      {"a_kernel", 0, 2 * ms, 3}, {"b_kernel", 1 * ms, 3 * ms, 3}, {"c_kernel", 5 * ms / 2, 4 * ms, 4}};
  const json::Value v = parse_json(kernel_breakdown_json(recs), "overlap");
  EXPECT_NEAR(member_number(v, "overlap_ms"), 0.5, 1e-9);
  EXPECT_NEAR(member_number(v, "busy_ms"), 4.0, 1e-9);
}

TEST(KernelTrace, EmptyAndStub) {
  const json::Value v = parse_json(kernel_breakdown_json({}), "empty");
  EXPECT_EQ(member_number(v, "launches"), 0);
  EXPECT_EQ(member_number(v, "host_gap_ms"), 0);
  KernelTrace t;
  if (!KernelTrace::available()) {
    t.start();
    t.stop();
    EXPECT_TRUE(t.records().empty());
    const json::Value s = parse_json(t.to_json(), "stub");
    EXPECT_FALSE(json_member(s, "available", "stub").as_bool());
  }
}

TEST(KernelTrace, TracesCopiesMemsetAndGraphReplayOnGpu) {
  if (!KernelTrace::available()) GTEST_SKIP() << "built without CUPTI";
  BLU_REQUIRE_GPU();
  const size_t n = 1 << 20;
  std::vector<float> host(n, 1.5f);
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, n * sizeof(float)), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  // A graph of one memset node, replayed twice inside the trace.
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(dev, 0, n * sizeof(float), s), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);

  KernelTrace t;
  t.start();
  ASSERT_EQ(cudaMemcpyAsync(dev, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  t.stop();
  int htod = 0, dtoh = 0, graph_work = 0;
  std::string names;
  for (const KernelRecord& r : t.records()) {
    EXPECT_LE(r.start_ns, r.end_ns) << r.name;
    htod += r.name == "[memcpy HtoD]";
    dtoh += r.name == "[memcpy DtoH]";
    names += r.name + "; ";
    // A graph's memset node is reported as a memset record, or, by drivers that turn memset
    // nodes into kernels (the device's CUDA 13 driver, session 22), as a kernel record.
    graph_work += r.name != "[memcpy HtoD]" && r.name != "[memcpy DtoH]";
  }
  EXPECT_EQ(htod, 1) << names;
  EXPECT_EQ(dtoh, 1) << names;
  EXPECT_EQ(graph_work, 2) << names;  // graph-launched work is traced
  EXPECT_EQ(host[12345], 0.0f);
  const json::Value v = parse_json(t.to_json(), "trace");
  EXPECT_TRUE(json_member(v, "available", "trace").as_bool());
  EXPECT_EQ(json_member(v, "launches", "trace").as_number(), 4);
  EXPECT_GT(json_member(v, "busy_ms", "trace").as_number(), 0.0);
  // Outside the trace nothing is recorded.
  ASSERT_EQ(cudaMemsetAsync(dev, 0, n * sizeof(float), s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(t.records().size(), 4u);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  cudaFree(dev);
}

}  // namespace
}  // namespace blu::train
