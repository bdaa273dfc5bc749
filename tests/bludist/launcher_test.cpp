// blurun: the environment it gives each rank, rank-prefixed output, the failure path (one rank
// exits 3: every rank ends, the message names it, within 60 s), --max-restarts, collectives on
// 3 CPU processes, and a peer that leaves early (a clear error, not a hang).
#include <gtest/gtest.h>

#include "bludist/store.h"
#include "support/mlp_ddp.h"
#include "support/require_gloo.h"

using bludist::test::run_command;

namespace {
std::string blurun(const std::string& args) { return std::string(BLURUN_EXE) + " " + args; }
std::string worker(const std::string& args) { return std::string(BLUDIST_TEST_WORKER) + " " + args; }
}  // namespace

TEST(Blurun, SetsTheEnvironmentAndPrefixesOutput) {
  auto r = run_command("env NCCL_NVLS_ENABLE=1 " + blurun("--nproc-per-node 3 -- " + worker("env")));
  ASSERT_EQ(r.status, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank) {
    std::string want = "[rank " + std::to_string(rank) + "] RANK=" + std::to_string(rank) +
                       " WORLD_SIZE=3 LOCAL_RANK=" + std::to_string(rank) + " LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1";
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
  }
  // NVLink multicast stays off even when the caller's environment turned it on.
  EXPECT_EQ(r.output.find("NCCL_NVLS_ENABLE=1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"),
            std::string::npos) << r.output;
}

TEST(Blurun, NodeFlagsGiveGlobalRanks) {
  auto r = run_command(blurun("--nproc-per-node 2 --nnodes 3 --node-rank 2 --master-addr 127.0.0.1 "
                              "--master-port 29999 -- " + worker("env")));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 5] RANK=5 WORLD_SIZE=6 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "
                          "MASTER_PORT=29999"), std::string::npos) << r.output;
}

TEST(Blurun, OneRankFailingEndsEveryRankWithAClearMessage) {
  BLUDIST_REQUIRE_GLOO();
  auto r = run_command(blurun("--nproc-per-node 4 -- " + worker("exit 2 3")));
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_LT(r.seconds, 60.0) << r.output;
  EXPECT_NE(r.output.find("blurun: rank 2 (local rank 2, node 0) failed with exit status 3; all ranks stopped"),
            std::string::npos) << r.output;
  std::printf("failure path took %.2f s\n%s", r.seconds, r.output.c_str());
}

TEST(Blurun, MaxRestartsRestartsTheGang) {
  BLUDIST_REQUIRE_GLOO();
  auto r = run_command(blurun("--nproc-per-node 2 --max-restarts 2 -- " + worker("restart 1")));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("restarting the gang (restart 1 of 2)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank 0] attempt 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank 1] attempt 1"), std::string::npos) << r.output;
  auto none = run_command(blurun("--nproc-per-node 2 -- " + worker("restart 1")));
  EXPECT_EQ(none.status, 5) << none.output;
}

