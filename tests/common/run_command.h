// Test support: run a shell command (a launcher, a program under test) and keep its exit status,
// merged output and wall time. Header-only so any test directory can use it.
#pragma once

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace blu::test {

struct CommandResult {
  int status = -1;     // the exit status; -1 when it did not exit normally
  std::string output;  // stdout and stderr merged
  double seconds = 0;
};

inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) r.output.append(buf, n);
  const int st = ::pclose(f);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// Note [Sanitized ranks]
// compute-sanitizer wrapped around a two-GPU test binary (--target-processes all, so that it follows
// blurun's ranks) hung every time on the device (session 15, 2x H200: bludist_nccl_gpu_test's
// CollectivesOnTwoGpus past 200 s under memcheck, racecheck and synccheck alike), while the same ranks
// under the sanitizer without the gtest parent finished in ~30 s: the parent, which holds a CUDA
// context and waits on the launcher's pipe, is what the tool cannot follow. So the tests put
// $BLU_RANK_WRAPPER (when set) in front of every program they start through blurun (and the
// one-GPU test that starts blutrain itself, fused_nonfinite_gpu_test: the same hang, session 17),
// and scripts/device-sanitize.sh runs such a binary unwrapped with BLU_RANK_WRAPPER naming the
// sanitizer: each rank runs under its own sanitizer (reports to per-process log files), the gtest
// process checks the results as usual. The one-GPU reference runs the parents do are the same code
// as the one-GPU tests, which run under the sanitizer themselves.
inline std::string rank_program(const std::string& program_and_args) {
  const char* w = std::getenv("BLU_RANK_WRAPPER");
  return (w && *w) ? std::string(w) + " " + program_and_args : program_and_args;
}

}  // namespace blu::test
