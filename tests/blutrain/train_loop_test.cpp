// train_loop_test.cpp: a short CPU training run of the tiny model whose loss falls, writing a
// checkpoint, metrics and a loss curve; a corrupt checkpoint (truncated, overwritten, bit-flipped:
// the checksums) is a clear error and is left alone; a checkpoint without checksums still loads;
// the --nonfinite policies end to end (a NaN put in by the test hook: stop reports, skip leaves
// the weights and AdamW state alone and stops after a run of skips).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "blutensor/error.h"
#include "blutensor/safetensors.h"
#include "blutrain/checkpoint_checksums.h"
#include "blutrain/checkpoint_dir.h"
#include "blutrain/config.h"
#include "blutrain/data.h"
#include "blutrain/files.h"
#include "blutrain/trainer.h"
#include "support/pattern_shards.h"
#include "support/tiny_config.h"

using namespace blu::train;
namespace fs = std::filesystem;

namespace {

using test::write_pattern_shards;  // support/pattern_shards.h

using test::tiny_config;  // support/tiny_config.h

class TrainLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("blu_train_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    write_pattern_shards((root_ / "data").string());
  }
  void TearDown() override { fs::remove_all(root_); }
  // Two steps without a plot into <root>/out; returns its latest checkpoint directory (non-empty).
  std::string train_two_steps(TrainConfig& cfg, std::ostringstream& log) {
    cfg = tiny_config((root_ / "data").string(), (root_ / "out").string());
    cfg.max_steps = 2;
    cfg.plot = false;
    run_training(cfg, log);
    return latest_checkpoint(cfg.out_dir);
  }
  fs::path root_;
};

}  // namespace

TEST_F(TrainLoopTest, LossFallsAndOutputsAreWritten) {
  TrainConfig cfg = tiny_config((root_ / "data").string(), (root_ / "out").string());
  cfg.vocab = "gpt2";  // the whole GPT-2 vocabulary: the untrained loss is near ln(50257)
  std::ostringstream log;
  TrainResult r = run_training(cfg, log);
  ASSERT_EQ(r.train_losses.size(), 30u) << log.str();
  const double first = r.train_losses.front().loss;
  double last5 = 0;
  for (size_t i = 25; i < 30; ++i) last5 += r.train_losses[i].loss / 5;
  EXPECT_GT(first, 9.5) << "an untrained GPT-2 starts near ln(50257) = 10.8";
  EXPECT_LT(last5, first - 4.0) << log.str();
  ASSERT_GE(r.val_losses.size(), 3u);
  EXPECT_LT(r.val_losses.back().loss, r.val_losses.front().loss - 4.0);
  // Outputs: progress lines, a checkpoint, metrics and the curve.
  EXPECT_NE(log.str().find("step 30/30 | loss "), std::string::npos) << log.str();
  EXPECT_EQ(latest_checkpoint(cfg.out_dir), (fs::path(cfg.out_dir) / "step_00000030").string());
  for (const char* f : {"model.safetensors", "config.json", "optimizer.safetensors", "state.json"}) {
    EXPECT_TRUE(fs::exists(fs::path(cfg.out_dir) / "step_00000030" / f)) << f;
  }
  std::ifstream metrics(cfg.out_dir + "/metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line);) ++lines;
  // A line per step, per periodic validation, and one for the whole-split validation at the end
  // (--final-val-batches, auto -1 on the CPU).
  ASSERT_GE(r.final_val_loss, 0.0);
  EXPECT_LT(r.final_val_loss, r.val_losses.front().loss);
  EXPECT_EQ(lines, 30 + static_cast<int>(r.val_losses.size()) + 1);
  EXPECT_TRUE(fs::exists(cfg.out_dir + "/loss.png") || fs::exists(cfg.out_dir + "/loss.svg"));
}

TEST_F(TrainLoopTest, CorruptCheckpointIsAClearErrorAndStaysUntouched) {
  TrainConfig cfg;
  std::ostringstream log;
  const std::string ckpt = train_two_steps(cfg, log);
  ASSERT_FALSE(ckpt.empty());
  const std::string model = ckpt + "/model.safetensors";
  std::string bytes = read_file(model, "test");
  bytes.resize(bytes.size() / 2);
  std::ofstream(model, std::ios::binary | std::ios::trunc) << bytes;
  cfg.resume = "auto";
  cfg.max_steps = 4;
  try {
    run_training(cfg, log);
    ADD_FAILURE() << "expected an error for a truncated checkpoint";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(model, "test"), bytes) << "the (corrupt) checkpoint must not be overwritten";
  EXPECT_EQ(latest_checkpoint(cfg.out_dir), ckpt);
  // Data that does not fit one batch is a clear error too.
  TrainConfig big = tiny_config((root_ / "data").string(), (root_ / "out2").string());
  big.batch_size = 64;
  big.seq_len = 256;
  big.total_batch_tokens = 64 * 256;
  try {
    run_training(big, log);
    ADD_FAILURE() << "expected an error for a batch larger than the data";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("larger than the data"), std::string::npos) << e.what();
  }
}

