// capture_test.cpp: Note [Step capture] on the CPU. A small transformer-like training step
// (embedding, layernorm, attention, GELU MLP, cross-entropy, autograd backward, AdamW) is captured
// and replayed: the replay's outputs equal the eager step's bit for bit; inputs, outputs and
// temporaries are classified; the key is stable across steps and follows the shapes; the JSON
// round-trips; misuse is a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "blutensor/autograd.h"
#include "blutensor/capture.h"
#include "blutensor/nn.h"
#include "blutensor/ops.h"
#include "blutensor/optim.h"
#include "blutensor/random.h"
#include "support/random_leaf.h"

namespace {

using namespace blu;
using optim::AdamW;
using optim::AdamWOptions;

struct TinyBlock {
  static constexpr int64_t kVocab = 29, kEmbd = 16, kHeads = 2;
  Tensor wte, ln_w, ln_b, w_qkv, b_qkv, w_fc, b_fc, w_proj, b_proj;
  std::vector<Tensor> params() const { return {wte, ln_w, ln_b, w_qkv, b_qkv, w_fc, b_fc, w_proj, b_proj}; }

  explicit TinyBlock(uint64_t seed) {
    Generator g(seed);
    auto p = [&](Shape s, double scale) { return test::random_leaf(s, scale, g); };
    wte = p({kVocab, kEmbd}, 0.3);
    ln_w = p({kEmbd}, 0.1);
    ln_b = p({kEmbd}, 0.1);
    w_qkv = p({3 * kEmbd, kEmbd}, 0.2);
    b_qkv = p({3 * kEmbd}, 0.05);
    w_fc = p({4 * kEmbd, kEmbd}, 0.2);
    b_fc = p({4 * kEmbd}, 0.05);
    w_proj = p({kEmbd, 4 * kEmbd}, 0.1);
    b_proj = p({kEmbd}, 0.05);
  }

