// ZeRO-1 and ZeRO-2 (ZeroAdamW) on CPU ranks (threads): the MLP's loss curve on 2 and 3 ranks
// equals the one-process AdamW run of the same global batch within 1e-5 relative over 20 steps;
// each rank holds 1/size of the moments; a parameter total not divisible by the group size
// (padding); stage 2's chunked gradient shards (Note [ZeRO-2]): reduced during backward, .grad
// freed, unused parameters, checkpoints in the one-process layout.
#include <gtest/gtest.h>

#include <cmath>

#include "bludist/zero.h"
#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "blutensor/random.h"
#include "common/loss_curves.h"
#include "support/mlp_ddp.h"
#include "support/require_gloo.h"
#include "support/thread_ranks.h"

using namespace bludist;

namespace {
void run_case(int n, int accum, int stage = 1, bool skip_unused = false) {
  test::MlpRunOptions o;
  o.accum = accum;
  o.skip_unused = skip_unused;
  std::vector<double> ref = test::train_mlp(nullptr, o);
  o.zero1 = true;
  o.zero_stage = stage;
  std::vector<std::vector<double>> got(n);
  test::run_gloo_ranks(
      n, [&](ProcessGroup& pg) { got[pg.rank()] = test::train_mlp(pg.shared_from_this(), o); });
  blu::test::expect_same_loss_curve(got[0], ref, 1e-5,
                                    "zero" + std::to_string(stage) + " on " + std::to_string(n) +
                                        " ranks (accum " + std::to_string(accum) +
                                        (skip_unused ? ", unused parameter)" : ")"));
}
// Two f64 parameters (7 and 3x2: 13 elements, the same values on every rank) and a copy of them
// for a one-process AdamW.
std::pair<std::vector<Tensor>, std::vector<Tensor>> thirteen_parameters() {
  blu::Generator gen(17);
  std::vector<Tensor> params = {
      blu::empty({7}, blu::kFloat64).normal_(0, 1, &gen).requires_grad_(),
      blu::empty({3, 2}, blu::kFloat64).normal_(0, 1, &gen).requires_grad_()};
  std::vector<Tensor> ref = {params[0].detach().clone().requires_grad_(),
                             params[1].detach().clone().requires_grad_()};
  return {params, ref};
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

// One chunk (13 padded to 16 over 4 ranks) and, with a 10-element cap, two chunks of 8.
TEST(Zero1, ShardsArePaddedAndStateIsSharded) {
  BLUDIST_REQUIRE_GLOO();
  for (const std::size_t cap : {std::size_t(25) << 20, 10 * sizeof(double)}) {
    test::run_gloo_ranks(4, [cap](ProcessGroup& pg) {
      auto [params, ref] = thirteen_parameters();
      blu::optim::AdamWOptions ao;
      ao.lr = 0.1;
      ZeroOptions zo;
      zo.bucket_cap_bytes = cap;
      ZeroAdamW zero(params, pg.shared_from_this(), ao, {}, zo);
      EXPECT_EQ(zero.total_numel(), 13);
      EXPECT_EQ(zero.num_chunks(), cap > 100 ? 1 : 2);
      EXPECT_EQ(zero.shard_numel(), 4);
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
          std::vector<double> a = params[i].detach().to_double_vector(),
                              b = ref[i].detach().to_double_vector();
          for (std::size_t j = 0; j < a.size(); ++j)
            ASSERT_NEAR(a[j], b[j], 1e-12) << step << " " << i << " " << j;
        }
      }
      EXPECT_EQ(zero.exp_avg_shard().numel(), 4);
    });
  }
}

TEST(Zero2, TwoRanksMatchOneProcess) {
  BLUDIST_REQUIRE_GLOO();
  run_case(2, 1, 2);
}

TEST(Zero2, ThreeRanksWithAccumulationMatchOneProcess) {
  BLUDIST_REQUIRE_GLOO();
  run_case(3, 2, 2);
}

TEST(Zero2, UnusedParameterWithAccumulationMatchesOneProcess) {
  BLUDIST_REQUIRE_GLOO();
  run_case(2, 2, 2, true);
}