// Note [Checkpoint checksums]: a resume from a damaged checkpoint is an error naming the file, the
// tensor (or file) and expected vs found; a checkpoint from before checksums loads with a note.
TEST_F(TrainLoopTest, DamagedCheckpointIsDetectedAndOldCheckpointsStillLoad) {
  TrainConfig cfg;
  std::ostringstream log;
  const std::string ckpt = train_two_steps(cfg, log);
  ASSERT_FALSE(ckpt.empty());
  cfg.resume = "auto";
  cfg.max_steps = 3;
  auto resume_error = [&]() -> std::string {
    try {
      run_training(cfg, log);
    } catch (const blu::Error& e) {
      return e.what();
    }
    return "(loaded silently)";
  };
  struct Damage {
    const char* file;
    const char* what;
    std::function<void(std::string&)> apply;
    std::vector<std::string> expect;
  };
  auto data_start = [](const std::string& b) {
    uint64_t n = 0;
    std::memcpy(&n, b.data(), 8);
    return static_cast<size_t>(8 + n);
  };
  const std::vector<Damage> damages = {
      {"model.safetensors", "64 bytes of weights overwritten",
       [&](std::string& b) { std::memset(b.data() + data_start(b) + 4096, 0x41, 64); },
       {"model.safetensors", "checksum mismatch in tensor '", "expected ", ", found "}},
      {"optimizer.safetensors", "one bit flipped in a moment",
       [&](std::string& b) { b[b.size() - 5] = static_cast<char>(b[b.size() - 5] ^ 0x10); },
       {"optimizer.safetensors", "checksum mismatch in tensor 'exp_avg", "expected ", ", found "}},
      {"model.safetensors", "truncated by one byte", [](std::string& b) { b.pop_back(); },
       {"model.safetensors"}},
      {"state.json", "the step changed",
       [](std::string& b) { b.replace(b.find("\"step\": 2"), 9, "\"step\": 1"); },
       {"state.json", "checksum mismatch", "expected ", ", found "}},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(std::string(d.file) + ": " + d.what);
    const std::string path = ckpt + "/" + d.file;
    const std::string good = read_file(path, "test");
    std::string bad = good;
    d.apply(bad);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
    const std::string err = resume_error();
    for (const std::string& e : d.expect) EXPECT_NE(err.find(e), std::string::npos) << "missing '" << e << "' in: " << err;
    EXPECT_EQ(read_file(path, "test"), bad) << "the damaged checkpoint must be left alone";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << good;
  }
  // As written before checksums existed: no manifest, no checksum metadata. Loads, with a note.
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    blu::SafetensorsData d = blu::load_safetensors(ckpt + "/" + f);
    blu::save_safetensors(ckpt + "/" + f, d.tensors, d.metadata);  // no checksums
  }
  fs::remove(fs::path(ckpt) / kChecksumManifest);
  ::testing::internal::CaptureStderr();
  TrainResult r = run_training(cfg, log);
  const std::string note = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.resumed_from, 2);
  EXPECT_NE(note.find("note: checkpoint '" + ckpt + "'"), std::string::npos) << note;
  EXPECT_NE(note.find("unverified"), std::string::npos) << note;
}