  Tensor loss(const Tensor& idx, const Tensor& targets) const {
    const int64_t B = idx.size(0), T = idx.size(1), C = kEmbd, H = kHeads;
    Tensor x = embedding(wte, idx);                         // [B, T, C]
    Tensor h = layer_norm(x, add(ln_w, 1.0), ln_b);         // weight near 1
    Tensor qkv = linear(h, w_qkv, b_qkv).reshape({B, T, 3, H, C / H});
    Tensor q = qkv.select(2, 0).transpose(1, 2), k = qkv.select(2, 1).transpose(1, 2), v = qkv.select(2, 2).transpose(1, 2);
    Tensor a = scaled_dot_product_attention(q, k, v, true).transpose(1, 2).reshape({B, T, C});
    x = x + a;
    Tensor m = linear(gelu(linear(layer_norm(x, add(ln_w, 1.0), ln_b), w_fc, b_fc)), w_proj, b_proj);
    x = x + m;
    Tensor logits = matmul(x, wte.transpose(0, 1));         // tied head
    return cross_entropy(logits.reshape({B * T, kVocab}), targets.reshape({B * T}));
  }
};

Tensor batch(uint64_t seed, int64_t B, int64_t T) {
  Generator g(seed);
  return randint(0, TinyBlock::kVocab, {B, T}, TensorOptions(kInt64), &g);
}

// One training step: forward, backward, AdamW, zero_grad. Returns the loss (a host read).
double train_step(const TinyBlock& m, AdamW& opt, const Tensor& x, const Tensor& y) {
  Tensor loss = m.loss(x, y);
  loss.backward();
  opt.step();
  opt.zero_grad();
  return loss.item();
}

std::vector<uint8_t> bytes(const Tensor& t) {
  Tensor b = capture::bytes_of(t);
  std::vector<uint8_t> out(static_cast<size_t>(b.numel()) * b.element_size());
  std::memcpy(out.data(), b.data_ptr(), out.size());
  return out;
}

TEST(Capture, ReplayReproducesTheEagerStepBitForBit) {
  TinyBlock m(7);
  AdamW opt(m.params(), AdamWOptions{3e-3, 0.9, 0.99, 1e-8, 0.01});
  const Tensor x = batch(11, 3, 5), y = batch(12, 3, 5);
  train_step(m, opt, x, y);  // the moments exist from here on

  capture::Scope scope(true);
  const double loss = train_step(m, opt, x, y);
  capture::Graph g = scope.finish();
  EXPECT_TRUE(std::isfinite(loss));
  std::printf("%s", g.summary().c_str());

  // Every op of the step is in the record and nothing else ran: replaying from the snapshots of
  // the inputs gives every output buffer bit for bit.
  const std::map<int, Tensor> out = capture::replay(g);
  ASSERT_FALSE(out.empty());
  // Parameters and moments are both inputs and outputs; identify them by content.
  std::vector<Tensor> state = m.params();
  for (size_t i = 0; i < m.params().size(); ++i) {
    state.push_back(opt.exp_avg(i));
    state.push_back(opt.exp_avg_sq(i));
  }
  int matched = 0;
  for (const Tensor& t : state) {
    const std::vector<uint8_t> want = bytes(t);
    bool found = false;
    for (const auto& [id, r] : out) {
      if (static_cast<size_t>(r.numel()) * r.element_size() != want.size()) continue;
      found = found || std::memcmp(r.data_ptr(), want.data(), want.size()) == 0;
    }
    EXPECT_TRUE(found) << "no replayed output equals " << t.describe();
    matched += found ? 1 : 0;
  }
  EXPECT_EQ(matched, static_cast<int>(state.size()));
  // The comparison can fail: without its AdamW node the replay's weights are not the eager ones.
  capture::Graph no_update = g;
  std::erase_if(no_update.nodes, [](const capture::Node& n) { return n.op == "adamw_step"; });
  const std::map<int, Tensor> stale = capture::replay(no_update);
  const std::vector<uint8_t> w = bytes(m.w_fc);
  for (const auto& [id, r] : stale) {
    if (static_cast<size_t>(r.numel()) * r.element_size() == w.size()) {
      EXPECT_NE(std::memcmp(r.data_ptr(), w.data(), w.size()), 0) << "buffer " << id;
    }
  }

  // Inputs: the 9 parameters, their 18 moments, the two index tensors (and the gradients' old
  // buffers, if zero_grad kept any): at least 29. The parameters' updates are outputs.
  EXPECT_GE(g.inputs().size(), 29u);
  EXPECT_GE(g.outputs().size(), 27u);
  EXPECT_GT(g.launches(), 40);
  // Two host reads: embedding()'s index range check (blutensor checks indices on the host) and
  // loss.item() at the end.
  EXPECT_EQ(g.host_reads(), 2);
  EXPECT_EQ(g.nodes.back().op, "host_read");
  EXPECT_EQ(g.nodes.front().op, "host_read");
  size_t temporaries = 0;
  for (const capture::Buffer& b : g.buffers) temporaries += b.origin == capture::Origin::kInternal && !b.alive;
  EXPECT_GT(temporaries, 20u);
  // Op kinds of the step are all there.
  std::map<std::string, int> ops;
  for (const capture::Node& n : g.nodes) ++ops[n.op];
  for (const char* op : {"embedding_forward", "embedding_backward", "layer_norm_forward", "layer_norm_backward",
                         "gemm", "softmax_forward", "softmax_backward", "cross_entropy_forward",
                         "cross_entropy_backward", "adamw_step", "binary", "unary"}) {
    EXPECT_GT(ops[op], 0) << op;
  }
}

// Note [Running a captured step]: model A trains eagerly; model B (same init) is captured at step
// 2 and then trained by running the capture on new batches with the step count advancing: the
// losses and the final weights are A's, bit for bit: with the temporaries in one arena (Note
// [Step arena]; the loss, a temporary read on the host, stays readable after run()) and with a
// storage each (BLU_CAPTURE_ARENA=0).
TEST(Capture, ExecutableTrainsLikeTheEagerSteps) {
  for (const bool arena : {true, false}) {
    SCOPED_TRACE(arena ? "arena" : "a storage per temporary");
    TinyBlock a(21), b(21);
    AdamW opt_a(a.params(), AdamWOptions{3e-3, 0.9, 0.99, 1e-8, 0.01});
    AdamW opt_b(b.params(), AdamWOptions{3e-3, 0.9, 0.99, 1e-8, 0.01});
    auto x_of = [](int step) { return batch(100 + step, 3, 5); };
    auto y_of = [](int step) { return batch(200 + step, 3, 5); };
    EXPECT_EQ(train_step(a, opt_a, x_of(1), y_of(1)), train_step(b, opt_b, x_of(1), y_of(1)));
    Tensor xb = x_of(2), yb = y_of(2);  // B's batch tensors: the capture reads them, later runs refill them
    const double loss_a2 = train_step(a, opt_a, x_of(2), y_of(2));
    capture::Scope scope(true);
    const double loss_b2 = train_step(b, opt_b, xb, yb);
    capture::Executable exe(scope.finish());
    exe.use_arena(arena);
    EXPECT_EQ(exe.arena().enabled, arena);
    EXPECT_EQ(loss_a2, loss_b2);
    EXPECT_GE(exe.persistent_buffers(), 29u);  // 9 weights, 18 moments, the batch
    // Note [Graph segments]: cut at the two host reads (the second ends the step); no CUDA graphs
    // for a CPU step.
    const capture::Executable::GraphStats gs = exe.graph_stats();
    EXPECT_FALSE(gs.enabled);
    EXPECT_EQ(gs.segments, 2);
    EXPECT_EQ(gs.captured, 0);
    EXPECT_EQ(gs.eager_calls, exe.graph().launches());
    EXPECT_NE(gs.describe().find(arena ? "not on one CUDA device" : "no arena"), std::string::npos) << gs.describe();
    for (int step = 3; step <= 8; ++step) {
      const double loss_a = train_step(a, opt_a, x_of(step), y_of(step));
      {
        NoGradGuard ng;
        xb.copy_(x_of(step));
        yb.copy_(y_of(step));
      }
      exe.run({3e-3, step});
      ASSERT_EQ(exe.host_reads().size(), 2u);
      EXPECT_EQ(exe.host_reads().back().item(), loss_a) << "step " << step;
    }
    for (size_t i = 0; i < a.params().size(); ++i) {
      EXPECT_EQ(bytes(a.params()[i]), bytes(b.params()[i])) << "parameter " << i;
      EXPECT_EQ(bytes(opt_a.exp_avg_sq(i)), bytes(opt_b.exp_avg_sq(i))) << "exp_avg_sq " << i;
    }
    // A run stopped at its first host read (the embedding's index check, before any update) leaves
    // every weight as it was.
    const std::vector<uint8_t> before = bytes(b.params()[3]);
    EXPECT_FALSE(exe.run({3e-3, 9}, [](std::size_t, const Tensor&) { return false; }));
    EXPECT_EQ(bytes(b.params()[3]), before);
    EXPECT_EQ(exe.host_reads().size(), 1u);
    // Without the step count advancing the bias correction is step 2's: the weights drift from A's.
    exe.run({3e-3, -1});
    train_step(a, opt_a, x_of(9), y_of(9));
    EXPECT_NE(bytes(a.params()[0]), bytes(b.params()[0]));
  }
}

// Note [Kernel overrides]: the step's first GELU call replaced by a launch that computes the same
// thing through the public op trains exactly like the recorded call; a launch that writes zeros
// instead changes the result (the override really runs in its place).
TEST(Capture, OverridesRunInPlaceOfTheirCalls) {
  auto train = [](bool override_gelu, bool wrong) {
    TinyBlock m(31);
    AdamW opt(m.params(), AdamWOptions{3e-3, 0.9, 0.99, 1e-8, 0.01});
    train_step(m, opt, batch(1, 3, 5), batch(2, 3, 5));
    Tensor x = batch(3, 3, 5), y = batch(4, 3, 5);
    capture::Scope scope(true);
    train_step(m, opt, x, y);
    capture::Executable exe(scope.finish());
    int gelu_node = -1;
    for (size_t i = 0; i < exe.graph().nodes.size() && gelu_node < 0; ++i) {
      const capture::Node& n = exe.graph().nodes[i];
      if (n.op == "unary" && n.arg("op").enum_name == "kGelu") gelu_node = static_cast<int>(i);
    }
    EXPECT_GE(gelu_node, 0);
    if (!override_gelu) {  // misuse: a host read (node 0: embedding's index check), a node twice
      const capture::Executable::LaunchFn noop = [](const capture::Executable::ViewFn&) {};
      EXPECT_EQ(exe.graph().nodes[0].op, "host_read");
      EXPECT_THROW(exe.replace({0}, noop), Error);
      EXPECT_THROW(exe.replace({gelu_node, gelu_node}, noop), Error);
      EXPECT_THROW(exe.replace({static_cast<int>(exe.graph().nodes.size())}, noop), Error);
    }
    if (override_gelu) {
      const capture::Node node = exe.graph().nodes[static_cast<size_t>(gelu_node)];
      exe.replace({gelu_node}, [node, wrong](const capture::Executable::ViewFn& view) {
        NoGradGuard ng;
        Tensor out = view(node.arg("out").tensors[0]);
        out.copy_(wrong ? zeros_like(out) : gelu(view(node.arg("a").tensors[0])));
      });
    }
    for (int step = 3; step <= 5; ++step) exe.run({3e-3, step});
    return bytes(m.w_fc);
  };
  const std::vector<uint8_t> recorded = train(false, false);
  EXPECT_EQ(train(true, false), recorded);
  EXPECT_NE(train(true, true), recorded);
}

// Note [Kernel overrides], views: y = gelu(x), z = 2 y, w = 3 z recorded, the first two calls
// replaced by two launches. A value one launch hands to the other (y, viewed by both) keeps arena
// bytes and the run equals the eager ops; one launch over both calls that never views y gives y no
// bytes; a launch that views a buffer nobody declared (so it has no bytes) is an error naming it
// (session 16: such values were given storages outside the arena at run time, 2.3 GiB at d12).
TEST(Capture, OverrideViewsDecideWhichHandedValuesKeepBytes) {
  Generator gen(17);
  const Tensor x = randn({5, 37}, TensorOptions(kFloat32), &gen);
  const auto record = [&](Tensor& w) {
    capture::Scope scope(true);
    {
      NoGradGuard ng;
      const Tensor y = gelu(x), z = mul(y, 2.0);  // temporaries: gone before finish()
      w = mul(z, 3.0);
    }
    return scope.finish();
  };
  Tensor expected;
  {
    NoGradGuard ng;
    expected = mul(mul(gelu(x), 2.0), 3.0);
  }
  const auto ref = [](const capture::Executable& e, int node, const char* arg) {
    return e.graph().nodes[static_cast<size_t>(node)].arg(arg).tensors.at(0);
  };
  for (int mode = 0; mode < 3; ++mode) {  // 0: two launches, declared; 1: one launch; 2: undeclared
    SCOPED_TRACE("mode " + std::to_string(mode));
    Tensor w;
    capture::Executable exe(record(w));
    ASSERT_EQ(exe.graph().nodes.size(), 3u);
    const capture::TensorRef rx = ref(exe, 0, "a"), ry = ref(exe, 0, "out"), rz = ref(exe, 1, "out");
    ASSERT_EQ(ref(exe, 1, "a").buffer, ry.buffer);
    const auto gelu_into_y = [rx, ry](const capture::Executable::ViewFn& view) {
      NoGradGuard ng;
      view(ry).copy_(gelu(view(rx)));
    };
    const auto double_into_z = [ry, rz](const capture::Executable::ViewFn& view) {
      NoGradGuard ng;
      view(rz).copy_(mul(view(ry), 2.0));
    };
    if (mode == 0) {
      exe.replace({0}, gelu_into_y, {rx.buffer, ry.buffer});
      exe.replace({1}, double_into_z, {ry.buffer, rz.buffer});
    } else if (mode == 1) {
      exe.replace({0, 1}, [rx, rz](const capture::Executable::ViewFn& view) {
        NoGradGuard ng;
        view(rz).copy_(mul(gelu(view(rx)), 2.0));
      }, {rx.buffer, rz.buffer});
    } else {
      exe.replace({0}, gelu_into_y, {rx.buffer});
      exe.replace({1}, double_into_z, {rz.buffer});
    }
    const capture::ArenaStats st = exe.arena();
    EXPECT_EQ(st.dropped, mode == 0 ? 0u : 1u);
    if (mode == 2) {
      try {
        exe.run();
        ADD_FAILURE() << "an undeclared view ran";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("viewed buffer " + std::to_string(ry.buffer)), std::string::npos)
            << e.what();
      }
      continue;
    }
    {
      NoGradGuard ng;
      w.fill_(0.0);
    }
    ASSERT_TRUE(exe.run());
    EXPECT_EQ(bytes(w), bytes(expected));
  }
}