TEST(Blurun, GlooCollectivesOnThreeProcesses) {
  BLUDIST_REQUIRE_GLOO();
  auto r = run_command(blurun("--nproc-per-node 3 -- " + worker("collectives gloo")));
  ASSERT_EQ(r.status, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_NE(r.output.find("[rank " + std::to_string(rank) + "] collectives ok"), std::string::npos) << r.output;
}

TEST(Blurun, PeerLeavingMidJobIsAClearErrorNotAHang) {
  BLUDIST_REQUIRE_GLOO();
  auto r = run_command("BLUDIST_TIMEOUT_S=20 " + blurun("--nproc-per-node 2 -- " + worker("leave_early gloo")));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_LT(r.seconds, 60.0) << r.output;
  EXPECT_NE(r.output.find("[rank 0] test_worker leave_early: bludist gloo all_reduce"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("blurun: rank 0"), std::string::npos) << r.output;
}

// The whole path of the NCCL watchdog test, on CPU ranks: rank 1 leaves with status 0, rank 0 is
// stuck under the watchdog's deadline timer; its message (written with write(2)), the trace and
// blurun's lines all reach the log, and the gang ends with the watchdog's status.
TEST(Blurun, WatchdogEndsARankWhosePeerLeft) {
  BLUDIST_REQUIRE_GLOO();
  auto r = run_command("BLUDIST_TIMEOUT_S=2 BLUDIST_WATCHDOG_TRACE=1 timeout -k 5 45 " +
                       blurun("--nproc-per-node 2 -- " + worker("leave_early_watchdog returns")));
  std::printf("%s(%.1f s)\n", r.output.c_str(), r.seconds);
  EXPECT_EQ(r.status, 124) << r.output;
  EXPECT_LT(r.seconds, 30.0) << r.output;
  for (const char* want : {"[rank 0] leave_early_watchdog: rank 0 waits on a peer that left",
                           "[rank 0] bludist watchdog trace: 1 pending (oldest stand-in all_reduce "
                           "of 1000 f32 (#1), 1.",
                           "[rank 0] bludist watchdog: stand-in all_reduce of 1000 f32 (#1) did "
                           "not complete within 2.0 s (a peer "
                           "rank died or hung) on the gloo group (rank 0 of 2); aborting the "
                           "stand-in communicator and exiting with "
                           "status 124",
                           "blurun: rank 0 (local rank 0, pid ",
                           "blurun: rank 0 (local rank 0, node 0) failed with exit status 124"})
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
  // An abort that never returns: the process still ends, with the other status.
  r = run_command("BLUDIST_TIMEOUT_S=2 timeout -k 5 45 " +
                  blurun("--nproc-per-node 2 -- " + worker("leave_early_watchdog hangs")));
  EXPECT_EQ(r.status, 125) << r.output;
  EXPECT_NE(
      r.output.find(
          "[rank 0] bludist watchdog: the abort did not return within 5.0 s; exiting with status "
          "125"),
      std::string::npos)
      << r.output;
}

// Note [A rank that ends early]: a rank exits 0 while the others hang (no watchdog here).
TEST(Blurun, RanksLeftRunningAfterOneExitedAreNamedThenStopped) {
  auto r = run_command("timeout -k 5 45 " +
                       blurun("--nproc-per-node 3 --exit-grace-s 2 -- sh -c 'echo started; "
                              "if [ \"$RANK\" = 1 ]; then exit 0; fi; exec sleep 60'"));
  EXPECT_EQ(r.status, 128 + 15) << r.output;
  EXPECT_LT(r.seconds, 20.0) << r.output;
  for (const char* want :
       {"[rank 1] started",
        "blurun: rank 1 exited with status 0 2 s ago; still running: rank 0 (pid ", "rank 2 (pid ",
        "; waiting 2 s (--exit-grace-s) after it",
        "still running 2 s after rank 1 exited with status 0; stopping it",
        "ended with signal 15 (Terminated) while the gang was stopping",
        "blurun: rank 0 (local rank 0, node 0) failed with signal 15 (Terminated); all ranks "
        "stopped"})
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
}

TEST(Blurun, SignalNamesTheRanksStillRunning) {
  auto r = run_command("sh -c '" + blurun("--nproc-per-node 2 -- sh -c \"exec sleep 60\"") +
                       " & p=$!; sleep 1; kill -TERM $p; wait $p'");
  EXPECT_EQ(r.status, 128 + 15) << r.output;
  EXPECT_NE(
      r.output.find("blurun: received signal 15; stopping all ranks (still running: rank 0 (pid "),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("), rank 1 (pid "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ended with signal 15 (Terminated) while the gang was stopping"),
            std::string::npos)
      << r.output;
}

// A rank's last words come before blurun's line about its end, also without a final newline.
TEST(Blurun, LastOutputOfAFailedRankComesFirst) {
  auto r = run_command(
      blurun("--nproc-per-node 1 -- sh -c 'echo line; printf \"no newline\" >&2; exit 3'"));
  EXPECT_EQ(r.status, 3) << r.output;
  const auto last = r.output.find("[rank 0] no newline\n");
  const auto failed = r.output.find("blurun: rank 0 (local rank 0, pid ");
  EXPECT_NE(r.output.find("[rank 0] line\n"), std::string::npos) << r.output;
  ASSERT_NE(last, std::string::npos) << r.output;
  ASSERT_NE(failed, std::string::npos) << r.output;
  EXPECT_LT(last, failed) << r.output;
}

TEST(Blurun, BadUsageIsExplained) {
  auto r = run_command(blurun("--nproc-per-node 2"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("no program given"), std::string::npos) << r.output;
  r = run_command(blurun("--nnodes 2 --nproc-per-node 1 -- true"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--master-addr"), std::string::npos) << r.output;
}

TEST(Blurun, TwoLaunchersStandInForTwoNodes) {
  BLUDIST_REQUIRE_GLOO();
  int port;
  {
    bludist::TcpStoreServer probe(0);  // a free port, released before the launchers start
    port = probe.port();
  }
  auto node = [&](int r) {
    return blurun("--nnodes 2 --node-rank " + std::to_string(r) + " --nproc-per-node 2 --master-addr 127.0.0.1 "
                  "--master-port " + std::to_string(port) + " -- " + worker("collectives gloo"));
  };
  std::string log = ::testing::TempDir() + "bludist_node1_" + std::to_string(port) + ".log";
  auto r = run_command("sh -c '" + node(1) + " > " + log + " 2>&1 & p=$!; " + node(0) + "; s0=$?; wait $p; s1=$?; cat " +
                       log + "; exit $((s0 + s1))'");
  ASSERT_EQ(r.status, 0) << r.output;
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(r.output.find("[rank " + std::to_string(rank) + "] collectives ok: gloo group (rank " +
                            std::to_string(rank) + " of 4)"), std::string::npos) << r.output;
}
