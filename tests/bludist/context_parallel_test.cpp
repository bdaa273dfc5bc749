// Context parallelism on CPU ranks (threads over Gloo; Note [Ring attention]): ring_shift moves a
// tensor one rank on and its gradient one rank back; ring attention of a sequence cut across 2, 3
// and 4 ranks equals attention over the whole sequence on one process, causal and not: each rank's
// output chunk and the gradients of its q, k and v chunks (float64, 1e-10).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bludist/context_parallel.h"
#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "blutensor/random.h"
#include "common/tensor_near.h"
#include "support/require_gloo.h"
#include "support/thread_ranks.h"

using namespace bludist;

namespace {

void expect_near(const Tensor& got, const Tensor& want, const std::string& what) {
  blu::test::expect_tensor_near(got, want, 1e-10, what);
}

void run_ring(int ranks, bool causal, bool balanced) {
  test::run_gloo_ranks(ranks, [causal, balanced](ProcessGroup& pg) {
    constexpr int64_t B = 2, H = 2, Tl = 4, D = 3;
    const int64_t T = Tl * pg.size();
    blu::Generator gen(33);  // the same full tensors on every rank
    auto leaf = [&] { return blu::empty({B, H, T, D}, blu::kFloat64).normal_(0, 1, &gen).requires_grad_(); };
    Tensor q = leaf(), k = leaf(), v = leaf();
    Tensor c = blu::empty({B, H, T, D}, blu::kFloat64).normal_(0, 1, &gen);
    Tensor y = blu::scaled_dot_product_attention(q, k, v, causal);
    blu::sum(y * c).backward();

    // This rank's positions: chunk r of size Tl, or (balanced) chunks r and 2n-1-r of size Tl/2.
    const int n = pg.size(), r = pg.rank();
    auto mine = [&](const Tensor& t) {
      if (!balanced) return t.narrow(2, r * Tl, Tl);
      return blu::cat({t.narrow(2, r * (Tl / 2), Tl / 2), t.narrow(2, (2 * n - 1 - r) * (Tl / 2), Tl / 2)}, 2);
    };
    auto leaf_of = [&](const Tensor& t) { return mine(t.detach()).contiguous().clone().requires_grad_(); };
    Tensor qr = leaf_of(q), kr = leaf_of(k), vr = leaf_of(v);
    Tensor yr = ring_attention(qr, kr, vr, causal, pg.shared_from_this(), balanced);
    blu::sum(yr * mine(c)).backward();
    const std::string tag =
        std::to_string(n) + " ranks" + (causal ? ", causal" : "") + (balanced ? ", balanced" : "");
    expect_near(yr.detach(), mine(y.detach()), "output chunk, " + tag);
    expect_near(qr.grad(), mine(q.grad()), "q gradient chunk, " + tag);
    expect_near(kr.grad(), mine(k.grad()), "k gradient chunk, " + tag);
    expect_near(vr.grad(), mine(v.grad()), "v gradient chunk, " + tag);
  });
}

}  // namespace

TEST(ContextParallel, RingShiftMovesValuesForwardAndGradientsBack) {
  BLUDIST_REQUIRE_GLOO();
  test::run_gloo_ranks(3, [](ProcessGroup& pg) {
    Tensor x = blu::full({2}, 10.0 * pg.rank(), blu::kFloat64).requires_grad_();
    Tensor y = ring_shift(x, pg.shared_from_this());
    EXPECT_EQ(y.to_double_vector()[0], 10.0 * ((pg.rank() + 2) % 3));  // from rank - 1
    blu::sum(y * (pg.rank() + 1.0)).backward();  // rank r's y came from r - 1: r - 1's x gets r + 1
    EXPECT_EQ(x.grad().to_double_vector()[0], static_cast<double>((pg.rank() + 1) % 3 + 1));
  });
}

TEST(ContextParallel, RingAttentionMatchesWholeSequence) {
  BLUDIST_REQUIRE_GLOO();
  for (int ranks : {2, 3, 4}) {
    run_ring(ranks, true, false);
    run_ring(ranks, false, false);
  }
}

TEST(ContextParallel, BalancedRingAttentionMatchesWholeSequence) {
  BLUDIST_REQUIRE_GLOO();
  for (int ranks : {1, 2, 3, 4}) {
    run_ring(ranks, true, true);
    run_ring(ranks, false, true);
  }
}
