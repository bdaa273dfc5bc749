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
  EXPECT_EQ(ops["cross_entropy_forward_backward"], 1);  // Note [Cross-entropy in one pass]
  EXPECT_GE(ops["adamw_step"], 1);
  EXPECT_EQ(ops["global_norm"], 1);
  EXPECT_EQ(g.outputs().size(), 156u);
  EXPECT_FALSE(key_line(a.log).empty()) << a.log;

  const Captured b = capture_tiny("b", 32);
  EXPECT_EQ(key_line(b.log), key_line(a.log)) << "same configuration, another key";
  const Captured c = capture_tiny("c", 48);
  EXPECT_NE(key_line(c.log), key_line(a.log)) << "another sequence length, the same key";
}


// Note [Side stream] (blutensor) on the tiny GPT-2's record, its calls relabelled as CUDA ones
// (planning needs no GPU): every linear's weight gradient (a GEMM whose result only the norm and
// the update read) and bias gradient go to the side stream, no data gradient does, nor the
// update, and each group is joined before anything reads what it wrote (the norm).
TEST(CaptureStep, TheWeightGradientsGoToTheSideStream) {
  Captured a = capture_tiny("side", 32);
  ASSERT_EQ(a.status, 0) << a.log;
  blu::capture::Graph& g = a.graph;
  for (blu::capture::Node& n : g.nodes) n.device = blu::Device::cuda(0);
  const blu::capture::SidePlan p = blu::capture::side_stream_plan(g, {});
  std::map<std::string, int> side_ops;
  int norm_at = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (p.group_of[i] >= 0) ++side_ops[g.nodes[i].op];
    if (g.nodes[i].op == "global_norm" && norm_at < 0) norm_at = static_cast<int>(i);
  }
  for (const auto& [op, count] : side_ops) std::printf("side stream: %s x %d\n", op.c_str(), count);
  std::printf("side stream: %zu calls in %zu groups\n", p.side_calls, p.fork_at.size());
  // 4 blocks x 4 linears: their weight gradients (the lm head's is wte's, tied).
  EXPECT_GE(side_ops["gemm"], 16);
  EXPECT_GE(p.fork_at.size(), 8u);
  // The dW GEMM comes after its layer's dX GEMM in the record: its group waits only for the
  // writer of what it reads, so most groups start before the launch just ahead of them.
  size_t early = 0;
  for (size_t k = 0; k < p.fork_at.size(); ++k) early += p.ready_after[k] < p.fork_at[k] - 1 ? 1 : 0;
  std::printf("side stream: %zu of %zu groups start before the launch ahead of them\n", early, p.fork_at.size());
  EXPECT_GE(early, 16u);
  ASSERT_GE(norm_at, 0);
  for (size_t k = 0; k < p.fork_at.size(); ++k) {
    if (p.fork_at[k] < norm_at) {
      EXPECT_LE(p.join_before[k], norm_at) << "group " << k << " still in flight at the norm";
    }
  }
}
