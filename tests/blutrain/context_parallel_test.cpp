// context_parallel_test.cpp: `blutrain train --cp 2` as two CPU ranks under blurun (Gloo), each
// sequence cut into 4 chunks (rank r: chunks r and 3-r) with ring attention, reproduces the
// per-step train and val losses of the one-process run of the same batch within 1e-5 relative
// over 20 steps; its checkpoints are one-process ones (one process resumes a --cp checkpoint onto
// the uninterrupted curve); a 2 x 2 mesh (--dp 2 --cp 2, with gradient accumulation) matches too;
// bad --cp flags and launches are clear errors (Note [Context-parallel GPT-2] in blutrain/gpt2.h,
// Note [Context-parallel training] in blutrain/src/train/data_parallel.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/loss_curves.h"
#include "common/run_command.h"
#include "support/metrics_losses.h"
#include "support/rank_runs.h"

using blu::test::losses_in;
using blu::test::run_command;

namespace {

class ContextParallelTrain : public blu::train::test::RankRuns {
 protected:
  ContextParallelTrain() : RankRuns("cp") {}
  // Tiny model, fp32 on the CPU, one thread per process, T=16, the corpus vocabulary (cheap ranks),
  // validation and a checkpoint every 10 steps.
  std::string blutrain(const std::string& out, const std::string& flags) const {
    return program(out,
                   "--model tiny --device cpu --vocab corpus --cache-dir " + (root_ / "cache").string() +
                       " --seq-len 16 --lr 2e-3 --warmup-steps 3 --val-every 10 --val-batches 1 --final-val-batches 0 "
                       "--ckpt-every 10 --sample-tokens 0 --no-plot --threads 1 --resume none",
                   flags);
  }
};

}  // namespace

TEST_F(ContextParallelTrain, TwoRanksMatchOneProcessAndCheckpointsAreOneProcessOnes) {
  REQUIRE_GLOO();
  const std::string common = "--batch-size 2 --max-steps 20 ";
  auto one = run_command(blutrain("one", common));
  ASSERT_EQ(one.status, 0) << one.output;
  auto two = run_command(blurun(2, blutrain("two", common + "--cp 2")));
  ASSERT_EQ(two.status, 0) << two.output;
  std::printf("one process %.1f s, --cp 2 %.1f s\n", one.seconds, two.seconds);
  const std::vector<double> ref = losses_in(metrics("one"), "train");
  ASSERT_EQ(ref.size(), 20u) << one.output;
  EXPECT_GT(ref.front(), ref.back() + 0.5) << "the one-process run does not learn";
  blu::test::expect_same_loss_curve(losses_in(metrics("two"), "train"), ref, 1e-5, "--cp 2 train");
  const std::vector<double> ref_val = losses_in(metrics("one"), "val");
  ASSERT_EQ(ref_val.size(), 3u) << one.output;  // steps 0, 10, 20
  blu::test::expect_same_loss_curve(losses_in(metrics("two"), "val"), ref_val, 1e-5, "--cp 2 val");
  EXPECT_NE(two.output.find("[rank 0] context parallel over 2 ranks (gloo)"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("| cp 2"), std::string::npos) << two.output;
  EXPECT_EQ(two.output.find("[rank 1] step"), std::string::npos) << two.output;
  // The --cp checkpoint of step 10 (replicated weights: the one-process format) resumes in one
  // process onto the uninterrupted curve.
  auto resumed = run_command(blutrain("r1", common + "--no-save --resume " + checkpoint("two", 10)));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  blu::test::expect_same_loss_curve(losses_in(metrics("r1"), "train"), std::vector<double>(ref.begin() + 10, ref.end()),
                                    1e-5, "one process from --cp 2 step 10");
}

TEST_F(ContextParallelTrain, TwoByTwoMeshMatchesOneProcess) {
  REQUIRE_GLOO();
  // 4 ranks: context-parallel pairs {0, 1} and {2, 3}, each pair reading B=1 of the global batch of
  // 2, with 2 accumulation micro-steps (DDP's no_sync step in between).
  const std::string common = "--max-steps 12 --total-batch-tokens 64 --no-save ";
  auto one = run_command(blutrain("one", common + "--batch-size 2"));
  ASSERT_EQ(one.status, 0) << one.output;
  auto mesh = run_command(blurun(4, blutrain("mesh", common + "--batch-size 1 --dp 2 --cp 2")));
  ASSERT_EQ(mesh.status, 0) << mesh.output;
  std::printf("one process %.1f s, --dp 2 --cp 2 %.1f s\n", one.seconds, mesh.seconds);
  blu::test::expect_same_loss_curve(losses_in(metrics("mesh"), "train"), losses_in(metrics("one"), "train"), 1e-5,
                                    "--dp 2 --cp 2 train");
  blu::test::expect_same_loss_curve(losses_in(metrics("mesh"), "val"), losses_in(metrics("one"), "val"), 1e-5,
                                    "--dp 2 --cp 2 val");
  EXPECT_NE(mesh.output.find("| dp 2"), std::string::npos) << mesh.output;
  EXPECT_NE(mesh.output.find("| cp 2"), std::string::npos) << mesh.output;
}

TEST_F(ContextParallelTrain, BadFlagsAndLaunchesAreClearErrors) {
  REQUIRE_GLOO();
  const std::string common = "--batch-size 2 --max-steps 2 --no-save ";
  auto expect_error = [](const blu::test::CommandResult& r, const std::string& text) {
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_NE(r.output.find(text), std::string::npos) << "expected '" << text << "' in:\n" << r.output;
  };
  expect_error(run_command(blutrain("e0", common + "--cp 0")), "--cp 0: expected the number of context-parallel ranks");
  expect_error(run_command(blutrain("e1", common + "--cp 3")),
               "--cp 3: --seq-len 16 must be a multiple of 6 (each sequence is cut into 2 x cp equal chunks");
  expect_error(run_command(blutrain("e2", common + "--cp 2 --tp 2")),
               "--cp 2 with --tp 2: tensor and context parallelism together are not implemented");
  expect_error(run_command(blutrain("e3", common + "--cp 2")),
               "--dp 1 --cp 2 needs 2 processes, one per rank, but this process was not started by a launcher");
  expect_error(run_command(blurun(2, blutrain("e4", common + "--cp 2 --dp 2"))),
               "--dp 2 --cp 2 needs WORLD_SIZE = dp x cp = 4 but the launcher started 2");
}
