// The fused step's activation plan (blutrain/activation_plan.h): sizes per recompute mode equal the
// formula of Note [Activation arena], buffers are aligned and inside the arena, buffers that are
// live at the same time never overlap, and bad sizes are clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "blutensor/error.h"
#include "blutrain/activation_plan.h"

namespace {

using blu::train::ActivationPlan;
using blu::train::ActivationPlanInput;
using blu::train::Recompute;

struct Span {
  std::size_t at, bytes;
  std::string name;
};

// Every buffer of the plan with its size (per-layer buffers once per distinct offset).
std::vector<Span> spans(const ActivationPlan& p) {
  const ActivationPlanInput& in = p.in;
  const std::size_t rows = static_cast<std::size_t>(in.batch * in.seq_len);
  const std::size_t btc = rows * in.n_embd * in.act_bytes, rowf = rows * 4;
  const std::size_t lse = static_cast<std::size_t>(in.batch) * in.n_head * in.seq_len * 4;
  std::vector<Span> out = {{p.tmp, btc, "tmp"}, {p.dres, btc, "dres"}, {p.dbig, 4 * btc, "dbig"},
                           {p.logits, static_cast<std::size_t>(in.logits_chunk_rows) * in.padded_vocab * in.act_bytes, "logits"},
                           {p.row_losses, rowf, "losses"}, {p.x_final, btc, "x_final"}, {p.lnf, btc, "lnf"},
                           {p.lnf_mean, rowf, "lnf_mean"}, {p.lnf_rstd, rowf, "lnf_rstd"}};
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const auto& b = p.layers[l];
    std::string s = "h";  // built by appends: GCC 12's -Wrestrict misfires on "h" + to_string(l) + "."
    s += std::to_string(l);
    s += '.';
    for (auto [at, bytes, n] : std::vector<std::tuple<std::size_t, std::size_t, std::string>>{
             {b.x, btc, "x"}, {b.ln1, btc, "ln1"}, {b.qkv, 3 * btc, "qkv"}, {b.atty, btc, "atty"}, {b.lse, lse, "lse"},
             {b.x2, btc, "x2"}, {b.ln2, btc, "ln2"}, {b.pre, 4 * btc, "pre"}, {b.gelu, 4 * btc, "gelu"},
             {b.ln1_mean, rowf, "m1"}, {b.ln1_rstd, rowf, "r1"}, {b.ln2_mean, rowf, "m2"}, {b.ln2_rstd, rowf, "r2"}}) {
      const std::size_t where = at;  // clang 14 cannot capture a structured binding in a lambda
      if (std::none_of(out.begin(), out.end(), [&](const Span& sp) { return sp.at == where; })) out.push_back({at, bytes, s + n});
    }
  }
  return out;
}

ActivationPlanInput gpt2_124m(Recompute r, std::size_t bytes) {
  ActivationPlanInput in;
  in.act_bytes = bytes;
  in.recompute = r;
  return in;
}

TEST(ActivationPlan, BuffersAlignedDisjointAndInside) {
  for (Recompute r : {Recompute::kNone, Recompute::kGelu, Recompute::kLayerNorm, Recompute::kBlock}) {
    for (std::size_t bytes : {2u, 4u}) {
      ActivationPlanInput in = gpt2_124m(r, bytes);
      in.n_layer = 3;
      in.batch = 3;
      in.seq_len = 77;  // odd sizes
      in.logits_chunk_rows = 100;
      const ActivationPlan p = blu::train::plan_activations(in);
      std::vector<Span> s = spans(p);
      std::sort(s.begin(), s.end(), [](const Span& a, const Span& b) { return a.at < b.at; });
      for (size_t i = 0; i < s.size(); ++i) {
        SCOPED_TRACE(s[i].name + " mode " + blu::train::recompute_name(r));
        EXPECT_EQ(s[i].at % 256, 0u);
        EXPECT_LE(s[i].at + s[i].bytes, p.total_bytes);
        if (i + 1 < s.size()) {
          EXPECT_LE(s[i].at + s[i].bytes, s[i + 1].at) << "overlaps " << s[i + 1].name;
        }
      }
    }
  }
}

TEST(ActivationPlan, SavedBytesFollowTheRecomputeMode) {
  // GPT-2 124M, B16 T1024, bf16: BTC = 16384 * 768 * 2 bytes; 16 / 12 / 10 / 1 BTC per layer saved
  // besides the f32 statistics (4 rows of f32 per layer) and the lse (B*H*T f32) where saved.
  const double btc = 16384.0 * 768 * 2, rowf = 16384.0 * 4, lse = 16.0 * 12 * 1024 * 4;
  const std::pair<Recompute, double> want[] = {{Recompute::kNone, 16 * btc + lse},
                                               {Recompute::kGelu, 12 * btc + lse},
                                               {Recompute::kLayerNorm, 10 * btc + lse},
                                               {Recompute::kBlock, 1 * btc}};
  for (auto [r, per_layer] : want) {
    const ActivationPlan p = blu::train::plan_activations(gpt2_124m(r, 2));
    const double expect = 12 * (per_layer + 4 * rowf) + 2 * btc + 2 * rowf;  // + x_final, lnf and its stats
    EXPECT_NEAR(static_cast<double>(p.saved_bytes), expect, 12 * 6 * 256.0) << blu::train::recompute_name(r);
  }
  // The default plan of the race: 4.05 GiB of activations in bf16 (3.43 saved + 0.62 scratch).
  const ActivationPlan def = blu::train::plan_activations(gpt2_124m(Recompute::kGelu, 2));
  EXPECT_LT(static_cast<double>(def.total_bytes), 4.1 * (1 << 30)) << def.describe();
  EXPECT_NE(def.describe().find("recompute gelu"), std::string::npos);
}

TEST(ActivationPlan, BadInputIsAClearError) {
  ActivationPlanInput in;
  in.logits_chunk_rows = 16 * 1024 + 1;
  try {
    (void)blu::train::plan_activations(in);
    FAIL() << "expected an error";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("logits chunk"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)blu::train::parse_recompute("sometimes"), blu::Error);
  EXPECT_EQ(blu::train::parse_recompute("block"), Recompute::kBlock);
}

}  // namespace
