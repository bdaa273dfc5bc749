// resume_test.cpp: kill-and-resume. A run stopped abruptly after step 4 (its last checkpoint at
// step 3, so step 4 is lost as in a kill) and resumed must produce, for every step after 3,
// losses bitwise equal to an uninterrupted run (Note [Deterministic resume]).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "blutensor/error.h"
#include "blutrain/checkpoint_checksums.h"
#include "blutrain/checkpoint_dir.h"
#include "blutrain/config.h"
#include "blutrain/data.h"
#include "blutrain/files.h"
#include "blutrain/trainer.h"

using namespace blu::train;
namespace fs = std::filesystem;

TEST(Resume, KillAndResumeIsBitwiseEqual) {
  const fs::path root = fs::temp_directory_path() / ("blu_resume_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "data");
  std::vector<int32_t> tokens;
  uint64_t s = 42;
  for (int i = 0; i < 30000; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    tokens.push_back(static_cast<int32_t>((s >> 33) % 2000) + (i % 7 == 0 ? 30000 : 0));
  }
  write_shard((root / "data" / "r_train_000000.bin").string(), tokens);
  write_shard((root / "data" / "r_val_000000.bin").string(), std::vector<int32_t>(tokens.begin(), tokens.begin() + 4000));

  auto config = [&](const std::string& out) {
    TrainConfig c;
    c.model = "tiny";
    c.device = "cpu";
    c.data = (root / "data").string();
    c.batch_size = 2;
    c.seq_len = 32;
    c.total_batch_tokens = 2 * 2 * 32;  // 2 micro-batches: accumulation is part of the state
    c.max_steps = 6;
    c.lr = 2e-3;
    c.warmup_steps = 2;
    c.val_every = 4;
    c.val_batches = 1;
    c.sample_tokens = 4;  // sampling advances the saved RNG
    c.sample_every = 2;
    c.plot = false;
    c.out_dir = (root / out).string();
    c.resume = "auto";
    c.vocab = "corpus";  // the ~2300 ids the shards use: a small lm head (the vocabulary is saved state too)
    resolve_auto(c, false);
    c.time_limit_s = 0;
    return c;
  };
  std::ostringstream log;
  TrainResult full = run_training(config("full"), log);
  ASSERT_EQ(full.train_losses.size(), 6u);

  TrainConfig killed = config("killed");
  killed.ckpt_every = 3;
  killed.stop_after_steps = 4;
  TrainResult first = run_training(killed, log);
  EXPECT_TRUE(first.stopped_early);
  ASSERT_EQ(first.train_losses.size(), 4u);
  EXPECT_EQ(latest_checkpoint(killed.out_dir), (fs::path(killed.out_dir) / "step_00000003").string());

  killed.stop_after_steps = 0;
  TrainResult resumed = run_training(killed, log);
  EXPECT_EQ(resumed.resumed_from, 3);
  ASSERT_EQ(resumed.train_losses.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const double a = full.train_losses[i].loss, b = resumed.train_losses[i].loss;
    EXPECT_EQ(std::memcmp(&a, &b, sizeof(double)), 0)
        << "step " << i + 1 << ": uninterrupted " << a << " vs resumed " << b << " (diff " << a - b << ")";
  }
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(full.train_losses[i].loss, first.train_losses[i].loss) << "step " << i + 1;
  }
  ASSERT_EQ(full.val_losses.size(), resumed.val_losses.size());
  for (size_t i = 0; i < full.val_losses.size(); ++i) {
    EXPECT_EQ(full.val_losses[i].loss, resumed.val_losses[i].loss);
  }
  fs::remove_all(root);
}

