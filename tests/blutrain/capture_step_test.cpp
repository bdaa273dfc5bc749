// capture_step_test.cpp: `blutrain capture` (run_capture) on the tiny GPT-2 on the CPU: the whole
// autograd training step (forward, backward, clipping, AdamW) is recorded, its replay gives every
// weight and both moments bit for bit, the JSON reads back, and the key is the same for a second
// capture of the same configuration and differs for another sequence length.
#include <gtest/gtest.h>

#include "blutensor/capture.h"
#include "support/capture_tiny.h"

using blu::train::test::Captured;
using blu::train::test::capture_tiny;
using blu::train::test::key_line;

TEST(CaptureStep, TinyGpt2StepReplaysBitForBit) {
  const Captured a = capture_tiny("a", 32);
  ASSERT_EQ(a.status, 0) << a.log;
  std::printf("%s", a.log.c_str());
  // 4 layers x 12 tensors + embeddings + final layernorm = 52 parameters, 3 tensors each.
  EXPECT_NE(a.log.find("replay: 156/156 weights and moments bitwise equal"), std::string::npos) << a.log;
  const blu::capture::Graph& g = a.graph;
  std::map<std::string, int> ops;
  for (const blu::capture::Node& n : g.nodes) ++ops[n.op];
  EXPECT_EQ(ops["layer_norm_forward"], 9);  // 2 per block + ln_f
  EXPECT_EQ(ops["layer_norm_backward"], 9);
  EXPECT_GE(ops["gemm"], 4 * 4 * 3);  // 4 linears per block, forward + 2 backward GEMMs each
  EXPECT_EQ(ops["cross_entropy_forward"], 1);
  EXPECT_GE(ops["adamw_step"], 1);
  EXPECT_EQ(ops["global_norm"], 1);
  EXPECT_EQ(g.outputs().size(), 156u);
  EXPECT_FALSE(key_line(a.log).empty()) << a.log;

  const Captured b = capture_tiny("b", 32);
  EXPECT_EQ(key_line(b.log), key_line(a.log)) << "same configuration, another key";
  const Captured c = capture_tiny("c", 48);
  EXPECT_NE(key_line(c.log), key_line(a.log)) << "another sequence length, the same key";
}

