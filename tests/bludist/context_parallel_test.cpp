// Context parallelism on CPU ranks (threads over Gloo; Note [Ring attention]): ring_shift moves a
// tensor one rank on and its gradient one rank back; ring attention of a sequence cut across 2, 3
// and 4 ranks (contiguous chunks, or the balanced zigzag layout, also on 1 rank) equals attention
// over the whole sequence on one process, causal and not: each rank's output chunk and the
// gradients of its q, k and v chunks (float64; support/parallel_checks.h, which nccl_gpu_test also
// runs on 2 GPUs).
#include <gtest/gtest.h>

#include <string>

#include "bludist/context_parallel.h"
#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "support/parallel_checks.h"
#include "support/require_gloo.h"
#include "support/thread_ranks.h"

using namespace bludist;

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
    for (bool causal : {true, false}) {
      test::run_gloo_ranks(ranks, [causal](ProcessGroup& pg) {
        EXPECT_EQ(test::check_ring_attention(pg, blu::kCPU, causal, false), "");
      });
    }
  }
}

TEST(ContextParallel, BalancedRingAttentionMatchesWholeSequence) {
  BLUDIST_REQUIRE_GLOO();
  for (int ranks : {1, 2, 3, 4}) {
    for (bool causal : {true, false}) {
      test::run_gloo_ranks(ranks, [causal](ProcessGroup& pg) {
        EXPECT_EQ(test::check_ring_attention(pg, blu::kCPU, causal, true), "");
      });
    }
  }
}
