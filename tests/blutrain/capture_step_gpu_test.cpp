// capture_step_gpu_test.cpp: on a GPU, the tiny GPT-2's captured step through the CUDA backends
// (fused attention, the multi-tensor AdamW kernels) replays bit for bit too (Note [Step capture]).
#include <gtest/gtest.h>

#include <map>

#include "blutensor/device.h"
#include "support/capture_tiny.h"

using blu::train::test::capture_tiny;
using blu::train::test::key_line;

TEST(CaptureStepGpu, TinyGpt2StepReplaysBitForBitOnCuda) {
  if (!blu::cuda_is_available()) GTEST_SKIP() << "no CUDA device";
  const auto a = capture_tiny("gpu", 64, "cuda");
  ASSERT_EQ(a.status, 0) << a.log;
  std::printf("%s", a.log.c_str());
  EXPECT_NE(a.log.find("replay: 156/156 weights and moments bitwise equal"), std::string::npos) << a.log;
  std::map<std::string, int> ops;
  for (const blu::capture::Node& n : a.graph.nodes) ++ops[n.op];
  EXPECT_EQ(ops["attention_forward"], 4);
  EXPECT_EQ(ops["attention_backward"], 4);
  EXPECT_EQ(key_line(a.log).find("-sm_"), 37u) << a.log;  // "key <16 hex>-<16 hex>-sm_NN"
}
