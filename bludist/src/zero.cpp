// ZeroAdamW (Note [ZeRO-1] in bludist/zero.h).
#include "bludist/zero.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "blutensor/autograd.h"
#include "blutensor/error.h"
#include "blutensor/ops.h"

namespace bludist {

ZeroAdamW::ZeroAdamW(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> pg, blu::optim::AdamWOptions options,
                     std::vector<bool> decay)
    : params_(std::move(params)), decay_(std::move(decay)), pg_(std::move(pg)), options_(options) {
  BLU_CHECK(pg_, "ZeroAdamW: null process group");
  BLU_CHECK(!params_.empty(), "ZeroAdamW: no parameters");
  if (decay_.empty()) decay_.assign(params_.size(), true);
  BLU_CHECK(decay_.size() == params_.size(), "ZeroAdamW: ", decay_.size(), " decay flags for ", params_.size(),
            " parameters");
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
  flat_ = blu::zeros({shard_ * n}, opts);  // Note [ZeRO-1 memory]
  param_shard_ = blu::zeros({shard_}, opts);
  grad_shard_ = blu::zeros({shard_}, opts);
  exp_avg_ = blu::zeros({shard_}, opts);
  exp_avg_sq_ = blu::zeros({shard_}, opts);
  // Rank 0's values everywhere.
  blu::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i)
    flat_.narrow(0, offsets_[i], params_[i].numel()).copy_(params_[i].detach().reshape({-1}));
  pg_->broadcast(flat_, 0);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor p = params_[i].detach();
    p.copy_(flat_.narrow(0, offsets_[i], p.numel()).view(p.sizes()));
  }
}

double ZeroAdamW::step(double max_grad_norm, bool compute_norm, bool skip_nonfinite) {
  blu::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor dst = flat_.narrow(0, offsets_[i], params_[i].numel());
    const Tensor& g = params_[i].grad();
    if (g.defined()) dst.copy_(g.reshape({-1}));
    else dst.zero_();
  }
  auto timed = [this](auto&& collective) {
    const auto t0 = std::chrono::steady_clock::now();
    collective();
    comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  timed([&] { pg_->reduce_scatter(grad_shard_, flat_, ReduceOp::kAvg); });
  double norm = 0;
  if (max_grad_norm > 0 || compute_norm || skip_nonfinite) {  // Note [ZeRO-1 for a trainer]: clipping on the shards
    // global_norm: f64 partials on the CPU, f32 partials + an f64 sum on CUDA; no shard-sized temporary.
    const double shard_norm = blu::optim::global_norm({grad_shard_}).norm.item();
    Tensor sum_sq = blu::from_vector(std::vector<double>{shard_norm * shard_norm}, {1}, blu::TensorOptions(DType::F64))
                        .to(pg_->device());
    timed([&] { pg_->all_reduce(sum_sq, ReduceOp::kSum); });
    norm = std::sqrt(sum_sq.item());
    if (max_grad_norm > 0 && norm > max_grad_norm) {
      const double scale = max_grad_norm / (norm + 1e-6);
      blu::optim::scale_tensors_({grad_shard_}, blu::scalar_tensor(scale, blu::kFloat32).to(pg_->device()));
    }
  }
  if (skip_nonfinite && !std::isfinite(norm)) return norm;  // every rank has this norm: all skip
  ++step_;
  // The shard cut at parameter boundaries, grouped by weight decay (Note [ZeRO-1 for a trainer]).
  // This rank's slice of the parameters, copied from them (Note [ZeRO-1 memory]).
  const Tensor& param_shard = param_shard_;
  const int64_t lo = pg_->rank() * shard_, hi = lo + shard_;
  std::vector<Tensor> lists[2][4];
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const int64_t a = std::max(lo, offsets_[i]), b = std::min(hi, offsets_[i] + params_[i].numel());
    if (a >= b) continue;
    param_shard_.narrow(0, a - lo, b - a).copy_(params_[i].detach().reshape({-1}).narrow(0, a - offsets_[i], b - a));
    auto& l = lists[decay_[i] ? 1 : 0];
    for (int k = 0; k < 4; ++k) {
      const Tensor& whole = k == 0 ? param_shard : k == 1 ? grad_shard_ : k == 2 ? exp_avg_ : exp_avg_sq_;
      l[k].push_back(whole.narrow(0, a - lo, b - a));
    }
  }
  for (int d = 0; d < 2; ++d) {
    if (lists[d][0].empty()) continue;
    blu::optim::AdamWOptions o = options_;
    if (d == 0) o.weight_decay = 0;
    blu::optim::adamw_step_(lists[d][0], lists[d][1], lists[d][2], lists[d][3], o, step_);
  }
  timed([&] { pg_->all_gather(flat_, param_shard_); });
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor p = params_[i].detach();
    p.copy_(flat_.narrow(0, offsets_[i], p.numel()).view(p.sizes()));
  }
  return norm;
}

std::pair<Tensor, Tensor> ZeroAdamW::gather_state() {
  blu::NoGradGuard no_grad;
  auto opts = blu::TensorOptions(exp_avg_.dtype()).device(pg_->device());
  Tensor m = blu::zeros({shard_ * pg_->size()}, opts), v = blu::zeros({shard_ * pg_->size()}, opts);
  pg_->all_gather(m, exp_avg_);
  pg_->all_gather(v, exp_avg_sq_);
  return {m.narrow(0, 0, total_), v.narrow(0, 0, total_)};
}

void ZeroAdamW::load_state(const Tensor& exp_avg, const Tensor& exp_avg_sq) {
  BLU_CHECK(exp_avg.numel() == total_ && exp_avg_sq.numel() == total_, "ZeroAdamW::load_state: moments ",
            exp_avg.describe(), " and ", exp_avg_sq.describe(), " must have ", total_, " elements each");
  blu::NoGradGuard no_grad;
  const int64_t lo = pg_->rank() * shard_;
  const int64_t len = std::max<int64_t>(0, std::min(shard_, total_ - lo));
  exp_avg_.zero_();
  exp_avg_sq_.zero_();
  if (len == 0) return;
  exp_avg_.narrow(0, 0, len).copy_(exp_avg.reshape({-1}).narrow(0, lo, len).to(pg_->device(), exp_avg_.dtype()));
  exp_avg_sq_.narrow(0, 0, len).copy_(
      exp_avg_sq.reshape({-1}).narrow(0, lo, len).to(pg_->device(), exp_avg_sq_.dtype()));
}

void ZeroAdamW::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
}

}  // namespace bludist
