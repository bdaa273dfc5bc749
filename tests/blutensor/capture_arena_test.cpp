// capture_arena_test.cpp: Note [Step arena] (blutensor/capture_arena.h). The interval placement
// on hand-made cases (offsets, alignment, the lower bound, bad input) and on random step-shaped
// interval sets (no two intervals live at one node share a byte; the arena stays within 1.25x of
// the lower bound); a captured transformer step on the arena: its temporaries live at once never
// overlap in memory, the arena is its lower bound, and Note [Fresh buffers] keeps the buffers
// the step allocates out of its inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "blutensor/autograd.h"
#include "blutensor/capture.h"
#include "blutensor/capture_arena.h"
#include "blutensor/nn.h"
#include "blutensor/ops.h"
#include "blutensor/optim.h"
#include "blutensor/random.h"
#include "support/random_leaf.h"

namespace {

using namespace blu;
using capture::ArenaInterval;
using capture::plan_arena;

// Every pair of intervals live at one node is disjoint in bytes; every offset aligned; the
// arena holds them all and is at least the lower bound.
void expect_valid(const std::vector<ArenaInterval>& v, const capture::ArenaPlan& p,
                  std::size_t align) {
  ASSERT_EQ(p.offsets.size(), v.size());
  const auto round_up = [align](std::size_t x) { return (x + align - 1) / align * align; };
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(p.offsets[i] % align, 0u) << i;
    EXPECT_LE(p.offsets[i] + v[i].bytes, p.bytes) << i;
    for (size_t j = i + 1; j < v.size(); ++j) {
      const bool live_together = v[i].first <= v[j].last && v[j].first <= v[i].last;
      const bool overlap = p.offsets[i] < p.offsets[j] + round_up(v[j].bytes) &&
                           p.offsets[j] < p.offsets[i] + round_up(v[i].bytes);
      EXPECT_FALSE(live_together && overlap && v[i].bytes > 0 && v[j].bytes > 0)
          << "intervals " << i << " and " << j;
    }
  }
  EXPECT_GE(p.bytes, p.lower_bound_bytes);
}

TEST(CaptureArena, PlacesByLiveRangeLargestFirst) {
  // a [0,2] 1000 B, b [1,3] 500 B (live with a), c [3,5] 1000 B (after a: a's bytes), d [4,4] 10 B.
  const std::vector<ArenaInterval> v = {{1000, 0, 2}, {500, 1, 3}, {1000, 3, 5}, {10, 4, 4}};
  const capture::ArenaPlan p = plan_arena(v, 256);
  EXPECT_EQ(p.offsets[0], 0u);     // largest, earliest
  EXPECT_EQ(p.offsets[2], 0u);     // a is dead at node 3: the same bytes
  EXPECT_EQ(p.offsets[1], 1024u);  // above a (1000 rounded to 1024) and c
  EXPECT_EQ(p.offsets[3], 1024u);  // b is dead at node 4: its bytes, above c
  EXPECT_EQ(p.bytes, 1536u);
  EXPECT_EQ(p.lower_bound_bytes, 1536u);  // nodes 1..3: a or c (1024) + b (512)
  EXPECT_EQ(p.summed_bytes, 1024u + 512 + 1024 + 256);
  expect_valid(v, p, 256);
  // Closed ranges: a result never shares bytes with an operand of the same node.
  const capture::ArenaPlan q = plan_arena({{64, 0, 1}, {64, 1, 2}}, 64);
  EXPECT_NE(q.offsets[0], q.offsets[1]);
  EXPECT_EQ(q.bytes, 128u);
  EXPECT_EQ(plan_arena({}, 256).bytes, 0u);
}

TEST(CaptureArena, BadInputIsAClearError) {
  try {
    plan_arena({{8, 0, 1}}, 48);
    FAIL() << "alignment 48 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("alignment 48 is not a power of two"), std::string::npos)
        << e.what();
  }
  try {
    plan_arena({{8, 0, 1}, {8, 3, 2}}, 64);
    FAIL() << "a reversed interval accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("interval 1 has nodes [3, 2]"), std::string::npos)
        << e.what();
  }
}

