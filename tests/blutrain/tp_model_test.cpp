// tp_model_test.cpp: GPT2 on a tensor-parallel group (Note [Tensor-parallel GPT-2] in
// blutrain/gpt2.h), ranks as threads of one Gloo group: init_weights gives every rank exactly its
// part of the one-process weights; the loss, every shard's gradient and the all-gathered logits
// match the one-process model; replicated parameters get bitwise identical gradients on every rank;
// heads or a vocabulary that do not split are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "bludist/process_group.h"
#include "blutensor/autograd.h"
#include "blutensor/error.h"
#include "blutensor/ops.h"
#include "blutrain/gpt2.h"
#include "support/require_gloo.h"
#include "support/thread_ranks.h"

namespace {

using blu::Tensor;
using blu::train::GPT2;
using blu::train::GPT2Config;
using blu::train::TpSplit;

// 2 layers, 4 heads of 8 channels, 100 tokens padded to 128 rows (rank 1 of 2 holds 36 real rows
// and the 28 padded ones), context 16.
GPT2Config small_config() {
  GPT2Config c;
  c.name = "tiny";
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.block_size = 16;
  c.vocab_size = 100;
  c.padded_vocab = 128;
  return c;
}

Tensor ids(uint64_t seed, int64_t b, int64_t t) {
  std::vector<int32_t> v(static_cast<size_t>(b * t));
  for (int32_t& x : v) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<int32_t>((seed >> 33) % 100);
  }
  return blu::from_vector(v, {b, t});
}

// Largest |a - b| / max(1, |b|) over the elements.
double max_rel_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  const std::vector<double> x = a.contiguous().to_double_vector(), y = b.contiguous().to_double_vector();
  double m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i)
    m = std::max(m, std::abs(x[i] - y[i]) / std::max(1.0, std::abs(y[i])));
  return m;
}

}  // namespace

TEST(TensorParallelGPT2, ShardsMatchTheOneProcessModel) {
  BLUDIST_REQUIRE_GLOO();
  const GPT2Config cfg = small_config();
  const Tensor x = ids(11, 2, 8), y = ids(12, 2, 8);
  GPT2 whole(cfg, blu::kCPU);
  whole.init_weights(7);
  const Tensor loss = whole.forward(x, y, blu::train::Precision::kFp32);
  loss.backward();
  Tensor whole_logits;
  {
    blu::NoGradGuard no_grad;
    whole_logits = whole.logits(x, blu::train::Precision::kFp32);  // [2, 8, 100] on the CPU
  }
  const std::vector<blu::train::NamedParam> ref = whole.parameters();

  bludist::test::run_gloo_ranks(2, [&](bludist::ProcessGroup& pg) {
    GPT2 model(cfg, blu::kCPU, pg.shared_from_this());
    model.init_weights(7);
    std::vector<blu::train::NamedParam> mine = model.parameters();
    ASSERT_EQ(mine.size(), ref.size());
    for (size_t i = 0; i < mine.size(); ++i) {  // exactly this rank's part of the one-process draw
      ASSERT_EQ(mine[i].name, ref[i].name);
      const Tensor part = model.tp_shard(ref[i].tensor->detach(), blu::train::tp_split(mine[i].name));
      EXPECT_EQ(mine[i].tensor->to_double_vector(), part.to_double_vector()) << mine[i].name;
    }
    EXPECT_EQ(model.num_params(), whole.num_params());

    const Tensor l = model.forward(x, y, blu::train::Precision::kFp32);
    EXPECT_LE(std::abs(l.item() - loss.item()) / loss.item(), 1e-6) << l.item() << " vs " << loss.item();
    l.backward();
    for (size_t i = 0; i < mine.size(); ++i) {
      const TpSplit split = blu::train::tp_split(mine[i].name);
      const Tensor want = model.tp_shard(ref[i].tensor->grad(), split);
      EXPECT_LE(max_rel_diff(mine[i].tensor->grad(), want), 1e-5) << mine[i].name << " gradient, rank " << pg.rank();
      if (split != TpSplit::kReplicated) continue;
      // Replicated: the same bits on both ranks (Megatron's property, not assumed).
      const Tensor g = mine[i].tensor->grad().contiguous();
      Tensor both = blu::empty({2, g.numel()}, blu::TensorOptions(g.dtype()));
      pg.all_gather(both, g);
      EXPECT_EQ(both.select(0, 0).to_double_vector(), both.select(0, 1).to_double_vector())
          << mine[i].name << ": replicated gradient differs between the ranks";
    }

    blu::NoGradGuard no_grad;
    const Tensor all = model.logits(x, blu::train::Precision::kFp32);  // [2, 8, 128], padding -1e30
    ASSERT_EQ(all.sizes(), (blu::Shape{2, 8, 128}));
    EXPECT_LE(max_rel_diff(all.narrow(2, 0, 100), whole_logits), 1e-5);
    EXPECT_LE(blu::amax(all.narrow(2, 100, 28), {0, 1, 2}, false).item(), -1e29);
  });
}

// Each rank ends with a barrier: a rank that threw at once and closed its group could otherwise
// break the connection set-up of a slower one.
TEST(TensorParallelGPT2, UnevenSplitsAreClearErrors) {
  BLUDIST_REQUIRE_GLOO();
  bludist::test::run_gloo_ranks(3, [&](bludist::ProcessGroup& pg) {
    try {
      GPT2 model(small_config(), blu::kCPU, pg.shared_from_this());
      ADD_FAILURE() << "4 heads over 3 ranks was accepted";
    } catch (const blu::Error& e) {
      EXPECT_NE(std::string(e.what()).find("--tp 3: the tiny model's 4 attention heads do not split into 3 equal "
                                           "parts"),
                std::string::npos)
          << e.what();
    }
    pg.barrier();
  });
  bludist::test::run_gloo_ranks(2, [&](bludist::ProcessGroup& pg) {
    GPT2Config c = small_config();
    c.padded_vocab = 101;
    c.vocab_size = 101;
    try {
      GPT2 model(c, blu::kCPU, pg.shared_from_this());
      ADD_FAILURE() << "a vocabulary of 101 rows over 2 ranks was accepted";
    } catch (const blu::Error& e) {
      EXPECT_NE(std::string(e.what()).find("padded vocabulary of 101 rows (101 tokens) does not split into 2"),
                std::string::npos)
          << e.what();
    }
    pg.barrier();
  });
}
