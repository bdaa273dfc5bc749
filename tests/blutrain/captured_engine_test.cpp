// captured_engine_test.cpp: `--engine captured` (Note [Captured engine]) trains the tiny GPT-2 on
// the CPU exactly like the autograd engine: every train and val loss and the final checkpoint's
// weights and moments bit for bit (step 2 recorded, steps 3.. run from the record, on the arena
// of Note [Step arena] and with a storage per temporary); unsupported
// configurations are clear errors. --compile (Note [blutrain --compile]) runs blu-plan on the record
// where the build has it (on the CPU nothing binds: the same losses) and, without blu-plan, says so
// and trains on as recorded, the same losses. (Stopping a run at a host read: capture_test.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/scoped_env.h"

#include "blutrain/checkpoint_dir.h"
#include "blutrain/trainer.h"
#include "support/pattern_shards.h"
#include "support/tiny_config.h"

namespace fs = std::filesystem;
using namespace blu::train;

namespace {

class CapturedEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("blu_captured_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    test::write_pattern_shards((root_ / "data").string());
  }
  void TearDown() override { fs::remove_all(root_); }
  TrainConfig config(const std::string& engine) {
    TrainConfig c = test::tiny_config((root_ / "data").string(), (root_ / engine).string());
    c.engine = engine;
    c.max_steps = 9;
    c.val_every = 4;
    c.plot = false;
    c.ckpt_every = 9;
    return c;
  }
  static std::string file_bytes(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  fs::path root_;
};

}  // namespace

TEST_F(CapturedEngine, TrainsExactlyLikeTheAutogradEngine) {
  std::ostringstream log_a, log_c;
  const TrainResult a = run_training(config("autograd"), log_a);
  const TrainResult c = run_training(config("captured"), log_c);
  EXPECT_NE(log_c.str().find("captured engine: step 2 recorded"), std::string::npos) << log_c.str();
  ASSERT_EQ(a.train_losses.size(), 9u);
  ASSERT_EQ(c.train_losses.size(), 9u);
  for (size_t i = 0; i < 9; ++i) EXPECT_EQ(c.train_losses[i].loss, a.train_losses[i].loss) << "step " << i + 1;
  EXPECT_GT(a.train_losses.front().loss, a.train_losses.back().loss + 0.5) << "the reference does not learn";
  ASSERT_EQ(c.val_losses.size(), a.val_losses.size());
  for (size_t i = 0; i < a.val_losses.size(); ++i) EXPECT_EQ(c.val_losses[i].loss, a.val_losses[i].loss);
  // The checkpoint: weights, moments and step count are the autograd run's.
  const fs::path ca = latest_checkpoint((root_ / "autograd").string()), cc = latest_checkpoint((root_ / "captured").string());
  ASSERT_FALSE(ca.empty());
  ASSERT_FALSE(cc.empty());
  EXPECT_EQ(file_bytes(cc / "model.safetensors"), file_bytes(ca / "model.safetensors"));
  EXPECT_EQ(file_bytes(cc / "optimizer.safetensors"), file_bytes(ca / "optimizer.safetensors"));
  // Note [Step arena]: the temporaries ran in one arena, reported with its lower bound; with
  // BLU_CAPTURE_ARENA=0 (a storage per temporary) the losses are the same.
  EXPECT_NE(log_c.str().find("captured engine: arena "), std::string::npos) << log_c.str();
  EXPECT_NE(log_c.str().find(" (lower bound "), std::string::npos) << log_c.str();
  EXPECT_NE(log_c.str().find(" in-place pairs shared)"), std::string::npos) << log_c.str();
  {
    // Note [In-place reuse] off alone (BLU_CAPTURE_INPLACE=0): the arena without the pairs, the
    // same losses.
    blu::test::ScopedEnv no_inplace("BLU_CAPTURE_INPLACE", "0");
    std::ostringstream log_n;
    TrainConfig n = config("captured");
    n.out_dir = (root_ / "no_inplace").string();
    const TrainResult r = run_training(n, log_n);
    EXPECT_NE(log_n.str().find("in place off: BLU_CAPTURE_INPLACE=0)"), std::string::npos) << log_n.str();
    ASSERT_EQ(r.train_losses.size(), 9u);
    for (size_t i = 0; i < 9; ++i) EXPECT_EQ(r.train_losses[i].loss, a.train_losses[i].loss) << "step " << i + 1;
  }
  blu::test::ScopedEnv off("BLU_CAPTURE_ARENA", "0");
  std::ostringstream log_p;
  TrainConfig p = config("captured");
  p.out_dir = (root_ / "per_buffer").string();
  p.summary_json = (root_ / "per_buffer" / "summary.json").string();
  const TrainResult r = run_training(p, log_p);
  EXPECT_NE(log_p.str().find("captured engine: a storage per temporary (BLU_CAPTURE_ARENA=0; the arena would be "),
            std::string::npos)
      << log_p.str();
  EXPECT_NE(file_bytes(p.summary_json).find("\"e2e.fp32.arena_enabled\": 0}"), std::string::npos)
      << file_bytes(p.summary_json);
  ASSERT_EQ(r.train_losses.size(), 9u);
  for (size_t i = 0; i < 9; ++i) EXPECT_EQ(r.train_losses[i].loss, a.train_losses[i].loss) << "step " << i + 1;
}

