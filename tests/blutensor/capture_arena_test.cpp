// capture_arena_test.cpp: Note [Step arena] (blutensor/capture_arena.h). The interval placement
// on hand-made cases (offsets, alignment, the lower bound, bad input) and on random step-shaped
// interval sets (no two intervals live at one node share a byte but an in-place pair at its node;
// the arena stays within 1.25x of the lower bound); a captured transformer step on the arena: its temporaries live at once never
// overlap in memory, the arena is its lower bound, and Note [Fresh buffers] keeps the buffers
// the step allocates out of its inputs; with in-place pairs (Note [In-place reuse]: elementwise
// chains, the logits' gradient on the logits) the arena shrinks, a pair shares bytes only at the
// node that makes it, and the step trains bit for bit like the eager one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "blutensor/autograd.h"
#include "blutensor/capture.h"
#include "blutensor/capture_arena.h"
#include "blutensor/nn.h"
#include "blutensor/ops.h"
#include "blutensor/optim.h"
#include "blutensor/random.h"
#include "support/adamw_step.h"
#include "support/capture_record.h"
#include "support/recorded_twin.h"
#include "support/random_leaf.h"

namespace {

using namespace blu;
using capture::ArenaInterval;
using capture::plan_arena;

// Every pair of intervals live at one node is disjoint in bytes, but an in-place pair (Note
// [In-place reuse]) placed at one offset, live together only at the node that makes it; every
// offset aligned; the arena holds them all and is at least the lower bound. Returns the in-place
// pairs that share bytes.
std::size_t expect_valid(const std::vector<ArenaInterval>& v, const capture::ArenaPlan& p,
                         std::size_t align) {
  EXPECT_EQ(p.offsets.size(), v.size());
  if (p.offsets.size() != v.size()) return 0;
  const auto round_up = [align](std::size_t x) { return (x + align - 1) / align * align; };
  std::size_t shared = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(p.offsets[i] % align, 0u) << i;
    EXPECT_LE(p.offsets[i] + v[i].bytes, p.bytes) << i;
    for (size_t j = i + 1; j < v.size(); ++j) {
      const bool live_together = v[i].first <= v[j].last && v[j].first <= v[i].last;
      const bool overlap = p.offsets[i] < p.offsets[j] + round_up(v[j].bytes) &&
                           p.offsets[j] < p.offsets[i] + round_up(v[i].bytes);
      if (!(live_together && overlap && v[i].bytes > 0 && v[j].bytes > 0)) continue;
      const bool pair = (v[i].inplace_of == static_cast<int>(j) && v[j].last == v[i].first) ||
                        (v[j].inplace_of == static_cast<int>(i) && v[i].last == v[j].first);
      EXPECT_TRUE(pair && p.offsets[i] == p.offsets[j])
          << "intervals " << i << " [" << v[i].first << ", " << v[i].last << "] and " << j << " ["
          << v[j].first << ", " << v[j].last << "]";
      ++shared;
    }
  }
  EXPECT_GE(p.bytes, p.lower_bound_bytes);
  EXPECT_LE(shared, p.inplace_pairs);
  return shared;
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

// Note [In-place reuse]: an elementwise chain a -> b -> c of one size, each dying at the op that
// makes the next, takes one slot; without the hints, two (a result never on its operand).
TEST(CaptureArena, InPlaceChainTakesOneSlot) {
  std::vector<ArenaInterval> v = {{1000, 0, 1}, {1000, 1, 2, 0}, {1000, 2, 3, 1}};
  const capture::ArenaPlan p = plan_arena(v, 256);
  EXPECT_EQ(p.offsets, (std::vector<std::size_t>{0, 0, 0}));
  EXPECT_EQ(p.bytes, 1024u);
  EXPECT_EQ(p.lower_bound_bytes, 1024u);
  EXPECT_EQ(p.inplace_pairs, 2u);
  EXPECT_EQ(expect_valid(v, p, 256), 2u);
  for (ArenaInterval& a : v) a.inplace_of = -1;
  const capture::ArenaPlan q = plan_arena(v, 256);
  EXPECT_EQ(q.bytes, 2048u);
  EXPECT_EQ(q.lower_bound_bytes, 2048u);
  EXPECT_EQ(q.inplace_pairs, 0u);
  // The partner placed first may sit where a third interval, live with the other one only,
  // needs the bytes: z [0,0] 3000 and w [2,2] 2000 go first (both at 0), b [1,2] 1500 above w;
  // a [0,1] on b's bytes would cross z: a goes above both and the pair does not share.
  const std::vector<ArenaInterval> w = {{1000, 0, 1}, {1500, 1, 2, 0}, {3000, 0, 0}, {2000, 2, 2}};
  const capture::ArenaPlan r = plan_arena(w, 256);
  EXPECT_EQ(r.offsets, (std::vector<std::size_t>{3584, 2048, 0, 0}));
  EXPECT_EQ(r.inplace_pairs, 0u);
  EXPECT_EQ(expect_valid(w, r, 256), 0u);
  EXPECT_EQ(r.lower_bound_bytes, 4096u);  // node 0: z and a
  // A result larger than its operand: shares the operand's start, its tail checked like any.
  const std::vector<ArenaInterval> x = {{1000, 0, 1}, {2000, 1, 2, 0}, {500, 0, 2}};
  const capture::ArenaPlan t = plan_arena(x, 256);
  EXPECT_EQ(t.offsets[0], t.offsets[1]);
  EXPECT_EQ(expect_valid(x, t, 256), 1u);
  EXPECT_EQ(t.bytes, 2048u + 512);
  EXPECT_EQ(t.lower_bound_bytes, 2048u + 512);  // node 1: b over a, beside the 500
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
  try {
    plan_arena({{8, 0, 2}, {8, 1, 3, 0}}, 64);
    FAIL() << "an in-place hint at a node where the operand lives on accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("interval 1 [1, 3] cannot take the bytes of interval 0 "
                                         "(its last node is not this one's first)"),
              std::string::npos)
        << e.what();
  }
  try {
    plan_arena({{8, 0, 1}, {8, 1, 2, 0}, {8, 1, 3, 0}}, 64);
    FAIL() << "one operand given in place to two results accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("interval 0 gives its bytes in place to two intervals"),
              std::string::npos)
        << e.what();
  }
}

