// capture_classifier_test.cpp: Note [Chunked classifier] (src/capture/capture_classifier.cpp) on
// a small tied-weight classifier recorded on the CPU, with the lm head as the CUDA GPT-2 records
// it: a GEMM, then the padded-vocabulary mask added in place (GPT2::head's linear with a bias),
// then the loss. Chunked with rows that do not divide N, the step trains like the eager steps
// (losses within 1e-6 relative, weights within 1e-5), which fails if a chunk's recomputed logits
// in the backward miss the bias; the logits and their gradient get no arena bytes; a bias the step
// computes (a temporary) or one that trains (the update writes it) leaves the record as it is, saying why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "blutensor/autograd.h"
#include "blutensor/capture.h"
#include "blutensor/nn.h"
#include "blutensor/ops.h"
#include "blutensor/optim.h"
#include "blutensor/random.h"
#include "support/adamw_step.h"
#include "support/recorded_twin.h"
#include "support/random_leaf.h"

namespace {

using namespace blu;

constexpr int64_t kVocab = 41, kPadded = 48, kEmbd = 12, kB = 3, kT = 7;  // N = 21 rows

enum class BiasKind { kMask, kComputed, kTrainable };

struct Head {
  Tensor wte, w_fc, mask;
  BiasKind kind;
  std::vector<Tensor> params() const {
    std::vector<Tensor> p{wte, w_fc};
    if (kind == BiasKind::kTrainable) p.push_back(mask);
    return p;
  }
  Head(uint64_t seed, BiasKind k) : kind(k) {
    Generator g(seed);
    wte = test::random_leaf({kPadded, kEmbd}, 0.3, g);
    w_fc = test::random_leaf({kEmbd, kEmbd}, 0.2, g);
    Generator gb(seed + 1);
    NoGradGuard ng;
    // A finite random bias on the real columns (so a chunk that drops it changes the loss) and
    // -inf on the padding, as GPT2::head's mask.
    mask = mul(randn({kPadded}, TensorOptions(kFloat32), &gb), 0.5);
    mask.narrow(0, kVocab, kPadded - kVocab).fill_(-std::numeric_limits<double>::infinity());
    if (k == BiasKind::kTrainable) {
      mask.narrow(0, kVocab, kPadded - kVocab).fill_(-30.0);  // a gradient through -inf is NaN
      mask.requires_grad_(true);
    }
  }
  Tensor loss(const Tensor& idx, const Tensor& targets) const {
    Tensor x = embedding(wte, idx);
    x = x + gelu(linear(x, w_fc, Tensor()));
    const Tensor bias = kind == BiasKind::kComputed ? mul(mask, 1.0) : mask;
    Tensor logits = linear(x, wte, bias);  // [B, T, Vp]: one GEMM, then += bias in place
    return cross_entropy(logits.reshape({kB * kT, kPadded}), targets.reshape({kB * kT}));
  }
};

Tensor tokens(uint64_t seed) {
  Generator g(seed);
  return randint(0, kVocab, {kB, kT}, TensorOptions(kInt64), &g);
}

TEST(CaptureClassifier, MaskedHeadInChunksTrainsLikeTheEagerSteps) {
  for (const int64_t rows : {5, 8, 21, 64}) {
    SCOPED_TRACE("chunk rows " + std::to_string(rows));
    test::RecordedTwin<Head> t(optim::AdamWOptions{1e-2, 0.9, 0.99, 1e-8, 0.01}, tokens, 7, BiasKind::kMask);
    capture::Executable& exe = *t.exe;
    EXPECT_EQ(t.loss_a1, t.loss_b1);
    EXPECT_EQ(t.loss_a2, t.loss_b2);
    const capture::ArenaStats before = exe.arena();
    const auto& info = exe.chunk_classifier(rows);
    ASSERT_TRUE(info.applied) << info.describe();
    EXPECT_EQ(info.forward_nodes.size(), 3u) << "the forward set is GEMM, bias add, loss";
    EXPECT_EQ(info.rows, kB * kT);
    EXPECT_EQ(info.vocab, kPadded);
    EXPECT_EQ(info.chunks, (kB * kT + std::min(rows, kB * kT) - 1) / std::min(rows, kB * kT));
    const capture::ArenaStats after = exe.arena();
    // L and D (2 x 21 x 48 x 4 B) leave the arena; one chunk's scratch comes.
    if (rows < kB * kT) {
      EXPECT_LT(after.bytes, before.bytes);
    }
    for (int k = 3; k <= 10; ++k) {
      bool ran = false;
      const auto [loss_a, loss_b] = t.step(k, 1e-2, &ran);
      ASSERT_TRUE(ran);
      EXPECT_NEAR(loss_b, loss_a, 1e-6 * std::fabs(loss_a)) << "step " << k;
    }
    for (size_t i = 0; i < t.a.params().size(); ++i)
      EXPECT_LT(max_abs_diff(t.a.params()[i], t.b.params()[i]), 1e-5) << "parameter " << i;
  }
}

TEST(CaptureClassifier, BiasTheStepComputesOrTrainsKeepsTheRecord) {
  for (const BiasKind kind : {BiasKind::kComputed, BiasKind::kTrainable}) {
    Head m(3, kind);
    optim::AdamW opt(m.params(), optim::AdamWOptions{1e-2, 0.9, 0.99, 1e-8, 0.01});
    test::adamw_step(m, opt, tokens(1), tokens(2));
    Tensor x = tokens(3), y = tokens(4);
    capture::Scope scope(true);
    test::adamw_step(m, opt, x, y);
    capture::Executable exe(scope.finish());
    const auto& info = exe.chunk_classifier(5);
    EXPECT_FALSE(info.applied);
    const std::string why = info.describe();
    if (kind == BiasKind::kComputed)
      EXPECT_NE(why.find("temporary"), std::string::npos) << why;
    else  // the optimizer updates it (and its gradient sums the logits' gradient)
      EXPECT_NE(why.find("writes the bias added to the logits"), std::string::npos) << why;
    ASSERT_TRUE(exe.run({1e-2, 3}));  // the record as it is still runs
    EXPECT_TRUE(std::isfinite(exe.host_reads().back().item()));
  }
}

}  // namespace
