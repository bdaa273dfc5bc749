// nn::Module bookkeeping and layers, optimizers against hand-computed updates, gradient clipping,
// the LR schedule and state_dict through safetensors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "blutensor/blutensor.h"
#include "support/error_of.h"

namespace {

using namespace blu;

using blu::test::error_of;

class Block : public nn::Module {
 public:
  Block() {
    ln = register_module("ln", std::make_shared<nn::LayerNorm>(6));
    fc = register_module("fc", std::make_shared<nn::Linear>(6, 4));
    scale = register_buffer("scale", full({1}, 2.0));
  }
  std::shared_ptr<nn::LayerNorm> ln;
  std::shared_ptr<nn::Linear> fc;
  Tensor scale;
};

class Net : public nn::Module {
 public:
  Net() {
    emb = register_module("wte", std::make_shared<nn::Embedding>(10, 6));
    h0 = register_module("h0", std::make_shared<Block>());
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.5));
  }
  std::shared_ptr<nn::Embedding> emb;
  std::shared_ptr<Block> h0;
  std::shared_ptr<nn::Dropout> drop;
};

TEST(NnModule, NamesStateDictTrainEval) {
  Net net;
  std::vector<std::string> names;
  for (auto& [n, p] : net.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"wte.weight", "h0.ln.weight", "h0.ln.bias", "h0.fc.weight", "h0.fc.bias"}));
  EXPECT_EQ(net.num_parameters(), 60 + 6 + 6 + 24 + 4);
  auto sd = net.state_dict();
  EXPECT_EQ(sd.size(), 6u);
  EXPECT_TRUE(sd.count("h0.scale"));
  for (auto& [n, p] : net.named_parameters()) EXPECT_TRUE(p.requires_grad()) << n;
  EXPECT_TRUE(net.drop->is_training());
  net.eval();
  EXPECT_FALSE(net.drop->is_training());
  EXPECT_FALSE(net.h0->fc->is_training());
  Tensor x = ones({3, 5});
  EXPECT_TRUE(net.drop->forward(x).is_same(x));
  net.train();
  EXPECT_TRUE(net.h0->is_training());
  EXPECT_NE(error_of([&] { net.register_buffer("wte", zeros({1})); }).find("duplicate name 'wte'"), std::string::npos);
  // Linear init bound and shapes; LayerNorm init.
  nn::Linear lin(16, 3);
  for (double w : lin.weight.to_double_vector()) EXPECT_LE(std::fabs(w), 0.25);
  EXPECT_EQ(lin.forward(ones({2, 7, 16})).sizes(), (Shape{2, 7, 3}));
  EXPECT_EQ(net.h0->ln->weight.to_vector<double>(), std::vector<double>(6, 1.0));
}

TEST(NnModule, LoadStateDictAndSafetensorsRoundTrip) {
  Net a, b;
  std::string path = (std::filesystem::temp_directory_path() / "blu_net.safetensors").string();
  save_safetensors(path, a.state_dict());
  b.load_state_dict(load_safetensors(path).tensors);
  std::remove(path.c_str());
  for (auto& [n, p] : a.state_dict()) EXPECT_EQ(max_abs_diff(p, b.state_dict().at(n)), 0.0) << n;
  auto sd = a.state_dict();
  sd.erase("h0.fc.bias");
  EXPECT_NE(error_of([&] { b.load_state_dict(sd); }).find("missing key 'h0.fc.bias'"), std::string::npos);
  sd = a.state_dict();
  sd["extra"] = zeros({1});
  EXPECT_NE(error_of([&] { b.load_state_dict(sd); }).find("unexpected key 'extra'"), std::string::npos);
  sd = a.state_dict();
  sd["h0.fc.weight"] = zeros({3, 3});
  EXPECT_NE(error_of([&] { b.load_state_dict(sd); }).find("'h0.fc.weight' has shape [3, 3]"), std::string::npos);
}

TEST(NnModule, ToDtypeKeepsHandles) {
  nn::Linear lin(3, 2);
  Tensor handle = lin.weight;
  lin.to(kFloat64);
  EXPECT_EQ(handle.dtype(), kFloat64);
  EXPECT_EQ(lin.parameters()[0].dtype(), kFloat64);
  EXPECT_TRUE(handle.requires_grad());
  EXPECT_EQ(lin.forward(ones({1, 3}, kFloat64)).dtype(), kFloat64);
}

TEST(Optim, AdamWMatchesReferenceFormula) {
  Tensor p = from_vector(std::vector<double>{1.0, -2.0, 0.5}, {}, kFloat64).requires_grad_();
  optim::AdamWOptions o{0.1, 0.9, 0.99, 1e-8, 0.05};
  optim::AdamW opt({p}, o);
  std::vector<double> ref = {1.0, -2.0, 0.5}, m(3, 0), v(3, 0);
  for (int step = 1; step <= 3; ++step) {
    std::vector<double> g = {0.3 * step, -0.2, 1.0 / step};
    p.set_grad(from_vector(g, {}, kFloat64));
    opt.step();
    for (int i = 0; i < 3; ++i) {
      ref[i] *= 1 - o.lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g[i] * g[i];
      double mh = m[i] / (1 - std::pow(o.beta1, step)), vh = v[i] / (1 - std::pow(o.beta2, step));
      ref[i] -= o.lr * mh / (std::sqrt(vh) + o.eps);
    }
  }
  std::vector<double> got = p.to_double_vector();
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], ref[i], 1e-12);
  EXPECT_EQ(opt.step_count(), 3);
  // Parameters without a gradient are skipped.
  Tensor q = ones({2}, kFloat64).requires_grad_();
  optim::AdamW opt2({q});
  opt2.step();
  EXPECT_EQ(q.to_vector<double>(), (std::vector<double>{1, 1}));
}