// Random step-shaped lifetimes: most temporaries short (an op's output read by the next few ops),
// some long (a forward activation saved for its backward: born in the first half, dying in the
// second, the later-born dying earlier), sizes spread over four orders of magnitude.
// Half the trials also carry random in-place hints (Note [In-place reuse]): some intervals start
// where one ends (elementwise chains), and a share of those, and of the chance meetings, take
// their predecessor's bytes.
TEST(CaptureArena, RandomGraphsNeverOverlapLiveIntervals) {
  std::mt19937_64 rng(20261127);
  double worst = 1, worst_hinted = 1;
  std::size_t hints = 0, shared = 0, smaller = 0, hinted_trials = 0;
  for (int trial = 0; trial < 120; ++trial) {
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
      if (trial % 2 == 1 && rng() % 3 == 0 && a.last < nodes - 1) {
        // the next op of an elementwise chain: starts where a dies, a's size or near it
        ArenaInterval b;
        b.bytes = rng() % 4 == 0 ? a.bytes / 2 + rng() % (a.bytes + 1) : a.bytes;
        b.first = a.last;
        b.last = std::min(nodes - 1, b.first + static_cast<int>(rng() % 4));
        v.push_back(b);
      }
    }
    if (trial % 2 == 1) {
      ++hinted_trials;
      std::vector<char> gives(v.size(), 0);
      for (size_t i = 0; i < v.size(); ++i) {
        if (rng() % 4 == 0) continue;
        for (size_t j = 0; j < v.size(); ++j) {
          if (j != i && !gives[j] && v[j].last == v[i].first) {
            v[i].inplace_of = static_cast<int>(j);
            gives[j] = 1;
            ++hints;
            break;
          }
        }
      }
    }
    const std::size_t align = std::size_t{1} << (rng() % 9);
    const capture::ArenaPlan p = plan_arena(v, align);
    SCOPED_TRACE("trial " + std::to_string(trial));
    shared += expect_valid(v, p, align);
    if (trial % 2 == 1) {
      std::vector<ArenaInterval> plain = v;
      for (ArenaInterval& a : plain) a.inplace_of = -1;
      const capture::ArenaPlan q = plan_arena(plain, align);
      EXPECT_LE(p.lower_bound_bytes, q.lower_bound_bytes);
      smaller += p.bytes < q.bytes ? 1 : 0;
      EXPECT_EQ(plan_arena(v, align).offsets, p.offsets) << "not deterministic";
    }
    if (p.lower_bound_bytes > 0) {
      double& w = trial % 2 == 1 ? worst_hinted : worst;
      w = std::max(w, static_cast<double>(p.bytes) / static_cast<double>(p.lower_bound_bytes));
    }
  }
  std::printf("worst arena / lower bound over the random graphs: %.3f without hints, %.3f with\n",
              worst, worst_hinted);
  std::printf("in-place hints %zu, pairs sharing bytes %zu; arena smaller with them in %zu of %zu "
              "trials\n", hints, shared, smaller, hinted_trials);
  EXPECT_LE(worst, 1.25);
  // The lower bound with hints counts every pair as sharing; the greedy takes about 40% of them.
  EXPECT_LE(worst_hinted, 1.35);
  EXPECT_GT(shared, hints / 4) << "few hints taken: the test lost its case";
  EXPECT_GT(smaller, hinted_trials / 4);
}

