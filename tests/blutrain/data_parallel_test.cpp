// data_parallel_test.cpp: `blutrain train --dp 2` as two CPU ranks under blurun (Gloo), with DDP
// (and accumulation micro-steps) and with --zero 1, reproduces the per-step train and val losses
// of the one-process run of the same global batch within 1e-5 relative; a whole ZeRO-1/3
// checkpoint (moments gathered from the shards) and a sharded ZeRO-2 one resume in one process,
// and a gang restarted by blurun --max-restarts resumes on 2 ranks from its sharded checkpoint,
// onto the uninterrupted curve; only rank 0 writes; a
// non-finite gradient makes every rank skip the same step (DDP and ZeRO-1 stay on the one-process
// curve) or stop with the report (Note [Non-finite steps]); bad --dp / --zero flags and launches
// are clear errors naming the values (Note [Data-parallel training] in
// blutrain/src/train/data_parallel.h).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "blutensor/error.h"
#include "blutrain/config.h"
#include "common/loss_curves.h"
#include "common/run_command.h"
#include "support/metrics_losses.h"
#include "support/rank_runs.h"

namespace fs = std::filesystem;
using blu::test::losses_in;
using blu::test::run_command;

namespace {

class DataParallelTrain : public blu::train::test::RankRuns {
 protected:
  DataParallelTrain() : RankRuns("dp") {}
  // The program with the flags every run here shares: tiny model, fp32 on the CPU, one thread per
  // process (2 cores, 2 ranks), T=32, 12 steps, validation at 0, 6 and the end.
  std::string blutrain(const std::string& out, const std::string& flags) const {
    return program(out,
                   "--model tiny --device cpu --seq-len 32 --max-steps 12 --lr 2e-3 --warmup-steps 3 --val-every 6 "
                   "--val-batches 1 --sample-tokens 0 --no-plot --threads 1 --vocab corpus --resume none",
                   flags);
  }

  // Runs `dp_flags` on 2 ranks of B=2 and the one-process run of B=4 (same global batch and
  // tokens per step); compares train and val curves.
  void expect_two_ranks_match_one_process(const std::string& dp_flags,
                                          const std::string& common_flags) {
    auto one = run_command(blutrain("one", "--batch-size 4 " + common_flags));
    ASSERT_EQ(one.status, 0) << one.output;
    auto two =
        run_command(blurun(2, blutrain("two", "--batch-size 2 " + dp_flags + " " + common_flags)));
    ASSERT_EQ(two.status, 0) << two.output;
    std::printf("one process %.1f s, two ranks %.1f s\n", one.seconds, two.seconds);
    const std::vector<double> ref = losses_in(metrics("one"), "train");
    ASSERT_EQ(ref.size(), 12u) << one.output;
    EXPECT_GT(ref.front(), ref.back() + 0.5) << "the one-process run does not learn";
    // Only rank 0 writes metrics: 12 train records, not 24.
    blu::test::expect_same_loss_curve(losses_in(metrics("two"), "train"), ref, 1e-5,
                                      dp_flags + " train");
    blu::test::expect_same_loss_curve(losses_in(metrics("two"), "val"),
                                      losses_in(metrics("one"), "val"), 1e-5, dp_flags + " val");
    // The progress line carries the data-parallel figures, from rank 0 only.
    EXPECT_NE(two.output.find("[rank 0] step 12/12 | loss"), std::string::npos) << two.output;
    EXPECT_NE(two.output.find("| dp 2: rank mem "), std::string::npos) << two.output;
    EXPECT_EQ(two.output.find("[rank 1] step"), std::string::npos) << two.output;
  }

