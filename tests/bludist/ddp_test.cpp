// DistributedDataParallel on CPU ranks: 2 processes under blurun reproduce the one-process loss
// curve of the same global batch within 1e-5 relative over 20 steps (also with accumulation
// micro-steps under no_sync, and with a parameter that gets no gradient); bucket layout, one
// all-reduce per bucket per step, nothing on no_sync micro-steps, the initial broadcast, and the
// flat-buffer entry point (ranks as threads).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "bludist/ddp.h"
#include "common/loss_curves.h"
#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "support/mlp_ddp.h"
#include "support/require_gloo.h"
#include "support/thread_ranks.h"

using namespace bludist;
using bludist::test::run_command;

namespace {

std::vector<double> read_losses(const std::string& path) {
  std::vector<double> v;
  std::ifstream f(path);
  double x;
  while (f >> x) v.push_back(x);
  return v;
}

void run_ddp_case(int nproc, int accum, bool skip_unused) {
  std::string out = ::testing::TempDir() + "bludist_ddp_" + std::to_string(nproc) + "_" + std::to_string(accum) +
                    (skip_unused ? "_u" : "") + ".txt";
  std::remove(out.c_str());
  std::string cmd = std::string(BLURUN_EXE) + " --nproc-per-node " + std::to_string(nproc) + " -- " +
                    BLUDIST_TEST_WORKER + " ddp gloo " + out + " " + std::to_string(accum) + (skip_unused ? " 1" : " 0");
  auto r = run_command(cmd);
  ASSERT_EQ(r.status, 0) << r.output;
  test::MlpRunOptions o;
  o.accum = accum;
  o.skip_unused = skip_unused;
  std::vector<double> ref = test::train_mlp(nullptr, o);
  EXPECT_GT(ref.front(), ref.back() + 0.05) << "the reference run does not learn";
  blu::test::expect_same_loss_curve(read_losses(out), ref, 1e-5, "ddp on " + std::to_string(nproc) + " ranks");
}

}  // namespace

TEST(Ddp, TwoProcessesMatchOneProcess) {
  BLUDIST_REQUIRE_GLOO();
  run_ddp_case(2, 1, false);
}
TEST(Ddp, TwoProcessesWithAccumulationMatchOneProcess) {
  BLUDIST_REQUIRE_GLOO();
  run_ddp_case(2, 3, false);
}
TEST(Ddp, ThreeProcessesWithAnUnusedParameterMatchOneProcess) {
  BLUDIST_REQUIRE_GLOO();
  run_ddp_case(3, 2, true);
}

TEST(Ddp, BucketsReverseOrderOneReductionPerBucketNoneOnNoSync) {
  BLUDIST_REQUIRE_GLOO();
  test::run_gloo_ranks(2, [](ProcessGroup& pg_ref) {
    auto pg = pg_ref.shared_from_this();
    blu::Generator gen(5 + pg->rank());
    // 5 parameters of 40, 40, 400, 40, 40 floats; cap 400 bytes: [4,3] [2] [1,0].
    std::vector<Tensor> params;
    for (int64_t n : {40, 40, 400, 40, 40}) params.push_back(blu::empty({n}).normal_(0, 1, &gen).requires_grad_());
    DDPOptions o;
    o.bucket_cap_bytes = 400;
    DistributedDataParallel ddp(params, pg, o);
    ASSERT_EQ(ddp.num_buckets(), 3u);
    EXPECT_EQ(ddp.bucket_parameters(0), (std::vector<std::size_t>{4, 3}));
    EXPECT_EQ(ddp.bucket_parameters(1), (std::vector<std::size_t>{2}));
    EXPECT_EQ(ddp.bucket_parameters(2), (std::vector<std::size_t>{1, 0}));
    // The initial broadcast made every rank's values rank 0's.
    blu::Generator check(5);
    for (std::size_t i = 0; i < params.size(); ++i) {
      Tensor want = blu::empty({params[i].numel()}).normal_(0, 1, &check);
      EXPECT_EQ(params[i].detach().to_double_vector(), want.to_double_vector()) << "param " << i;
    }
    auto loss_of = [&](double scale) {
      Tensor l = blu::zeros({});
      for (std::size_t i = 0; i < params.size(); ++i) l = l + (params[i] * params[i]).sum() * (scale * (i + 1));
      return l;
    };
    // Two no_sync micro-steps, then a synchronised one: 3 bucket reductions in all.
    double s = 1.0 + pg->rank();  // rank-dependent gradients
    {
      auto guard = ddp.no_sync();
      loss_of(s).backward();
      loss_of(s).backward();
    }
    EXPECT_EQ(ddp.buckets_reduced(), 0);
    loss_of(s).backward();
    ddp.finish_gradient_sync();
    EXPECT_EQ(ddp.buckets_reduced(), 3);
    // grad_i = 3 micro-steps * 2 * (i + 1) * avg_rank(s) * p_i, avg of s over ranks 1, 2 = 1.5.
    for (std::size_t i = 0; i < params.size(); ++i) {
      std::vector<double> p = params[i].detach().to_double_vector(), g = params[i].grad().to_double_vector();
      for (std::size_t j = 0; j < p.size(); ++j)
        ASSERT_NEAR(g[j], 3 * 2 * (i + 1) * 1.5 * p[j], 1e-5 * (1 + std::fabs(g[j]))) << i << " " << j;
    }
  });
}

TEST(Ddp, FlatGradientBufferIsAveraged) {
  BLUDIST_REQUIRE_GLOO();
  test::run_gloo_ranks(3, [](ProcessGroup& pg) {
    std::vector<float> g(1001);
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(test::test_value(pg.rank(), i));
    all_reduce_gradients(pg, g.data(), g.size(), nullptr);
    for (std::size_t i = 0; i < g.size(); ++i) {
      double want = 0;
      for (int r = 0; r < 3; ++r) want += static_cast<float>(test::test_value(r, i));
      ASSERT_NEAR(g[i], want / 3, 1e-6 * (1 + std::fabs(want)));
    }
  });
}

TEST(Ddp, MaxRestartsResumesFromTheCheckpointWithTheSameLosses) {
  BLUDIST_REQUIRE_GLOO();
  std::string dir = ::testing::TempDir();
  std::string out = dir + "bludist_restart_losses", ckpt = dir + "bludist_restart.safetensors";
  for (const std::string& f : {out + ".0", out + ".1", ckpt}) std::remove(f.c_str());
  // Rank 1 crashes (status 7) at step 12 of the first attempt; blurun restarts the gang once.
  auto r = run_command(std::string(BLURUN_EXE) + " --nproc-per-node 2 --max-restarts 1 -- " + BLUDIST_TEST_WORKER +
                       " ddp_restart " + out + " " + ckpt + " 1 12");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("blurun: rank 1 (local rank 1, node 0) failed with exit status 7"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("restarting the gang (restart 1 of 1)"), std::string::npos) << r.output;
  std::vector<double> ref = test::train_mlp(nullptr, test::MlpRunOptions{});
  std::ifstream f(out + ".1");
  int step, first = -1, n = 0;
  double loss;
  while (f >> step >> loss) {
    if (first < 0) first = step;
    ++n;
    EXPECT_LE(std::fabs(loss - ref[step]), 1e-5 * std::fabs(ref[step])) << "step " << step;
  }
  // The restart resumed from a checkpoint (step 11 or 12 done), not from scratch, and finished.
  EXPECT_GE(first, 11) << r.output;
  EXPECT_EQ(first + n, 20);
  std::printf("restart resumed at step %d; %d later steps equal the uninterrupted run\n", first, n);
}