TEST(Capture, KeyIsStableAcrossStepsAndFollowsTheShapes) {
  TinyBlock m(3);
  AdamW opt(m.params(), AdamWOptions{3e-3, 0.9, 0.99, 1e-8, 0.01});
  train_step(m, opt, batch(1, 2, 7), batch(2, 2, 7));
  auto capture_step = [&](int64_t B, int64_t T, uint64_t seed) {
    capture::Scope scope;
    train_step(m, opt, batch(seed, B, T), batch(seed + 1, B, T));
    return scope.finish();
  };
  const capture::Graph a = capture_step(2, 7, 5), b = capture_step(2, 7, 9);
  // Other token values, another step count: the same calls on the same shapes.
  EXPECT_EQ(a.key("cpu"), b.key("cpu"));
  EXPECT_NE(a.key("cpu"), a.key("sm_90"));
  const capture::Graph c = capture_step(2, 9, 5);
  EXPECT_NE(a.signature_hash(), c.signature_hash());
  EXPECT_NE(a.key("cpu"), c.key("cpu"));
}

TEST(Capture, JsonRoundTrips) {
  TinyBlock m(5);
  AdamW opt(m.params());
  capture::Scope scope;
  train_step(m, opt, batch(3, 2, 4), batch(4, 2, 4));
  const capture::Graph g = scope.finish();
  const std::string text = g.to_json();
  const capture::Graph back = capture::Graph::from_json(text);
  EXPECT_EQ(back.to_json(), text);
  EXPECT_EQ(back.key("cpu"), g.key("cpu"));
  EXPECT_EQ(back.nodes.size(), g.nodes.size());
  EXPECT_EQ(back.inputs(), g.inputs());
  EXPECT_EQ(back.outputs(), g.outputs());
}

