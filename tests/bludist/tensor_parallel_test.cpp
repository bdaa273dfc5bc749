// Tensor parallelism on CPU ranks (threads over Gloo; Note [Tensor-parallel regions]): a column-
// then row-parallel MLP (Linear, GELU, Linear) on 2 and 3 ranks gives the unsharded MLP's output,
// input gradient and, for each rank's weight and bias shard, the matching slice of the full
// gradients (float64, 1e-12); vocabulary-parallel embedding and cross-entropy equal the unsharded
// ops and their gradients; a dimension that does not split evenly is a clear error.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bludist/tensor_parallel.h"
#include "blutensor/autograd.h"
#include "blutensor/error.h"
#include "blutensor/ops.h"
#include "blutensor/random.h"
#include "common/tensor_near.h"
#include "support/require_gloo.h"
#include "support/thread_ranks.h"

using namespace bludist;

namespace {

void expect_near(const Tensor& got, const Tensor& want, const std::string& what) {
  blu::test::expect_tensor_near(got, want, 1e-12, what);
}

void run_mlp(int ranks) {
  test::run_gloo_ranks(ranks, [](ProcessGroup& pg) {
    blu::Generator gen(5);  // the same full tensors on every rank
    auto leaf = [&](blu::Shape s) { return blu::empty(s, blu::kFloat64).normal_(0, 0.5, &gen).requires_grad_(); };
    Tensor x = leaf({5, 6}), w1 = leaf({12, 6}), b1 = leaf({12}), w2 = leaf({4, 12}), b2 = leaf({4});
    Tensor c = blu::empty({5, 4}, blu::kFloat64).normal_(0, 1, &gen);
    Tensor y = blu::linear(blu::gelu(blu::linear(x, w1, b1)), w2, b2);
    blu::sum(y * c).backward();

    auto pgp = pg.shared_from_this();
    ColumnParallelLinear col(w1, b1, pgp);
    RowParallelLinear row(w2, b2, pgp);
    Tensor xt = x.detach().clone().requires_grad_();
    Tensor yt = row.forward(blu::gelu(col.forward(xt)));
    blu::sum(yt * c).backward();

    const int64_t h = 12 / pg.size(), lo = pg.rank() * h;
    expect_near(yt.detach(), y.detach(), "output");
    expect_near(xt.grad(), x.grad(), "input gradient");
    expect_near(col.weight().grad(), w1.grad().narrow(0, lo, h), "column weight shard gradient");
    expect_near(col.bias().grad(), b1.grad().narrow(0, lo, h), "column bias shard gradient");
    expect_near(row.weight().grad(), w2.grad().narrow(1, lo, h), "row weight shard gradient");
    expect_near(row.bias().grad(), b2.grad(), "row bias gradient");
  });
}

}  // namespace

TEST(TensorParallel, ColumnThenRowMlpMatchesUnshardedOnTwoRanks) {
  BLUDIST_REQUIRE_GLOO();
  run_mlp(2);
}

TEST(TensorParallel, ColumnThenRowMlpMatchesUnshardedOnThreeRanks) {
  BLUDIST_REQUIRE_GLOO();
  run_mlp(3);
}

// Vocabulary 12 over 2 / 3 ranks: the embedding of ids covering every shard and the cross-entropy
// of logits [7, 12] equal the unsharded ops; each rank's gradient is its rows / columns of the full.
void run_vocab(int ranks) {
  test::run_gloo_ranks(ranks, [](ProcessGroup& pg) {
    auto pgp = pg.shared_from_this();
    blu::Generator gen(9);
    Tensor wte = blu::empty({12, 5}, blu::kFloat64).normal_(0, 1, &gen).requires_grad_();
    Tensor logits = blu::empty({7, 12}, blu::kFloat64).normal_(0, 2, &gen).requires_grad_();
    Tensor c = blu::empty({2, 4, 5}, blu::kFloat64).normal_(0, 1, &gen);
    const std::vector<int64_t> ids_v = {0, 11, 5, 6, 3, 3, 8, 10}, tgt_v = {1, 11, 4, 7, 0, 9, 6};
    Tensor ids = blu::from_vector(ids_v, {2, 4}), targets = blu::from_vector(tgt_v, {7});
    blu::sum(blu::embedding(wte, ids) * c).backward();
    Tensor loss = blu::cross_entropy(logits, targets);
    loss.backward();

    const int64_t v = 12 / pg.size(), lo = pg.rank() * v;
    Tensor wte_r = shard_rows(wte, pg), logits_r = shard_cols(logits, pg);
    Tensor emb = vocab_parallel_embedding(wte_r, ids, pgp);
    blu::sum(emb * c).backward();
    Tensor loss_r = vocab_parallel_cross_entropy(logits_r, targets, pgp);
    loss_r.backward();
    expect_near(emb.detach(), blu::embedding(wte.detach(), ids), "embedding");
    expect_near(wte_r.grad(), wte.grad().narrow(0, lo, v), "embedding shard gradient");
    expect_near(loss_r.detach(), loss.detach(), "cross-entropy");
    expect_near(logits_r.grad(), logits.grad().narrow(1, lo, v), "logits shard gradient");
  });
}

