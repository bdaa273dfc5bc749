// checkpoint_test.cpp: the checkpoint directory's atomic commit, `latest`, pruning, and that an
// interrupted write never replaces a good one (safetensors itself is blutensor's, tested there;
// a corrupt checkpoint in a training run is tested in train_loop_test.cpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "blutensor/error.h"
#include "blutrain/checkpoint_dir.h"
#include "blutrain/files.h"

using namespace blu::train;
namespace fs = std::filesystem;

namespace {
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("blu_ckpt_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& f) const { return (dir_ / f).string(); }
  fs::path dir_;
};

void write_state(const CheckpointStaging& s, const std::string& text) {
  write_file_atomic(s.file("state.json"), text);
}
}  // namespace

TEST_F(CheckpointTest, CommitLatestAndPrune) {
  const std::string out = path("run");
  EXPECT_EQ(latest_checkpoint(out), "");
  for (int step : {10, 20, 30}) {
    CheckpointStaging s(out, step);
    write_state(s, "{\"step\": " + std::to_string(step) + "}");
    std::string final_dir = s.commit(2);
    EXPECT_EQ(final_dir, (fs::path(out) / checkpoint_dir_name(step)).string());
  }
  EXPECT_EQ(latest_checkpoint(out), (fs::path(out) / "step_00000030").string());
  EXPECT_FALSE(fs::exists(fs::path(out) / "step_00000010"));  // pruned (keep 2)
  EXPECT_TRUE(fs::exists(fs::path(out) / "step_00000020"));
  EXPECT_EQ(read_file((fs::path(out) / "latest").string(), "t"), "step_00000030\n");
  // Rewriting the same step replaces it completely.
  {
    CheckpointStaging s(out, 30);
    write_state(s, "{\"step\": 30, \"again\": true}");
    s.commit(2);
  }
  EXPECT_EQ(read_file((fs::path(out) / "step_00000030" / "state.json").string(), "t"), "{\"step\": 30, \"again\": true}");
}

TEST_F(CheckpointTest, InterruptedWriteLeavesTheGoodCheckpoint) {
  const std::string out = path("run");
  {
    CheckpointStaging s(out, 5);
    write_state(s, "good");
    s.commit(3);
  }
  {
    // A write that fails before commit (an exception, a kill): nothing visible changes.
    CheckpointStaging s(out, 6);
    write_file_atomic(s.file("model.safetensors"), "partial");
  }
  EXPECT_EQ(latest_checkpoint(out), (fs::path(out) / "step_00000005").string());
  EXPECT_FALSE(fs::exists(fs::path(out) / "step_00000006"));
  // A commit without state.json is refused.
  CheckpointStaging s(out, 7);
  EXPECT_THROW(s.commit(3), blu::Error);
  EXPECT_EQ(latest_checkpoint(out), (fs::path(out) / "step_00000005").string());
  // A stale `latest` (pointing at a missing directory) falls back to the newest complete one.
  write_file_atomic((fs::path(out) / "latest").string(), "step_00000099\n");
  EXPECT_EQ(latest_checkpoint(out), (fs::path(out) / "step_00000005").string());
}