// Random step-shaped lifetimes: most temporaries short (an op's output read by the next few ops),
// some long (a forward activation saved for its backward: born in the first half, dying in the
// second, the later-born dying earlier), sizes spread over four orders of magnitude.
TEST(CaptureArena, RandomGraphsNeverOverlapLiveIntervals) {
  std::mt19937_64 rng(20261127);
  double worst = 1;
  for (int trial = 0; trial < 60; ++trial) {
    const int nodes = 20 + static_cast<int>(rng() % 300);
    std::vector<ArenaInterval> v;
    const int count = 5 + static_cast<int>(rng() % 200);
    for (int i = 0; i < count; ++i) {
      ArenaInterval a;
      a.bytes = static_cast<std::size_t>(1) << (rng() % 14);
      a.bytes += rng() % a.bytes;  // not powers of two
      if (rng() % 5 == 0) a.bytes = 0;
      a.first = static_cast<int>(rng() % static_cast<uint64_t>(nodes));
      if (rng() % 4 == 0 && a.first < nodes / 2) {
        a.last = nodes - 1 - a.first;  // saved for the backward
      } else {
        a.last = std::min(nodes - 1, a.first + static_cast<int>(rng() % 4));
      }
      v.push_back(a);
    }
    const std::size_t align = std::size_t{1} << (rng() % 9);
    const capture::ArenaPlan p = plan_arena(v, align);
    SCOPED_TRACE("trial " + std::to_string(trial));
    expect_valid(v, p, align);
    if (p.lower_bound_bytes > 0)
      worst =
          std::max(worst, static_cast<double>(p.bytes) / static_cast<double>(p.lower_bound_bytes));
  }
  std::printf("worst arena / lower bound over the random graphs: %.3f\n", worst);
  EXPECT_LE(worst, 1.25);
}

// A transformer-like step (as capture_test's TinyBlock, with q, k, v split from one tensor as
// GPT-2 does: the split's backward assembles the qkv gradient from three copies into its slices).
struct Block {
  static constexpr int64_t kVocab = 23, kEmbd = 16, kHeads = 2;
  Tensor wte, w_qkv, w_fc, w_proj;
  std::vector<Tensor> params() const { return {wte, w_qkv, w_fc, w_proj}; }
  explicit Block(uint64_t seed) {
    Generator g(seed);
    auto p = [&](Shape s, double scale) { return test::random_leaf(s, scale, g); };
    wte = p({kVocab, kEmbd}, 0.3);
    w_qkv = p({3 * kEmbd, kEmbd}, 0.2);
    w_fc = p({4 * kEmbd, kEmbd}, 0.2);
    w_proj = p({kEmbd, 4 * kEmbd}, 0.1);
  }
  Tensor loss(const Tensor& idx, const Tensor& targets) const {
    const int64_t B = idx.size(0), T = idx.size(1), C = kEmbd, H = kHeads;
    Tensor x = embedding(wte, idx);
    std::vector<Tensor> qkv = linear(x, w_qkv, Tensor()).split(C, 2);  // as GPT-2's attention
    auto heads = [&](const Tensor& t) { return t.reshape({B, T, H, C / H}).transpose(1, 2); };
    Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
    x = x + scaled_dot_product_attention(q, k, v, true).transpose(1, 2).reshape({B, T, C});
    x = x + linear(gelu(linear(x, w_fc, Tensor())), w_proj, Tensor());
    return cross_entropy(matmul(x, wte.transpose(0, 1)).reshape({B * T, kVocab}),
                         targets.reshape({B * T}));
  }
};

double step(const Block& m, optim::AdamW& opt, const Tensor& x, const Tensor& y) {
  Tensor loss = m.loss(x, y);
  loss.backward();
  opt.step();
  opt.zero_grad();
  return loss.item();
}

Tensor tokens(uint64_t seed) {
  Generator g(seed);
  return randint(0, Block::kVocab, {3, 7}, TensorOptions(kInt64), &g);
}