TEST(TensorParallel, VocabParallelEmbeddingAndCrossEntropyMatchUnsharded) {
  BLUDIST_REQUIRE_GLOO();
  run_vocab(2);
  run_vocab(3);
}

// A GPT-2 attention sub-block, heads split across ranks: x + proj(attention(qkv(ln(x)))) with the
// QKV weight cut by heads (shard_fused_qkv), attention on the local heads, the projection
// row-parallel (its input columns are those heads). 6 heads of 2 over 2 and 3 ranks: the output and
// the gradients of x and of every shard equal the unsharded block's (f64, 1e-12).
void run_attention_block(int ranks) {
  test::run_gloo_ranks(ranks, [](ProcessGroup& pg) {
    auto pgp = pg.shared_from_this();
    constexpr int64_t B = 2, T = 5, C = 12, H = 6, D = C / H;
    blu::Generator gen(21);
    auto leaf = [&](blu::Shape s, double sd) { return blu::empty(s, blu::kFloat64).normal_(0, sd, &gen).requires_grad_(); };
    Tensor x = leaf({B, T, C}, 1), ln_w = leaf({C}, 1), ln_b = leaf({C}, 0.1), wqkv = leaf({3 * C, C}, 0.3),
           bqkv = leaf({3 * C}, 0.1), wproj = leaf({C, C}, 0.3), bproj = leaf({C}, 0.1);
    Tensor c = blu::empty({B, T, C}, blu::kFloat64).normal_(0, 1, &gen);
    auto attend = [&](const Tensor& qkv, int64_t heads) {
      const int64_t width = heads * D;
      std::vector<Tensor> p = qkv.split(width, -1);
      auto split_heads = [&](const Tensor& t) { return t.reshape({B, T, heads, D}).transpose(1, 2); };
      Tensor y = blu::scaled_dot_product_attention(split_heads(p[0]), split_heads(p[1]), split_heads(p[2]), true);
      return y.transpose(1, 2).reshape({B, T, width});
    };
    Tensor h = blu::layer_norm(x, ln_w, ln_b);
    Tensor y = x + blu::linear(attend(blu::linear(h, wqkv, bqkv), H), wproj, bproj);
    blu::sum(y * c).backward();

    Tensor xt = x.detach().clone().requires_grad_();
    Tensor wqkv_r = shard_fused_qkv(wqkv, H, pg), bqkv_r = shard_fused_qkv(bqkv, H, pg);
    RowParallelLinear proj(wproj, bproj, pgp);
    Tensor ht = tp_copy_to_region(blu::layer_norm(xt, ln_w.detach(), ln_b.detach()), pgp);
    Tensor yt = xt + proj.forward(attend(blu::linear(ht, wqkv_r, bqkv_r), H / pg.size()));
    blu::sum(yt * c).backward();

    const int64_t rows = C / pg.size(), lo = pg.rank() * rows;
    auto qkv_rows = [&](const Tensor& g) {
      return blu::cat({g.narrow(0, lo, rows), g.narrow(0, C + lo, rows), g.narrow(0, 2 * C + lo, rows)}, 0);
    };
    expect_near(yt.detach(), y.detach(), "block output");
    expect_near(xt.grad(), x.grad(), "input gradient");
    expect_near(wqkv_r.grad(), qkv_rows(wqkv.grad()), "qkv weight shard gradient");
    expect_near(bqkv_r.grad(), qkv_rows(bqkv.grad()), "qkv bias shard gradient");
    expect_near(proj.weight().grad(), wproj.grad().narrow(1, lo, rows), "projection weight shard gradient");
    expect_near(proj.bias().grad(), bproj.grad(), "projection bias gradient");
  });
}

TEST(TensorParallel, AttentionBlockWithHeadsSplitMatchesUnsharded) {
  BLUDIST_REQUIRE_GLOO();
  run_attention_block(2);
  run_attention_block(3);
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
