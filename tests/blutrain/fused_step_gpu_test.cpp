// The fused GPT-2 step (blutrain/fused_step.h) against the autograd model on the same weights and
// batch: loss and every parameter gradient in strict fp32, tf32 and bf16; recompute modes agree;
// gradient accumulation equals one big batch; CUDA-graph replay is bitwise the eager step and runs
// are bitwise reproducible; a bad token id is a clear error. Small model (2 layers, C 128, two
// heads of 64, T 64, B 2) with the real 50304-row vocabulary; a 48-row logits chunk so the
// classifier runs three chunks, the last one partial.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "blutensor/autograd.h"
#include "blutensor/cuda_stream.h"
#include "blutensor/error.h"
#include "blutensor/ops.h"
#include "blutrain/fused_step.h"
#include "common/gpu_test.h"

namespace {

using namespace blu;
using namespace blu::train;

GPT2Config small_config() {
  GPT2Config c = gpt2_config("tiny");
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 128;
  c.block_size = 64;
  return c;
}

std::vector<int32_t> random_tokens(std::size_t n, uint32_t seed, int vocab = 50257) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

struct Batch {
  std::vector<int32_t> x, y;
};

Batch random_batch(int B, int T, uint32_t seed) { return {random_tokens(size_t(B) * T, seed), random_tokens(size_t(B) * T, seed + 7)}; }

FusedGPT2Step::StageFn stage_from(const std::vector<Batch>& batches, size_t* next) {
  return [&batches, next](int32_t* x, int32_t* y, cudaStream_t s) {
    const Batch& b = batches[(*next)++ % batches.size()];
    ASSERT_EQ(cudaMemcpyAsync(x, b.x.data(), b.x.size() * 4, cudaMemcpyHostToDevice, s), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(y, b.y.data(), b.y.size() * 4, cudaMemcpyHostToDevice, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);  // the host vectors are pageable
  };
}

std::vector<float> host(const Tensor& t) {
  Tensor c = t.detach().to(kCPU).to(kFloat32).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct ModelAndOptimizer {
  GPT2 model;
  AdamW opt;
  explicit ModelAndOptimizer(uint64_t seed, const GPT2Config& c = small_config())
      : model(c, Device::cuda(0)), opt((model.init_weights(seed), model.parameters()), AdamWConfig{}) {}
};

FusedStepOptions options(Precision p, int B = 2, int T = 64) {
  FusedStepOptions o;
  o.precision = p;
  o.batch = B;
  o.seq_len = T;
  o.logits_chunk_rows = 48;
  return o;
}

// Loss and gradients of the autograd model on one batch (the reference).
std::pair<double, std::vector<std::vector<float>>> autograd_grads(ModelAndOptimizer& s, const Batch& b, Precision p, int B, int T) {
  Tensor x = from_vector(b.x, {B, T}).to(Device::cuda(0)), y = from_vector(b.y, {B, T}).to(Device::cuda(0));
  Tensor loss = s.model.forward(x, y, p);
  loss.backward();
  std::vector<std::vector<float>> grads;
  for (const NamedParam& np : s.opt.params()) grads.push_back(host(np.tensor->grad()));
  s.opt.zero_grad();
  return {loss.item(), grads};
}

void expect_matches_autograd(Precision p, double loss_tol, double grad_tol) {
  set_matmul_precision(p == Precision::kTf32 ? MatmulPrecision::kHigh : MatmulPrecision::kHighest);
  ModelAndOptimizer s(1234);
  const Batch b = random_batch(2, 64, 99);
  auto [ref_loss, ref_grads] = autograd_grads(s, b, p, 2, 64);
  FusedGPT2Step step(s.model, s.opt, options(p));
  std::vector<Batch> batches = {b};
  size_t next = 0;
  const FusedStepResult r = step.step(stage_from(batches, &next), 1e-4);
  EXPECT_NEAR(r.loss, ref_loss, loss_tol * std::abs(ref_loss)) << step.describe();
  double sumsq = 0;
  for (size_t i = 0; i < ref_grads.size(); ++i) {
    const std::vector<float> got = host(step.gradient(static_cast<int>(i)));
    for (float v : ref_grads[i]) sumsq += double(v) * v;
    EXPECT_LT(rel_l2(got, ref_grads[i]), grad_tol) << s.opt.params()[i].name;
  }
  EXPECT_NEAR(r.grad_norm, std::sqrt(sumsq), 10 * grad_tol * std::sqrt(sumsq));
  set_matmul_precision(MatmulPrecision::kHighest);
}

TEST(FusedStep, MatchesAutogradStrictFp32) {
  BLU_REQUIRE_GPU();
  expect_matches_autograd(Precision::kFp32, 1e-5, 2e-4);
}

TEST(FusedStep, MatchesAutogradTf32) {
  BLU_REQUIRE_GPU();
  expect_matches_autograd(Precision::kTf32, 2e-3, 3e-2);
}

TEST(FusedStep, MatchesAutogradBf16) {
  BLU_REQUIRE_GPU();
  expect_matches_autograd(Precision::kBf16, 1e-2, 8e-2);
}

// Gradients after one step of each recompute mode (strict fp32) equal those of --recompute gelu.
TEST(FusedStep, RecomputeModesAgree) {
  BLU_REQUIRE_GPU();
  std::vector<Batch> batches = {random_batch(2, 64, 5)};
  std::vector<std::vector<float>> ref;
  for (const char* mode : {"gelu", "none", "layernorm", "block"}) {
    SCOPED_TRACE(mode);
    ModelAndOptimizer s(77);
    FusedStepOptions o = options(Precision::kFp32);
    o.recompute = mode;
    FusedGPT2Step step(s.model, s.opt, o);
    size_t next = 0;
    (void)step.step(stage_from(batches, &next), 1e-4);
    for (size_t i = 0; i < s.opt.params().size(); ++i) {
      std::vector<float> g = host(step.gradient(static_cast<int>(i)));
      if (ref.size() <= i) {
        ref.push_back(g);
      } else {
        EXPECT_LT(rel_l2(g, ref[i]), 1e-5) << s.opt.params()[i].name;
      }
    }
  }
}

// Two micro-batches of B=2 accumulate to the gradient of one B=4 batch holding both.
TEST(FusedStep, AccumulationEqualsOneBigBatch) {
  BLU_REQUIRE_GPU();
  const Batch b1 = random_batch(2, 64, 21), b2 = random_batch(2, 64, 22);
  Batch both{b1.x, b1.y};
  both.x.insert(both.x.end(), b2.x.begin(), b2.x.end());
  both.y.insert(both.y.end(), b2.y.begin(), b2.y.end());
  ModelAndOptimizer s1(8), s2(8);
  FusedStepOptions o1 = options(Precision::kFp32);
  o1.accum_steps = 2;
  FusedGPT2Step acc(s1.model, s1.opt, o1);
  FusedGPT2Step big(s2.model, s2.opt, options(Precision::kFp32, 4, 64));
  std::vector<Batch> in1 = {b1, b2}, in2 = {both};
  size_t n1 = 0, n2 = 0;
  for (int rep = 0; rep < 2; ++rep) {  // the second step runs the captured graphs
    const FusedStepResult r1 = acc.step(stage_from(in1, &n1), 3e-4);
    const FusedStepResult r2 = big.step(stage_from(in2, &n2), 3e-4);
    EXPECT_NEAR(r1.loss, r2.loss, 1e-5 * r2.loss);
    for (size_t i = 0; i < s1.opt.params().size(); ++i) {
      EXPECT_LT(rel_l2(host(acc.gradient(int(i))), host(big.gradient(int(i)))), 1e-5) << s1.opt.params()[i].name;
    }
  }
}

// Five bf16 steps: graph replay equals eager launches bit for bit, and a second graph run equals
// the first (bitwise reproducible run to run).
TEST(FusedStep, GraphReplayIsBitwiseEagerAndReproducible) {
  BLU_REQUIRE_GPU();
  std::vector<Batch> batches = {random_batch(2, 64, 31), random_batch(2, 64, 32), random_batch(2, 64, 33)};
  auto run = [&](bool graph, std::vector<double>* losses) {
    ModelAndOptimizer s(4242);
    FusedStepOptions o = options(Precision::kBf16);
    o.use_graph = graph;
    FusedGPT2Step step(s.model, s.opt, o);
    size_t next = 0;
    for (int i = 0; i < 5; ++i) losses->push_back(step.step(stage_from(batches, &next), 6e-4 * (i + 1) / 5).loss);
    std::vector<std::vector<float>> params;
    for (const NamedParam& p : s.opt.params()) params.push_back(host(*p.tensor));
    if (graph) {
      EXPECT_GT(step.launches_per_step(), 20);
    }
    return params;
  };
  std::vector<double> l_eager, l_graph, l_graph2;
  const auto p_eager = run(false, &l_eager);
  const auto p_graph = run(true, &l_graph);
  const auto p_graph2 = run(true, &l_graph2);
  EXPECT_EQ(l_eager, l_graph);
  EXPECT_EQ(l_graph, l_graph2);
  for (size_t i = 0; i < p_eager.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(p_eager[i].data(), p_graph[i].data(), p_eager[i].size() * 4)) << i;
    EXPECT_EQ(0, std::memcmp(p_graph[i].data(), p_graph2[i].data(), p_graph[i].size() * 4)) << i;
  }
  EXPECT_LT(l_graph.back(), l_graph.front());  // it learns (the same three batches repeat)
}

TEST(FusedStep, OutOfRangeTokenIsAClearError) {
  BLU_REQUIRE_GPU();
  ModelAndOptimizer s(3);
  FusedGPT2Step step(s.model, s.opt, options(Precision::kBf16));
  Batch b = random_batch(2, 64, 41);
  b.x[77] = 60000;
  std::vector<Batch> batches = {b};
  size_t next = 0;
  try {
    (void)step.step(stage_from(batches, &next), 1e-4);
    FAIL() << "expected an error";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("input token id"), std::string::npos) << e.what();
  }
}

// The precision logger (Note [Precision logger]): names and shapes, the residual stream entering
// block 0 equals wte[token] + wpe[position] exactly (fp32), gradients are the gradient() views,
// and a buffer the recompute mode does not keep is a clear error.
TEST(FusedStep, DumpNamedActivationsAndGradients) {
  BLU_REQUIRE_GPU();
  ModelAndOptimizer s(5);
  const std::vector<float> wte = host(*s.opt.params()[0].tensor), wpe = host(*s.opt.params()[1].tensor);
  FusedStepOptions o = options(Precision::kFp32);
  o.recompute = "none";
  FusedGPT2Step step(s.model, s.opt, o);
  std::vector<Batch> batches = {random_batch(2, 64, 51)};
  size_t next = 0;
  (void)step.step(stage_from(batches, &next), 1e-4);
  const std::map<std::string, Tensor> d = step.dump({"h.0.*", "grad.wte.weight", "ln_f"});
  EXPECT_EQ(d.size(), 10u);
  ASSERT_TRUE(d.count("h.0.x") && d.count("h.0.attn.qkv") && d.count("grad.wte.weight") && d.count("ln_f"));
  EXPECT_EQ(d.at("h.0.attn.qkv").sizes(), (Shape{2, 64, 3 * 128}));
  const std::vector<float> x = host(d.at("h.0.x"));
  const int C = 128;
  for (int r = 0; r < 2 * 64; ++r) {
    const int tok = batches[0].x[static_cast<size_t>(r)], t = r % 64;
    for (int c = 0; c < C; ++c) {
      ASSERT_EQ(x[size_t(r) * C + c], wte[size_t(tok) * C + c] + wpe[size_t(t) * C + c]) << r << " " << c;
    }
  }
  EXPECT_EQ(host(d.at("grad.wte.weight")), host(step.gradient(0)));
  EXPECT_THROW((void)step.dump({"h.0.nothing"}), blu::Error);

  ModelAndOptimizer s2(5);
  FusedGPT2Step gelu_mode(s2.model, s2.opt, options(Precision::kFp32));
  next = 0;
  (void)gelu_mode.step(stage_from(batches, &next), 1e-4);
  try {
    (void)gelu_mode.dump({"h.1.mlp.gelu"});
    FAIL() << "expected an error";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--recompute"), std::string::npos) << e.what();
  }
}

// Weight gradients on the side stream (Note [Weight gradients on a side stream]) give the same
// bits as the serial order, with and without gradient accumulation.
TEST(FusedStep, SideStreamIsBitwiseSerial) {
  BLU_REQUIRE_GPU();
  std::vector<Batch> batches = {random_batch(2, 64, 61), random_batch(2, 64, 62)};
  auto run = [&](bool side, int64_t accum) {
    setenv("BLUTRAIN_SIDE_STREAM", side ? "1" : "0", 1);
    ModelAndOptimizer s(99);
    FusedStepOptions o = options(Precision::kBf16);
    o.accum_steps = accum;
    o.recompute = accum == 1 ? "layernorm" : "gelu";
    FusedGPT2Step step(s.model, s.opt, o);
    unsetenv("BLUTRAIN_SIDE_STREAM");
    size_t next = 0;
    std::vector<double> losses;
    for (int i = 0; i < 3; ++i) losses.push_back(step.step(stage_from(batches, &next), 3e-4).loss);
    std::vector<std::vector<float>> out;
    for (const NamedParam& p : s.opt.params()) out.push_back(host(*p.tensor));
    for (size_t i = 0; i < s.opt.params().size(); ++i) out.push_back(host(step.gradient(int(i))));
    return std::make_pair(losses, out);
  };
  for (int64_t accum : {1, 2}) {
    SCOPED_TRACE("accum " + std::to_string(accum));
    const auto serial = run(false, accum), side = run(true, accum);
    EXPECT_EQ(serial.first, side.first);
    for (size_t i = 0; i < serial.second.size(); ++i) {
      EXPECT_EQ(0, std::memcmp(serial.second[i].data(), side.second[i].data(), serial.second[i].size() * 4)) << i;
    }
  }
}

// Note [Per-layer bf16 weight copy]: the blocks' matrices cast per block into a two-block ring give
// the GEMMs the bits the whole copy (written by the AdamW update) holds, so every loss, weight and
// gradient matches bit for bit: 1, 2, 3 and 5 blocks (the backward casts none, none, one, three),
// graph replay and eager, one and two micro-batches (the second finds blocks 0 and 1 in the ring),
// with and without block recompute, and a timed step (casts in order on the main stream). Every
// cast waits 2 ms on the host first (BLUTRAIN_TEST_CAST_DELAY_US), so a block that read its slot
// without waiting for the cast would see the slot's previous block and change the numbers.
TEST(FusedStep, PerLayerWeightCopyIsBitwiseTheWholeCopy) {
  BLU_REQUIRE_GPU();
  std::vector<Batch> batches = {random_batch(2, 64, 71), random_batch(2, 64, 72)};
  auto run = [&](const GPT2Config& c, const char* copy, bool graph, int64_t accum, const char* recompute) {
    ModelAndOptimizer s(123, c);
    FusedStepOptions o = options(Precision::kBf16);
    o.weight_copy = copy;
    o.use_graph = graph;
    o.accum_steps = accum;
    o.recompute = recompute;
    FusedGPT2Step step(s.model, s.opt, o);
    const bool per_block = step.describe().find("per block") != std::string::npos;
    EXPECT_EQ(per_block, std::string(copy) != "whole") << step.describe();
    size_t next = 0;
    std::vector<double> losses;
    for (int i = 0; i < 4; ++i) {
      if (i == 2) step.time_next_step();
      losses.push_back(step.step(stage_from(batches, &next), 5e-4).loss);
    }
    std::vector<std::vector<float>> out;
    for (const NamedParam& p : s.opt.params()) out.push_back(host(*p.tensor));
    for (size_t i = 0; i < s.opt.params().size(); ++i) out.push_back(host(step.gradient(int(i))));
    return std::make_pair(losses, out);
  };
  setenv("BLUTRAIN_TEST_CAST_DELAY_US", "2000", 1);
  setenv("BLUTRAIN_TEST_FREE_MIB", "0", 1);  // auto sees no room for the whole copy: per block
  for (int layers : {1, 2, 3, 5}) {
    GPT2Config c = small_config();
    c.n_layer = layers;
    for (bool graph : {true, false}) {
      for (int64_t accum : {1, 2}) {
        for (const char* recompute : {"none", "block"}) {
          if (layers < 5 && (!graph || std::string(recompute) == "block")) continue;  // the edges once
          SCOPED_TRACE(std::to_string(layers) + " blocks " + (graph ? "graph" : "eager") + " accum " +
                       std::to_string(accum) + " recompute " + recompute);
          const auto whole = run(c, "whole", graph, accum, recompute);
          const auto layer = run(c, layers == 3 ? "auto" : "layer", graph, accum, recompute);
          EXPECT_EQ(whole.first, layer.first);
          for (size_t i = 0; i < whole.second.size(); ++i) {
            EXPECT_EQ(0, std::memcmp(whole.second[i].data(), layer.second[i].data(), whole.second[i].size() * 4))
                << i;
          }
        }
      }
    }
  }
  unsetenv("BLUTRAIN_TEST_CAST_DELAY_US");
  unsetenv("BLUTRAIN_TEST_FREE_MIB");
  // auto keeps the whole copy when it fits with room to spare (a small model on any GPU).
  ModelAndOptimizer s(5, small_config());
  FusedGPT2Step step(s.model, s.opt, options(Precision::kBf16));
  EXPECT_EQ(step.describe().find("per block"), std::string::npos) << step.describe();
  EXPECT_NE(step.describe().find("auto: whole copy"), std::string::npos) << step.describe();
}

}  // namespace
