// sharded_checkpoint_test.cpp: Note [Sharded checkpoints] (blutrain/src/train/sharded_checkpoint.h)
// with CPU ranks under blurun (Gloo), tiny model, global batch of 4 sequences:
//  - ZeRO-1 on 4 ranks writes one model and one optimizer shard per rank plus shard_index.json
//    (no whole file); resumed at step 4 on 4 ranks it continues bit for bit (the final shards are
//    byte-identical to the uninterrupted run's); on 2 ranks (other ZeRO chunking) and on one
//    process it continues bit for bit as a resume from the whole checkpoint of the same step does,
//    and within 1e-5 of the uninterrupted 4-rank curve;
//  - ZeRO-3 on 4 ranks resumes on 2 ZeRO-3 ranks (each reading about half of the shard data),
//    on 2 ZeRO-2 ranks and on one process;
//  - a truncated shard, a flipped bit in a shard and a missing shard are clear errors naming the
//    file; a rank dying while it writes its shard leaves `latest` on the previous checkpoint, from
//    which the gang resumes onto the same curve.
#include <gtest/gtest.h>

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

std::string bytes_of(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

class ShardedCheckpoints : public blu::train::test::RankRuns {
 protected:
  ShardedCheckpoints() : RankRuns("shardckpt") {}
  // 8 steps, checkpoints at 4 and 8, the global batch of 4 sequences over `ranks` ranks;
  // `flags` adds --zero / --checkpoint-format / --resume.
  std::string run(int ranks, const std::string& out, const std::string& flags) const {
    const std::string common =
        "--model tiny --device cpu --seq-len 32 --max-steps 8 --lr 2e-3 --warmup-steps 3 --val-every 4 "
        "--val-batches 1 --sample-tokens 0 --no-plot --threads 1 --vocab corpus --ckpt-every 4 --keep-checkpoints 3";
    const std::string batch = "--batch-size " + std::to_string(4 / ranks) +
                              (ranks > 1 ? " --dp " + std::to_string(ranks) : std::string());
    const std::string prog = program(out, common, batch + " " + flags);
    return ranks > 1 ? blurun(ranks, prog) : prog;
  }
  std::string resume_flag(const std::string& out, int step) const { return " --resume " + checkpoint(out, step); }
  static void expect_bitwise(const std::vector<double>& got, const std::vector<double>& ref, const std::string& label) {
    ASSERT_EQ(got.size(), ref.size()) << label;
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], ref[i]) << label << " record " << i;
  }
  std::vector<double> tail(const std::string& out, std::size_t from) const {
    const std::vector<double> all = losses_in(metrics(out), "train");
    return std::vector<double>(all.begin() + static_cast<std::ptrdiff_t>(std::min(from, all.size())), all.end());
  }
  void expect_ok(const blu::test::CommandResult& r) const { ASSERT_EQ(r.status, 0) << r.output; }
};

}  // namespace

