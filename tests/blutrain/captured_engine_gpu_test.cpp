// captured_engine_gpu_test.cpp: `--engine captured` on a GPU with Note [Side stream] (blutensor):
// the weight gradients the record writes straight into gradient buffers run on a second stream,
// and the tiny GPT-2 trains bit for bit as with the side stream off (BLU_CAPTURE_SIDE_STREAM=0)
// and, in strict fp32, as the autograd engine: every loss and the final checkpoint's bytes; and
// with its CUDA graphs (blutensor's Note [Graph segments]) as without them (BLU_CAPTURE_GRAPHS=0).
// BLU_CAPTURED_GPU_TEST_STEPS (default 7, at least 3: step 2 is recorded, later steps replay) lets
// compute-sanitizer's racecheck run it in bounded time (tests/sanitize/cases.txt).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "common/scoped_env.h"

#include "blutensor/device.h"
#include "blutrain/checkpoint_dir.h"
#include "blutrain/trainer.h"
#include "support/pattern_shards.h"
#include "support/tiny_config.h"

namespace fs = std::filesystem;
using namespace blu::train;

namespace {

std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct TrainRun {
  TrainResult result;
  std::string log;
  fs::path out;
};

int steps() {
  const char* s = std::getenv("BLU_CAPTURED_GPU_TEST_STEPS");
  return s != nullptr && *s != '\0' ? std::max(3, std::atoi(s)) : 7;
}

TrainRun train(const fs::path& root, const std::string& name, const std::string& engine, const std::string& precision) {
  TrainConfig c = test::tiny_config((root / "data").string(), (root / name).string());
  c.device = "cuda";
  c.precision = precision;
  c.engine = engine;
  c.max_steps = steps();
  c.val_every = 0;
  c.plot = false;
  c.ckpt_every = steps();
  std::ostringstream log;
  TrainRun r{run_training(c, log), log.str(), root / name};
  return r;
}

// The captured engine with the environment switch `off` set to 0.
TrainRun train_captured_with_off(const fs::path& root, const std::string& name, const std::string& precision,
                                 const char* off) {
  blu::test::ScopedEnv env(off, "0");
  return train(root, name, "captured", precision);
}

// b trained bit for bit as a: every train loss, the final checkpoint's weights and (optimizer)
// its AdamW state file.
void expect_same_training(const TrainRun& a, const TrainRun& b, size_t steps, const std::string& what,
                          bool optimizer = true) {
  ASSERT_EQ(a.result.train_losses.size(), steps) << what;
  ASSERT_EQ(b.result.train_losses.size(), steps) << what;
  for (size_t i = 0; i < steps; ++i) {
    EXPECT_EQ(a.result.train_losses[i].loss, b.result.train_losses[i].loss) << what << ", step " << i + 1;
  }
  const fs::path ca = latest_checkpoint(a.out.string());
  const fs::path cb = latest_checkpoint(b.out.string());
  ASSERT_FALSE(ca.empty()) << what;
  ASSERT_FALSE(cb.empty()) << what;
  // Compared as booleans: a failing EXPECT_EQ would print both files (megabytes into the log that
  // the device call brings back).
  EXPECT_TRUE(file_bytes(ca / "model.safetensors") == file_bytes(cb / "model.safetensors")) << what << ": weights differ";
  if (optimizer) {
    EXPECT_TRUE(file_bytes(ca / "optimizer.safetensors") == file_bytes(cb / "optimizer.safetensors"))
        << what << ": AdamW state differs";
  }
}

// b trained like a within 1e-2 of each loss, and equal for steps 1-3 (steps 1-2 eager, step 3 from
// step 2's eager update): a rewrite that rounds differently only in the captured replays.
void expect_close_training(const TrainRun& a, const TrainRun& b, size_t steps, const std::string& what) {
  ASSERT_EQ(a.result.train_losses.size(), steps) << what;
  ASSERT_EQ(b.result.train_losses.size(), steps) << what;
  for (size_t i = 0; i < steps; ++i) {
    const double x = a.result.train_losses[i].loss, y = b.result.train_losses[i].loss;
    EXPECT_NEAR(y, x, 1e-2 * std::abs(x)) << what << ", step " << i + 1;
    if (i < 3) {
      EXPECT_EQ(y, x) << what << ", step " << i + 1;
    }
  }
}

// Side stream on vs off, CUDA graphs on vs off (and, in fp32, vs the autograd engine) in one
// precision mode.
void side_stream_bit_for_bit(const std::string& precision) {
  const fs::path root = fs::temp_directory_path() / ("blu_captured_gpu_" + precision + "_" + std::to_string(::getpid()));
  fs::remove_all(root);
  test::write_pattern_shards((root / "data").string());
  const size_t n = static_cast<size_t>(steps());
  const TrainRun side = train(root, "side_" + precision, "captured", precision);
  ASSERT_NE(side.log.find("captured engine: step 2 recorded"), std::string::npos) << side.log;
  EXPECT_NE(side.log.find("; side stream: "), std::string::npos) << side.log;
  const TrainRun one = train_captured_with_off(root, "one_" + precision, precision, "BLU_CAPTURE_SIDE_STREAM");
  EXPECT_EQ(one.log.find("; side stream: "), std::string::npos) << one.log;
  expect_same_training(side, one, n, "side stream on vs off");
  {  // Note [Side groups in flight] (blutensor): two groups in flight (one by default)
    blu::test::ScopedEnv two("BLU_CAPTURE_SIDE_IN_FLIGHT", "2");
    const TrainRun two_groups = train(root, "two_" + precision, "captured", precision);
    expect_same_training(side, two_groups, n, "one vs two side groups in flight");
  }
  {  // Note [Side chains] + Note [Cheap side calls first] (off by default): the same bits
    blu::test::ScopedEnv chains("BLU_CAPTURE_SIDE_CHAIN", "1");
    blu::test::ScopedEnv cheap("BLU_CAPTURE_SIDE_CHEAP_FIRST", "1");
    const TrainRun reordered = train(root, "cheap_" + precision, "captured", precision);
    expect_same_training(side, reordered, n, "side chains with cheap side calls first vs the default plan");
  }
  // Note [LayerNorm backward with the residual gradient] (blutensor): the pairs as one launch
  // (bf16) or as recorded: the same bits.
  {  // (on by default; BLU_CAPTURE_LN_RESIDUAL=0 turns it off)
    blu::test::ScopedEnv off("BLU_CAPTURE_LN_RESIDUAL", "0");
    if (precision == "bf16") {
      EXPECT_NE(side.log.find("LayerNorm backward + residual gradient: "), std::string::npos) << side.log;
    }
    const TrainRun ln_pairs = train(root, "lnres_" + precision, "captured", precision);
    EXPECT_EQ(ln_pairs.log.find("LayerNorm backward + residual gradient: "), std::string::npos) << ln_pairs.log;
    expect_same_training(side, ln_pairs, n, "LayerNorm + residual pairs fused vs not");
  }
  // Note [One-pass LayerNorm backward] (blutensor; the compiled step's, forced here without a
  // plan): blublas's one-pass kernel for every bf16 LayerNorm backward (other sums: the losses
  // within 1e-2); nothing in fp32 (the same run).
  {
    blu::test::ScopedEnv on("BLU_CAPTURE_LN_ONE_PASS", "1");
    const TrainRun onep = train(root, "lnone_" + precision, "captured", precision);
    const bool said = onep.log.find("LayerNorm backward (one pass) + residual gradient: ") != std::string::npos;
    EXPECT_EQ(said, precision == "bf16") << onep.log;
    if (precision == "fp32") {
      expect_same_training(side, onep, n, "one-pass LayerNorm backward (nothing in f32) vs as recorded");
    } else {
      expect_close_training(side, onep, n, "one-pass LayerNorm backward (bf16)");
    }
  }
  // Note [Classifier gradient scaling] (blutensor): the dX scaling as one launch (bf16) or as
  // recorded: the same bits.
  {
    const TrainRun rec = train_captured_with_off(root, "clsrec_" + precision, precision, "BLU_CAPTURE_CLASSIFIER_GRAD");
    if (precision == "bf16") {
      EXPECT_NE(side.log.find("classifier gradients: 1 scaled input gradient(s) in one launch"), std::string::npos)
          << side.log;
    }
    expect_same_training(side, rec, n, "classifier gradient scalings in one launch vs as recorded");
  }
  // Note [Weight copies from the update] (blutensor): the bf16 casts written by AdamW, or cast
  // every step as recorded: the same bits.
  {
    const TrainRun cast = train_captured_with_off(root, "wcast_" + precision, precision, "BLU_CAPTURE_WEIGHT_COPIES");
    if (precision == "bf16") {
      EXPECT_NE(side.log.find("bf16 casts written by the AdamW update"), std::string::npos) << side.log;
    } else {
      EXPECT_EQ(side.log.find("bf16 casts written by the AdamW update"), std::string::npos) << side.log;
    }
    expect_same_training(side, cast, n, "weight copies from the update vs cast every step");
  }
  // ... and the tied embedding's gradient added into the classifier's in fp32 (the compiled step's
  // rewrite, forced here without a plan): in strict fp32 the record's arithmetic, so the same bits;
  // in bf16 the sum is no longer rounded to bf16: the losses within 1e-2.
  {
    blu::test::ScopedEnv on("BLU_CAPTURE_EMBEDDING_GRAD_F32", "1");
    const TrainRun emb = train(root, "embf32_" + precision, "captured", precision);
    // Note [Early classifier scaling]: the scaling where the record scaled (a side call), the
    // embedding sum at the end; or both at the end: the same kernels, the same bits.
    EXPECT_NE(emb.log.find("the classifier's gradient scaled into fp32 at call"), std::string::npos) << emb.log;
    {
      blu::test::ScopedEnv late("BLU_CAPTURE_EARLY_CLASSIFIER_SCALE", "0");
      const TrainRun one_launch = train(root, "emblate_" + precision, "captured", precision);
      EXPECT_NE(one_launch.log.find("the embedding gradient added into the classifier's in fp32"), std::string::npos)
          << one_launch.log;
      expect_same_training(emb, one_launch, n, "classifier scaling early vs at the chain's end");
    }
    if (precision == "fp32") {
      expect_same_training(side, emb, n, "embedding gradient added into the classifier's vs as recorded");
    } else {
      expect_close_training(side, emb, n, "embedding gradient added into the classifier's in fp32 (bf16)");
    }
  }
  // Note [Graph segments] (blutensor): from the executable's second run (step 4) its stretches
  // between host reads run as CUDA graphs; with BLU_CAPTURE_GRAPHS=0 every call is launched one by
  // one: the same bits.
  // The tiny step (blutrain Note [Update without a host read]): forward, backward, the gradient
  // norm and the clip coefficient in one captured segment; AdamW (eager) and the loss and norm
  // reads in its tail (the step's other host reads, if any, cut it further).
  if (n >= 4) {
    const std::regex captured("captured engine: CUDA graphs: [1-9] of [0-9]+ segments \\([1-9][0-9]* calls in graphs");
    EXPECT_TRUE(std::regex_search(side.log, captured)) << side.log;
    EXPECT_TRUE(std::regex_search(one.log, captured)) << one.log;
    EXPECT_EQ(side.log.find("failed"), std::string::npos) << side.log;
  }
  {  // Note [One host read a step] (blutrain, on by default): the loss and the norm in one
     // transfer or two: the same run
    blu::test::ScopedEnv two("BLU_CAPTURED_ONE_HOST_READ", "0");
    const TrainRun two_reads = train(root, "tworeads_" + precision, "captured", precision);
    expect_same_training(side, two_reads, n, "loss and norm read in one transfer vs two");
  }
  {  // Note [Graph head] (blutensor): the step's first stretch as two graphs (the default) or one
    blu::test::ScopedEnv one_graph("BLU_CAPTURE_GRAPH_HEAD", "0");
    const TrainRun whole = train(root, "nohead_" + precision, "captured", precision);
    expect_same_training(side, whole, n, "a head graph vs none");
  }
  {  // Note [Side map budget] (blutensor): side calls' map kernels on 2 blocks per SM or the full
     // grid (the default): the same bits
    blu::test::ScopedEnv full("BLU_CAPTURE_SIDE_MAP_BLOCKS", "2");
    const TrainRun full_grid = train(root, "fullmaps_" + precision, "captured", precision);
    expect_same_training(side, full_grid, n, "side maps on a block budget vs the full grid");
  }
  {  // Note [Position gradient as a copy] (blutensor): on (off by default until measured): the same
     // bits, and it was found
    blu::test::ScopedEnv on("BLU_CAPTURE_POSITION_GRAD", "1");
    const TrainRun folded = train(root, "posgrad_" + precision, "captured", precision);
    EXPECT_NE(folded.log.find("position gradient: 1 identity embedding backward(s) run as a copy"), std::string::npos)
        << folded.log;
    expect_same_training(side, folded, n, "the position gradient as a copy vs the embedding backward");
  }
  {  // Note [Staged captured inputs] (blutrain): batches staged into the recorded token tensors
     // (the default) or copied into them: the same run; Note [Host issue time]'s line is there
    blu::test::ScopedEnv copy("BLU_CAPTURED_STAGE_COPY", "1");
    const TrainRun copied = train(root, "stagecopy_" + precision, "captured", precision);
    expect_same_training(side, copied, n, "batches staged into the record's tensors vs copied");
    if (n >= 5) {
      EXPECT_NE(side.log.find("host: a step's graph launch began "), std::string::npos) << side.log;
    }
  }
  // Note [Dead host copies] (blutensor): item()'s unread copies into host memory dropped, or run.
  {
    EXPECT_NE(side.log.find("host copies: "), std::string::npos) << side.log;
    blu::test::ScopedEnv keep("BLU_CAPTURE_HOST_COPIES", "1");
    const TrainRun copies = train(root, "hostcopies_" + precision, "captured", precision);
    EXPECT_EQ(copies.log.find("host copies: "), std::string::npos) << copies.log;
    expect_same_training(side, copies, n, "unread host copies dropped vs run");
  }
  // Note [Stream priorities] (blutensor): the main stream's kernel nodes at the high priority
  // (the count proves the capture kept them), the same bits.
  if (n >= 4) {
    blu::test::ScopedEnv on("BLU_CAPTURE_STREAM_PRIORITY", "1");
    const TrainRun prio = train(root, "prio_" + precision, "captured", precision);
    const std::regex kept("; [1-9][0-9]* kernel nodes at the main stream's high priority");
    EXPECT_TRUE(std::regex_search(prio.log, kept)) << prio.log;
    expect_same_training(side, prio, n, "stream priorities on vs off");
  }
  const TrainRun eager = train_captured_with_off(root, "eager_" + precision, precision, "BLU_CAPTURE_GRAPHS");
  EXPECT_NE(eager.log.find("captured engine: CUDA graphs off (BLU_CAPTURE_GRAPHS=0)"), std::string::npos) << eager.log;
  expect_same_training(side, eager, n, "graphs on vs off");
  if (precision == "fp32") {  // strict fp32: the captured step is the autograd step, bit for bit
    const TrainRun a = train(root, "autograd", "autograd", precision);
    expect_same_training(side, a, n, "captured vs autograd", /*optimizer=*/false);
  }
  fs::remove_all(root);
}

}  // namespace

TEST(CapturedEngineGpu, SideStreamTrainsBitForBitLikeOneStreamFp32) {
  if (!blu::cuda_is_available()) GTEST_SKIP() << "no CUDA device";
  side_stream_bit_for_bit("fp32");
}

TEST(CapturedEngineGpu, SideStreamTrainsBitForBitLikeOneStreamBf16) {
  if (!blu::cuda_is_available()) GTEST_SKIP() << "no CUDA device";
  side_stream_bit_for_bit("bf16");
}