  // One process of B=4 resumes the 2-rank run's checkpoint of step 6 ("two/step_00000006"; whole,
  // or sharded: Note [Sharded checkpoints]) and continues on the one-process curve ("one").
  void expect_one_process_resumes_at_step_6(const std::string& flags, const std::string& label,
                                            const std::string& format) {
    const std::string ckpt = (root_ / "two" / "step_00000006").string();
    ASSERT_TRUE(fs::exists(ckpt + (format == "whole" ? "/optimizer.safetensors" : "/shard_index.json"))) << ckpt;
    auto resumed = run_command(blutrain("resumed", "--batch-size 4 " + flags + " --resume " + ckpt));
    ASSERT_EQ(resumed.status, 0) << resumed.output;
    const std::vector<double> all = losses_in(metrics("one"), "train");
    blu::test::expect_same_loss_curve(losses_in(metrics("resumed"), "train"),
                                      std::vector<double>(all.begin() + 6, all.end()), 1e-5, label);
  }
};

}  // namespace

TEST_F(DataParallelTrain, DdpTwoRanksWithAccumulationMatchOneProcess) {
  REQUIRE_GLOO();
  // 2 micro-steps per step: the first under no_sync, buckets reduced in the second backward.
  expect_two_ranks_match_one_process("--dp 2", "--total-batch-tokens 256");
}

TEST_F(DataParallelTrain, Zero2TwoRanksWithAccumulationMatchOneProcessAndItsCheckpointResumesInOne) {
  REQUIRE_GLOO();
  // Gradients reduce-scattered inside each micro-step's backward, in 1 MiB chunks (~17 of them).
  const std::string common = "--total-batch-tokens 256 --ckpt-every 6";
  expect_two_ranks_match_one_process("--dp 2 --zero 2 --dp-bucket-mb 1", common);
  // Its checkpoint is sharded by default (each rank wrote its chunked ranges): one process
  // assembles whole moments from it.
  expect_one_process_resumes_at_step_6("--total-batch-tokens 256", "resumed from ZeRO-2", "sharded");
}

TEST_F(DataParallelTrain, Zero1TwoRanksMatchOneProcessAndItsCheckpointResumesInOne) {
  REQUIRE_GLOO();
  expect_two_ranks_match_one_process("--dp 2 --zero 1 --checkpoint-format whole", "--ckpt-every 6");
  // The whole ZeRO-1 checkpoint of step 6 holds the moments gathered from both shards: one
  // process resuming from it continues on the one-process curve.
  expect_one_process_resumes_at_step_6("", "resumed from ZeRO-1", "whole");
}

TEST_F(DataParallelTrain, Zero3TwoRanksWithAccumulationMatchOneProcessAndCheckpointsAreOneProcessOnes) {
  REQUIRE_GLOO();
  // Note [ZeRO-3 GPT-2]: weights, gradients and moments sharded, every block gathered and
  // recomputed in backward; 2 accumulation micro-steps.
  const std::string common = "--total-batch-tokens 256 --ckpt-every 6";
  expect_two_ranks_match_one_process("--dp 2 --zero 3 --checkpoint-format whole", common);
  // Its whole checkpoint (weights and moments gathered from the shards) is the one-process format...
  expect_one_process_resumes_at_step_6("--total-batch-tokens 256", "resumed from ZeRO-3", "whole");
  // ...and the one-process checkpoint of step 6 resumes on 2 ZeRO-3 ranks (each keeps its pieces).
  auto z3 = run_command(blurun(2, blutrain("z3_resumed", "--batch-size 2 --dp 2 --zero 3 --total-batch-tokens 256 "
                                                          "--resume " + (root_ / "one" / "step_00000006").string())));
  ASSERT_EQ(z3.status, 0) << z3.output;
  const std::vector<double> all = losses_in(metrics("one"), "train");
  blu::test::expect_same_loss_curve(losses_in(metrics("z3_resumed"), "train"),
                                    std::vector<double>(all.begin() + 6, all.end()), 1e-5,
                                    "ZeRO-3 resumed from one process");
}