namespace {

// Sets BLUTRAIN_TEST_INJECT_NONFINITE (Note [Non-finite steps]) for one scope.
struct InjectNonfinite {
  explicit InjectNonfinite(const char* spec) { ::setenv("BLUTRAIN_TEST_INJECT_NONFINITE", spec, 1); }
  ~InjectNonfinite() { ::unsetenv("BLUTRAIN_TEST_INJECT_NONFINITE"); }
};

std::vector<std::string> metrics_lines(const std::string& out_dir, const std::string& event) {
  std::ifstream f(out_dir + "/metrics.jsonl");
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("{\"event\":\"" + event + "\"", 0) == 0) out.push_back(line);
  }
  return out;
}

}  // namespace

// Note [Non-finite steps], --nonfinite stop (the default): a NaN in one gradient at step 3 ends
// the run with a report naming the step and that parameter (the first bad one in the optimizer's
// order), nothing is saved after step 2, and the run resumes from there once the data is fine.
// A non-finite loss alone stops too.
TEST_F(TrainLoopTest, NonfiniteStepStopsWithAReportNamingStepAndParameter) {
  TrainConfig cfg = tiny_config((root_ / "data").string(), (root_ / "out").string());
  cfg.max_steps = 5;
  cfg.ckpt_every = 2;
  cfg.plot = false;
  cfg.val_batches = -1;
  std::ostringstream log;
  std::string err = "(no error)";
  {
    InjectNonfinite inject("3@h.1.mlp.c_fc.weight");
    try {
      run_training(cfg, log);
    } catch (const blu::Error& e) {
      err = e.what();
    }
  }
  const std::string step2 = cfg.out_dir + "/" + checkpoint_dir_name(2);
  for (const std::string& want :
       {std::string("non-finite step 3: loss "), std::string("gradient norm nan"),
        std::string("first non-finite gradient (optimizer order): h.1.mlp.c_fc.weight"),
        std::string("Training stopped (--nonfinite stop): the update was not applied; nothing is saved after step 2"),
        "Last checkpoint: " + step2}) {
    EXPECT_NE(err.find(want), std::string::npos) << "missing '" << want << "' in: " << err;
  }
  EXPECT_EQ(latest_checkpoint(cfg.out_dir), step2);
  const std::vector<std::string> events = metrics_lines(cfg.out_dir, "nonfinite");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0].find("\"step\":3,"), std::string::npos) << events[0];
  EXPECT_NE(events[0].find("\"grad_norm\":null"), std::string::npos) << events[0];
  EXPECT_NE(events[0].find("\"action\":\"stop\",\"first_nonfinite_gradient\":\"h.1.mlp.c_fc.weight\""),
            std::string::npos)
      << events[0];
  EXPECT_EQ(metrics_lines(cfg.out_dir, "train").size(), 2u);
  // Resumes from step 2 and finishes.
  cfg.resume = "auto";
  TrainResult r = run_training(cfg, log);
  EXPECT_EQ(r.resumed_from, 2);
  EXPECT_EQ(r.final_step, 5);
  // A non-finite loss with finite gradients (one process): stops, naming no parameter.
  TrainConfig c2 = tiny_config((root_ / "data").string(), (root_ / "out_loss").string());
  c2.max_steps = 3;
  c2.plot = false;
  c2.val_batches = -1;
  InjectNonfinite inject("2@loss:inf");
  try {
    run_training(c2, log);
    ADD_FAILURE() << "an infinite loss did not stop the run";
  } catch (const blu::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("non-finite step 2: loss inf, gradient norm "), std::string::npos) << msg;
    EXPECT_NE(msg.find("every gradient finite"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Last checkpoint: none"), std::string::npos) << msg;
  }
}

