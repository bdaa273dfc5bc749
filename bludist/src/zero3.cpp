// zero3.cpp: ZeRO-3 units (Note [ZeRO-3] in bludist/zero3.h): sharded parameters, gathered per
// unit, the unit recomputed in backward and its gradients reduce-scattered into the shards.
#include "bludist/zero3.h"

#include <utility>

#include "blutensor/autograd.h"
#include "blutensor/error.h"
#include "blutensor/ops.h"

namespace bludist {
namespace {

// Grad mode on for the scope (the backward of a node runs under no-grad; the recompute records).
class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(blu::GradMode::is_enabled()) { blu::GradMode::set_enabled(true); }
  ~EnableGradGuard() { blu::GradMode::set_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace

Zero3Unit::Zero3Unit(const std::vector<Tensor>& whole, std::shared_ptr<ProcessGroup> pg) : pg_(std::move(pg)) {
  BLU_CHECK(pg_ != nullptr, "Zero3Unit: no process group");
  n_ = pg_->size();
  blu::NoGradGuard no_grad;
  for (const Tensor& w : whole) {
    BLU_CHECK(w.defined() && w.numel() > 0, "Zero3Unit: an undefined or empty parameter");
    shapes_.push_back(w.sizes());
    numels_.push_back(w.numel());
    shards_.push_back(piece_of(shards_.size(), w).requires_grad_());
  }
}

std::pair<int64_t, int64_t> Zero3Unit::piece_range(std::size_t i, int rank) const {
  const int64_t numel = numels_.at(i), piece = (numel + n_ - 1) / n_;
  const int64_t begin = std::min(numel, rank * piece);
  return {begin, std::min(numel, begin + piece)};
}

Tensor Zero3Unit::piece_of(std::size_t i, const Tensor& whole) const {
  BLU_CHECK(whole.numel() == numels_.at(i), "Zero3Unit: parameter ", i, " has ", numels_.at(i), " elements, got ",
            whole.describe());
  blu::NoGradGuard no_grad;
  const int64_t numel = numels_[i], piece = (numel + n_ - 1) / n_, begin = pg_->rank() * piece;
  const int64_t end = std::min(numel, begin + piece);
  Tensor out = blu::zeros({piece}, blu::TensorOptions(whole.dtype()).device(pg_->device()));
  if (end > begin) {
    out.narrow(0, 0, end - begin).copy_(whole.detach().reshape({numel}).narrow(0, begin, end - begin).to(pg_->device()));
  }
  return out;
}

Tensor Zero3Unit::gather_like(std::size_t i, const Tensor& shard_state) const {
  blu::NoGradGuard no_grad;
  const int64_t piece = shards_.at(i).numel();
  BLU_CHECK(shard_state.numel() == piece, "Zero3Unit::gather_like: parameter ", i, "'s shard has ", piece,
            " elements, got ", shard_state.describe());
  Tensor all = blu::empty({n_ * piece}, blu::TensorOptions(shard_state.dtype()).device(pg_->device()));
  const Tensor mine = shard_state.detach().reshape({piece}).contiguous();
  pg_->all_gather(all, mine);
  return all.narrow(0, 0, numels_[i]).reshape(shapes_[i]).contiguous();
}

void Zero3Unit::prefetch() const {
  if (prefetch_is_fresh()) return;
  take_prefetch();  // a stale one goes; a new gather starts
  blu::NoGradGuard no_grad;
  auto p = std::make_unique<Pending>();
  CommOptions async;
  async.async_op = true;
  for (const Tensor& shard : shards_) {
    const int64_t piece = shard.numel();
    p->versions.push_back(shard.version());
    p->mine.push_back(shard.detach().reshape({piece}).contiguous());
    p->all.push_back(blu::empty({n_ * piece}, blu::TensorOptions(shard.dtype()).device(pg_->device())));
    p->work.push_back(pg_->all_gather(p->all.back(), p->mine.back(), async));
  }
  pending_ = std::move(p);
}

bool Zero3Unit::prefetch_is_fresh() const {
  if (!pending_) return false;
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    if (pending_->versions[i] != shards_[i].version()) return false;
  }
  return true;
}

std::unique_ptr<Zero3Unit::Pending> Zero3Unit::take_prefetch() const {
  std::unique_ptr<Pending> p = std::move(pending_);
  if (p) {
    for (const Work& w : p->work) w.wait();
  }
  return p;
}

std::vector<Tensor> Zero3Unit::gather_values() const {
  std::vector<Tensor> out;
  const bool fresh = prefetch_is_fresh();
  const std::unique_ptr<Pending> p = take_prefetch();  // used if fresh, else dropped
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    out.push_back(fresh ? p->all[i].narrow(0, 0, numels_[i]).reshape(shapes_[i]) : gather_like(i, shards_[i]));
  }
  return out;
}

std::vector<Tensor> Zero3Unit::gather() const { return gather_values(); }

void Zero3Unit::load(const std::vector<Tensor>& whole) {
  BLU_CHECK(whole.size() == shards_.size(), "Zero3Unit::load: ", whole.size(), " tensors for ", shards_.size(),
            " parameters");
  blu::NoGradGuard no_grad;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    Tensor s = shards_[i];
    s.copy_(piece_of(i, whole[i]));
  }
}