TEST_F(DataParallelTrain, Zero1GangRestartResumesOntoTheUninterruptedCurve) {
  REQUIRE_GLOO();
  // 10 steps, a checkpoint at 4; the first attempt stops abruptly after 7 steps (status 3 on both
  // ranks), blurun restarts the gang, which resumes from step 4 (both ranks load their ZeRO-1
  // slices of the moments) and finishes 5..10 (6 steps: below the stop) on the one-process curve.
  const std::string common = "--max-steps 10 --val-batches -1 --ckpt-every 4 ";
  auto one = run_command(blutrain("one", "--batch-size 4 " + common));
  ASSERT_EQ(one.status, 0) << one.output;
  auto two = run_command(
      std::string(BLURUN_EXE) + " --nproc-per-node 2 --max-restarts 1 -- " +
      blutrain("two",
               "--batch-size 2 --dp 2 --zero 1 --stop-after-steps 7 --resume auto " + common));
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_NE(two.output.find("restarting the gang (restart 1 of 1)"), std::string::npos)
      << two.output;
  EXPECT_NE(two.output.find("[rank 0] resumed from"), std::string::npos) << two.output;
  const std::vector<double> ref = losses_in(metrics("one"), "train");
  const std::vector<double> got = losses_in(metrics("two"), "train");  // 1..7, then 5..10
  ASSERT_EQ(ref.size(), 10u);
  ASSERT_EQ(got.size(), 13u) << two.output;
  blu::test::expect_same_loss_curve(std::vector<double>(got.begin(), got.begin() + 7),
                                    std::vector<double>(ref.begin(), ref.begin() + 7), 1e-5,
                                    "first attempt");
  blu::test::expect_same_loss_curve(std::vector<double>(got.begin() + 7, got.end()),
                                    std::vector<double>(ref.begin() + 4, ref.end()), 1e-5,
                                    "after the restart");
}

// Note [Non-finite steps] with --dp: the hook puts a NaN into one gradient at step 4 on every
// rank (after DDP's reduction; before ZeRO-1's reduce-scatter); the verdict is the global norm, so
// both ranks skip step 4 and the curves (DDP, ZeRO-1) stay on the one-process run's, which skipped
// it too. Under --nonfinite stop both ranks stop with the report and blurun ends in failure.
TEST_F(DataParallelTrain, NonfiniteStepIsSkippedOrStoppedByEveryRankTogether) {
  REQUIRE_GLOO();
  const std::string inject = "BLUTRAIN_TEST_INJECT_NONFINITE=4@h.2.attn.c_proj.weight ";
  const std::string common = "--max-steps 8 --val-batches -1 --nonfinite skip ";
  auto one = run_command(inject + blutrain("one", "--batch-size 4 " + common));
  ASSERT_EQ(one.status, 0) << one.output;
  const std::vector<double> ref = losses_in(metrics("one"), "train");
  ASSERT_EQ(ref.size(), 7u) << one.output;  // step 4 has a "nonfinite" event instead
  for (const std::string dp : {"--dp 2", "--dp 2 --zero 1", "--dp 2 --zero 2"}) {
    const std::string out = dp.size() > 6 ? "zero" + dp.substr(dp.size() - 1) : "ddp";
    auto two = run_command(inject + blurun(2, blutrain(out, "--batch-size 2 " + dp + " " + common)));
    ASSERT_EQ(two.status, 0) << two.output;
    EXPECT_NE(two.output.find("[rank 0] warning: non-finite step 4: "), std::string::npos) << two.output;
    EXPECT_NE(two.output.find("h.2.attn.c_proj.weight: update skipped"), std::string::npos) << two.output;
    blu::test::expect_same_loss_curve(losses_in(metrics(out), "train"), ref, 1e-5, dp + " --nonfinite skip");
  }
  auto stop = run_command(inject + blurun(2, blutrain("stop", "--batch-size 2 --dp 2 --max-steps 8 --val-batches -1")));
  EXPECT_NE(stop.status, 0) << stop.output;
  EXPECT_NE(stop.output.find("non-finite step 4: "), std::string::npos) << stop.output;
  EXPECT_NE(stop.output.find("first non-finite gradient (optimizer order): h.2.attn.c_proj.weight"), std::string::npos)
      << stop.output;
  EXPECT_EQ(losses_in(metrics("stop"), "train").size(), 3u) << stop.output;
}

