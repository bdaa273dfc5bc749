// Tensor parallelism on CPU ranks (threads over Gloo; Note [Tensor-parallel regions], support/
// parallel_checks.h): a column- then row-parallel MLP, vocabulary-parallel embedding and
// cross-entropy, and a GPT-2 attention sub-block with its heads split, on 2 and 3 ranks, equal the
// unsharded ops: outputs, input gradients and each shard's gradient (float64); a dimension that does
// not split evenly is a clear error. nccl_gpu_test runs the same checks on 2 GPUs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bludist/tensor_parallel.h"
#include "blutensor/error.h"
#include "blutensor/ops.h"
#include "support/mlp_ddp.h"  // run_command
#include "support/parallel_checks.h"
#include "support/require_gloo.h"
#include "support/thread_ranks.h"

using namespace bludist;

TEST(TensorParallel, ColumnThenRowMlpMatchesUnsharded) {
  BLUDIST_REQUIRE_GLOO();
  for (int ranks : {2, 3}) {
    test::run_gloo_ranks(ranks, [](ProcessGroup& pg) { EXPECT_EQ(test::check_tp_mlp(pg, blu::kCPU), ""); });
  }
}

// Note [Async TP]: the overlapped region GEMMs, in 1 to 16 row chunks, give the unsharded values.
TEST(TensorParallel, OverlappedRegionsMatchUnsharded) {
  BLUDIST_REQUIRE_GLOO();
  for (int ranks : {2, 3}) {
    test::run_gloo_ranks(ranks, [](ProcessGroup& pg) { EXPECT_EQ(test::check_tp_mlp_overlapped(pg, blu::kCPU), ""); });
  }
}

TEST(TensorParallel, VocabParallelEmbeddingAndCrossEntropyMatchUnsharded) {
  BLUDIST_REQUIRE_GLOO();
  for (int ranks : {2, 3}) {
    test::run_gloo_ranks(ranks, [](ProcessGroup& pg) { EXPECT_EQ(test::check_vocab_parallel(pg, blu::kCPU), ""); });
  }
}

TEST(TensorParallel, AttentionBlockWithHeadsSplitMatchesUnsharded) {
  BLUDIST_REQUIRE_GLOO();
  for (int ranks : {2, 3}) {
    test::run_gloo_ranks(ranks,
                         [](ProcessGroup& pg) { EXPECT_EQ(test::check_tp_attention_block(pg, blu::kCPU), ""); });
  }
}

// The same checks (and ring attention's) in two processes under blurun: the path nccl_gpu_test takes
// on GPUs, here over Gloo.
TEST(TensorParallel, WorkerProcessesPassTheChecksOverGloo) {
  BLUDIST_REQUIRE_GLOO();
  auto r = test::run_command(std::string(BLURUN_EXE) + " --nproc-per-node 2 -- " + BLUDIST_TEST_WORKER +
                             " parallel gloo");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 1] parallel ok: gloo group (rank 1 of 2)"), std::string::npos) << r.output;
}

TEST(TensorParallel, IdsOutsideTheVocabularyAreAClearError) {
  BLUDIST_REQUIRE_GLOO();
  test::run_gloo_ranks(2, [](ProcessGroup& pg) {
    Tensor wte = blu::zeros({6, 4}, blu::kFloat64);  // a rank's half of a 12-row table
    Tensor ids = blu::from_vector(std::vector<int64_t>{3, 12}, {2});
    try {
      vocab_parallel_embedding(wte, ids, pg.shared_from_this());
      ADD_FAILURE() << "expected an error";
    } catch (const blu::Error& e) {
      EXPECT_NE(std::string(e.what()).find("vocab_parallel_embedding: id 12 at position 1"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("outside the vocabulary [0, 12)"), std::string::npos) << e.what();
    }
    // Neither rank tears its group down while the other may still be finishing the connection
    // (a failure seen once in 372 tests under load: 0.11 s, no collective involved).
    pg.barrier();
  });
}

TEST(TensorParallel, UnevenShardsAreAClearError) {
  BLUDIST_REQUIRE_GLOO();
  test::run_gloo_ranks(5, [](ProcessGroup& pg) {
    Tensor w = blu::zeros({12, 6}, blu::kFloat64);
    try {
      ColumnParallelLinear col(w, Tensor(), pg.shared_from_this());
      ADD_FAILURE() << "expected an error";
    } catch (const blu::Error& e) {
      EXPECT_NE(std::string(e.what()).find("shard_rows: dimension 0 of"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("does not split into 5 equal parts"), std::string::npos) << e.what();
    }
  });
}