TEST(CaptureArena, CapturedStepTemporariesLiveAtOnceNeverShareBytes) {
  Block m(5);
  optim::AdamW opt(m.params(), optim::AdamWOptions{3e-3, 0.9, 0.99, 1e-8, 0.01});
  step(m, opt, tokens(1), tokens(2));
  Tensor x = tokens(3), y = tokens(4);
  capture::Scope scope(true);
  step(m, opt, x, y);
  capture::Graph g = scope.finish();

  // Note [Fresh buffers]: the inputs the step writes are the weights and moments, nothing it
  // allocated (the qkv gradient, filled by three copies into its slices, used to be one).
  std::vector<int> state;
  for (size_t i = 0; i < m.params().size(); ++i) {
    state.push_back(g.buffer_of(m.params()[i]));
    state.push_back(g.buffer_of(opt.exp_avg(i)));
    state.push_back(g.buffer_of(opt.exp_avg_sq(i)));
  }
  int partial_first_writes = 0;
  for (int id : g.inputs()) {
    if (g.buffers[static_cast<size_t>(id)].written) {
      EXPECT_NE(std::find(state.begin(), state.end(), id), state.end())
          << "buffer " << id << " written, not state";
    }
  }
  for (const capture::Buffer& b : g.buffers) {
    for (const capture::Node& n : g.nodes) {
      bool touched = false;
      for (const capture::Arg& a : n.args) {
        for (const capture::TensorRef& t : a.tensors) {
          if (t.buffer != b.id) continue;
          touched = true;
          if (a.write && !a.read && b.origin == capture::Origin::kInternal &&
              static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype) < b.nbytes)
            ++partial_first_writes;
        }
      }
      if (touched) break;
    }
  }
  EXPECT_GT(partial_first_writes, 0)
      << "the step has no buffer first written in part: the test lost its case";

  // Intervals as the Executable sees them: first to last use, host-read buffers to the end.
  const int n = static_cast<int>(g.nodes.size());
  std::vector<int> first(g.buffers.size(), -1), last(g.buffers.size(), -1);
  for (int i = 0; i < n; ++i) {
    for (const capture::Arg& a : g.nodes[static_cast<size_t>(i)].args) {
      for (const capture::TensorRef& t : a.tensors) {
        if (!t.defined()) continue;
        const size_t id = static_cast<size_t>(t.buffer);
        if (first[id] < 0) first[id] = i;
        last[id] =
            g.nodes[static_cast<size_t>(i)].op == "host_read" ? n - 1 : std::max(last[id], i);
      }
    }
  }
  capture::Executable exe(std::move(g));
  const capture::ArenaStats a = exe.arena();
  ASSERT_TRUE(a.enabled);
  EXPECT_GT(a.temporaries, 20u);
  EXPECT_EQ(a.bytes, a.lower_bound_bytes) << "greedy placement above the liveness lower bound";
  EXPECT_LT(a.bytes, a.summed_bytes / 2);
  struct Placed {
    int id;
    uintptr_t lo, hi;
  };
  std::vector<Placed> placed;
  for (const capture::Buffer& b : exe.graph().buffers) {
    if (b.origin == capture::Origin::kInput || b.alive) continue;
    const Tensor t = exe.buffer(b.id);
    ASSERT_TRUE(t.defined()) << "temporary " << b.id << " has no arena window";
    const auto lo = reinterpret_cast<uintptr_t>(t.data_ptr());
    EXPECT_EQ(lo % 256, 0u) << "buffer " << b.id;
    placed.push_back({b.id, lo, lo + b.nbytes});
  }
  for (size_t i = 0; i < placed.size(); ++i) {
    for (size_t j = i + 1; j < placed.size(); ++j) {
      const size_t p = static_cast<size_t>(placed[i].id), q = static_cast<size_t>(placed[j].id);
      const bool live_together = first[p] <= last[q] && first[q] <= last[p];
      const bool overlap = placed[i].lo < placed[j].hi && placed[j].lo < placed[i].hi;
      EXPECT_FALSE(live_together && overlap) << "buffers " << p << " and " << q;
    }
  }
  // Without the arena a temporary has no storage between runs.
  exe.use_arena(false);
  EXPECT_FALSE(exe.buffer(placed.front().id).defined());
  EXPECT_FALSE(exe.arena().enabled);
}

}  // namespace