TEST_F(DataParallelTrain, LaunchMismatchesAreClearErrors) {
  // Every case fails before a process group is made: no Gloo needed.
  auto r = run_command(blutrain("e1", "--dp 2"));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("--dp 2 needs one process per rank"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("blurun --nproc-per-node 2"), std::string::npos) << r.output;

  r = run_command(blurun(2, blutrain("e2", "--dp 3")));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--dp 3 does not match WORLD_SIZE=2"), std::string::npos) << r.output;

  r = run_command(blurun(2, blutrain("e3", "")));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("of WORLD_SIZE=2 but --dp is 1: pass --dp 2"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(root_ / "e3" / "metrics.jsonl"))
      << "a mismatched launch must not start training";
}

TEST_F(DataParallelTrain, BadFlagsAreClearErrors) {
  auto err = [](const std::string& flags, bool gpu = false) {
    std::vector<std::string> args = {"blutrain"};
    std::string word;
    for (char c : flags + " ") {
      if (c == ' ') {
        if (!word.empty()) args.push_back(word);
        word.clear();
      } else {
        word += c;
      }
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    try {
      blu::train::TrainConfig c =
          blu::train::parse_train_flags(static_cast<int>(argv.size()), argv.data(), 1);
      blu::train::resolve_auto(c, gpu);
    } catch (const blu::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(
      err("--zero 1")
          .find("--zero 1 shards the optimizer state across data-parallel ranks: it needs --dp N "
                "with N > 1 (got --dp 1)"),
      std::string::npos);
  EXPECT_NE(err("--dp 2 --zero 4").find("--zero 4: expected 0, 1, 2 or 3"), std::string::npos);
  EXPECT_EQ(err("--dp 2 --zero 2"), "no error");
  EXPECT_EQ(err("--dp 2 --zero 3"), "no error");
  EXPECT_NE(err("--dp 2 --zero 3 --cp 2 --seq-len 16")
                .find("--zero 3 with --tp 1 --cp 2: ZeRO-3 over a tensor- or context-parallel model is not implemented"),
            std::string::npos);
  EXPECT_NE(err("--dp 0").find("--dp 0: expected the number of data-parallel ranks"),
            std::string::npos);
  EXPECT_NE(err("--dp two").find("option --dp: 'two' is not a valid integer"), std::string::npos);
  // The fused engine takes --dp (its step averages the gradients itself); ZeRO-1 there is not built.
  EXPECT_EQ(err("--dp 2 --device cuda", true), "no error");
  EXPECT_EQ(err("--dp 2 --device cuda --engine fused --total-batch-tokens 65536", true), "no error");
  EXPECT_NE(err("--dp 2 --zero 1 --device cuda", true)
                .find("--zero 1 with --engine fused: ZeRO runs on the autograd engine only for now"),
            std::string::npos);
  EXPECT_EQ(err("--dp 2 --zero 1 --device cuda --engine autograd", true), "no error");
  EXPECT_NE(err("--dp 2 --device cuda --dp-bucket-mb 0", true)
                .find("--dp-bucket-mb 0: expected the size of a gradient bucket in MiB"),
            std::string::npos);
  EXPECT_NE(err("--dp 2 --device cuda --dp-embedding-grad scatter", true)
                .find("--dp-embedding-grad 'scatter': expected allreduce or gather"),
            std::string::npos);
  EXPECT_EQ(err("--dp 2 --device cuda --dp-embedding-grad gather", true), "no error");
  EXPECT_NE(err("--dp 2 --device cuda --engine autograd --dp-embedding-grad gather", true)
                .find("--dp-embedding-grad gather is a fused-engine option"),
            std::string::npos);
  EXPECT_NE(err("--dp 2 --batch-size 4 --seq-len 32 --total-batch-tokens 128")
                .find("--total-batch-tokens 128 is not a multiple of B*T*dp = 256"),
            std::string::npos);
  EXPECT_EQ(err("--dp 2 --zero 1"), "no error");
  EXPECT_EQ(err("--dp 2 --device cuda --engine autograd", true), "no error");
}