// Note [Position gradient as a copy] (blutensor): the position table's gradient (the tiny model's
// 256-row table read at 0..T-1) as a copy of the batch sum plus zeros: found once, and the run is
// the autograd run bit for bit (losses, weights, moments); without the switch nothing is folded.
TEST_F(CapturedEngine, PositionGradientAsACopyTrainsTheSame) {
  std::ostringstream log_a, log_c;
  const TrainResult a = run_training(config("autograd"), log_a);
  blu::test::ScopedEnv on("BLU_CAPTURE_POSITION_GRAD", "1");
  const TrainResult c = run_training(config("captured"), log_c);
  EXPECT_NE(log_c.str().find("position gradient: 1 identity embedding backward(s) run as a copy"), std::string::npos)
      << log_c.str();
  ASSERT_EQ(c.train_losses.size(), 9u);
  ASSERT_EQ(a.train_losses.size(), 9u);
  for (size_t i = 0; i < 9; ++i) EXPECT_EQ(c.train_losses[i].loss, a.train_losses[i].loss) << "step " << i + 1;
  const fs::path ca = latest_checkpoint((root_ / "autograd").string()), cc = latest_checkpoint((root_ / "captured").string());
  ASSERT_FALSE(ca.empty());
  ASSERT_FALSE(cc.empty());
  EXPECT_EQ(file_bytes(cc / "model.safetensors"), file_bytes(ca / "model.safetensors"));
  EXPECT_EQ(file_bytes(cc / "optimizer.safetensors"), file_bytes(ca / "optimizer.safetensors"));
  blu::test::ScopedEnv off("BLU_CAPTURE_POSITION_GRAD", "0");
  std::ostringstream log_o;
  TrainConfig o = config("captured");
  o.out_dir = (root_ / "off").string();
  (void)run_training(o, log_o);
  EXPECT_EQ(log_o.str().find("position gradient:"), std::string::npos) << log_o.str();
}

TEST_F(CapturedEngine, UnsupportedConfigurationsAreClearErrors) {
  TrainConfig c = config("captured");
  c.total_batch_tokens = 2 * c.batch_size * c.seq_len;  // two micro-batches
  std::ostringstream log;
  try {
    run_training(c, log);
    FAIL() << "accumulation accepted";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--engine captured takes one micro-batch per step"), std::string::npos)
        << e.what();
  }
  TrainConfig d;
  d.engine = "captured";
  d.dp = 2;
  d.device = "cpu";
  try {
    resolve_auto(d, false);
    FAIL() << "--dp 2 accepted";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--engine captured runs on one process"), std::string::npos) << e.what();
  }
}

