// fused_nonfinite_gpu_test.cpp: the fused CUDA engine's --nonfinite stop on a GPU (Note [Non-finite
// steps] in blutrain/src/train/nonfinite.h): a weight poisoned with NaN before step 3 (the test
// hook's fused form) makes the graph-captured step's loss and gradient norm non-finite; the run ends
// with exit status 1 and the report (step, loss, norm, the first non-finite gradient, that the fused
// step had applied its update), nothing is saved after step 2, and metrics.jsonl has the "nonfinite"
// event. Skips without a CUDA device (fails instead under BLU_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "blutensor/cuda_stream.h"
#include "common/run_command.h"
#include "support/pattern_shards.h"

namespace fs = std::filesystem;
using blu::test::run_command;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(FusedNonfinite, PoisonedWeightStopsWithAReportAndNothingSavedAfter) {
  if (blu::cuda::device_count() < 1) {
    const char* req = std::getenv("BLU_REQUIRE_GPU");
    if (req && std::string(req) == "1") FAIL() << "BLU_REQUIRE_GPU=1 but no CUDA device";
    GTEST_SKIP() << "no CUDA device";
  }
  const fs::path root = fs::temp_directory_path() / ("blu_fused_nonfinite_" + std::to_string(::getpid()));
  fs::remove_all(root);
  blu::train::test::write_pattern_shards((root / "data").string());
  const fs::path out = root / "out";
  // A 2-layer GPT-2 shape of head dim 64 (the fused attention's; Note [Model shapes]: small, so the
  // test also runs under compute-sanitizer's memcheck, where d12 took over 150 s) on a short context,
  // strict fp32, a checkpoint every 2 steps: step 2's is the last good one.
  // The program runs under $BLU_RANK_WRAPPER when set (Note [Sanitized ranks]: compute-sanitizer
  // cannot follow a child of a test process that holds a CUDA context; session 17 saw this test
  // time out under memcheck and racecheck with --target-processes all).
  const std::string cmd = "BLUTRAIN_TEST_INJECT_NONFINITE=3@h.1.mlp.c_fc.weight:nan " +
                          blu::test::rank_program(std::string(BLUTRAIN_EXE) +
                          " train --model 2x2x128 --device cuda --engine fused --precision fp32 --attention strict "
                          "--block-size 64 --seq-len 64 --batch-size 4 --data " + (root / "data").string() +
                          " --max-steps 5 --ckpt-every 2 --val-every -1 --val-batches -1 --sample-tokens 0 "
                          "--no-plot --resume none --nonfinite stop --out-dir " + out.string());
  const auto r = run_command(cmd);
  EXPECT_EQ(r.status, 1) << r.output;
  for (const std::string want :
       {"non-finite step 3: loss ", ", gradient norm ", "first non-finite gradient (optimizer order): ",
        "Training stopped (--nonfinite stop): the fused step had applied the update; nothing is saved after step 2",
        "Last checkpoint: "}) {
    EXPECT_NE(r.output.find(want), std::string::npos) << "missing '" << want << "' in:\n" << r.output;
  }
  EXPECT_NE(r.output.find("step 2/5 |"), std::string::npos) << "steps 1-2 trained normally:\n" << r.output;
  EXPECT_EQ(r.output.find("step 3/5 |"), std::string::npos) << "no progress line for the bad step:\n" << r.output;
  std::string latest = read_text(out / "latest");
  while (!latest.empty() && (latest.back() == '\n' || latest.back() == ' ')) latest.pop_back();
  EXPECT_EQ(latest, "step_00000002");
  EXPECT_FALSE(fs::exists(out / "step_00000004"));
  const std::string metrics = read_text(out / "metrics.jsonl");
  EXPECT_NE(metrics.find("{\"event\":\"nonfinite\""), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\"action\":\"stop\""), std::string::npos) << metrics;
  fs::remove_all(root);
}

}  // namespace
