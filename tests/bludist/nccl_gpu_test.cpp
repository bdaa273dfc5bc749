// The NCCL backend on 2 GPUs (2 processes under blurun): collectives against hand-computed values
// (sync and async on a non-default stream, grouped ring send/recv), tensor and context parallelism
// against the unsharded ops, DDP reproducing the one-GPU loss curve, and the watchdog turning a departed peer into a clear error. Skips without
// two CUDA devices or without NCCL in the build.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "bludist/process_group.h"
#include "bludist/store.h"
#include "blutensor/cuda_stream.h"
#include "support/mlp_ddp.h"

using namespace bludist;
using bludist::test::rank_program;
using bludist::test::run_command;

namespace {

// Fewer than 2 GPUs skips even under BLU_REQUIRE_GPU=1 (the one-GPU device runs set it), unless
// BLU_REQUIRE_MULTI_GPU=1; with 2 GPUs, a build without NCCL fails under BLU_REQUIRE_GPU=1.
void require_two_gpus() {
  auto env_is_1 = [](const char* k) { return std::getenv(k) && std::string(std::getenv(k)) == "1"; };
  if (blu::cuda::device_count() < 2) {
    if (env_is_1("BLU_REQUIRE_MULTI_GPU")) FAIL() << "needs 2 CUDA devices, found " << blu::cuda::device_count();
    GTEST_SKIP() << "needs 2 CUDA devices, found " << blu::cuda::device_count();
  }
  if (!nccl_available()) {
    if (env_is_1("BLU_REQUIRE_GPU") || env_is_1("BLU_REQUIRE_MULTI_GPU")) FAIL() << "built without NCCL (nccl.h/libnccl not found at configure time; set NCCL_HOME)";
    GTEST_SKIP() << "built without NCCL";
  }
}

std::vector<double> read_losses(const std::string& path) {
  std::vector<double> v;
  std::ifstream f(path);
  double x;
  while (f >> x) v.push_back(x);
  return v;
}

}  // namespace

// The test worker's `mode` over NCCL, as a rank blurun starts (Note [Sanitized ranks]).
std::string nccl_worker(const std::string& mode) {
  return rank_program(std::string(BLUDIST_TEST_WORKER) + " " + mode + " nccl");
}

// Runs `command`, which starts two ranks of the worker's `mode`: both must report "<mode> ok".
void expect_two_ranks_ok(const std::string& command, const std::string& mode) {
  auto r = run_command(command);
  std::printf("%s", r.output.c_str());
  ASSERT_EQ(r.status, 0) << r.output;
  for (const std::string rank : {"0", "1"}) {
    EXPECT_NE(r.output.find("[rank " + rank + "] " + mode + " ok: nccl group (rank " + rank + " of 2)"),
              std::string::npos) << r.output;
  }
}

TEST(Nccl, CollectivesOnTwoGpus) {
  require_two_gpus();
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFailure()) return;
  expect_two_ranks_ok(std::string(BLURUN_EXE) + " --nproc-per-node 2 -- " + nccl_worker("collectives"), "collectives");
}

// Multi-node through the launcher: two blurun launchers on this host stand in for two nodes of one
// GPU each (CUDA_VISIBLE_DEVICES gives each its own card, as a node would have), meeting at the
// store of node 0 (--master-addr / --master-port): the NCCL collectives over the two "nodes".
TEST(Nccl, TwoLaunchersStandInForTwoNodes) {
  require_two_gpus();
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFailure()) return;
  int port;
  {
    bludist::TcpStoreServer probe(0);  // a free port, released before the launchers start
    port = probe.port();
  }
  auto node = [&](int r) {
    return "CUDA_VISIBLE_DEVICES=" + std::to_string(r) + " " + std::string(BLURUN_EXE) + " --nnodes 2 --node-rank " +
           std::to_string(r) + " --nproc-per-node 1 --master-addr 127.0.0.1 --master-port " + std::to_string(port) +
           " -- " + nccl_worker("collectives");
  };
  const std::string log = ::testing::TempDir() + "bludist_nccl_node1_" + std::to_string(port) + ".log";
  expect_two_ranks_ok("sh -c '" + node(1) + " > " + log + " 2>&1 & p=$!; " + node(0) + "; s0=$?; wait $p; s1=$?; cat " +
                          log + "; exit $((s0 + s1))'",
                      "collectives");
}

// Tensor parallelism (MLP, vocabulary-parallel embedding / cross-entropy, heads-split attention) and
// ring attention (contiguous and balanced) on 2 GPUs against the unsharded ops (support/
// parallel_checks.h, float64 on CUDA).
TEST(Nccl, TensorAndContextParallelMatchUnsharded) {
  require_two_gpus();
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFailure()) return;
  expect_two_ranks_ok(std::string(BLURUN_EXE) + " --nproc-per-node 2 -- " + nccl_worker("parallel"), "parallel");
}