TEST(Capture, MisuseIsAClearError) {
  {
    Tensor a = ones({3});  // made before the capture: an input
    capture::Scope outer;
    EXPECT_TRUE(capture::recording());
    try {
      capture::Scope inner;
      FAIL() << "a second Scope on one thread was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("already open"), std::string::npos) << e.what();
    }
    Tensor b = ones({3});
    Tensor c = a + b;
    capture::Graph g = outer.finish();
    EXPECT_FALSE(capture::recording());
    ASSERT_EQ(g.nodes.size(), 2u);  // ones' fill and the add
    EXPECT_EQ(g.nodes[1].op, "binary");
    EXPECT_EQ(g.nodes[1].arg("op").enum_name, "kAdd");
    EXPECT_EQ(g.inputs().size(), 1u);   // a
    EXPECT_EQ(g.outputs().size(), 2u);  // b and c (a is read only)
    // Captured without snapshots: replay names the input it lacks.
    try {
      capture::replay(g);
      FAIL() << "replay without initial values";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("has no initial value"), std::string::npos) << e.what();
    }
  }
  for (const char* bad : {"{}", "{\"format\": \"blu-capture\", \"version\": 2}",
                          "{\"format\": \"blu-capture\", \"version\": 1, \"buffers\": [], \"nodes\": "
                          "[{\"op\": \"fill_\", \"device\": \"cpu\", \"args\": [{\"name\": \"dst\", \"tensor\": "
                          "{\"buffer\": 0, \"dtype\": \"f32\", \"offset\": 0, \"sizes\": [1], \"strides\": [1]}, "
                          "\"read\": false, \"write\": true}]}]}"}) {
    EXPECT_THROW(capture::Graph::from_json(bad), Error) << bad;
  }
}

}  // namespace
