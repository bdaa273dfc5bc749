// ZeRO-1 (ZeroAdamW) on CPU ranks (threads): the MLP's loss curve on 2 and 3 ranks equals the
// one-process AdamW run of the same global batch within 1e-5 relative over 20 steps; each rank
// holds 1/size of the moments; a parameter total not divisible by the group size (padding).
#include <gtest/gtest.h>

#include <cmath>

#include "bludist/zero.h"
#include "common/loss_curves.h"
#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "blutensor/random.h"
#include "support/mlp_ddp.h"
#include "support/require_gloo.h"
#include "support/thread_ranks.h"

using namespace bludist;

namespace {
void run_case(int n, int accum) {
  test::MlpRunOptions o;
  o.accum = accum;
  std::vector<double> ref = test::train_mlp(nullptr, o);
  o.zero1 = true;
  std::vector<std::vector<double>> got(n);
  test::run_gloo_ranks(n, [&](ProcessGroup& pg) { got[pg.rank()] = test::train_mlp(pg.shared_from_this(), o); });
  blu::test::expect_same_loss_curve(got[0], ref, 1e-5,
                                    "zero1 on " + std::to_string(n) + " ranks (accum " + std::to_string(accum) + ")");
}
}  // namespace

TEST(Zero1, TwoRanksMatchOneProcess) {
  BLUDIST_REQUIRE_GLOO();
  run_case(2, 1);
}

TEST(Zero1, ThreeRanksWithAccumulationMatchOneProcess) {
  BLUDIST_REQUIRE_GLOO();
  run_case(3, 2);
}

TEST(Zero1, ShardsArePaddedAndStateIsSharded) {
  BLUDIST_REQUIRE_GLOO();
  test::run_gloo_ranks(4, [](ProcessGroup& pg) {
    blu::Generator gen(17);  // same values on every rank
    std::vector<Tensor> params = {blu::empty({7}, blu::kFloat64).normal_(0, 1, &gen).requires_grad_(),
                                  blu::empty({3, 2}, blu::kFloat64).normal_(0, 1, &gen).requires_grad_()};
    std::vector<Tensor> ref = {params[0].detach().clone().requires_grad_(), params[1].detach().clone().requires_grad_()};
    blu::optim::AdamWOptions ao;
    ao.lr = 0.1;
    ZeroAdamW zero(params, pg.shared_from_this(), ao);
    EXPECT_EQ(zero.total_numel(), 13);
    EXPECT_EQ(zero.shard_numel(), 4);  // 13 padded to 16 over 4 ranks
    blu::optim::AdamW adamw(ref, ao);
    for (int step = 0; step < 3; ++step) {
      // Rank r's gradient: (r + 1) * (p + step); the average over 4 ranks is 2.5 * (p + step).
      for (std::size_t i = 0; i < params.size(); ++i) {
        params[i].set_grad((params[i].detach() + step) * (pg.rank() + 1.0));
        ref[i].set_grad((ref[i].detach() + step) * 2.5);
      }
      zero.step();
      adamw.step();
      for (std::size_t i = 0; i < params.size(); ++i) {
        std::vector<double> a = params[i].detach().to_double_vector(), b = ref[i].detach().to_double_vector();
        for (std::size_t j = 0; j < a.size(); ++j) ASSERT_NEAR(a[j], b[j], 1e-12) << step << " " << i << " " << j;
      }
    }
    EXPECT_EQ(zero.exp_avg_shard().numel(), 4);
  });
}
