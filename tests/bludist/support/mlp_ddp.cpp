// train_mlp (support/mlp_ddp.h).
#include "support/mlp_ddp.h"

#include <cstdlib>
#include <filesystem>
#include <limits>
#include <cmath>
#include <cstdio>

#include "bludist/ddp.h"
#include "bludist/zero.h"
#include "blutensor/autograd.h"
#include "blutensor/nn.h"
#include "blutensor/ops.h"
#include "blutensor/optim.h"
#include "blutensor/random.h"
#include "blutensor/safetensors.h"

namespace bludist::test {

namespace {
constexpr int64_t kIn = 13, kHidden = 29, kClasses = 7;

struct Mlp {
  blu::nn::Linear fc1, fc2, unused;
  Mlp(blu::Generator* g, blu::Device d)
      : fc1(kIn, kHidden, true, blu::TensorOptions().device(d), g),
        fc2(kHidden, kClasses, true, blu::TensorOptions().device(d), g),
        unused(3, 2, true, blu::TensorOptions().device(d), g) {}
  std::vector<Tensor> params() { return {fc1.weight, fc1.bias, fc2.weight, fc2.bias, unused.weight, unused.bias}; }
  Tensor forward(const Tensor& x, bool use_all) {
    Tensor y = fc2(blu::gelu(fc1(x)));
    if (use_all) y = y + unused(blu::zeros({1, 3}, blu::TensorOptions().device(x.device()))).sum() * 0.0;
    return y;
  }
};
}  // namespace

std::vector<double> train_mlp(const std::shared_ptr<ProcessGroup>& pg, const MlpRunOptions& o,
                              int64_t* buckets_reduced) {
  const int world = pg ? pg->size() : 1;
  const int rank = pg ? pg->rank() : 0;
  // Different initial weights per rank: DDP's initial broadcast must make them rank 0's.
  blu::Generator init_gen(1000 + rank);
  Mlp model(&init_gen, o.device);
  std::vector<Tensor> params = model.params();
  std::unique_ptr<DistributedDataParallel> ddp;
  if (pg && !o.zero1) {
    DDPOptions d;
    d.bucket_cap_bytes = o.bucket_cap_bytes;
    ddp = std::make_unique<DistributedDataParallel>(params, pg, d);
  }
  blu::optim::AdamWOptions ao;
  ao.lr = 1e-2;
  ao.weight_decay = 0.05;
  std::unique_ptr<blu::optim::AdamW> adamw;
  std::unique_ptr<ZeroAdamW> zero;
  if (pg && o.zero1) {
    ZeroOptions zo;
    zo.stage = o.zero_stage;
    zo.bucket_cap_bytes = o.bucket_cap_bytes;
    zero = std::make_unique<ZeroAdamW>(params, pg, ao, std::vector<bool>{}, zo);
  }
  else adamw = std::make_unique<blu::optim::AdamW>(params, ao);
  const int micro = o.global_batch / o.accum;
  const int local = micro / world;
  std::vector<double> losses(static_cast<std::size_t>(o.steps), std::numeric_limits<double>::quiet_NaN());
  int start_step = 0;
  if (adamw && !o.checkpoint.empty() && std::filesystem::exists(o.checkpoint)) {
    blu::NoGradGuard no_grad;
    auto data = blu::load_safetensors(o.checkpoint);
    std::map<std::string, Tensor> opt_state;
    for (auto& [k, t] : data.tensors) {
      if (k.rfind("opt.", 0) == 0) opt_state[k.substr(4)] = t;
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      Tensor p = params[i].detach();
      p.copy_(data.tensors.at("p." + std::to_string(i)));
    }
    adamw->load_state_dict(opt_state);
    start_step = static_cast<int>(data.tensors.at("next_step").item());
  }
  for (int step = start_step; step < o.steps; ++step) {
    if (step == o.fail_at_step && rank == o.fail_rank) std::exit(7);
    blu::Generator data_gen(777 + step);
    Tensor x = blu::empty({o.global_batch, kIn}).normal_(0.0, 1.0, &data_gen);
    // Labels from a fixed linear teacher (learnable): argmax_c sum_j x_j cos(j c + 1).
    std::vector<double> xv = x.to_double_vector();
    std::vector<int64_t> t(static_cast<std::size_t>(o.global_batch));
    for (int i = 0; i < o.global_batch; ++i) {
      double best = -1e300;
      for (int64_t c = 0; c < kClasses; ++c) {
        double score = 0;
        for (int64_t j = 0; j < kIn; ++j) score += xv[i * kIn + j] * std::cos(static_cast<double>(j * c) + 1.0);
        if (score > best) { best = score; t[i] = c; }
      }
    }
    Tensor targets = blu::from_vector(t);
    x = x.to(o.device);
    targets = targets.to(o.device);
    double step_loss = 0;
    for (int m = 0; m < o.accum; ++m) {
      int64_t start = static_cast<int64_t>(m) * micro + static_cast<int64_t>(rank) * local;
      Tensor xs = x.narrow(0, start, local), ts = targets.narrow(0, start, local);
      Tensor loss = blu::cross_entropy(model.forward(xs, !o.skip_unused), ts) * (1.0 / o.accum);
      step_loss += loss.item();
      if (ddp && m + 1 < o.accum) {
        auto guard = ddp->no_sync();
        loss.backward();
      } else {
        loss.backward();
      }
      if (zero) zero->finish_gradient_sync();  // stage 2: chunks left open by an unused parameter
    }
    if (ddp) ddp->finish_gradient_sync();
    if (zero) {
      zero->step();
      zero->zero_grad();
    } else {
      adamw->step();
      adamw->zero_grad();
    }
    if (pg) {
      Tensor v = blu::full({1}, step_loss, blu::TensorOptions(blu::kFloat64).device(pg->device()));
      pg->all_reduce(v, ReduceOp::kAvg);
      step_loss = v.item();
    }
    losses[static_cast<std::size_t>(step)] = step_loss;
    if (adamw && !o.checkpoint.empty() && rank == 0) {
      std::map<std::string, Tensor> ck;
      for (std::size_t i = 0; i < params.size(); ++i) ck["p." + std::to_string(i)] = params[i].detach().cpu();
      for (auto& [k, t] : adamw->state_dict()) ck["opt." + k] = t.cpu();
      ck["next_step"] = blu::scalar_tensor(step + 1, blu::kInt64);
      blu::save_safetensors(o.checkpoint + ".tmp", ck);
      std::filesystem::rename(o.checkpoint + ".tmp", o.checkpoint);  // atomic: never a torn checkpoint
    }
  }
  if (buckets_reduced && ddp) *buckets_reduced = ddp->buckets_reduced();
  return losses;
}

}  // namespace bludist::test
