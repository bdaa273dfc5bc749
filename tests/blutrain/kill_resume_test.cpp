// kill_resume_test.cpp: the blutrain program killed with SIGKILL at a random moment (a random
// step, a random delay into it: inside a step or inside a checkpoint write) and started again with
// --resume auto ends bitwise where the uninterrupted run ends: every train loss after the
// checkpoint it resumed from equal (metrics.jsonl, 9 significant digits: exact for the fp32
// losses), and the final checkpoint's weights and AdamW state byte for byte. Three kills per run of
// the test, each from a fresh seed that the failure message prints (BLU_KILL_SEED=<seed> replays
// one). Issue 14's "kill -9 at a random step" (resume_test stops the run in-process instead).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "common/run_command.h"
#include "support/metrics_losses.h"
#include "support/rank_runs.h"

namespace fs = std::filesystem;
using blu::test::field_in;
using blu::test::run_command;

namespace {

constexpr int kSteps = 24;

class KillResume : public blu::train::test::RankRuns {
 protected:
  KillResume() : RankRuns("kill") {}
  std::string blutrain(const std::string& out, const std::string& resume) const {
    return program(out,
                   "--model tiny --device cpu --batch-size 2 --seq-len 32 --max-steps " + std::to_string(kSteps) +
                       " --lr 2e-3 --warmup-steps 3 --val-every -1 --final-val-batches 0 --sample-tokens 0 "
                       "--no-plot --threads 1 --vocab corpus --ckpt-every 1 --keep-checkpoints 2",
                   "--resume " + resume);
  }
  // step -> loss of the last train record of each step (a killed run's records, then the resumed
  // run's, share one metrics.jsonl: a step run twice keeps the second).
  std::map<int, double> losses(const std::string& out) const {
    const auto steps = field_in(metrics(out), "train", "step");
    const auto loss = field_in(metrics(out), "train", "loss");
    std::map<int, double> m;
    for (size_t i = 0; i < std::min(steps.size(), loss.size()); ++i) m[static_cast<int>(steps[i])] = loss[i];
    return m;
  }
  static std::string bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // The step of the newest complete checkpoint (0: none).
  int latest(const std::string& out) const {
    std::ifstream in(root_ / out / "latest");
    std::string name;
    in >> name;
    return name.rfind("step_", 0) == 0 ? std::atoi(name.c_str() + 5) : 0;
  }
};

TEST_F(KillResume, SigkillAtARandomMomentThenResumeIsBitwiseTheUninterruptedRun) {
  auto full = run_command(blutrain("full", "none"));
  ASSERT_EQ(full.status, 0) << full.output;
  const std::map<int, double> ref = losses("full");
  ASSERT_EQ(ref.size(), static_cast<size_t>(kSteps)) << full.output;
  const std::string final_ckpt = "step_" + std::string(8 - std::to_string(kSteps).size(), '0') + std::to_string(kSteps);
  const double step_ms = 1000.0 * full.seconds / kSteps;

  const char* fixed = std::getenv("BLU_KILL_SEED");
  std::random_device rd;
  for (int trial = 0; trial < (fixed ? 1 : 3); ++trial) {
    const unsigned seed = fixed ? static_cast<unsigned>(std::strtoul(fixed, nullptr, 10)) : rd();
    SCOPED_TRACE("BLU_KILL_SEED=" + std::to_string(seed));
    std::mt19937 rng(seed);
    const int kill_after = std::uniform_int_distribution<int>(1, kSteps - 4)(rng);
    const int delay_us = std::uniform_int_distribution<int>(0, static_cast<int>(1000 * step_ms))(rng);
    const std::string out = "killed" + std::to_string(trial);
    const std::string log = (root_ / (out + ".log")).string();
    const std::string cmd = "exec " + blutrain(out, "none") + " > " + log + " 2>&1";  // built before fork()
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Whatever way this trial ends (a failed assertion returns early), the child is gone after it.
    struct Reaper {
      pid_t pid;
      bool reaped = false;
      ~Reaper() {
        if (reaped) return;
        ::kill(pid, SIGKILL);
        int st = 0;
        ::waitpid(pid, &st, 0);
      }
    } reaper{pid};
    // Wait for the checkpoint of step kill_after, then a random part of a step, then SIGKILL.
    const auto t0 = std::chrono::steady_clock::now();
    int status = 0;
    bool exited = false;
    while (latest(out) < kill_after) {
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        exited = reaper.reaped = true;
        break;
      }
      ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(120)) << bytes(log);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_FALSE(exited) << "the run ended before step " << kill_after << ": " << bytes(log);
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    reaper.reaped = true;
    const int resumed_from = latest(out);
    if (WIFEXITED(status)) {  // finished before the signal: nothing was interrupted, still checked
      ASSERT_EQ(WEXITSTATUS(status), 0) << bytes(log);
      std::printf("trial %d: the run finished before the kill\n", trial);
    } else {
      ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    }
    std::printf("trial %d (seed %u): killed after step %d + %.1f ms; resumes from step %d\n", trial, seed, kill_after,
                delay_us / 1000.0, resumed_from);
    ASSERT_GE(resumed_from, kill_after);

    auto resumed = run_command(blutrain(out, "auto"));
    ASSERT_EQ(resumed.status, 0) << resumed.output;
    // It resumed (a run from scratch would give the same losses too).
    EXPECT_NE(resumed.output.find("at step " + std::to_string(resumed_from) + "\n"), std::string::npos)
        << resumed.output;
    EXPECT_EQ(resumed.output.find("step  1/"), std::string::npos) << resumed.output;
    const std::map<int, double> got = losses(out);
    for (int s = resumed_from + 1; s <= kSteps; ++s) {
      ASSERT_TRUE(got.count(s)) << "no loss for step " << s;
      EXPECT_EQ(got.at(s), ref.at(s)) << "step " << s;
    }
    for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
      const fs::path a = root_ / "full" / final_ckpt / f, b = root_ / out / final_ckpt / f;
      ASSERT_TRUE(fs::exists(a) && fs::exists(b)) << a << " " << b;
      EXPECT_TRUE(bytes(a) == bytes(b)) << f << " differs from the uninterrupted run's";
    }
  }
}

}  // namespace
