// ZeroAdamW (Note [ZeRO-1] and Note [ZeRO-2] in bludist/zero.h).
#include "bludist/zero.h"

#include <algorithm>
#include <cmath>

#include "blutensor/autograd.h"
#include "blutensor/error.h"
#include "blutensor/ops.h"

namespace bludist {

ZeroAdamW::ZeroAdamW(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> pg, blu::optim::AdamWOptions options,
                     std::vector<bool> decay, ZeroOptions zero)
    : params_(std::move(params)), decay_(std::move(decay)), pg_(std::move(pg)), options_(options), zero_(zero) {
  BLU_CHECK(pg_, "ZeroAdamW: null process group");
  BLU_CHECK(!params_.empty(), "ZeroAdamW: no parameters");
  BLU_CHECK(zero_.stage == 1 || zero_.stage == 2, "ZeroAdamW: stage must be 1 or 2, got ", zero_.stage);
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
    BLU_CHECK(zero_.stage == 1 || (p.requires_grad() && p.is_leaf()), "ZeroAdamW: stage 2 parameter ", i, " ",
              p.describe(), " must be a leaf that requires grad (its gradient is reduced from a grad-ready hook)");
    offsets_.push_back(total_);
    total_ += p.numel();
  }
  // Both stages cut the flat vector into chunks of ~bucket_cap_bytes (Note [ZeRO memory]).
  const int64_t n = pg_->size();
  const int64_t elems = std::max<int64_t>(1, static_cast<int64_t>(zero_.bucket_cap_bytes / blu::dtype_size(dtype)));
  piece_ = std::max<int64_t>(1, std::min(elems / n, (total_ + n - 1) / n));
  chunk_ = piece_ * n;
  nchunks_ = (total_ + chunk_ - 1) / chunk_;
  shard_ = nchunks_ * piece_;
  auto opts = blu::TensorOptions(dtype).device(pg_->device());
  staging_ = blu::zeros({chunk_}, opts);
  piece_tmp_ = blu::zeros({piece_}, opts);
  grad_shard_ = blu::zeros({shard_}, opts);
  exp_avg_ = blu::zeros({shard_}, opts);
  exp_avg_sq_ = blu::zeros({shard_}, opts);
  chunk_params_.resize(static_cast<std::size_t>(nchunks_));
  param_chunks_.resize(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].numel() == 0) continue;
    const int64_t k0 = offsets_[i] / chunk_, k1 = (offsets_[i] + params_[i].numel() - 1) / chunk_;
    for (int64_t k = k0; k <= k1; ++k) {
      chunk_params_[static_cast<std::size_t>(k)].push_back(i);
      param_chunks_[i].push_back(k);
    }
  }
  // Rank 0's values everywhere, chunk by chunk.
  blu::NoGradGuard no_grad;
  for (int64_t k = 0; k < nchunks_; ++k) {
    pack_chunk(k, false);
    pg_->broadcast(staging_, 0);
    unpack_chunk(k);
  }
  if (zero_.stage == 2) {
    reset_backward_state();
    for (std::size_t i = 0; i < params_.size(); ++i) {
      hook_ids_.push_back(params_[i].register_grad_ready_hook([this, i](Tensor&) { on_grad_ready(i); }));
    }
  }
}

ZeroAdamW::~ZeroAdamW() {
  for (std::size_t i = 0; i < hook_ids_.size(); ++i) params_[i].remove_grad_ready_hook(hook_ids_[i]);
}

void ZeroAdamW::reset_backward_state() {
  chunk_pending_.resize(static_cast<std::size_t>(nchunks_));
  for (int64_t k = 0; k < nchunks_; ++k)
    chunk_pending_[static_cast<std::size_t>(k)] = static_cast<int>(chunk_params_[static_cast<std::size_t>(k)].size());
  param_ready_.assign(params_.size(), false);
  next_chunk_ = nchunks_ - 1;
  in_backward_ = false;
}

// Flat elements [a, b) of parameter i inside [lo, hi) (a >= b: none).
std::pair<int64_t, int64_t> ZeroAdamW::overlap(std::size_t i, int64_t lo, int64_t hi) const {
  return {std::max(lo, offsets_[i]), std::min(hi, offsets_[i] + params_[i].numel())};
}

