// The deadline half of the NCCL watchdog (Note [Watchdog deadlines] in bludist/src/
// watchdog_timer.h), on CPU: it ends the process with a clear message when a pending operation
// outlives the timeout, also while every other thread is blocked (here: holding the stdio locks),
// also when the abort it runs never returns (distinct status after the grace period); it stays
// quiet for operations that ended; BLUDIST_WATCHDOG_TRACE-style reports come once a second.
#include "watchdog_timer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

using bludist::kWatchdogAbortHungExitCode;
using bludist::kWatchdogExitCode;
using bludist::detail::DeadlineTimer;

namespace {

DeadlineTimer::Options options(int timeout_ms) {
  DeadlineTimer::Options o;
  o.timeout = bludist::Milliseconds(timeout_ms);
  o.abort_grace = bludist::Milliseconds(300);
  o.where = " on the test group (rank 0 of 2)";
  o.tick = std::chrono::milliseconds(20);
  return o;
}

[[noreturn]] void block_for_ever() {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

class WatchdogTimer : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

}  // namespace

TEST_F(WatchdogTimer, FiresWhenACollectiveOutlivesTheTimeout) {
  EXPECT_EXIT(
      {
        DeadlineTimer t(options(200));
        t.begin("all_reduce of 1000 f32 (#3)", DeadlineTimer::Kind::kCompletion);
        block_for_ever();
      },
      ::testing::ExitedWithCode(kWatchdogExitCode),
      "bludist watchdog: all_reduce of 1000 f32 \\(#3\\) did not complete within 0\\.2 s \\(a peer "
      "rank died or "
      "hung\\) on the test group \\(rank 0 of 2\\); exiting with status 124 \\(no poller\\)");
}

TEST_F(WatchdogTimer, FiresWhileOtherThreadsHoldTheStdioLocks) {
  // The main thread stuck while owning stdout and stderr (as inside a print): the message goes
  // out with write(2) and the exit does not wait for the streams.
  EXPECT_EXIT(
      {
        DeadlineTimer t(options(200));
        std::printf("buffered, never flushed");
        ::flockfile(stdout);
        ::flockfile(stderr);
        t.begin("broadcast of 7 f32 (#0)", DeadlineTimer::Kind::kCompletion);
        block_for_ever();
      },
      ::testing::ExitedWithCode(kWatchdogExitCode),
      "bludist watchdog: broadcast of 7 f32 \\(#0\\) did not complete");
}

TEST_F(WatchdogTimer, HostCallsAndSetUpHaveTheirOwnWording) {
  EXPECT_EXIT(
      {
        DeadlineTimer t(options(200));
        DeadlineTimer::Scope s(t, "ncclGroupEnd of 2 grouped operation(s)",
                               DeadlineTimer::Kind::kHostCall);
        block_for_ever();
      },
      ::testing::ExitedWithCode(kWatchdogExitCode),
      "ncclGroupEnd of 2 grouped operation\\(s\\) blocked in NCCL on the host for more than 0\\.2 "
      "s");
  EXPECT_EXIT(
      {
        DeadlineTimer t(options(200));
        DeadlineTimer::Scope s(t, "ncclCommInitRank (rank 1 of 2)", DeadlineTimer::Kind::kSetUp);
        block_for_ever();
      },
      ::testing::ExitedWithCode(kWatchdogExitCode),
      "ncclCommInitRank \\(rank 1 of 2\\) did not complete within 0\\.2 s \\(a peer rank died or "
      "never started\\)");
}

TEST_F(WatchdogTimer, AnAbortThatReturnsEndsWithTheWatchdogStatus) {
  EXPECT_EXIT(
      {
        DeadlineTimer::Options o = options(200);
        o.action = "aborting the communicator and ";
        o.abort = [] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); };
        DeadlineTimer t(o);
        t.begin("all_gather of 5 bf16 (#1)", DeadlineTimer::Kind::kCompletion);
        block_for_ever();
      },
      ::testing::ExitedWithCode(kWatchdogExitCode),
      "aborting the communicator and exiting with status 124");
}

TEST_F(WatchdogTimer, AnAbortThatNeverReturnsStillEndsTheProcess) {
  EXPECT_EXIT(
      {
        DeadlineTimer::Options o = options(200);
        o.abort = [] { block_for_ever(); };  // ncclCommAbort stuck behind a spinning kernel
        DeadlineTimer t(o);
        t.begin("all_reduce of 1 f32 (#9)", DeadlineTimer::Kind::kCompletion);
        block_for_ever();
      },
      ::testing::ExitedWithCode(kWatchdogAbortHungExitCode),
      "did not complete within 0\\.2 s(.|\n)*bludist watchdog: the abort did not return within "
      "0\\.3 s; exiting "
      "with status 125");
}

TEST_F(WatchdogTimer, TraceReportsOnceASecond) {
  EXPECT_EXIT(
      {
        DeadlineTimer::Options o = options(1500);
        o.trace = true;
        DeadlineTimer t(o);
        t.set_note("poller in cudaEventQuery");
        t.begin("reduce_scatter of 331 f32 (#4)", DeadlineTimer::Kind::kCompletion);
        block_for_ever();
      },
      ::testing::ExitedWithCode(kWatchdogExitCode),
      "bludist watchdog trace: 1 pending \\(oldest reduce_scatter of 331 f32 \\(#4\\), 1\\.[0-9] "
      "s\\), poller in "
      "cudaEventQuery on the test group");
}

TEST_F(WatchdogTimer, EndedOperationsNeverFire) {
  const auto t0 = std::chrono::steady_clock::now();
  {
    DeadlineTimer t(options(200));
    for (int i = 0; i < 20; ++i) {
      uint64_t id = t.begin("op " + std::to_string(i), DeadlineTimer::Kind::kCompletion);
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
      t.end(id);  // 20 x 25 ms: well past the timeout in total, never one operation
    }
    { DeadlineTimer::Scope s(t, "host call", DeadlineTimer::Kind::kHostCall); }
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
  }
  // Still here; and the destructor did not wait for a whole tick or more.
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 2.0);
}
