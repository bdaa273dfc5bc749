// fused_dp_gpu_test.cpp: `blutrain train --engine fused --dp 2` on two GPUs (two processes under
// blurun, NCCL) reproduces the per-step losses of the one-GPU fused run of the same global batch
// within 1e-5 relative over 20 steps in fp32: with the step captured as a CUDA graph (the bucket
// all-reduces inside it), with accumulation micro-steps (only the last one communicates), and
// eagerly (--no-graph, which tells a capture problem from a math one). Note [Data-parallel
// reference run]: the one-GPU run takes the global batch as micro-batches of the per-rank size. Note [Data-parallel fused
// step: streams and events under capture] in blutrain/src/engine/grad_sync.h. Skips without two
// CUDA devices (fails instead under BLU_REQUIRE_MULTI_GPU=1) or without NCCL in the build.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "blutensor/cuda_stream.h"
#include "common/loss_curves.h"
#include "common/run_command.h"
#include "support/pattern_shards.h"

namespace fs = std::filesystem;
using blu::test::rank_program;
using blu::test::run_command;

namespace {

bool env_is_1(const char* k) { return std::getenv(k) != nullptr && std::string(std::getenv(k)) == "1"; }

// The "loss" of every "train" record of a metrics.jsonl, in step order.
std::vector<double> train_losses(const std::string& metrics_path) {
  std::vector<double> out;
  std::ifstream f(metrics_path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("{\"event\":\"train\"", 0) != 0) continue;
    const size_t at = line.find("\"loss\":");
    if (at != std::string::npos) out.push_back(std::strtod(line.c_str() + at + 7, nullptr));
  }
  return out;
}

class FusedDataParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (blu::cuda::device_count() < 2) {
      if (env_is_1("BLU_REQUIRE_MULTI_GPU")) FAIL() << "needs 2 CUDA devices, found " << blu::cuda::device_count();
      GTEST_SKIP() << "needs 2 CUDA devices, found " << blu::cuda::device_count();
    }
    root_ = fs::temp_directory_path() / ("blu_fused_dp_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    blu::train::test::write_pattern_shards((root_ / "data").string());
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }

  // GPT-2 124M (the fused attention needs head dim 64) on a short context, strict fp32.
  std::string blutrain(const std::string& out, const std::string& flags) const {
    return std::string(BLUTRAIN_EXE) + " train --model d12 --device cuda --engine fused --precision fp32 " +
           "--attention strict --block-size 64 --seq-len 64 --data " + (root_ / "data").string() +
           " --max-steps 20 --lr 6e-4 --warmup-steps 2 --val-every -1 --val-batches -1 --sample-tokens 0 "
           "--no-plot --no-save --resume none --out-dir " +
           (root_ / out).string() + " " + flags;
  }
  std::string metrics(const std::string& out) const { return (root_ / out / "metrics.jsonl").string(); }

  // Note [Data-parallel reference run]
  // The reference is one GPU on the same global batch, split into micro-batches of the per-rank
  // size (B=4, gradients accumulated): the rank split and the micro-batch split then cover the
  // same rows (the loader gives rank r the r-th B*T slice of each global window, the one-GPU
  // run reads those slices in turn) and only the summation order of the two halves differs.
  // Against one GPU at B=8 in one pass (a different split of every dW reduction: 512 rows vs two
  // of 256), 2026-11-26 on 2x H200 the curves differed by 1.2e-5 (graph, eager) and 2.5e-5
  // (accumulation) relative within 6 steps: fp32 reassociation (~1e-7 per gradient) amplified by
  // Adam on gradient entries near zero while this test's loss falls from 10.9 to 0.01. That
  // run is still made by the graph test and held to 1e-4.
  // Two ranks of B=4 (`common` + `batch` flags) against one GPU of B=4 over `one_total_tokens`
  // per step (`common` flags).
  void expect_two_gpus_match_one(const std::string& tag, const std::string& common, const std::string& batch,
                                 int one_total_tokens, bool also_single_pass = false) {
    auto one = run_command("CUDA_VISIBLE_DEVICES=0 " +
                           blutrain(tag + "_one", "--batch-size 4 --total-batch-tokens " +
                                                      std::to_string(one_total_tokens) + " " + common));
    ASSERT_EQ(one.status, 0) << one.output;
    auto two = run_command(std::string(BLURUN_EXE) + " --nproc-per-node 2 -- " +
                           rank_program(blutrain(tag + "_two", "--batch-size 4 --dp 2 " + batch + " " + common)));
    if (two.status != 0 && two.output.find("this build has no NCCL") != std::string::npos) {
      if (env_is_1("BLU_REQUIRE_GPU") || env_is_1("BLU_REQUIRE_MULTI_GPU")) FAIL() << "built without NCCL";
      GTEST_SKIP() << "built without NCCL";
    }
    ASSERT_EQ(two.status, 0) << two.output;
    std::printf("%s: one GPU %.1f s, two GPUs %.1f s\n", tag.c_str(), one.seconds, two.seconds);
    EXPECT_NE(two.output.find("gradients averaged over 2 ranks (nccl) inside the backward"), std::string::npos)
        << two.output;
    EXPECT_EQ(two.output.find("[rank 1] step"), std::string::npos) << "only rank 0 reports\n" << two.output;
    const std::vector<double> ref = train_losses(metrics(tag + "_one"));
    ASSERT_EQ(ref.size(), 20u) << one.output;
    EXPECT_GT(ref.front(), ref.back() + 0.5) << "the one-GPU run does not learn\n" << one.output;
    const std::vector<double> two_losses = train_losses(metrics(tag + "_two"));
    blu::test::expect_same_loss_curve(two_losses, ref, 1e-5, tag);
    if (also_single_pass) {
      auto single = run_command("CUDA_VISIBLE_DEVICES=0 " + blutrain(tag + "_single", "--batch-size 8 " + batch + " " + common));
      ASSERT_EQ(single.status, 0) << single.output;
      blu::test::expect_same_loss_curve(two_losses, train_losses(metrics(tag + "_single")), 1e-4,
                                        tag + " vs one GPU at B=8 in one pass");
    }
  }

  fs::path root_;
};

}  // namespace

TEST_F(FusedDataParallel, GraphStepOnTwoGpusMatchesOneGpu) {
  expect_two_gpus_match_one("graph", "", "", 512, /*also_single_pass=*/true);
}

TEST_F(FusedDataParallel, AccumulationOnTwoGpusMatchesOneGpu) {
  // 2 micro-batches per step on both sides: the ranks all-reduce in the second one only.
  expect_two_gpus_match_one("accum", "", "--total-batch-tokens 1024", 1024);
}

// Note [Embedding gradient by all-gather] (fused_step.cpp): the tied embedding's gradient from an
// early all-reduce plus all-gathered embedding rows, with and without accumulation micro-steps.
TEST_F(FusedDataParallel, EmbeddingGradByAllGatherMatchesOneGpu) {
  expect_two_gpus_match_one("gather", "", "--dp-embedding-grad gather", 512);
}

TEST_F(FusedDataParallel, EmbeddingGradByAllGatherWithAccumulationMatchesOneGpu) {
  expect_two_gpus_match_one("gather_accum", "", "--dp-embedding-grad gather --total-batch-tokens 1024", 1024);
}

TEST_F(FusedDataParallel, EagerStepOnTwoGpusMatchesOneGpu) {
  expect_two_gpus_match_one("eager", "--no-graph", "", 512);
}