// Chunk k's slice of every parameter (grads: of every gradient, zeros where there is none) into
// staging_, and back.
void ZeroAdamW::pack_chunk(int64_t k, bool grads) {
  const int64_t f0 = k * chunk_;
  if (grads) staging_.zero_();
  for (std::size_t i : chunk_params_[static_cast<std::size_t>(k)]) {
    const Tensor& src = grads ? params_[i].grad() : params_[i].detach();
    if (!src.defined()) continue;
    const auto [a, b] = overlap(i, f0, f0 + chunk_);
    staging_.narrow(0, a - f0, b - a).copy_(src.reshape({-1}).narrow(0, a - offsets_[i], b - a));
  }
}
void ZeroAdamW::unpack_chunk(int64_t k) {
  const int64_t f0 = k * chunk_;
  for (std::size_t i : chunk_params_[static_cast<std::size_t>(k)]) {
    const auto [a, b] = overlap(i, f0, f0 + chunk_);
    params_[i].detach().reshape({-1}).narrow(0, a - offsets_[i], b - a).copy_(staging_.narrow(0, a - f0, b - a));
  }
}

// This rank's piece of chunk k of the parameters into piece_tmp_ (the padding past the last
// parameter is left as it is: unpack_chunk never reads it).
void ZeroAdamW::pack_own_piece(int64_t k) {
  const int64_t lo = k * chunk_ + pg_->rank() * piece_;
  for (std::size_t i : chunk_params_[static_cast<std::size_t>(k)]) {
    const auto [a, b] = overlap(i, lo, lo + piece_);
    if (a >= b) continue;
    piece_tmp_.narrow(0, a - lo, b - a).copy_(params_[i].detach().reshape({-1}).narrow(0, a - offsets_[i], b - a));
  }
}

// Packs chunk k's gradients (missing ones as zeros) and reduce-scatters them (average) into this
// rank's piece of the gradient shard: written at stage 1, added at stage 2 (Note [ZeRO-2]).
void ZeroAdamW::reduce_chunk(int64_t k, bool accumulate) {
  blu::NoGradGuard no_grad;
  pack_chunk(k, true);
  Tensor dst = grad_shard_.narrow(0, k * piece_, piece_);
  if (accumulate) {
    pg_->reduce_scatter(piece_tmp_, staging_, ReduceOp::kAvg);
    dst.add_(piece_tmp_);
  } else {
    pg_->reduce_scatter(dst, staging_, ReduceOp::kAvg);
  }
  ++chunks_reduced_;
}

void ZeroAdamW::on_grad_ready(std::size_t param) {
  BLU_CHECK(!param_ready_[param], "ZeroAdamW: parameter ", param, " ", params_[param].describe(),
            " got a second gradient in one backward before its chunk was reduced; this happens when the previous "
            "backward left parameters without a gradient: call finish_gradient_sync() after backward()");
  in_backward_ = true;
  param_ready_[param] = true;
  for (int64_t k : param_chunks_[param]) --chunk_pending_[static_cast<std::size_t>(k)];
  // Strictly descending chunk order, so every rank issues the same collectives; chunks above
  // next_chunk_ are the reduced ones.
  while (next_chunk_ >= 0 && chunk_pending_[static_cast<std::size_t>(next_chunk_)] == 0) {
    const int64_t k = next_chunk_--;
    reduce_chunk(k, true);
    for (std::size_t i : chunk_params_[static_cast<std::size_t>(k)]) {
      if (param_chunks_[i].front() == k) params_[i].set_grad(Tensor());  // its last chunk: free it
    }
  }
  if (next_chunk_ < 0) reset_backward_state();
}

void ZeroAdamW::finish_gradient_sync() {
  if (zero_.stage != 2) return;
  // Gradients set by hand (no backward, no hooks) are reduced here too.
  bool pending = in_backward_;
  for (std::size_t i = 0; i < params_.size() && !pending; ++i) pending = params_[i].grad().defined();
  if (!pending) return;
  for (int64_t k = next_chunk_; k >= 0; --k) reduce_chunk(k, true);
  for (Tensor& p : params_) p.set_grad(Tensor());
  reset_backward_state();
}

