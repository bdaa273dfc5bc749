// ZeroAdamW (Note [ZeRO-1] in bludist/zero.h).
#include "bludist/zero.h"

#include "blutensor/autograd.h"
#include "blutensor/error.h"
#include "blutensor/ops.h"

namespace bludist {

ZeroAdamW::ZeroAdamW(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> pg, blu::optim::AdamWOptions options)
    : params_(std::move(params)), pg_(std::move(pg)), options_(options) {
  BLU_CHECK(pg_, "ZeroAdamW: null process group");
  BLU_CHECK(!params_.empty(), "ZeroAdamW: no parameters");
  const DType dtype = params_[0].dtype();
  BLU_CHECK(dtype == DType::F32 || dtype == DType::F64, "ZeroAdamW: parameters must be f32 or f64, got ",
            params_[0].describe());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    BLU_CHECK(p.dtype() == dtype && p.is_contiguous() && p.device() == pg_->device(), "ZeroAdamW: parameter ", i,
              " ", p.describe(), " must be contiguous, ", blu::dtype_name(dtype), " and on ", pg_->device().str());
    offsets_.push_back(total_);
    total_ += p.numel();
  }
  const int n = pg_->size();
  shard_ = (total_ + n - 1) / n;
  auto opts = blu::TensorOptions(dtype).device(pg_->device());
  flat_params_ = blu::zeros({shard_ * n}, opts);
  flat_grads_ = blu::zeros({shard_ * n}, opts);
  grad_shard_ = blu::zeros({shard_}, opts);
  exp_avg_ = blu::zeros({shard_}, opts);
  exp_avg_sq_ = blu::zeros({shard_}, opts);
  // Rank 0's values everywhere.
  blu::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i)
    flat_params_.narrow(0, offsets_[i], params_[i].numel()).copy_(params_[i].detach().reshape({-1}));
  pg_->broadcast(flat_params_, 0);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor p = params_[i].detach();
    p.copy_(flat_params_.narrow(0, offsets_[i], p.numel()).view(p.sizes()));
  }
}

void ZeroAdamW::step() {
  blu::NoGradGuard no_grad;
  ++step_;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor dst = flat_grads_.narrow(0, offsets_[i], params_[i].numel());
    const Tensor& g = params_[i].grad();
    if (g.defined()) dst.copy_(g.reshape({-1}));
    else dst.zero_();
    flat_params_.narrow(0, offsets_[i], params_[i].numel()).copy_(params_[i].detach().reshape({-1}));
  }
  pg_->reduce_scatter(grad_shard_, flat_grads_, ReduceOp::kAvg);
  Tensor param_shard = flat_params_.narrow(0, pg_->rank() * shard_, shard_);
  blu::optim::adamw_step_({param_shard}, {grad_shard_}, {exp_avg_}, {exp_avg_sq_}, options_, step_);
  pg_->all_gather(flat_params_, param_shard);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor p = params_[i].detach();
    p.copy_(flat_params_.narrow(0, offsets_[i], p.numel()).view(p.sizes()));
  }
}

void ZeroAdamW::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
}

}  // namespace bludist
