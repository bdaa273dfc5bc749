// ZeRO-3 units on CPU ranks (threads over Gloo; Note [ZeRO-3] in bludist/zero3.h), float64: a
// Linear-GELU-Linear whose parameters (sizes not multiples of the rank count: padded shards) live
// as shards on 1, 2 and 3 ranks, each rank a slice of the batch, gives every shard the piece of
// the one-process whole-batch gradient and the input its gradient, through apply() (recomputed in
// backward) and through gathered(); a few AdamW steps on the shards keep the gathered parameters
// equal to one-process AdamW on the whole ones; gather / load / piece_of / gather_like round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "bludist/zero3.h"
#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "blutensor/optim.h"
#include "support/require_gloo.h"
#include "support/thread_ranks.h"

using namespace bludist;
using blu::Tensor;

namespace {

constexpr int64_t kIn = 5, kHidden = 7, kOut = 3, kBatch = 6;

Tensor values(const blu::Shape& shape, int salt, double scale = 0.3) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * test::test_value(0, i, salt);
  return blu::from_vector(v, shape, blu::kFloat64);
}

// The whole parameters: w1 [7, 5], b1 [7], w2 [3, 7], b2 [3] (7, 35, 21, 3 elements).
std::vector<Tensor> whole_params() {
  return {values({kHidden, kIn}, 1), values({kHidden}, 2), values({kOut, kHidden}, 3), values({kOut}, 4)};
}

std::vector<Tensor> mlp(const std::vector<Tensor>& p, const std::vector<Tensor>& in) {
  return {blu::linear(blu::gelu(blu::linear(in[0], p[0], p[1])), p[2], p[3])};
}

Tensor batch() { return values({kBatch, kIn}, 5, 1.0); }

// max |a - b| over all elements.
double max_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_double_vector(), y = b.to_double_vector();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// One process: loss = mean over the whole batch of sum(mlp(x)^2); the whole gradients.
struct Reference {
  std::vector<Tensor> grads;
  Tensor input_grad;
};
Reference reference() {
  std::vector<Tensor> p = whole_params();
  for (Tensor& t : p) t.requires_grad_();
  Tensor x = batch().requires_grad_();
  Tensor y = mlp(p, {x})[0];
  blu::mean(blu::sum(y * y, {1})).backward();
  Reference r;
  for (Tensor& t : p) r.grads.push_back(t.grad());
  r.input_grad = x.grad();
  return r;
}

blu::optim::AdamWOptions adamw_options() {
  blu::optim::AdamWOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  return o;
}

// One process: 4 AdamW steps on the whole parameters over the whole batch; the parameters after.
std::vector<Tensor> one_process_adamw(const blu::optim::AdamWOptions& o) {
  std::vector<Tensor> p = whole_params();
  for (Tensor& t : p) t.requires_grad_();
  blu::optim::AdamW opt(p, o);
  for (int step = 0; step < 4; ++step) {
    Tensor y = mlp(p, {batch()})[0];
    blu::mean(blu::sum(y * y, {1})).backward();
    opt.step();
    opt.zero_grad();
  }
  return p;
}

}  // namespace

TEST(Zero3, ShardsGetTheirPieceOfTheWholeBatchGradient) {
  BLUDIST_REQUIRE_GLOO();
  const Reference ref = reference();
  for (int ranks : {1, 2, 3}) {
    for (bool recompute : {true, false}) {
      test::run_gloo_ranks(ranks, [&](ProcessGroup& pg) {
        SCOPED_TRACE(std::to_string(ranks) + " ranks, " + (recompute ? "apply" : "gathered"));
        Zero3Unit unit(whole_params(), pg.shared_from_this());
        const int64_t rows = kBatch / pg.size(), first = pg.rank() * rows;
        Tensor x = batch().narrow(0, first, rows).contiguous().requires_grad_();
        Tensor y = recompute ? unit.apply(mlp, {x})[0] : mlp(unit.gathered(), {x})[0];
        blu::mean(blu::sum(y * y, {1})).backward();
        for (std::size_t i = 0; i < unit.size(); ++i) {
          ASSERT_TRUE(unit.shards()[i].grad().defined()) << "parameter " << i;
          EXPECT_LT(max_diff(unit.shards()[i].grad(), unit.piece_of(i, ref.grads[i])), 1e-13) << "parameter " << i;
        }
        // This rank's rows of the input gradient: the whole-batch mean gives 1/B per row, the
        // rank's mean 1/rows, so the rank's input gradient is size times the reference rows.
        EXPECT_LT(max_diff(x.grad(), ref.input_grad.narrow(0, first, rows) * static_cast<double>(pg.size())), 1e-13);
      });
    }
  }
}