double ZeroAdamW::step(double max_grad_norm, bool compute_norm, bool skip_nonfinite) {
  blu::NoGradGuard no_grad;
  if (zero_.stage == 1) {
    for (int64_t k = nchunks_ - 1; k >= 0; --k) reduce_chunk(k, false);
  } else {
    finish_gradient_sync();
  }
  double norm = 0;
  if (max_grad_norm > 0 || compute_norm || skip_nonfinite) {  // Note [ZeRO-1 for a trainer]: clipping on the shards
    // global_norm: f64 partials on the CPU, f32 partials + an f64 sum on CUDA; no shard-sized temporary.
    const double shard_norm = blu::optim::global_norm({grad_shard_}).norm.item();
    Tensor sum_sq = blu::from_vector(std::vector<double>{shard_norm * shard_norm}, {1}, blu::TensorOptions(DType::F64))
                        .to(pg_->device());
    pg_->all_reduce(sum_sq, ReduceOp::kSum);
    norm = std::sqrt(sum_sq.item());
    if (max_grad_norm > 0 && norm > max_grad_norm) {
      const double scale = max_grad_norm / (norm + 1e-6);
      blu::optim::scale_tensors_({grad_shard_}, blu::scalar_tensor(scale, blu::kFloat32).to(pg_->device()));
    }
  }
  first_nonfinite_ = -1;
  if (skip_nonfinite && !std::isfinite(norm)) {  // every rank has this norm: all skip
    first_nonfinite_ = find_first_nonfinite();
    if (zero_.stage == 2) grad_shard_.zero_();
    return norm;
  }
  ++step_;
  // This rank's pieces cut at parameter boundaries, grouped by weight decay (Note [ZeRO-1 for a
  // trainer]); the parameters are updated in place through views (Note [ZeRO memory]).
  const int64_t r = pg_->rank();
  std::vector<Tensor> lists[2][4];
  for (int64_t k = 0; k < nchunks_; ++k) {
    const int64_t lo = k * chunk_ + r * piece_, hi = lo + piece_, s0 = k * piece_;
    for (std::size_t i : chunk_params_[static_cast<std::size_t>(k)]) {
      const auto [a, b] = overlap(i, lo, hi);
      if (a >= b) continue;
      auto& l = lists[decay_[i] ? 1 : 0];
      l[0].push_back(params_[i].detach().reshape({-1}).narrow(0, a - offsets_[i], b - a));
      for (int q = 1; q < 4; ++q) {
        const Tensor& whole = q == 1 ? grad_shard_ : q == 2 ? exp_avg_ : exp_avg_sq_;
        l[q].push_back(whole.narrow(0, s0 + a - lo, b - a));
      }
    }
  }
  for (int d = 0; d < 2; ++d) {
    if (lists[d][0].empty()) continue;
    blu::optim::AdamWOptions o = options_;
    if (d == 0) o.weight_decay = 0;
    blu::optim::adamw_step_(lists[d][0], lists[d][1], lists[d][2], lists[d][3], o, step_);
  }
  // Every rank's updated pieces to every rank, chunk by chunk.
  for (int64_t k = 0; k < nchunks_; ++k) {
    pack_own_piece(k);
    pg_->all_gather(staging_, piece_tmp_);
    unpack_chunk(k);
  }
  if (zero_.stage == 2) grad_shard_.zero_();  // the next step's gradients accumulate from zero
  return norm;
}

// The first parameter with a non-finite element in any rank's gradient shard (a collective: the
// minimum over ranks of each rank's first), -1 when none. Only on the skipped-step path.
int64_t ZeroAdamW::find_first_nonfinite() {
  blu::NoGradGuard no_grad;
  const int64_t r = pg_->rank();
  double first = static_cast<double>(params_.size());
  for (int64_t k = 0; k < nchunks_; ++k) {
    const int64_t lo = k * chunk_ + r * piece_, hi = lo + piece_;
    for (std::size_t i : chunk_params_[static_cast<std::size_t>(k)]) {
      const auto [a, b] = overlap(i, lo, hi);
      if (a >= b || static_cast<double>(i) >= first) continue;
      const double n = blu::optim::global_norm({grad_shard_.narrow(0, k * piece_ + a - lo, b - a)}).norm.item();
      if (!std::isfinite(n)) first = static_cast<double>(i);
    }
  }
  Tensor v = blu::from_vector(std::vector<double>{first}, {1}, blu::TensorOptions(DType::F64)).to(pg_->device());
  pg_->all_reduce(v, ReduceOp::kMin);
  const double g = v.item();
  return g < static_cast<double>(params_.size()) ? static_cast<int64_t>(g) : -1;
}

