// blutensor/optim.h: optimizers (AdamW, SGD with momentum), global gradient-norm clipping and the
// linear-warmup + cosine learning-rate schedule.
//
// Note [Optimizer backends]
// AdamW::step groups parameters by device and dtype and hands each group to the kernel-level
// backend's adamw_step (multi-tensor: one call per group): blu::cpu_ops::adamw_step is a loop on
// the CPU; blu::cuda_ops::adamw_step (tensorcuda) runs blublas's multi-tensor AdamW kernel. That
// function is the hook point for CUDA. Updates run under no_grad and bump parameter versions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "blutensor/tensor.h"

namespace blu::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  void zero_grad();  // sets .grad undefined (set_to_none, like PyTorch's default)
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  const std::vector<Tensor>& params() const { return params_; }

 protected:
  std::vector<Tensor> params_;
  double lr_;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  void step() override;  // parameters without a gradient are skipped (their state is untouched)
  int64_t step_count() const { return step_; }
  const AdamWOptions& options() const { return options_; }
  // State per parameter (same order as params()); undefined until the first step that updated it.
  const Tensor& exp_avg(std::size_t i) const { return exp_avg_[i]; }
  const Tensor& exp_avg_sq(std::size_t i) const { return exp_avg_sq_[i]; }
  // Per-parameter weight decay switch (e.g. off for biases and norms); default all on.
  void set_weight_decay_mask(std::vector<bool> decay);
  // Checkpointing: {"step": 0-d i64, "exp_avg.<i>", "exp_avg_sq.<i>"} (i = index in params()).
  // load_state_dict copies into this optimizer's state (shapes must match its parameters).
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);

 private:
  AdamWOptions options_;
  std::vector<Tensor> exp_avg_;
  std::vector<Tensor> exp_avg_sq_;
  std::vector<bool> decay_;
  int64_t step_ = 0;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, double momentum = 0.0, double weight_decay = 0.0);
  void step() override;

 private:
  double momentum_;
  double weight_decay_;
  std::vector<Tensor> velocity_;
};

// Scales all gradients so their global L2 norm is at most max_norm; returns the norm before
// clipping as a 0-d float32 tensor on the parameters' device (no host synchronisation).
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

// Linear warmup from 0 to max_lr over warmup_steps, then cosine decay to min_lr at total_steps
// (constant min_lr after). step is 0-based.
double lr_warmup_cosine(int64_t step, int64_t warmup_steps, int64_t total_steps, double max_lr, double min_lr);

}  // namespace blu::optim