std::vector<Tensor> Zero3Unit::reduce_grads(const std::vector<Tensor>& whole_grads) const {
  blu::NoGradGuard no_grad;
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    const Tensor& g = whole_grads[i];
    if (!g.defined()) {  // the unit did not use this parameter: zero gradient (every rank agrees)
      out.push_back(Tensor());
      continue;
    }
    const int64_t piece = shards_[i].numel();
    Tensor padded = blu::zeros({n_ * piece}, blu::TensorOptions(shards_[i].dtype()).device(pg_->device()));
    padded.narrow(0, 0, numels_[i]).copy_(g.reshape({numels_[i]}));
    Tensor mine = blu::empty({piece}, blu::TensorOptions(shards_[i].dtype()).device(pg_->device()));
    pg_->reduce_scatter(mine, padded, ReduceOp::kAvg);
    out.push_back(mine);
  }
  return out;
}

std::vector<Tensor> Zero3Unit::apply(const Fn& fn, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> outs;
  {
    blu::NoGradGuard no_grad;
    const std::vector<Tensor> whole = gather_values();
    if (forward_next_ != nullptr) forward_next_->prefetch();  // Note [ZeRO-3 prefetch]
    std::vector<Tensor> in;
    for (const Tensor& t : inputs) in.push_back(t.detach());
    outs = fn(whole, in);
  }  // the whole parameters and fn's intermediates go here
  for (Tensor& o : outs) {
    // record() wants fresh outputs; an output that is an input's storage would alias it.
    for (const Tensor& t : inputs) BLU_CHECK(!o.is_same(t), "Zero3Unit::apply: fn returned an input as an output");
  }
  std::vector<Tensor> all_inputs = inputs;
  all_inputs.insert(all_inputs.end(), shards_.begin(), shards_.end());
  const std::size_t n_in = inputs.size();
  return blu::autograd::record_multi(
      "zero3_unit", outs, all_inputs, inputs,
      [this, fn, n_in](const std::vector<Tensor>& grad_outputs, const blu::BackwardContext& ctx) {
        std::vector<Tensor> whole = gather_values();
        if (backward_next_ != nullptr) backward_next_->prefetch();  // Note [ZeRO-3 prefetch]
        std::vector<Tensor> in;
        std::vector<Tensor> re;
        {
          EnableGradGuard grad_on;
          for (Tensor& w : whole) w.requires_grad_();
          for (std::size_t i = 0; i < n_in; ++i) {
            Tensor t = ctx.saved[i].detach();
            if (ctx.needs_input_grad[i] && t.is_floating_point()) t.requires_grad_();
            in.push_back(t);
          }
          re = fn(whole, in);
        }
        std::vector<Tensor> roots, grads;
        for (std::size_t o = 0; o < re.size(); ++o) {
          if (grad_outputs[o].defined() && re[o].requires_grad()) {
            roots.push_back(re[o]);
            grads.push_back(grad_outputs[o]);
          }
        }
        if (!roots.empty()) blu::autograd::backward(roots, grads);
        std::vector<Tensor> result;
        for (std::size_t i = 0; i < n_in; ++i) result.push_back(ctx.needs_input_grad[i] ? in[i].grad() : Tensor());
        std::vector<Tensor> whole_grads;
        for (const Tensor& w : whole) whole_grads.push_back(w.grad());
        for (Tensor& g : reduce_grads(whole_grads)) result.push_back(g);
        return result;
      });
}

std::vector<Tensor> Zero3Unit::gathered() {
  std::vector<Tensor> whole;
  {
    blu::NoGradGuard no_grad;
    whole = gather_values();
    if (forward_next_ != nullptr) forward_next_->prefetch();  // Note [ZeRO-3 prefetch]
  }
  return blu::autograd::record_multi("zero3_gather", whole, shards_, {},
                                     [this](const std::vector<Tensor>& grad_outputs, const blu::BackwardContext&) {
                                       return reduce_grads(grad_outputs);
                                     });
}

}  // namespace bludist