TEST_F(ShardedCheckpoints, Zero1FourRanksResumeOnFourTwoAndOneAsTheWholeCheckpointDoes) {
  REQUIRE_GLOO();
  // 0.25 MiB chunks: ~13 ZeRO chunks of the tiny model, so every rank owns many ranges.
  expect_ok(run_command(run(4, "four", "--zero 1 --dp-bucket-mb 0.25 --resume none")));
  expect_ok(run_command(run(4, "four_whole", "--zero 1 --dp-bucket-mb 0.25 --resume none --checkpoint-format whole")));
  const std::vector<double> ref = losses_in(metrics("four"), "train");
  ASSERT_EQ(ref.size(), 8u);
  expect_bitwise(losses_in(metrics("four_whole"), "train"), ref, "the format does not change training");
  const fs::path ckpt = checkpoint("four", 4);
  for (const char* f : {"shard_index.json", "state.json", "config.json", "checksums.crc32c",
                        "model.rank00000-of-00004.safetensors", "optimizer.rank00003-of-00004.safetensors"})
    EXPECT_TRUE(fs::exists(ckpt / f)) << f;
  EXPECT_FALSE(fs::exists(ckpt / "optimizer.safetensors"));
  EXPECT_FALSE(fs::exists(ckpt / "model.safetensors"));
  const std::vector<double> after4(ref.begin() + 4, ref.end());

  // Same rank count: the uninterrupted run, bit for bit, down to the final shards' bytes.
  auto r4 = run_command(run(4, "r4", "--zero 1 --dp-bucket-mb 0.25" + resume_flag("four", 4)));
  expect_ok(r4);
  EXPECT_NE(r4.output.find("sharded resume: 4 -> 4 ranks"), std::string::npos) << r4.output;
  expect_bitwise(tail("r4", 0), after4, "4 -> 4");
  for (int r = 0; r < 4; ++r) {
    for (const std::string kind : {"model", "optimizer"}) {
      const std::string name = kind + ".rank0000" + std::to_string(r) + "-of-00004.safetensors";
      EXPECT_EQ(bytes_of(fs::path(checkpoint("r4", 8)) / name), bytes_of(fs::path(checkpoint("four", 8)) / name))
          << name;
    }
  }

  // 2 ranks, other chunking: as the whole checkpoint's resume, bit for bit.
  auto r2 = run_command(run(2, "r2", "--zero 1 --dp-bucket-mb 0.1" + resume_flag("four", 4)));
  expect_ok(r2);
  EXPECT_NE(r2.output.find("sharded resume: 4 -> 2 ranks"), std::string::npos) << r2.output;
  expect_ok(run_command(run(2, "r2_whole", "--zero 1 --dp-bucket-mb 0.1" + resume_flag("four_whole", 4))));
  expect_bitwise(tail("r2", 0), tail("r2_whole", 0), "4 -> 2, sharded vs whole checkpoint");
  blu::test::expect_same_loss_curve(tail("r2", 0), after4, 1e-5, "4 -> 2 vs uninterrupted");

  // One process, no ZeRO: whole tensors assembled from the shards.
  expect_ok(run_command(run(1, "r1", resume_flag("four", 4))));
  expect_ok(run_command(run(1, "r1_whole", resume_flag("four_whole", 4))));
  expect_bitwise(tail("r1", 0), tail("r1_whole", 0), "4 -> 1, sharded vs whole checkpoint");
  blu::test::expect_same_loss_curve(tail("r1", 0), after4, 1e-5, "4 -> 1 vs uninterrupted");
  for (const char* f : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_EQ(bytes_of(fs::path(checkpoint("r1", 8)) / f), bytes_of(fs::path(checkpoint("r1_whole", 8)) / f)) << f;
}

TEST_F(ShardedCheckpoints, Zero3FourRanksResumeOnZero3Zero2AndOneProcess) {
  REQUIRE_GLOO();
  expect_ok(run_command(run(4, "z3", "--zero 3 --resume none")));
  expect_ok(run_command(run(4, "z3_whole", "--zero 3 --resume none --checkpoint-format whole")));
  const std::vector<double> ref = losses_in(metrics("z3"), "train");
  ASSERT_EQ(ref.size(), 8u);
  const std::vector<double> after4(ref.begin() + 4, ref.end());

  auto z3r2 = run_command(run(2, "z3r2", "--zero 3" + resume_flag("z3", 4)));
  expect_ok(z3r2);
  expect_ok(run_command(run(2, "z3r2_whole", "--zero 3" + resume_flag("z3_whole", 4))));
  expect_bitwise(tail("z3r2", 0), tail("z3r2_whole", 0), "ZeRO-3 4 -> 2, sharded vs whole checkpoint");
  blu::test::expect_same_loss_curve(tail("z3r2", 0), after4, 1e-5, "ZeRO-3 4 -> 2 vs uninterrupted");
  // Each of the 2 ranks reads its half of the weights and moments, not the whole model.
  const std::string key = "rank 0 read ";
  const std::size_t at = z3r2.output.find(key);
  ASSERT_NE(at, std::string::npos) << z3r2.output;
  const double read_mib = std::strtod(z3r2.output.c_str() + at + key.size(), nullptr);
  const std::size_t of = z3r2.output.find(" of ", at + key.size());
  const double total_mib = std::strtod(z3r2.output.c_str() + of + 4, nullptr);
  EXPECT_GT(read_mib, 0.45 * total_mib) << z3r2.output;
  EXPECT_LT(read_mib, 0.55 * total_mib) << z3r2.output;

  expect_ok(run_command(run(2, "z3r2z2", "--zero 2 --dp-bucket-mb 0.1" + resume_flag("z3", 4))));
  blu::test::expect_same_loss_curve(tail("z3r2z2", 0), after4, 1e-5, "ZeRO-3 4 -> ZeRO-2 2");
  expect_ok(run_command(run(1, "z3r1", resume_flag("z3", 4))));
  blu::test::expect_same_loss_curve(tail("z3r1", 0), after4, 1e-5, "ZeRO-3 4 -> 1 process");
}

TEST_F(ShardedCheckpoints, DamagedOrMissingShardsAreClearErrorsNamingTheFile) {
  REQUIRE_GLOO();
  expect_ok(run_command(run(2, "two", "--zero 1 --max-steps 4 --resume none")));
  const fs::path good = checkpoint("two", 4);
  auto damaged = [&](const std::string& name) {
    const fs::path dir = root_ / name;
    fs::copy(good, dir, fs::copy_options::recursive);
    return dir;
  };
  auto resume_from = [&](int ranks, const fs::path& dir) {
    return run_command(run(ranks, "out_" + dir.filename().string(),
                           (ranks > 1 ? "--zero 1 --resume " : "--resume ") + dir.string()));
  };

  const fs::path truncated = damaged("truncated");
  const fs::path opt1 = truncated / "optimizer.rank00001-of-00002.safetensors";
  fs::resize_file(opt1, fs::file_size(opt1) - 100);
  auto t = resume_from(2, truncated);
  EXPECT_NE(t.status, 0);
  EXPECT_NE(t.output.find("checkpoint file '" + opt1.string() + "' is "), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("(truncated or damaged file)"), std::string::npos) << t.output;

  const fs::path flipped = damaged("flipped");
  const fs::path model0 = flipped / "model.rank00000-of-00002.safetensors";
  {
    std::fstream f(model0, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1000, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(-1000, std::ios::end);
    f.write(&c, 1);
  }
  for (int ranks : {2, 1}) {
    auto b = resume_from(ranks, flipped);
    EXPECT_NE(b.status, 0);
    EXPECT_NE(b.output.find("safetensors '" + model0.string() + "': checksum mismatch in tensor '"), std::string::npos)
        << b.output;
  }

  const fs::path missing = damaged("missing");
  fs::remove(missing / "optimizer.rank00001-of-00002.safetensors");
  auto m = resume_from(1, missing);
  EXPECT_NE(m.status, 0);
  EXPECT_NE(m.output.find("shard file '" + (missing / "optimizer.rank00001-of-00002.safetensors").string() +
                          "' is missing (rank 1 of 2's optimizer shard"),
            std::string::npos)
      << m.output;
}

TEST_F(ShardedCheckpoints, ARankDyingMidWriteLeavesThePreviousCheckpointLatest) {
  REQUIRE_GLOO();
  // Rank 1 writes half of its optimizer shard of step 8 and exits: blurun stops the gang.
  auto died = run_command("BLUTRAIN_TEST_DIE_IN_CHECKPOINT=1@8 " + run(2, "two", "--zero 1 --resume auto"));
  EXPECT_NE(died.status, 0) << died.output;
  EXPECT_NE(died.output.find("rank 1 dies writing"), std::string::npos) << died.output;
  EXPECT_EQ(bytes_of(root_ / "two" / "latest"), "step_00000004\n");
  EXPECT_FALSE(fs::exists(checkpoint("two", 8)));
  int stale = 0;
  for (const auto& e : fs::directory_iterator(root_ / "two")) stale += e.path().filename().string().rfind(".step_00000008", 0) == 0;
  EXPECT_LE(stale, 1) << "the dead gang's staging directory (rank 0 may remove it as it fails)";
  const std::vector<double> first = losses_in(metrics("two"), "train");  // steps 1..8 ran before the save
  ASSERT_EQ(first.size(), 8u) << died.output;

  // The gang again: it resumes from step 4 and reproduces 5..8, then commits step 8 (and removes
  // the stale staging directory).
  auto again = run_command(run(2, "two", "--zero 1 --resume auto"));
  expect_ok(again);
  EXPECT_NE(again.output.find("resumed from " + checkpoint("two", 4)), std::string::npos) << again.output;
  expect_bitwise(tail("two", 8), std::vector<double>(first.begin() + 4, first.end()), "after the crash");
  EXPECT_EQ(bytes_of(root_ / "two" / "latest"), "step_00000008\n");
  for (const auto& e : fs::directory_iterator(root_ / "two"))
    EXPECT_NE(e.path().filename().string().rfind(".step_", 0), 0u) << e.path();
}
