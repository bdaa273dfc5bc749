// DistributedDataParallel and all_reduce_gradients (Note [DDP buckets] in bludist/ddp.h).
#include "bludist/ddp.h"


#include "blutensor/autograd.h"
#include "blutensor/error.h"
#include "blutensor/ops.h"

namespace bludist {

DistributedDataParallel::DistributedDataParallel(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> pg,
                                                 DDPOptions options)
    : params_(std::move(params)), pg_(std::move(pg)), options_(options) {
  BLU_CHECK(pg_, "DistributedDataParallel: null process group");
  BLU_CHECK(!params_.empty(), "DistributedDataParallel: no parameters");
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    BLU_CHECK(p.defined() && p.requires_grad() && p.is_leaf(), "DistributedDataParallel: parameter ", i,
              " must be a leaf that requires grad (", p.defined() ? p.describe() : "undefined", ")");
    BLU_CHECK(p.is_contiguous() && p.is_floating_point(), "DistributedDataParallel: parameter ", i, " ",
              p.describe(), " must be contiguous and floating point");
    BLU_CHECK(p.device() == pg_->device(), "DistributedDataParallel: parameter ", i, " ", p.describe(),
              " is not on the ", pg_->describe(), "'s device ", pg_->device().str());
  }
  // Buckets in reverse parameter order, one dtype per bucket, at most bucket_cap_bytes (a larger
  // parameter gets a bucket of its own).
  where_.resize(params_.size());
  std::vector<std::vector<std::size_t>> groups;
  std::size_t bytes = 0;
  for (std::size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k];
    bool fits = !groups.empty() && params_[groups.back().front()].dtype() == p.dtype() &&
                bytes + p.nbytes() <= options_.bucket_cap_bytes;
    if (!fits) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(k);
    bytes += p.nbytes();
  }
  for (const auto& g : groups) {
    Bucket b;
    int64_t total = 0;
    for (std::size_t k : g) {
      where_[k] = {buckets_.size(), b.slots.size()};
      b.slots.push_back(Slot{k, total});
      total += params_[k].numel();
    }
    b.flat = blu::zeros({total}, blu::TensorOptions(params_[g.front()].dtype()).device(pg_->device()));
    b.pending = static_cast<int>(b.slots.size());
    buckets_.push_back(std::move(b));
  }
  if (options_.broadcast_parameters) broadcast_parameters(0);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    hook_ids_.push_back(params_[i].register_grad_ready_hook([this, i](Tensor&) { on_grad_ready(i); }));
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (std::size_t i = 0; i < params_.size(); ++i) params_[i].remove_grad_ready_hook(hook_ids_[i]);
}

std::vector<std::size_t> DistributedDataParallel::bucket_parameters(std::size_t bucket) const {
  std::vector<std::size_t> out;
  for (const Slot& s : buckets_.at(bucket).slots) out.push_back(s.param);
  return out;
}

void DistributedDataParallel::broadcast_parameters(int root) {
  blu::NoGradGuard no_grad;
  for (Bucket& b : buckets_) {
    for (const Slot& s : b.slots) {
      const Tensor& p = params_[s.param];
      b.flat.narrow(0, s.offset, p.numel()).copy_(p.detach().reshape({-1}));
    }
    pg_->broadcast(b.flat, root);
    for (const Slot& s : b.slots) {
      Tensor p = params_[s.param].detach();
      p.copy_(b.flat.narrow(0, s.offset, p.numel()).view(p.sizes()));
    }
  }
}

void DistributedDataParallel::on_grad_ready(std::size_t param) {
  if (!sync_enabled_) return;
  auto [bi, si] = where_[param];
  Bucket& b = buckets_[bi];
  Slot& s = b.slots[si];
  BLU_CHECK(!s.ready, "DistributedDataParallel: parameter ", param, " ", params_[param].describe(),
            " got a second gradient in one backward before its gradients were reduced; this happens when the "
            "previous backward left parameters without a gradient: call finish_gradient_sync() after backward()");
  in_backward_ = true;
  const Tensor& g = params_[param].grad();
  b.flat.narrow(0, s.offset, g.numel()).copy_(g.reshape({-1}));
  s.ready = true;
  if (--b.pending == 0) launch_ready_buckets();
}

void DistributedDataParallel::launch(Bucket& b) {
  CommOptions o;
  o.async_op = true;
  b.work = pg_->all_reduce(b.flat, ReduceOp::kAvg, o);
  b.launched = true;
  ++buckets_reduced_;
}

void DistributedDataParallel::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) launch(buckets_[next_bucket_++]);
  if (next_bucket_ == buckets_.size()) complete();
}

void DistributedDataParallel::complete() {
  blu::NoGradGuard no_grad;
  for (Bucket& b : buckets_) {
    b.work.wait();  // CUDA: the stream waits, the host does not
    for (const Slot& s : b.slots) {
      Tensor p = params_[s.param];
      Tensor avg = b.flat.narrow(0, s.offset, p.numel()).view(p.sizes());
      if (p.grad().defined()) {
        Tensor g = p.grad();
        g.copy_(avg);
      } else {
        p.set_grad(avg.clone());
      }
    }
  }
  reset_backward_state();
}

void DistributedDataParallel::reset_backward_state() {
  for (Bucket& b : buckets_) {
    for (Slot& s : b.slots) s.ready = false;
    b.pending = static_cast<int>(b.slots.size());
    b.launched = false;
    b.work = Work();
  }
  next_bucket_ = 0;
  in_backward_ = false;
}

void DistributedDataParallel::finish_gradient_sync() {
  if (!in_backward_) return;  // nothing pending (all hooks fired, or no backward since)
  blu::NoGradGuard no_grad;
  for (Bucket& b : buckets_) {
    for (Slot& s : b.slots) {
      if (s.ready) continue;
      b.flat.narrow(0, s.offset, params_[s.param].numel()).zero_();
      s.ready = true;
      --b.pending;
    }
  }
  launch_ready_buckets();
}

Work all_reduce_gradients(ProcessGroup& pg, float* flat_grads, std::size_t n, cudaStream_t stream, bool async_op) {
  CommOptions o;
  o.stream = stream;
  o.async_op = async_op;
  return pg.all_reduce(flat_grads, n, DType::F32, ReduceOp::kAvg, o);
}

}  // namespace bludist