// A transformer-like step (as capture_test's TinyBlock, with q, k, v split from one tensor as
// GPT-2 does: the split's backward assembles the qkv gradient from three copies into its slices).
struct Block {
  static constexpr int64_t kVocab = 301, kEmbd = 16, kHeads = 2;  // logits dominate, as in GPT-2
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

Tensor tokens(uint64_t seed) {
  Generator g(seed);
  return randint(0, Block::kVocab, {3, 7}, TensorOptions(kInt64), &g);
}

TEST(CaptureArena, CapturedStepTemporariesLiveAtOnceNeverShareBytes) {
  Block m(5);
  optim::AdamW opt(m.params(), optim::AdamWOptions{3e-3, 0.9, 0.99, 1e-8, 0.01});
  test::adamw_step(m, opt, tokens(1), tokens(2));
  Tensor x = tokens(3), y = tokens(4);
  capture::Scope scope(true);
  test::adamw_step(m, opt, x, y);
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
  exe.use_inplace(false);
  const capture::ArenaStats off = exe.arena();
  EXPECT_FALSE(off.inplace);
  EXPECT_TRUE(exe.inplace_pairs().empty());
  exe.use_inplace(true);
  const capture::ArenaStats a = exe.arena();
  ASSERT_TRUE(a.enabled);
  ASSERT_TRUE(a.inplace);
  std::printf("captured block step: arena %zu B (lower bound %zu B) without in-place pairs, %zu B "
              "(lower bound %zu B) with %zu of %zu pairs sharing\n",
              off.bytes, off.lower_bound_bytes, a.bytes, a.lower_bound_bytes, a.inplace_pairs,
              a.inplace_candidates);
  EXPECT_GT(a.temporaries, 20u);
  EXPECT_EQ(a.bytes, a.lower_bound_bytes) << "greedy placement above the liveness lower bound";
  EXPECT_LE(off.bytes, off.lower_bound_bytes * 5 / 4);
  EXPECT_LT(a.bytes, off.bytes) << "in-place pairs did not shrink the arena";
  EXPECT_LT(a.lower_bound_bytes, off.lower_bound_bytes);
  EXPECT_LT(a.bytes, a.summed_bytes / 2);
  // The pairs (Note [In-place reuse]): the logits' gradient on the logits, and elementwise ops.
  std::map<std::string, int> pair_ops;
  std::set<std::pair<int, int>> pairs;
  for (const capture::InplacePair& ip : exe.inplace_pairs()) {
    ++pair_ops[exe.graph().nodes[static_cast<size_t>(ip.node)].op];
    pairs.insert({std::min(ip.operand, ip.result), std::max(ip.operand, ip.result)});
    EXPECT_EQ(last[static_cast<size_t>(ip.operand)], ip.node);
    EXPECT_EQ(first[static_cast<size_t>(ip.result)], ip.node);
  }
  EXPECT_EQ(pair_ops["cross_entropy_backward"], 1);
  EXPECT_GT(pair_ops["binary"] + pair_ops["unary"], 0);
  EXPECT_EQ(a.inplace_candidates, exe.inplace_pairs().size());
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
  std::size_t sharing = 0;
  for (size_t i = 0; i < placed.size(); ++i) {
    for (size_t j = i + 1; j < placed.size(); ++j) {
      const size_t p = static_cast<size_t>(placed[i].id), q = static_cast<size_t>(placed[j].id);
      const bool live_together = first[p] <= last[q] && first[q] <= last[p];
      const bool overlap = placed[i].lo < placed[j].hi && placed[j].lo < placed[i].hi;
      if (!(live_together && overlap)) continue;
      // Allowed only for an in-place pair, on the same bytes, live together at its node alone.
      const bool pair = pairs.count({std::min(placed[i].id, placed[j].id),
                                     std::max(placed[i].id, placed[j].id)}) > 0;
      EXPECT_TRUE(pair && placed[i].lo == placed[j].lo &&
                  (last[p] == first[q] || last[q] == first[p]))
          << "buffers " << p << " and " << q;
      ++sharing;
    }
  }
  EXPECT_EQ(sharing, a.inplace_pairs);
  // Without the arena a temporary has no storage between runs.
  exe.use_arena(false);
  EXPECT_FALSE(exe.buffer(placed.front().id).defined());
  EXPECT_FALSE(exe.arena().enabled);
}

// Note [In-place reuse] end to end: model A trains eagerly, model B (same init) is captured at
// step 2 and then runs the record with its results in place of dying operands: the losses and
// the weights stay A's bit for bit over six more steps; the same with in-place reuse off
// (BLU_CAPTURE_INPLACE=0's switch) and without the arena.
std::vector<uint8_t> bytes(const Tensor& t) {
  const Tensor b = capture::bytes_of(t);
  std::vector<uint8_t> out(static_cast<size_t>(b.numel()) * b.element_size());
  std::memcpy(out.data(), b.data_ptr(), out.size());
  return out;
}

TEST(CaptureArena, InPlaceStepTrainsLikeTheEagerSteps) {
  struct Mode {
    const char* name;
    bool arena, inplace;
  };
  for (const Mode mode : {Mode{"in place", true, true}, Mode{"no in-place pairs", true, false},
                          Mode{"a storage per temporary", false, true}}) {
    SCOPED_TRACE(mode.name);
    test::RecordedTwin<Block> t(optim::AdamWOptions{3e-3, 0.9, 0.99, 1e-8, 0.01}, tokens, 7);
    capture::Executable& exe = *t.exe;
    exe.use_arena(mode.arena);
    exe.use_inplace(mode.inplace);
    EXPECT_EQ(t.loss_a1, t.loss_b1);
    EXPECT_EQ(t.loss_a2, t.loss_b2);
    const capture::ArenaStats st = exe.arena();
    EXPECT_EQ(st.inplace_pairs > 0, mode.inplace);  // planned (without the arena: what it would be)
    for (int k = 3; k <= 8; ++k) {
      bool ran = false;
      const auto [loss_a, loss_b] = t.step(k, 3e-3, &ran);
      ASSERT_TRUE(ran);
      EXPECT_EQ(loss_b, loss_a) << "step " << k;
    }
    for (size_t i = 0; i < t.a.params().size(); ++i) {
      EXPECT_EQ(bytes(t.a.params()[i]), bytes(t.b.params()[i])) << "parameter " << i;
      EXPECT_EQ(bytes(t.opt_a.exp_avg(i)), bytes(t.opt_b.exp_avg(i))) << "exp_avg " << i;
    }
  }
}

}  // namespace

