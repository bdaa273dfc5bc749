// checkpoint_test.cpp: the checkpoint directory's atomic commit, `latest`, pruning, that an
// interrupted write (an exception, or SIGKILL in a child process) never replaces a good one, and
// the checksum manifest (Note [Checkpoint checksums]) (safetensors itself is blutensor's, tested there;
// a corrupt checkpoint in a training run is tested in train_loop_test.cpp).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "blutensor/blutensor.h"
#include "blutensor/error.h"
#include "blutrain/checkpoint_checksums.h"
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

// Note [Checkpoint checksums]: the manifest written at commit covers every file; damage to any
// of them is an error naming the file and the expected vs found checksum (or size).
TEST_F(CheckpointTest, ManifestCatchesDamageInEveryFile) {
  const std::string out = path("run");
  std::string model_bytes = blu::serialize_safetensors({{"w", blu::arange(64, blu::kFloat32)}}, {},
                                                       blu::Checksums::kCrc32c);
  {
    CheckpointStaging s(out, 3);
    write_file_atomic(s.file("model.safetensors"), model_bytes);
    write_file_atomic(s.file("config.json"), "{\"n_layer\": 2}\n");
    write_state(s, "{\"step\": 3}\n");
    s.commit(3);
  }
  const std::string dir = latest_checkpoint(out);
  ASSERT_TRUE(has_checksum_manifest(dir));
  const std::string manifest = read_file(dir + "/" + kChecksumManifest, "t");
  for (const char* f : {"model.safetensors", "config.json", "state.json"}) {
    EXPECT_NE(manifest.find(std::string(" ") + f + "\n"), std::string::npos) << manifest;
    EXPECT_EQ(read_checkpoint_file(dir, f, "t"), read_file(dir + "/" + f, "t"));
  }
  auto error_reading = [&](const std::string& f) {
    try {
      read_checkpoint_file(dir, f, "t");
    } catch (const blu::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  // state.json: one digit changed (same size).
  write_file_atomic(dir + "/state.json", "{\"step\": 8}\n");
  std::string err = error_reading("state.json");
  EXPECT_NE(err.find(dir + "/state.json"), std::string::npos) << err;
  EXPECT_NE(err.find("checksum mismatch"), std::string::npos) << err;
  EXPECT_NE(err.find("expected "), std::string::npos) << err;
  EXPECT_NE(err.find(", found "), std::string::npos) << err;
  // config.json truncated.
  write_file_atomic(dir + "/config.json", "{\"n_layer\": 2");
  err = error_reading("config.json");
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  // model.safetensors: 64 bytes of the tensor overwritten: the tensor is named.
  std::string damaged = model_bytes;
  std::memset(damaged.data() + damaged.size() - 100, 0x7F, 64);
  write_file_atomic(dir + "/model.safetensors", damaged);
  err = error_reading("model.safetensors");
  EXPECT_NE(err.find("tensor 'w'"), std::string::npos) << err;
  EXPECT_NE(err.find("model.safetensors"), std::string::npos) << err;
  // A file the manifest does not list, and a damaged manifest line.
  write_file_atomic(dir + "/extra.txt", "x");
  EXPECT_NE(error_reading("extra.txt").find("not listed"), std::string::npos);
  write_file_atomic(dir + "/" + kChecksumManifest, manifest + "zz 1 q\n");
  EXPECT_NE(error_reading("extra.txt").find("malformed"), std::string::npos);
}

TEST_F(CheckpointTest, CheckpointWithoutManifestStillReads) {
  const std::string out = path("run");
  {
    CheckpointStaging s(out, 1);
    write_state(s, "{\"step\": 1}\n");
    s.commit(3);
  }
  const std::string dir = latest_checkpoint(out);
  fs::remove(fs::path(dir) / kChecksumManifest);  // as written before checksums existed
  EXPECT_FALSE(has_checksum_manifest(dir));
  EXPECT_EQ(read_checkpoint_file(dir, "state.json", "t"), "{\"step\": 1}\n");
}

// A process killed (SIGKILL: no destructors, no cleanup) in the middle of writing a checkpoint, or
// one whose disk fills up, leaves the previous one as `latest`, complete and verifiable; the next
// commit removes the debris.
TEST_F(CheckpointTest, KilledOrDiskFullMidWriteLeavesThePreviousCheckpointLoadable) {
  const std::string out = path("run");
  {
    CheckpointStaging s(out, 10);
    write_file_atomic(s.file("model.safetensors"), std::string(1 << 16, 'm'));
    write_state(s, "{\"step\": 10}\n");
    s.commit(1);
  }
  for (int phase = 0; phase < 3; ++phase) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      CheckpointStaging s(out, phase == 2 ? 10 : 20);  // phase 2: rewriting the same step
      // Half a file, as if killed inside write(): the bytes reach disk but the rename does not.
      const std::string tmp = s.file("model.safetensors") + ".tmp.1";
      std::ofstream(tmp, std::ios::binary) << std::string(1 << 15, 'x');
      if (phase >= 1) write_file_atomic(s.file("model.safetensors"), std::string(1 << 16, 'n'));
      if (phase == 2) write_state(s, "{\"step\": 10, \"new\": 1}\n");
      ::kill(::getpid(), SIGKILL);
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "phase " << phase;
    const std::string dir = latest_checkpoint(out);
    ASSERT_EQ(dir, (fs::path(out) / "step_00000010").string()) << "phase " << phase;
    EXPECT_EQ(read_checkpoint_file(dir, "state.json", "t"), "{\"step\": 10}\n");
    EXPECT_EQ(read_checkpoint_file(dir, "model.safetensors", "t"), std::string(1 << 16, 'm'));
  }
  {
    // A full disk (simulated with RLIMIT_FSIZE: write() fails with EFBIG) is an error; nothing changes.
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::signal(SIGXFSZ, SIG_IGN);
      struct rlimit limit {4096, 4096};
      ::setrlimit(RLIMIT_FSIZE, &limit);
      try {
        CheckpointStaging s(out, 30);
        write_file_atomic(s.file("model.safetensors"), std::string(1 << 16, 'f'));
        write_state(s, "{\"step\": 30}\n");
        s.commit(1);
      } catch (const blu::Error& e) {
        ::_exit(std::string(e.what()).find("write failed") != std::string::npos ? 3 : 4);
      }
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << status;
    EXPECT_EQ(WEXITSTATUS(status), 3) << "the full-disk write must fail with a write error";
    const std::string dir = latest_checkpoint(out);
    ASSERT_EQ(dir, (fs::path(out) / "step_00000010").string());
    EXPECT_EQ(read_checkpoint_file(dir, "model.safetensors", "t"), std::string(1 << 16, 'm'));
    EXPECT_FALSE(fs::exists(fs::path(out) / "step_00000030"));
  }
  {
    CheckpointStaging s(out, 11);
    write_state(s, "{\"step\": 11}\n");
    s.commit(2);
  }
  for (const auto& entry : fs::directory_iterator(out)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << "debris left: " << entry.path();
  }
  // Rewriting an existing step swaps it in whole (and is verifiable afterwards).
  {
    CheckpointStaging s(out, 11);
    write_state(s, "{\"step\": 11, \"again\": 1}\n");
    s.commit(2);
  }
  EXPECT_EQ(read_checkpoint_file(latest_checkpoint(out), "state.json", "t"), "{\"step\": 11, \"again\": 1}\n");
}
