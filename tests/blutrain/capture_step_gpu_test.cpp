// capture_step_gpu_test.cpp: on a GPU, the tiny GPT-2's captured step through the CUDA backends
// (the multi-tensor AdamW kernels, the global norm) replays bit for bit too (Note [Step capture]).
// The tiny model's head size (not 64 or 128) keeps its attention on the composite path; the fused
// attention's capture and replay are checked on GPT-2 124M by scripts/device-comp.sh.
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
  EXPECT_EQ(ops["softmax_forward"], 4);  // one per layer: the composite attention
  EXPECT_EQ(ops["softmax_backward"], 4);
  EXPECT_EQ(ops["adamw_step"], 2);       // multi-tensor AdamW: one per parameter group (decayed or not)
  EXPECT_EQ(ops["global_norm"], 1);
  EXPECT_EQ(key_line(a.log).find("-sm_"), 37u) << a.log;  // "key <16 hex>-<16 hex>-sm_NN"
}