// A 10-element bucket over 4 ranks: chunks of 8 (a 2-element piece per rank), so the 13 elements
// take 2 chunks. The update equals one-process AdamW on the averaged gradient; a backward reduces
// every chunk from the hooks and frees every .grad; the moments gather into the one-process
// layout and load back.
TEST(Zero2, ChunkedShardsReduceInBackwardAndFreeGradients) {
  BLUDIST_REQUIRE_GLOO();
  test::run_gloo_ranks(4, [](ProcessGroup& pg) {
    auto [params, ref] = thirteen_parameters();
    blu::optim::AdamWOptions ao;
    ao.lr = 0.1;
    ZeroOptions zo;
    zo.stage = 2;
    zo.bucket_cap_bytes = 10 * sizeof(double);
    ZeroAdamW zero(params, pg.shared_from_this(), ao, {}, zo);
    EXPECT_EQ(zero.total_numel(), 13);
    EXPECT_EQ(zero.num_chunks(), 2);  // chunks of 8 (2 per rank)
    EXPECT_EQ(zero.shard_numel(), 4);
    blu::optim::AdamW adamw(ref, ao);
    for (int step = 0; step < 3; ++step) {
      // Rank r's loss sum(p * c) with c = (step + 1) (r + 1): its gradient c, averaged over the 4
      // ranks 2.5 (step + 1).
      const int64_t before = zero.chunks_reduced();
      Tensor loss = blu::zeros({1}, blu::kFloat64);
      for (std::size_t i = 0; i < params.size(); ++i) {
        Tensor c =
            (ref[i].detach() * 0.0 + step + 1.0) * (pg.rank() + 1.0);  // a constant per element
        loss = loss + (params[i] * c).sum();
        ref[i].set_grad(c * (2.5 / (pg.rank() + 1.0)));
      }
      loss.backward();
      EXPECT_EQ(zero.chunks_reduced() - before, 2) << "both chunks reduced inside backward";
      for (const Tensor& p : params)
        EXPECT_FALSE(p.grad().defined()) << "stage 2 frees .grad once reduced";
      zero.step();
      adamw.step();
      for (std::size_t i = 0; i < params.size(); ++i) {
        std::vector<double> a = params[i].detach().to_double_vector(),
                            b = ref[i].detach().to_double_vector();
        for (std::size_t j = 0; j < a.size(); ++j)
          ASSERT_NEAR(a[j], b[j], 1e-12) << step << " " << i << " " << j;
      }
    }
    auto [m, v] = zero.gather_state();
    ASSERT_EQ(m.numel(), 13);
    // The flat moments in parameter order equal one-process AdamW's.
    std::vector<double> mm = m.to_double_vector();
    std::vector<double> ref_m;
    for (const auto& [name, t] : adamw.state_dict()) {
      if (name.find("exp_avg") != std::string::npos &&
          name.find("exp_avg_sq") == std::string::npos) {
        std::vector<double> x = t.to_double_vector();
        ref_m.insert(ref_m.end(), x.begin(), x.end());
      }
    }
    ASSERT_EQ(ref_m.size(), mm.size());
    for (std::size_t j = 0; j < mm.size(); ++j) EXPECT_NEAR(mm[j], ref_m[j], 1e-12) << j;
    Tensor saved = zero.exp_avg_shard().clone();
    zero.load_state(m, v);
    EXPECT_EQ(saved.to_double_vector(), zero.exp_avg_shard().to_double_vector());
    // owned_ranges (sharded checkpoints): the ranks' ranges tile the 13 elements without padding,
    // and this rank's shard holds the flat moments of its ranges where the ranges say.
    std::vector<int> owner(13, -1);
    for (int r = 0; r < pg.size(); ++r) {
      for (const ZeroAdamW::OwnedRange& o : zero.owned_ranges(r)) {
        for (int64_t j = o.flat_begin; j < o.flat_begin + o.length; ++j) {
          ASSERT_TRUE(j >= 0 && j < 13 && owner[static_cast<std::size_t>(j)] == -1) << r << " " << j;
          owner[static_cast<std::size_t>(j)] = r;
        }
      }
    }
    for (int x : owner) EXPECT_GE(x, 0);
    const std::vector<double> shard = saved.to_double_vector();
    for (const ZeroAdamW::OwnedRange& o : zero.owned_ranges(pg.rank())) {
      for (int64_t j = 0; j < o.length; ++j)
        EXPECT_EQ(shard[static_cast<std::size_t>(o.shard_begin + j)], mm[static_cast<std::size_t>(o.flat_begin + j)]);
    }
    zero.load_shard_state(saved * 0.0 + 1.0, zero.exp_avg_sq_shard());
    EXPECT_EQ(zero.exp_avg_shard().to_double_vector(), std::vector<double>(shard.size(), 1.0));
    zero.load_state(m, v);
    // Gathered to one rank only: the same vectors there, nothing on the others.
    auto [m1, v1] = zero.gather_state(1);
    if (pg.rank() == 1) {
      EXPECT_EQ(m1.to_double_vector(), m.to_double_vector());
      EXPECT_EQ(v1.to_double_vector(), v.to_double_vector());
    } else {
      EXPECT_FALSE(m1.defined() || v1.defined());
    }
  });
}

TEST(Zero2, BadStageIsAnError) {
  BLUDIST_REQUIRE_GLOO();
  test::run_gloo_ranks(1, [](ProcessGroup& pg) {  // the check precedes any collective
    std::vector<Tensor> params = {blu::zeros({4}).requires_grad_()};
    ZeroOptions zo;
    zo.stage = 3;
    EXPECT_THROW(ZeroAdamW(params, pg.shared_from_this(), {}, {}, zo), blu::Error);
  });
}
