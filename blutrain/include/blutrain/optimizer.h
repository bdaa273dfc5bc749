// blutrain/optimizer.h: AdamW over the model's parameters (decoupled weight decay on 2-D
// weights only; moments in fp32 beside the fp32 master weights), global-norm gradient clipping
// and the warmup + cosine learning-rate schedule.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "blutensor/tensor.h"
#include "blutrain/gpt2.h"

namespace blu::train {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

class AdamW {
 public:
  // allocate_moments false: no moments are held (ZeRO-1 keeps them sharded elsewhere, Note
  // [Data-parallel training]); step() then throws until allocate_moments() is called.
  AdamW(std::vector<NamedParam> params, const AdamWConfig& cfg, bool allocate_moments = true);
  void allocate_moments();  // zero moments for every parameter that has none

  // One update with learning rate `lr` from the parameters' .grad (parameters without a grad
  // are skipped); step_count() + 1 is used for bias correction.
  // grad_scale (optional): a one-element f32 tensor on the parameters' device multiplying every
  // gradient inside the update (the clip coefficient; Note [Clip coefficient in the update]).
  void step(double lr, const Tensor& grad_scale = Tensor());
  void zero_grad();

  int64_t step_count() const { return t_; }
  void set_step_count(int64_t t) { t_ = t; }
  const std::vector<NamedParam>& params() const { return params_; }
  std::vector<Tensor>& exp_avg() { return m_; }
  std::vector<Tensor>& exp_avg_sq() { return v_; }

 private:
  std::vector<NamedParam> params_;
  AdamWConfig cfg_;
  std::vector<Tensor> m_, v_;
  int64_t t_ = 0;
};

// The squared global norm of a model's gradients when `params` (this process's tensors) are not
// all of it: under --tp, this rank's shards plus the other ranks' (Note [Tensor-parallel training]
// in src/train/tensor_parallel.h). Empty: the sum over `params`.
using GradSumOfSquares = std::function<double(const std::vector<NamedParam>& params)>;

// The global L2 norm of all gradients (computed in one reduction, read with one sync); scales
// them by max_norm / norm when larger (max_norm <= 0: no clipping). Returns the norm before.
// With sum_of_squares, the norm is the square root of what it returns.
double clip_grad_norm(const std::vector<NamedParam>& params, double max_norm,
                      const GradSumOfSquares& sum_of_squares = {});
// The sum of the squared gradient elements of `params` (those with a gradient), in f64, in a fixed
// order; and every gradient multiplied by `scale`.
double grad_sum_of_squares(const std::vector<NamedParam>& params);
void scale_grads(const std::vector<NamedParam>& params, double scale);

// Whether every element of `t` is finite (one pass on the CPU; a reduction and one sync elsewhere).
bool all_finite(const Tensor& t);
// The name of the first parameter, in the optimizer's order, whose gradient holds a NaN or an
// infinity; "" when all are finite (Note [Non-finite steps] in src/train/nonfinite.h).
std::string first_nonfinite_gradient(const std::vector<NamedParam>& params);

// What one optimizer update did (Note [Non-finite steps]).
struct UpdateResult {
  double grad_norm = 0;         // global gradient norm before clipping
  bool applied = true;          // false: not finite, so weights and AdamW state were left alone
  std::string first_nonfinite;  // when not applied: first_nonfinite_gradient ("" if none)
};
// clip_grad_norm then opt.step(lr), unless the norm is not finite or loss_finite is false: then
// no update at all (the AdamW step count stays too). Gradients are left for the caller to zero;
// without sum_of_squares they are left unscaled: the clip coefficient is applied inside the update
// (Note [Clip coefficient in the update]), with the same bits.
UpdateResult clip_and_update(AdamW& opt, double max_norm, double lr, bool loss_finite = true,
                             const GradSumOfSquares& sum_of_squares = {});

// Note [Update without a host read] (optimizer.cpp): with max_norm > 0, the clipped update is
// launched at once, skipped on the device when `loss` or the gradient norm is not finite; the
// caller reads both afterwards and calls finish_deferred_update. launched is false (nothing done)
// when max_norm <= 0 or no parameter has a gradient: use clip_and_update then.
struct DeferredUpdate {
  bool launched = false;
  Tensor norm;  // the global gradient norm, a 0-d f32 tensor on the gradients' device
};
DeferredUpdate update_unless_nonfinite(AdamW& opt, double max_norm, double lr, const Tensor& loss);
// The result of a launched DeferredUpdate from the host's values of the loss and the norm: when
// either is not finite the device skipped the update, so the AdamW step count is set back.
UpdateResult finish_deferred_update(AdamW& opt, double loss, double grad_norm);

// Linear warmup over `warmup` steps to max_lr, then cosine decay to min_lr at max_steps
// (0-based step).
double learning_rate(int64_t step, double max_lr, double min_lr, int64_t warmup, int64_t max_steps);

}  // namespace blu::train
