// blutensor/optim.h: optimizers (AdamW, SGD with momentum), global gradient-norm clipping and the
// linear-warmup + cosine learning-rate schedule.
//
// Note [Optimizer backends]
// AdamW::step groups parameters by device, dtype and weight decay and hands each group to
// adamw_step_ below, one kernel-level backend call per group: blu::cpu_ops::adamw_step is a loop on
// the CPU; blu::cuda_ops::adamw_step (tensorcuda) runs blublas's multi-tensor AdamW kernel.
// clip_grad_norm_ is global_norm + scale_tensors_ (one reduction, one multi-tensor scale). Updates
// run under no_grad and bump parameter versions.
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

// ---- Multi-tensor primitives (Note [Multi-tensor primitives] in src/optim/multi_tensor.cpp) ----
// For optimizers that keep their own state (blutrain's AdamW) and for the classes above: each call
// is one backend call over the whole list (on CUDA one blublas / blutensor multi-tensor launch per
// up to 256 tensors instead of several launches per tensor), asynchronous (no host sync), and
// deterministic. Run under no_grad; they bump the versions of what they write.

// The AdamW update (formula at cpu_ops::adamw_step, src/backend_ops.def) of params[i] from grads[i]
// with moments exp_avgs[i] and exp_avg_sqs[i]: one device, one dtype (f32 or f64), contiguous,
// equal sizes per i (grads may be non-contiguous: copied). options.lr and options.weight_decay
// apply to the whole list (call once per weight-decay group); step >= 1 is the step count after
// this update (bias corrections). grad_scale (optional): a one-element f32 tensor on the
// parameters' device, read there when the update runs; every gradient element is multiplied by it
// (rounded to the parameters' dtype) before the update, the same bits as scale_tensors_(grads,
// grad_scale) followed by the update without it, one pass over the gradients fewer, and the
// gradients are left as they were (Note [Clip coefficient in the update] in blutrain's optimizer).
// A non-finite grad_scale skips the update: params and moments are left as they were (the step's
// skip decided on the device: Note [Update without a host read] in blutrain's optimizer).
void adamw_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                 const AdamWOptions& options, int64_t step, const Tensor& grad_scale = Tensor());

// norm: sqrt(sum of x^2 over every element of every tensor), a 0-d f32 tensor on the tensors'
// device (one device, floating dtypes); clip_coef: max_norm > 0 ? min(1, max_norm / (norm + 1e-6))
// : 1, ready for scale_tensors_. An empty list gives norm 0 and coefficient 1 on the CPU.
struct GlobalNorm {
  Tensor norm;
  Tensor clip_coef;
};
GlobalNorm global_norm(const std::vector<Tensor>& tensors, double max_norm = 0.0);

// tensors[i] *= factor (a one-element tensor on the tensors' device, read on the device).
void scale_tensors_(const std::vector<Tensor>& tensors, const Tensor& factor);

// Scales all gradients so their global L2 norm is at most max_norm; returns the norm before
// clipping as a 0-d float32 tensor on the parameters' device (no host synchronisation).
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

// Linear warmup from 0 to max_lr over warmup_steps, then cosine decay to min_lr at total_steps
// (constant min_lr after). step is 0-based.
double lr_warmup_cosine(int64_t step, int64_t warmup_steps, int64_t total_steps, double max_lr, double min_lr);

}  // namespace blu::optim
