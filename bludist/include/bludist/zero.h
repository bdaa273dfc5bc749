// bludist/zero.h: ZeRO stage 1, an AdamW whose state is sharded across the data-parallel group.
//
// Note [ZeRO-1]
// The parameters (one dtype, f32 or f64, on the group's device) are viewed as one flat vector of
// `total` elements, padded to a multiple of the group size; rank r owns the slice
// [r * shard, (r + 1) * shard). step(): each rank's local gradients (.grad, not yet averaged: do
// not combine with DistributedDataParallel) are packed into a flat buffer and reduce-scattered
// (average), so rank r receives the averaged gradient of its slice only; r updates its slice of
// the parameters with AdamW (blutensor's multi-tensor adamw_step_, moments of that slice only:
// 2 x total / size state elements per rank instead of 2 x total); the updated slices are
// all-gathered and copied back into the parameters. Same arithmetic as blu::optim::AdamW on the
// averaged gradient (weight decay on every parameter), so the loss curve matches DDP + AdamW.
// Communication per step: one reduce-scatter + one all-gather = one all-reduce's volume.
#pragma once

#include <memory>
#include <vector>

#include "bludist/process_group.h"
#include "blutensor/optim.h"

namespace bludist {

class ZeroAdamW {
 public:
  // Broadcasts rank 0's parameter values to every rank (as DDP does).
  ZeroAdamW(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> pg, blu::optim::AdamWOptions options = {});
  void step();       // parameters without a gradient count as zero gradient
  void zero_grad();  // sets every .grad undefined
  int64_t total_numel() const { return total_; }
  int64_t shard_numel() const { return shard_; }
  int64_t step_count() const { return step_; }
  void set_lr(double lr) { options_.lr = lr; }
  // This rank's moments (shard_numel() elements each).
  const Tensor& exp_avg_shard() const { return exp_avg_; }
  const Tensor& exp_avg_sq_shard() const { return exp_avg_sq_; }

 private:
  std::vector<Tensor> params_;
  std::vector<int64_t> offsets_;
  std::shared_ptr<ProcessGroup> pg_;
  blu::optim::AdamWOptions options_;
  int64_t total_ = 0, shard_ = 0, step_ = 0;
  Tensor flat_params_, flat_grads_, grad_shard_, exp_avg_, exp_avg_sq_;
};

}  // namespace bludist