TEST(Nccl, DdpOnTwoGpusMatchesOneGpu) {
  require_two_gpus();
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFailure()) return;
  for (int accum : {1, 2}) {
    std::string out = ::testing::TempDir() + "bludist_nccl_ddp_" + std::to_string(accum) + ".txt";
    std::remove(out.c_str());
    auto r = run_command(std::string(BLURUN_EXE) + " --nproc-per-node 2 -- " +
                         nccl_worker("ddp") + " " + out + " " + std::to_string(accum));
    ASSERT_EQ(r.status, 0) << r.output;
    std::vector<double> ddp = read_losses(out);
    test::MlpRunOptions o;
    o.accum = accum;
    o.device = blu::Device::cuda(0);
    std::vector<double> one_gpu = test::train_mlp(nullptr, o);
    o.device = blu::kCPU;
    std::vector<double> cpu = test::train_mlp(nullptr, o);
    ASSERT_EQ(ddp.size(), one_gpu.size());
    double max_gpu = 0, max_cpu = 0;
    for (std::size_t i = 0; i < ddp.size(); ++i) {
      max_gpu = std::max(max_gpu, std::fabs(ddp[i] - one_gpu[i]) / std::fabs(one_gpu[i]));
      max_cpu = std::max(max_cpu, std::fabs(ddp[i] - cpu[i]) / std::fabs(cpu[i]));
      EXPECT_LE(std::fabs(ddp[i] - one_gpu[i]), 1e-5 * std::fabs(one_gpu[i])) << "accum " << accum << " step " << i;
    }
    std::printf("nccl ddp (accum %d): loss %.6f -> %.6f; max rel diff vs one GPU %.3g, vs CPU %.3g\n", accum,
                one_gpu.front(), one_gpu.back(), max_gpu, max_cpu);
  }
}

// ZeRO-1 (sharded AdamW state) and ZeRO-2 (+ gradients reduce-scattered from the grad-ready hooks
// in 2 KiB chunks, Note [ZeRO-2]), with and without accumulation, against one GPU.
TEST(Nccl, ZeroStagesOnTwoGpusMatchOneGpu) {
  require_two_gpus();
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFailure()) return;
  for (int stage : {1, 2}) {
    for (int accum : {1, 2}) {
      std::string out = ::testing::TempDir() + "bludist_nccl_zero" + std::to_string(stage) + "_" +
                        std::to_string(accum) + ".txt";
      std::remove(out.c_str());
      auto r = run_command(std::string(BLURUN_EXE) + " --nproc-per-node 2 -- " + nccl_worker("zero") + " " + out + " " +
                           std::to_string(stage) + " " + std::to_string(accum));
      ASSERT_EQ(r.status, 0) << r.output;
      std::vector<double> z = read_losses(out);
      test::MlpRunOptions o;
      o.accum = accum;
      o.device = blu::Device::cuda(0);
      std::vector<double> one_gpu = test::train_mlp(nullptr, o);
      ASSERT_EQ(z.size(), one_gpu.size());
      double m = 0;
      for (std::size_t i = 0; i < z.size(); ++i) {
        m = std::max(m, std::fabs(z[i] - one_gpu[i]) / std::fabs(one_gpu[i]));
        EXPECT_LE(std::fabs(z[i] - one_gpu[i]), 1e-5 * std::fabs(one_gpu[i]))
            << "stage " << stage << " accum " << accum << " step " << i;
      }
      std::printf("nccl zero%d (accum %d): max rel diff vs one GPU %.3g\n", stage, accum, m);
    }
  }
}

TEST(Nccl, WatchdogEndsACollectiveWhosePeerLeft) {
  require_two_gpus();
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFailure()) return;
  // Bounded from outside too (timeout(1)), so that a hang fails with the ranks' output in the log
  // (2026-11-25, 2x H100: this test hung past 140 s with nothing printed; see the issue 12 note).
  // 2026-11-25 (2x H100, second run, rank 1 leaving with _Exit): the test binary was killed from
  // outside at 90 s before this inner timeout, so nothing of the ranks' output came back; the
  // inner bound is now well under any outer one (45 s: the watchdog fires at 10 s).
  // 2026-11-26 (2x H200): still no watchdog message in 45 s, also with the deadline kept by a
  // thread that makes no CUDA call (Note [Watchdog threads]); BLUDIST_WATCHDOG_TRACE=1 makes both
  // watchdog threads report once a second, so the next run shows which one is stuck, and where.
  // (That run, 2026-11-26, 2x H200: not one trace line either.) Cause, found by reading: the
  // poller destroyed a completed Work's CUDA event under the lock the timer needed (Note
  // [Watchdog deadlines] in bludist/src/watchdog_timer.h). Expected now, within ~11-16 s: trace
  // lines, "[rank 0] bludist watchdog: all_reduce of 1000 f32 (#1) did not complete within
  // 10.0 s ...", "blurun: rank 1 exited with status 0 5 s ago; still running: rank 0 ..." and
  // blurun's line for rank 0 with status 124 (125 if ncclCommAbort itself never returns).
  auto r = run_command("NCCL_DEBUG=WARN BLUDIST_TIMEOUT_S=10 BLUDIST_WATCHDOG_TRACE=1 timeout -k 5 45 " + std::string(BLURUN_EXE) +
                       " --nproc-per-node 2 -- " + BLUDIST_TEST_WORKER + " leave_early nccl");
  std::printf("%s(%.1f s)\n", r.output.c_str(), r.seconds);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_LT(r.seconds, 60.0);
  // The deadline, or an asynchronous NCCL error if NCCL notices first; not a trace line.
  EXPECT_NE(r.output.find("[rank 0] bludist watchdog: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("blurun: rank 0 (local rank 0, node 0) failed with exit status 12"), std::string::npos)
      << r.output;
}