// A replace()d set's launch that views a buffer the record first touches later (Note [Early
// classifier scaling]: the scaling writes the gradient G hundreds of calls before the record's
// first use of it) holds that buffer from the launch on: its arena window shares no byte with a
// temporary live in between (session 24: before the fix the arena gave G's bytes to such
// temporaries, and the compiled bf16 step faulted).
TEST(CaptureArena, AnOverridesViewsLiveFromItsLaunch) {
  capture::Graph g;
  const Device cpu = Device::cpu();
  std::vector<int> t;
  for (int k = 0; k < 6; ++k) t.push_back(test::add_buffer(g, cpu, 1024));
  const auto call = [&](const std::string& op, std::vector<int> reads, std::vector<int> writes) {
    capture::Node n;
    n.op = op;
    n.device = cpu;
    for (int b : reads) n.args.push_back(test::tensor_arg(std::string("r") + char('0' + n.args.size()), b, true, false, kFloat32, {256}));
    for (int b : writes) n.args.push_back(test::tensor_arg(std::string("w") + char('0' + n.args.size()), b, false, true, kFloat32, {256}));
    g.nodes.push_back(n);
  };
  call("fill", {}, {t[0]});              // 0
  call("fill", {t[0]}, {t[1]});          // 1 replaced below: its launch also writes t[3]
  call("fill", {}, {t[2]});              // 2 t[2] lives over 2..3
  call("binary", {t[2]}, {t[4]});        // 3
  call("binary", {t[0]}, {t[3]});        // 4 the record's first touch of t[3]
  call("binary", {t[3], t[4], t[1]}, {t[5]});  // 5
  capture::Executable exe(std::move(g));
  exe.use_inplace(false);
  const auto windows_overlap = [&](int a, int b) {
    const Tensor x = exe.buffer(a), y = exe.buffer(b);
    const auto xl = reinterpret_cast<uintptr_t>(x.data_ptr()), yl = reinterpret_cast<uintptr_t>(y.data_ptr());
    return xl < yl + 1024 && yl < xl + 1024;
  };
  ASSERT_TRUE(exe.arena().enabled);
  // As recorded, t[2] (2..3) and t[3] (4..5) never live together: the lower bound shares them.
  EXPECT_TRUE(windows_overlap(t[2], t[3])) << "the test lost its case: t[2] and t[3] got separate bytes anyway";
  exe.replace({1}, [](const capture::Executable::ViewFn&) {}, {t[0], t[1], t[3]});
  EXPECT_FALSE(windows_overlap(t[2], t[3]));
}