TEST_F(CapturedEngine, CompileRunsBluPlanOrFallsBackWithTheSameLosses) {
  std::ostringstream log_a;
  const TrainResult a = run_training(config("autograd"), log_a);
  auto compiled = [&](const std::string& name, const std::string& blu_plan, const std::string& expect) {
    SCOPED_TRACE(name);
    blu::test::ScopedEnv env("BLU_PLAN", blu_plan);
    TrainConfig c = config(name);
    c.engine = "auto";
    c.compile = true;
    resolve_auto(c, false);
    EXPECT_EQ(c.engine, "captured");
    std::ostringstream log;
    const TrainResult r = run_training(c, log);
    EXPECT_NE(log.str().find(expect), std::string::npos) << log.str();
    ASSERT_EQ(r.train_losses.size(), a.train_losses.size());
    for (size_t i = 0; i < a.train_losses.size(); ++i) EXPECT_EQ(r.train_losses[i].loss, a.train_losses[i].loss) << i;
  };
  compiled("no_tool", "/nonexistent/blu-plan",
           "compile: /nonexistent/blu-plan not found; the step runs as recorded (no fused kernels)");
#ifdef BLU_PLAN_EXE
  compiled("with_tool", BLU_PLAN_EXE, "compile: blu-plan wrote a plan");
  EXPECT_TRUE(fs::exists(root_ / "with_tool" / "compiled_plan.json"));
#endif
  for (const auto& [engine, plan, error] :
       {std::tuple<std::string, std::string, std::string>{"fused", "", "--compile runs the captured engine (got --engine fused)"},
        {"captured", "p.json", "--compile makes its own plan; --plan p.json binds an existing one"}}) {
    TrainConfig d;
    d.device = "cpu";
    d.compile = true;
    d.engine = engine;
    d.plan = plan;
    try {
      resolve_auto(d, false);
      FAIL() << "accepted: --compile --engine " << engine << " --plan " << plan;
    } catch (const blu::Error& e) {
      EXPECT_NE(std::string(e.what()).find(error), std::string::npos) << e.what();
    }
  }
}

// Note [GELU recompute]: --recompute none keeps the MLP's GELU outputs from the forward to the
// backward, --recompute gelu (auto in fp32) computes them again there: the same losses bit for bit,
// one GELU call more per layer in the record, and a smaller arena (the tiny model's T=32 rows: the
// saved GELU outputs are part of the arena's peak, the backward's live set).
TEST_F(CapturedEngine, GeluRecomputeTrainsTheSameInLessArena) {
  const auto arena_of = [](const std::string& log) {
    const std::string key = "captured engine: arena ";
    const size_t at = log.find(key);
    return at == std::string::npos ? -1.0 : std::strtod(log.c_str() + at + key.size(), nullptr);
  };
  std::vector<double> losses[2];
  double arena[2];
  std::string logs[2];
  for (int k = 0; k < 2; ++k) {
    TrainConfig c = config("captured");
    c.recompute = k == 0 ? "none" : "gelu";
    c.out_dir = (root_ / ("recompute_" + c.recompute)).string();
    std::ostringstream log;
    const TrainResult r = run_training(c, log);
    logs[k] = log.str();
    for (const auto& l : r.train_losses) losses[k].push_back(l.loss);
    arena[k] = arena_of(logs[k]);
  }
  ASSERT_EQ(losses[0].size(), 9u);
  EXPECT_EQ(losses[1], losses[0]);
  ASSERT_GT(arena[0], 0.0) << logs[0];
  ASSERT_GT(arena[1], 0.0) << logs[1];
  EXPECT_LT(arena[1], arena[0]) << logs[0] << "\n" << logs[1];
  std::printf("arena: recompute none %.4f GiB, gelu %.4f GiB\n", arena[0], arena[1]);
}