// Note [Model shapes] (gpt2.cpp): a checkpoint of an LxHxC model records that name, a resumed run
// of the same shape continues from it, and another shape is refused with both names.
TEST(Resume, ModelShapeIsRecordedAndChecked) {
  const fs::path root = fs::temp_directory_path() / ("blu_resume_shape_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "data");
  std::vector<int32_t> tokens;
  for (int i = 0; i < 8000; ++i) tokens.push_back((i * 37 + i / 11) % 500);
  write_shard((root / "data" / "r_train_000000.bin").string(), tokens);
  write_shard((root / "data" / "r_val_000000.bin").string(), std::vector<int32_t>(tokens.begin(), tokens.begin() + 2000));
  auto config = [&](const std::string& model, int64_t steps) {
    TrainConfig c;
    c.model = model;
    c.device = "cpu";
    c.data = (root / "data").string();
    c.batch_size = 2;
    c.seq_len = 16;
    c.block_size = 16;
    c.max_steps = steps;
    c.val_every = -1;
    c.val_batches = 1;
    c.sample_tokens = 0;
    c.plot = false;
    c.ckpt_every = 2;
    c.out_dir = (root / "out").string();
    c.resume = "auto";
    c.vocab = "corpus";
    resolve_auto(c, false);
    c.time_limit_s = 0;
    return c;
  };
  std::ostringstream log;
  TrainResult first = run_training(config("3x2x32", 2), log);
  ASSERT_EQ(first.train_losses.size(), 2u);
  TrainResult resumed = run_training(config("3x2x32", 3), log);
  EXPECT_EQ(resumed.resumed_from, 2);
  ASSERT_EQ(resumed.train_losses.size(), 3u);
  EXPECT_EQ(resumed.train_losses[1].loss, first.train_losses[1].loss);
  try {
    run_training(config("2x2x32", 4), log);
    ADD_FAILURE() << "a 2x2x32 run resumed a 3x2x32 checkpoint";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is of model '3x2x32', not '2x2x32'"), std::string::npos) << e.what();
  }
  fs::remove_all(root);
}

// Note [state.json is input] (train_state.cpp), found by tests/fuzz/checkpoint_fuzz.cpp: a
// damaged state.json is a blu::Error naming the file and the field, never another exception
// (a non-numeric "sample_rng" escaped as std::invalid_argument "stoull") nor a negative cursor
// handed to the data loader. The damaged files get a fresh manifest, as hand edits would.
TEST(Resume, DamagedStateJsonIsAClearError) {
  const fs::path root = fs::temp_directory_path() / ("blu_resume_state_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "data");
  std::vector<int32_t> tokens;
  for (int i = 0; i < 4000; ++i) tokens.push_back((i * 7919) % 2000);
  write_shard((root / "data" / "s_train_000000.bin").string(), tokens);
  TrainConfig c;
  c.model = "tiny";
  c.device = "cpu";
  c.data = (root / "data").string();
  c.batch_size = 1;
  c.seq_len = 16;
  c.max_steps = 1;
  c.val_batches = -1;
  c.sample_tokens = 0;
  c.plot = false;
  c.out_dir = (root / "out").string();
  resolve_auto(c, false);
  c.time_limit_s = 0;
  std::ostringstream log;
  const TrainResult first = run_training(c, log);
  ASSERT_FALSE(first.checkpoint_dir.empty());
  const std::string state_path = first.checkpoint_dir + "/state.json";
  const std::string good = read_file(state_path, "test");
  struct Damage {
    std::string from, to, expect;
  };
  const std::vector<Damage> damages = {
      {"\"sample_rng\": \"", "\"sample_rng\": \"x", "\"sample_rng\" is \"x"},
      {"\"shard\": 0", "\"shard\": -1", "\"shard\" is -1, not a non-negative integer"},
      {"\"step\": 1", "\"step\": \"1\"", "\"step\" is \"1\""},
      {"\"model\": \"tiny\"", "\"model\": 7", "\"model\" is not a string"},
  };
  c.max_steps = 2;
  for (const Damage& d : damages) {
    std::string bad = good;
    const size_t at = bad.find(d.from);
    ASSERT_NE(at, std::string::npos) << d.from << " not in " << good;
    bad.replace(at, d.from.size(), d.to);
    write_file_atomic(state_path, bad);
    write_checksum_manifest(first.checkpoint_dir);
    try {
      run_training(c, log);
      ADD_FAILURE() << "resumed from a state.json with " << d.to;
    } catch (const blu::Error& e) {
      EXPECT_NE(std::string(e.what()).find(d.expect), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("state.json"), std::string::npos) << e.what();
    }
  }
  fs::remove_all(root);
}