// Note [Dead host copies]: item()'s copy of a scalar into a host tensor nothing reads again runs
// nothing; a copy whose destination a later call reads stays. (A destination kept after the step,
// Buffer::alive, needs a live tensor: the captured engine GPU test's full step covers it.)
TEST(CaptureArena, DeadHostCopiesRunNothing) {
  capture::Graph g;
  const Device cpu = Device::cpu();
  const int src = test::add_buffer(g, cpu, 4), dead = test::add_buffer(g, cpu, 4), read = test::add_buffer(g, cpu, 4),
            kept = test::add_buffer(g, cpu, 4), out = test::add_buffer(g, cpu, 4);
  const auto call = [&](const std::string& op, std::vector<std::pair<const char*, int>> reads,
                        std::vector<std::pair<const char*, int>> writes) {
    capture::Node n;
    n.op = op;
    n.device = cpu;
    for (const auto& [name, b] : reads) n.args.push_back(test::tensor_arg(name, b, true, false, kFloat32, {1}));
    for (const auto& [name, b] : writes) n.args.push_back(test::tensor_arg(name, b, false, true, kFloat32, {1}));
    g.nodes.push_back(n);
  };
  call("fill", {}, {{"out", src}});                     // 0
  call("host_read", {{"src", src}}, {});                // 1
  call("copy_", {{"src", src}}, {{"dst", dead}});       // 2 dropped
  call("copy_", {{"src", src}}, {{"dst", read}});       // 3 read by 5: stays
  call("copy_", {{"src", kept}}, {{"dst", kept}});      // 4 onto itself: stays
  call("binary", {{"a", read}}, {{"out", out}});        // 5
  capture::Executable exe(std::move(g));
  EXPECT_EQ(exe.drop_dead_host_copies(), 1);
  EXPECT_TRUE(exe.replaced(2));
  EXPECT_FALSE(exe.replaced(3));
  EXPECT_FALSE(exe.replaced(4));
  EXPECT_FALSE(exe.buffer(dead).defined());  // no bytes
  EXPECT_EQ(exe.drop_dead_host_copies(), 0);  // once
}
