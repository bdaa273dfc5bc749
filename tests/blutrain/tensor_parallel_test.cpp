// tensor_parallel_test.cpp: `blutrain train --tp 2` as two CPU ranks under blurun (Gloo)
// reproduces the per-step train and val losses of the one-process run of the same batch within
// 1e-5 relative over 20 steps (and greedy samples, when the GPT-2 vocabulary is installed); its
// checkpoints are one-process ones (one process resumes a --tp checkpoint, --tp resumes a
// one-process one, both onto the uninterrupted curve) and --init-from weights are cut into shards;
// a 2 x 2 mesh (--dp 2 --tp 2, with gradient accumulation and --tp-overlap 3) matches too; a non-finite gradient makes
// both ranks skip the same step;
// bad --tp flags and launches are clear errors (Note [Tensor-parallel training] in
// blutrain/src/train/tensor_parallel.h).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/loss_curves.h"
#include "common/run_command.h"
#include "support/metrics_losses.h"
#include "support/rank_runs.h"

namespace fs = std::filesystem;
using blu::test::losses_in;
using blu::test::run_command;

namespace {

// The text of the last "--- sample at step N ---" block of a run's output ("" without one).
std::string sample_of(std::string output) {
  for (size_t at; (at = output.find("[rank 0] ")) != std::string::npos;) output.erase(at, 9);  // blurun's prefix
  const size_t at = output.rfind("--- sample at step");
  if (at == std::string::npos) return "";
  const size_t begin = output.find('\n', at);
  const size_t end = output.find("\n---", begin);
  return output.substr(begin + 1, end - begin - 1);
}

class TensorParallelTrain : public blu::train::test::RankRuns {
 protected:
  TensorParallelTrain() : RankRuns("tp") {}
  // Tiny model, fp32 on the CPU, one thread per process, T=16, validation every 10 steps, a
  // checkpoint every 10, a greedy 12-token sample at the end (when the vocabulary is installed).
  // GPT-2's vocabulary (50304 padded rows: the lm head is most of the work), so B*T is kept small.
  std::string blutrain(const std::string& out, const std::string& flags) const {
    return program(out,
                   "--model tiny --device cpu --seq-len 16 --lr 2e-3 --warmup-steps 3 --val-every 10 --val-batches 1 "
                   "--final-val-batches 0 --ckpt-every 10 --sample-tokens 12 --temperature 0 --no-plot --threads 1 "
                   "--resume none",
                   flags);
  }
};

}  // namespace