TEST(Zero3, AdamWOnShardsMatchesOneProcess) {
  BLUDIST_REQUIRE_GLOO();
  const blu::optim::AdamWOptions o = adamw_options();
  const std::vector<Tensor> p = one_process_adamw(o);
  for (int ranks : {2, 3}) {
    test::run_gloo_ranks(ranks, [&](ProcessGroup& pg) {
      Zero3Unit unit(whole_params(), pg.shared_from_this());
      blu::optim::AdamW opt(unit.shards(), o);  // moments of the shards only
      const int64_t rows = kBatch / pg.size();
      Tensor x = batch().narrow(0, pg.rank() * rows, rows).contiguous();
      for (int step = 0; step < 4; ++step) {
        Tensor y = unit.apply(mlp, {x})[0];
        blu::mean(blu::sum(y * y, {1})).backward();
        opt.step();
        opt.zero_grad();
      }
      const std::vector<Tensor> whole = unit.gather();
      for (std::size_t i = 0; i < whole.size(); ++i) {
        EXPECT_EQ(whole[i].sizes(), p[i].sizes());
        EXPECT_LT(max_diff(whole[i], p[i].detach()), 1e-12) << ranks << " ranks, parameter " << i;
      }
    });
  }
}

TEST(Zero3, GatherLoadAndPiecesRoundTrip) {
  BLUDIST_REQUIRE_GLOO();
  test::run_gloo_ranks(3, [](ProcessGroup& pg) {
    Zero3Unit unit(whole_params(), pg.shared_from_this());
    EXPECT_EQ(unit.shards()[1].numel(), 3);  // 7 elements over 3 ranks: pieces of 3, the last padded
    EXPECT_EQ(unit.whole_numel(1), 7);
    std::vector<Tensor> other = {values({kHidden, kIn}, 11), values({kHidden}, 12), values({kOut, kHidden}, 13),
                                 values({kOut}, 14)};
    unit.load(other);
    const std::vector<Tensor> back = unit.gather();
    for (std::size_t i = 0; i < back.size(); ++i) EXPECT_EQ(max_diff(back[i], other[i]), 0.0) << i;
    // Per-element state laid out like a shard (an AdamW moment) gathers to the whole shape.
    const Tensor state = unit.piece_of(2, other[2] * 2.0);
    EXPECT_EQ(max_diff(unit.gather_like(2, state), other[2] * 2.0), 0.0);
  });
}

// Note [ZeRO-3 prefetch]: the MLP as two chained units (Linear-GELU, then Linear) whose gathers
// start one unit ahead in forward and in backward: four AdamW steps equal one-process AdamW on the
// whole parameters, as without the chain; a prefetch followed by a change of the shards (load(),
// an optimizer step) is dropped, never used stale.
TEST(Zero3, PrefetchChainMatchesOneProcessAndNeverGoesStale) {
  BLUDIST_REQUIRE_GLOO();
  const blu::optim::AdamWOptions o = adamw_options();
  const std::vector<Tensor> p = one_process_adamw(o);
  auto first = [](const std::vector<Tensor>& w, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{blu::gelu(blu::linear(in[0], w[0], w[1]))};
  };
  auto second = [](const std::vector<Tensor>& w, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{blu::linear(in[0], w[0], w[1])};
  };
  for (int ranks : {2, 3}) {
    test::run_gloo_ranks(ranks, [&](ProcessGroup& pg) {
      const std::vector<Tensor> w = whole_params();
      Zero3Unit a({w[0], w[1]}, pg.shared_from_this()), b({w[2], w[3]}, pg.shared_from_this());
      a.set_prefetch(&b, nullptr);
      b.set_prefetch(nullptr, &a);
      std::vector<Tensor> shards = a.shards();
      shards.insert(shards.end(), b.shards().begin(), b.shards().end());
      blu::optim::AdamW opt(shards, o);
      const int64_t rows = kBatch / pg.size();
      Tensor x = batch().narrow(0, pg.rank() * rows, rows).contiguous();
      for (int step = 0; step < 4; ++step) {
        if (step == 2) b.prefetch();  // left over from "another pass": the step's own use must still be right
        Tensor y = b.apply(second, {a.apply(first, {x})[0]})[0];
        blu::mean(blu::sum(y * y, {1})).backward();
        opt.step();
        opt.zero_grad();
      }
      std::vector<Tensor> whole = a.gather();
      for (const Tensor& t : b.gather()) whole.push_back(t);
      for (std::size_t i = 0; i < whole.size(); ++i) {
        EXPECT_LT(max_diff(whole[i], p[i].detach()), 1e-12) << ranks << " ranks, parameter " << i;
      }
      // A pending prefetch, then new values: the gather returns the new ones.
      a.prefetch();
      const std::vector<Tensor> other = {values({kHidden, kIn}, 21), values({kHidden}, 22)};
      a.load(other);
      const std::vector<Tensor> back = a.gather();
      for (std::size_t i = 0; i < back.size(); ++i) EXPECT_EQ(max_diff(back[i], other[i]), 0.0) << i;
    });
  }
}
