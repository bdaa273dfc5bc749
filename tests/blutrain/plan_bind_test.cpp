// plan_bind_test.cpp: blucomp's bind_plan (Note [Step runtime]) beside the chunked classifier
// (blutensor's Note [Chunked classifier]): the trainer chunks the classifier first, and a plan
// kernel over any call the chunked launches took is kept as recorded with a reason naming the
// call, never a second override of one node (which Executable::replace refuses). On the CPU: the
// check comes before any kernel is loaded. Also the plan-key checks (a plan made for another
// capture is refused naming both hashes).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "blucomp/step_runtime.h"
#include "blutensor/autograd.h"
#include "blutensor/capture.h"
#include "blutensor/nn.h"
#include "blutensor/ops.h"
#include "blutensor/optim.h"
#include "blutensor/random.h"
#include "blutensor/support/random_leaf.h"  // tests/blutensor/support

namespace {

using namespace blu;

constexpr int64_t kV = 24, kC = 8, kB = 2, kT = 5;

// One step of a tied-weight classifier whose head is a GEMM plus an in-place mask add, as the
// CUDA GPT-2 records it; returns the captured graph.
capture::Graph record_head_step(Tensor& wte, Tensor& mask, optim::AdamW& opt) {
  Generator gi(5);
  const Tensor idx = randint(0, kV - 2, {kB, kT}, TensorOptions(kInt64), &gi);
  const Tensor tgt = randint(0, kV - 2, {kB, kT}, TensorOptions(kInt64), &gi);
  const auto step = [&] {
    Tensor logits = linear(embedding(wte, idx), wte, mask);
    Tensor loss = cross_entropy(logits.reshape({kB * kT, kV}), tgt.reshape({kB * kT}));
    loss.backward();
    opt.step();
    opt.zero_grad();
    return loss.item();
  };
  step();
  capture::Scope scope(true);
  step();
  return scope.finish();
}

std::string plan_for(const capture::Graph& g, const std::vector<int>& nodes, const std::string& structure = "") {
  std::string list;
  for (int n : nodes) list += (list.empty() ? "" : ", ") + std::to_string(n);
  return std::string("{\"format\": \"blu-plan\", \"version\": 1, \"structure_hash\": \"") +
         (structure.empty() ? capture::Graph::hash_hex(g.structure_hash()) : structure) +
         "\", \"signature_hash\": \"" + capture::Graph::hash_hex(g.signature_hash()) +
         "\", \"kernels\": [{\"kind\": \"matmul_epilogue\", \"epilogue\": \"bias\", \"nodes\": [" + list +
         "], \"operands\": [0, 1, 2], \"results\": [3], \"transpose_lhs\": false, \"transpose_rhs\": true}]}";
}

TEST(PlanBind, KernelOverChunkedClassifierCallsIsKeptNamingTheCall) {
  Generator g(3);
  Tensor wte = test::random_leaf({kV, kC}, 0.3, g), mask;
  {
    NoGradGuard ng;
    mask = zeros({kV}, TensorOptions(kFloat32));
    mask.narrow(0, kV - 2, 2).fill_(-std::numeric_limits<double>::infinity());
  }
  optim::AdamW opt({wte}, optim::AdamWOptions{1e-2, 0.9, 0.99, 1e-8, 0.01});
  capture::Executable exe(record_head_step(wte, mask, opt));
  const auto& info = exe.chunk_classifier(3);
  ASSERT_TRUE(info.applied) << info.describe();
  ASSERT_EQ(info.forward_nodes.size(), 3u);  // the GEMM, the mask add, the loss
  const int gemm = info.forward_nodes[0], add = info.forward_nodes[1];
  EXPECT_TRUE(exe.replaced(gemm));
  EXPECT_TRUE(exe.replaced(add));
  const comp::BindReport r = comp::bind_plan(exe, plan_for(exe.graph(), {gemm, add}));
  EXPECT_EQ(r.bound, 0);
  ASSERT_EQ(r.kept, 1);
  ASSERT_EQ(r.reasons.size(), 1u);
  EXPECT_NE(r.reasons[0].find("call " + std::to_string(gemm) + " is already replaced"), std::string::npos)
      << r.reasons[0];
  ASSERT_TRUE(exe.run({1e-2, 3}));  // the chunked step still runs
  EXPECT_TRUE(std::isfinite(exe.host_reads().back().item()));

  // A plan for another capture: refused, naming the hash it was made for.
  try {
    comp::bind_plan(exe, plan_for(exe.graph(), {gemm, add}, "0123456789abcdef"));
    ADD_FAILURE() << "a plan for another capture bound";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("0123456789abcdef"), std::string::npos) << e.what();
  }
}

}  // namespace