TEST(Optim, AdamWStateDictResumesExactly) {
  Generator gen(1);
  Tensor p1 = randn({3, 2}, kFloat64, &gen).requires_grad_(), q1 = p1.detach().clone().requires_grad_();
  optim::AdamW a({p1}), b({q1});
  auto step_with = [&](optim::AdamW& o, Tensor& p, int s) {
    p.set_grad(full({3, 2}, 0.1 * s, kFloat64));
    o.step();
  };
  step_with(a, p1, 1);
  step_with(a, p1, 2);
  // b resumes from a's state after two steps.
  b.load_state_dict(a.state_dict());
  {
    NoGradGuard ng;
    q1.copy_(p1);
  }
  EXPECT_EQ(b.step_count(), 2);
  step_with(a, p1, 3);
  step_with(b, q1, 3);
  EXPECT_EQ(max_abs_diff(p1, q1), 0.0);
  auto sd = a.state_dict();
  sd["exp_avg.0"] = zeros({2}, kFloat64);
  EXPECT_NE(error_of([&] { b.load_state_dict(sd); }).find("'exp_avg.0' is f64[2]"), std::string::npos);
}

TEST(NnModule, TiedParametersAreListedOnce) {
  struct Tied : nn::Module {
    Tied() {
      emb = register_module("wte", std::make_shared<nn::Embedding>(7, 3));
      head = register_module("lm_head", std::make_shared<nn::Linear>(3, 7, false));
      head->weight = emb->weight;
    }
    std::shared_ptr<nn::Embedding> emb;
    std::shared_ptr<nn::Linear> head;
  };
  // A second module registering the same tensor (weight tying at the module level).
  struct Owner : nn::Module {
    Owner() {
      a = register_module("a", std::make_shared<nn::Embedding>(7, 3));
      register_parameter("tied", a->weight);
    }
    std::shared_ptr<nn::Embedding> a;
  };
  Owner o;
  EXPECT_EQ(o.parameters().size(), 1u);
  EXPECT_EQ(o.named_parameters()[0].first, "tied");  // own parameters come before children's
  EXPECT_EQ(o.state_dict().size(), 2u);
  Tied t;
  Tensor logits = t.head->forward(t.emb->forward(from_vector(std::vector<int64_t>{1, 2})));
  sum(logits).backward();
  EXPECT_TRUE(t.emb->weight.grad().defined());
}

TEST(Optim, SgdMomentum) {
  Tensor p = from_vector(std::vector<double>{1.0}, {}, kFloat64).requires_grad_();
  optim::SGD opt({p}, 0.1, 0.9);
  double ref = 1.0, vel = 0;
  for (int step = 0; step < 3; ++step) {
    double g = 2.0 * (step + 1);
    p.set_grad(from_vector(std::vector<double>{g}, {}, kFloat64));
    opt.step();
    vel = step == 0 ? g : 0.9 * vel + g;
    ref -= 0.1 * vel;
  }
  EXPECT_NEAR(p.item(), ref, 1e-12);
  opt.zero_grad();
  EXPECT_FALSE(p.grad().defined());
}

TEST(Optim, ClipGradNormIsGlobal) {
  Tensor a = zeros({2}).requires_grad_(), b = zeros({1}).requires_grad_();
  a.set_grad(from_vector(std::vector<float>{3, 0}));
  b.set_grad(from_vector(std::vector<float>{4}));
  Tensor norm = optim::clip_grad_norm_({a, b}, 1.0);
  EXPECT_NEAR(norm.item(), 5.0, 1e-6);
  EXPECT_NEAR(a.grad().to_vector<double>()[0], 0.6, 1e-5);
  EXPECT_NEAR(b.grad().item(), 0.8, 1e-5);
  // Below the limit: unchanged.
  Tensor n2 = optim::clip_grad_norm_({a, b}, 10.0);
  EXPECT_NEAR(n2.item(), 1.0, 1e-5);
  EXPECT_NEAR(b.grad().item(), 0.8, 1e-5);
}

TEST(Optim, WarmupCosineSchedule) {
  EXPECT_DOUBLE_EQ(optim::lr_warmup_cosine(0, 10, 100, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(optim::lr_warmup_cosine(9, 10, 100, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(optim::lr_warmup_cosine(10, 10, 100, 1.0, 0.1), 1.0);
  EXPECT_NEAR(optim::lr_warmup_cosine(55, 10, 100, 1.0, 0.1), 0.55, 1e-12);
  EXPECT_DOUBLE_EQ(optim::lr_warmup_cosine(100, 10, 100, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(optim::lr_warmup_cosine(500, 10, 100, 1.0, 0.1), 0.1);
}

}  // namespace
