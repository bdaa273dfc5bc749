// checkpoint_test.cpp: safetensors round trip and corruption errors; the checkpoint directory's
// atomic commit, `latest`, pruning, and that an interrupted write never replaces a good one.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "blutensor/error.h"
#include "blutrain/checkpoint_dir.h"
#include "blutrain/files.h"
#include "blutrain/safetensors.h"

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
  std::string expect_error(const std::string& file) {
    try {
      SafetensorsFile::read(path(file));
    } catch (const blu::Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "no error for " << file;
    return "";
  }
  fs::path dir_;
};

void write_state(const CheckpointStaging& s, const std::string& text) {
  write_file_atomic(s.file("state.json"), text);
}
}  // namespace

TEST_F(CheckpointTest, SafetensorsRoundTrip) {
  std::vector<float> a(3 * 5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.25f * static_cast<float>(i) - 1.0f;
  std::vector<int64_t> b = {7, -3};
  std::vector<uint16_t> c = {1, 2, 3};
  write_safetensors(path("t.safetensors"),
                    {{"layer.weight", "F32", {3, 5}, a.data(), a.size() * 4},
                     {"counts", "I64", {2}, b.data(), 16},
                     {"half", "BF16", {3}, c.data(), 6},
                     {"scalar", "F32", {}, a.data(), 4}},
                    {{"format", "pt"}, {"step", "12"}});
  std::string bytes = read_file(path("t.safetensors"), "test");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
  SafetensorsFile f = SafetensorsFile::read(path("t.safetensors"));
  ASSERT_EQ(f.entries().size(), 4u);
  const SafetensorsEntryView& w = f.get("layer.weight", "F32", {3, 5});
  std::vector<float> back(15);
  std::memcpy(back.data(), w.data, w.nbytes);
  EXPECT_EQ(back, a);
  int64_t b0;
  std::memcpy(&b0, f.get("counts").data, 8);
  EXPECT_EQ(b0, 7);
  EXPECT_EQ(f.get("scalar").shape.size(), 0u);
  ASSERT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata()[1].second, "12");
  EXPECT_THROW(f.get("missing"), blu::Error);
  try {
    f.get("layer.weight", "F32", {5, 3});
    ADD_FAILURE();
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("F32[3, 5], expected F32[5, 3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(write_safetensors(path("bad.safetensors"), {{"x", "F32", {4}, a.data(), 8}}), blu::Error);
  EXPECT_THROW(write_safetensors(path("bad.safetensors"), {{"x", "Q7", {1}, a.data(), 1}}), blu::Error);
}

TEST_F(CheckpointTest, CorruptSafetensorsGiveClearErrors) {
  std::vector<float> a(64, 1.5f);
  write_safetensors(path("good.safetensors"), {{"a", "F32", {8, 8}, a.data(), 256}});
  std::string good = read_file(path("good.safetensors"), "test");
  std::ofstream(path("trunc.safetensors"), std::ios::binary) << good.substr(0, good.size() - 4);
  EXPECT_NE(expect_error("trunc.safetensors").find("truncated"), std::string::npos);
  std::ofstream(path("tiny.safetensors"), std::ios::binary) << "abc";
  EXPECT_NE(expect_error("tiny.safetensors").find("no header"), std::string::npos);
  std::string badlen = good;
  badlen[0] = '\x7f';
  badlen[5] = '\x01';
  std::ofstream(path("len.safetensors"), std::ios::binary) << badlen;
  EXPECT_NE(expect_error("len.safetensors").find("header length"), std::string::npos);
  std::string badjson = good;
  badjson[8] = 'x';
  std::ofstream(path("json.safetensors"), std::ios::binary) << badjson;
  EXPECT_NE(expect_error("json.safetensors").find("malformed JSON"), std::string::npos);
  std::ofstream(path("extra.safetensors"), std::ios::binary) << good << "xx";
  EXPECT_NE(expect_error("extra.safetensors").find("trailing bytes"), std::string::npos);
  EXPECT_NE(expect_error("nonexistent.safetensors").find("cannot open"), std::string::npos);
}

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