// Whole flat moments from the shards, chunk by chunk (a collective): all-gathered, or sent to
// `root` piece by piece (every rank sends its pieces in chunk order; root receives them in the
// same order, rank by rank).
std::pair<Tensor, Tensor> ZeroAdamW::gather_state(int root) {
  BLU_CHECK(root < pg_->size(), "ZeroAdamW::gather_state: root ", root, " is not a rank of ", pg_->describe());
  blu::NoGradGuard no_grad;
  auto opts = blu::TensorOptions(exp_avg_.dtype()).device(pg_->device());
  const bool whole = root < 0 || pg_->rank() == root;
  Tensor out[2];
  if (whole) out[0] = blu::zeros({nchunks_ * chunk_}, opts), out[1] = blu::zeros({nchunks_ * chunk_}, opts);
  const Tensor* shards[2] = {&exp_avg_, &exp_avg_sq_};
  for (int q = 0; q < 2; ++q) {
    for (int64_t k = 0; k < nchunks_; ++k) {
      const Tensor mine = shards[q]->narrow(0, k * piece_, piece_);
      if (root < 0) {
        pg_->all_gather(out[q].narrow(0, k * chunk_, chunk_), mine);
      } else if (pg_->rank() == root) {
        for (int r = 0; r < pg_->size(); ++r) {
          Tensor dst = out[q].narrow(0, k * chunk_ + r * piece_, piece_);
          if (r == root) dst.copy_(mine);
          else pg_->recv(dst, r);
        }
      } else {
        pg_->send(mine.contiguous(), root);
      }
    }
  }
  if (!whole) return {Tensor(), Tensor()};
  return {out[0].narrow(0, 0, total_), out[1].narrow(0, 0, total_)};
}

void ZeroAdamW::load_state(const Tensor& exp_avg, const Tensor& exp_avg_sq) {
  BLU_CHECK(exp_avg.numel() == total_ && exp_avg_sq.numel() == total_, "ZeroAdamW::load_state: moments ",
            exp_avg.describe(), " and ", exp_avg_sq.describe(), " must have ", total_, " elements each");
  blu::NoGradGuard no_grad;
  const Tensor src[2] = {exp_avg.reshape({-1}), exp_avg_sq.reshape({-1})};
  Tensor* dst[2] = {&exp_avg_, &exp_avg_sq_};
  for (int q = 0; q < 2; ++q) {
    dst[q]->zero_();
    for (int64_t k = 0; k < nchunks_; ++k) {
      const int64_t lo = k * chunk_ + pg_->rank() * piece_;
      const int64_t len = std::max<int64_t>(0, std::min(piece_, total_ - lo));
      if (len == 0) continue;
      dst[q]->narrow(0, k * piece_, len).copy_(src[q].narrow(0, lo, len).to(pg_->device(), dst[q]->dtype()));
    }
  }
}

std::vector<ZeroAdamW::OwnedRange> ZeroAdamW::owned_ranges(int rank) const {
  BLU_CHECK(rank >= 0 && rank < pg_->size(), "ZeroAdamW::owned_ranges: rank ", rank, " is not a rank of ",
            pg_->describe());
  std::vector<OwnedRange> out;
  for (int64_t k = 0; k < nchunks_; ++k) {
    const int64_t lo = k * chunk_ + rank * piece_;
    const int64_t len = std::max<int64_t>(0, std::min(piece_, total_ - lo));
    if (len > 0) out.push_back({lo, len, k * piece_});
  }
  return out;
}

void ZeroAdamW::load_shard_state(const Tensor& exp_avg_shard, const Tensor& exp_avg_sq_shard) {
  BLU_CHECK(exp_avg_shard.numel() == shard_ && exp_avg_sq_shard.numel() == shard_,
            "ZeroAdamW::load_shard_state: moment shards ", exp_avg_shard.describe(), " and ",
            exp_avg_sq_shard.describe(), " must have ", shard_, " elements each");
  blu::NoGradGuard no_grad;
  exp_avg_.copy_(exp_avg_shard.reshape({shard_}).to(pg_->device(), exp_avg_.dtype()));
  exp_avg_sq_.copy_(exp_avg_sq_shard.reshape({shard_}).to(pg_->device(), exp_avg_sq_.dtype()));
}

void ZeroAdamW::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
}

}  // namespace bludist