TEST_F(TensorParallelTrain, TwoRanksMatchOneProcessAndCheckpointsAreOneProcessOnes) {
  REQUIRE_GLOO();
  const std::string common = "--batch-size 2 --max-steps 20 ";
  auto one = run_command(blutrain("one", common));
  ASSERT_EQ(one.status, 0) << one.output;
  auto two = run_command(blurun(2, blutrain("two", common + "--tp 2")));
  ASSERT_EQ(two.status, 0) << two.output;
  std::printf("one process %.1f s, --tp 2 %.1f s\n", one.seconds, two.seconds);
  const std::vector<double> ref = losses_in(metrics("one"), "train");
  ASSERT_EQ(ref.size(), 20u) << one.output;
  EXPECT_GT(ref.front(), ref.back() + 0.5) << "the one-process run does not learn";
  blu::test::expect_same_loss_curve(losses_in(metrics("two"), "train"), ref, 1e-5, "--tp 2 train");
  const std::vector<double> ref_val = losses_in(metrics("one"), "val");
  ASSERT_EQ(ref_val.size(), 3u) << one.output;  // steps 0, 10, 20
  blu::test::expect_same_loss_curve(losses_in(metrics("two"), "val"), ref_val, 1e-5, "--tp 2 val");
  EXPECT_NE(two.output.find("[rank 0] tensor parallel over 2 ranks (gloo)"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("[rank 0] step 20/20 | loss"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("| tp 2"), std::string::npos) << two.output;
  EXPECT_EQ(two.output.find("[rank 1] step"), std::string::npos) << two.output;
  // bludist Note [Communication timing]: every step reports its collectives; Gloo's calls block,
  // so all of their time is exposed (the NCCL path measures the hidden share on the device).
  const std::vector<double> comm = blu::test::field_in(metrics("two"), "train", "comm_ms");
  const std::vector<double> exposed = blu::test::field_in(metrics("two"), "train", "comm_exposed_ms");
  ASSERT_EQ(comm.size(), 20u) << two.output;
  ASSERT_EQ(exposed.size(), 20u) << two.output;
  for (std::size_t i = 0; i < comm.size(); ++i) {
    EXPECT_GT(comm[i], 0.0) << "step " << i + 1;
    EXPECT_EQ(exposed[i], comm[i]) << "step " << i + 1;
  }
  EXPECT_NE(two.output.find("| tp 2, comm "), std::string::npos) << two.output;
  EXPECT_NE(two.output.find(" ms, 0% hidden)"), std::string::npos) << two.output;
  // The logits all-gathered for sampling give the one-process greedy tokens.
  EXPECT_EQ(sample_of(two.output), sample_of(one.output)) << two.output;
  if (!sample_of(one.output).empty()) std::printf("greedy sample: %s\n", sample_of(one.output).c_str());

  // The --tp checkpoint of step 10 (whole tensors gathered from the shards) resumes in one process
  // (3 steps are enough to show weights, moments and step count came through), and the one-process
  // checkpoint resumes on 2 tensor-parallel ranks (each keeps its shards) to the end: an early stop
  // there would race blurun, which ends the gang when the first rank exits with a failure status.
  const std::string resume = "--sample-tokens 0 --no-save --resume ";
  auto resumed_one = run_command(blutrain("r1", common + "--stop-after-steps 3 " + resume + checkpoint("two", 10)));
  ASSERT_EQ(resumed_one.status, 3) << resumed_one.output;  // --stop-after-steps: an abrupt stop
  blu::test::expect_same_loss_curve(losses_in(metrics("r1"), "train"),
                                    std::vector<double>(ref.begin() + 10, ref.begin() + 13), 1e-5,
                                    "one process from --tp 2 step 10");
  auto resumed_two = run_command(blurun(2, blutrain("r2", common + "--tp 2 " + resume + checkpoint("one", 10))));
  ASSERT_EQ(resumed_two.status, 0) << resumed_two.output;
  blu::test::expect_same_loss_curve(losses_in(metrics("r2"), "train"), std::vector<double>(ref.begin() + 10, ref.end()),
                                    1e-5, "--tp 2 from one process step 10");

  // --init-from (Hugging Face weights: the one-process run's final model.safetensors) cut into
  // shards: 3 steps from it on 2 ranks follow the one-process run from it.
  const std::string init = "--max-steps 3 --sample-tokens 0 --no-save --init-from " + checkpoint("one", 20) +
                           "/model.safetensors ";
  auto init_one = run_command(blutrain("i1", "--batch-size 2 " + init));
  ASSERT_EQ(init_one.status, 0) << init_one.output;
  auto init_two = run_command(blurun(2, blutrain("i2", "--batch-size 2 --tp 2 " + init)));
  ASSERT_EQ(init_two.status, 0) << init_two.output;
  blu::test::expect_same_loss_curve(losses_in(metrics("i2"), "train"), losses_in(metrics("i1"), "train"), 1e-5,
                                    "--tp 2 --init-from");
}

TEST_F(TensorParallelTrain, TwoByTwoMeshMatchesOneProcess) {
  REQUIRE_GLOO();
  // 4 ranks: tensor-parallel pairs {0, 1} and {2, 3}, each pair reading B=1 of the global batch of 2,
  // with 2 accumulation micro-steps (DDP's no_sync step in between), the region GEMMs in 3 row
  // chunks (--tp-overlap 3, bludist Note [Async TP]). The corpus vocabulary (the
  // pattern's 24 ids padded to 128 rows: rank 1 of a pair holds only padding) keeps the 4
  // processes cheap.
  const std::string common = "--max-steps 12 --total-batch-tokens 64 --sample-tokens 0 --no-save --vocab corpus "
                             "--cache-dir " + (root_ / "cache").string() + " ";
  auto one = run_command(blutrain("one", common + "--batch-size 2"));
  ASSERT_EQ(one.status, 0) << one.output;
  auto mesh = run_command(blurun(4, blutrain("mesh", common + "--batch-size 1 --dp 2 --tp 2 --tp-overlap 3")));
  ASSERT_EQ(mesh.status, 0) << mesh.output;
  std::printf("one process %.1f s, --dp 2 --tp 2 %.1f s\n", one.seconds, mesh.seconds);
  blu::test::expect_same_loss_curve(losses_in(metrics("mesh"), "train"), losses_in(metrics("one"), "train"), 1e-5,
                                    "--dp 2 --tp 2 train");
  blu::test::expect_same_loss_curve(losses_in(metrics("mesh"), "val"), losses_in(metrics("one"), "val"), 1e-5,
                                    "--dp 2 --tp 2 val");
  EXPECT_NE(mesh.output.find("| dp 2: rank mem"), std::string::npos) << mesh.output;
  EXPECT_NE(mesh.output.find("| tp 2"), std::string::npos) << mesh.output;
}

// Note [Non-finite steps] with --tp: a NaN put into every rank's shard of one gradient at step 4
// makes the norm summed over the shards NaN on both ranks, so both skip the step, on the
// one-process curve (which skipped it too).
TEST_F(TensorParallelTrain, NonfiniteStepIsSkippedByBothRanks) {
  REQUIRE_GLOO();
  const std::string inject = "BLUTRAIN_TEST_INJECT_NONFINITE=4@h.2.attn.c_proj.weight ";
  const std::string common = "--batch-size 2 --max-steps 8 --nonfinite skip --sample-tokens 0 --no-save --vocab corpus "
                             "--cache-dir " + (root_ / "cache").string() + " ";
  auto one = run_command(inject + blutrain("one", common));
  ASSERT_EQ(one.status, 0) << one.output;
  auto two = run_command(inject + blurun(2, blutrain("two", common + "--tp 2")));
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_NE(two.output.find("[rank 0] warning: non-finite step 4: "), std::string::npos) << two.output;
  const std::vector<double> ref = losses_in(metrics("one"), "train");
  ASSERT_EQ(ref.size(), 7u) << one.output;  // step 4 has a "nonfinite" event instead
  blu::test::expect_same_loss_curve(losses_in(metrics("two"), "train"), ref, 1e-5, "--tp 2 --nonfinite skip");
}

TEST_F(TensorParallelTrain, BadFlagsAndLaunchesAreClearErrors) {
  REQUIRE_GLOO();
  const std::string common = "--batch-size 2 --max-steps 2 --sample-tokens 0 --no-save ";
  auto expect_error = [](const blu::test::CommandResult& r, const std::string& text) {
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_NE(r.output.find(text), std::string::npos) << "expected '" << text << "' in:\n" << r.output;
  };
  expect_error(run_command(blutrain("e0", common + "--tp 0")), "--tp 0: expected the number of tensor-parallel ranks");
  expect_error(run_command(blutrain("e1", common + "--tp 2 --dp 2 --zero 1")),
               "--tp 2 with --zero 1: ZeRO over a tensor-parallel model is not implemented");
  expect_error(run_command(blutrain("e2", common + "--tp 2")),
               "--dp 1 --tp 2 needs 2 processes, one per rank, but this process was not started by a launcher");
  expect_error(run_command(blurun(2, blutrain("e3", common + "--tp 2 --dp 2"))),
               "--dp 2 --tp 2 needs WORLD_SIZE = dp x tp = 4 but the launcher started 2");
  expect_error(run_command(blutrain("e5", common + "--tp-overlap 0")), "--tp-overlap 0: expected a number of row chunks");
  expect_error(run_command(blutrain("e6", common + "--tp-overlap 2")), "--tp-overlap 2 needs --tp > 1");
  // The tiny model has 4 heads: 3 ranks cannot take whole heads each.
  expect_error(run_command(blurun(3, blutrain("e4", common + "--tp 3"))),
               "--tp 3: the tiny model's 4 attention heads do not split into 3 equal parts");
}