// --nonfinite skip: the step with a NaN gradient changes nothing (its checkpoint's weights and
// AdamW moments are bitwise the previous step's, adamw_step one behind the step), the run goes on
// and learns, warns once and logs the event; resuming from the skipped step's checkpoint follows
// the uninterrupted run exactly. A run of --nonfinite-max-skips non-finite steps stops it.
TEST_F(TrainLoopTest, NonfiniteSkipLeavesWeightsAndAdamWStateAndStopsAfterARunOfSkips) {
  TrainConfig cfg = tiny_config((root_ / "data").string(), (root_ / "out").string());
  cfg.max_steps = 4;
  cfg.ckpt_every = 1;
  cfg.keep_checkpoints = 10;
  cfg.plot = false;
  cfg.val_batches = -1;
  cfg.nonfinite = "skip";
  std::ostringstream log;
  TrainResult full;
  {
    InjectNonfinite inject("3@h.0.attn.c_attn.weight:-inf");
    full = run_training(cfg, log);
  }
  EXPECT_EQ(full.final_step, 4);
  EXPECT_NE(log.str().find("warning: non-finite step 3: loss "), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("first non-finite gradient (optimizer order): h.0.attn.c_attn.weight: update skipped "
                           "(1 in a row; --nonfinite skip stops at 10)"),
            std::string::npos)
      << log.str();
  EXPECT_EQ(log.str().find("step 3/4 |"), std::string::npos) << "a skipped step has no progress line";
  EXPECT_NE(log.str().find("step 4/4 |"), std::string::npos) << log.str();
  ASSERT_EQ(full.train_losses.size(), 4u);  // the skipped step's loss was finite (the gradient was not)
  EXPECT_LT(full.train_losses.back().loss, full.train_losses.front().loss);
  const std::vector<std::string> events = metrics_lines(cfg.out_dir, "nonfinite");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0].find("\"action\":\"skip\""), std::string::npos) << events[0];
  EXPECT_EQ(metrics_lines(cfg.out_dir, "train").size(), 3u);
  const std::string c2 = cfg.out_dir + "/" + checkpoint_dir_name(2), c3 = cfg.out_dir + "/" + checkpoint_dir_name(3);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const blu::SafetensorsData a = blu::load_safetensors(c2 + "/" + file), b = blu::load_safetensors(c3 + "/" + file);
    ASSERT_EQ(a.tensors.size(), b.tensors.size()) << file;
    for (const auto& [name, t] : a.tensors) {
      ASSERT_TRUE(b.tensors.count(name)) << file << " " << name;
      const std::vector<double> x = t.to_double_vector(), y = b.tensors.at(name).to_double_vector();
      ASSERT_EQ(x.size(), y.size()) << name;
      EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(double)), 0) << file << " " << name;
    }
  }
  const std::string state3 = read_file(c3 + "/state.json", "test");
  EXPECT_NE(state3.find("\"step\": 3,"), std::string::npos) << state3;
  EXPECT_NE(state3.find("\"adamw_step\": 2,"), std::string::npos) << state3;
  // Resumed from the skipped step's checkpoint: the same later losses, bit for bit.
  TrainConfig resumed = cfg;
  resumed.out_dir = (root_ / "resumed").string();
  resumed.resume = c3;
  const TrainResult r = run_training(resumed, log);
  ASSERT_EQ(r.train_losses.size(), full.train_losses.size());
  for (size_t i = 3; i < r.train_losses.size(); ++i) {
    EXPECT_EQ(r.train_losses[i].loss, full.train_losses[i].loss) << "step " << r.train_losses[i].step;
  }
  // Non-finite from step 2 on, at most 3 in a row: the run stops at step 4.
  TrainConfig c = tiny_config((root_ / "data").string(), (root_ / "out_streak").string());
  c.max_steps = 6;
  c.plot = false;
  c.val_batches = -1;
  c.nonfinite = "skip";
  c.nonfinite_max_skips = 3;
  InjectNonfinite inject("2-6");
  std::ostringstream log2;
  try {
    run_training(c, log2);
    ADD_FAILURE() << "a run of non-finite steps did not stop the run";
  } catch (const blu::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("non-finite step 4: "), std::string::npos) << msg;
    EXPECT_NE(msg.find("3 non-finite steps in a row, the limit of --nonfinite-max-skips"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(--nonfinite skip)"), std::string::npos) << msg;
  }
  EXPECT_EQ(metrics_lines(c.out_dir, "nonfinite").size(), 3u);
  EXPECT_NE(log2.str().find("warning: non-finite step 3:"), std::string::npos) << log2.str();
}
