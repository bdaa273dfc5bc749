// bludist/zero3.h: ZeRO stage 3 for the autograd engine: parameters sharded across the
// data-parallel group, whole only inside the units that use them.
//
// Note [ZeRO-3]
// A Zero3Unit owns a list of parameters (say one transformer block). Each is kept as this rank's
// shard: the flat parameter padded to a multiple of the group size n, cut into n equal pieces,
// piece r on rank r, a leaf that requires grad (what the optimizer sees: AdamW on the shards
// holds 1/n of the moments, with no further machinery). The whole values exist only while a unit
// runs:
//  - apply(fn, inputs) all-gathers the unit's parameters, runs fn under no-grad (neither the
//    whole parameters nor fn's activations outlive the call: only the unit's inputs are saved)
//    and records one autograd node. Its backward all-gathers again, recomputes fn with grad from
//    the saved inputs, back-propagates the output gradients through it (a nested backward), and
//    reduce-scatters each whole parameter gradient (average over the group) into its shard's
//    gradient. So at any time one unit's whole parameters and one unit's activations are alive:
//    ZeRO-3's parameter memory plus activation checkpointing per unit (one extra forward). The
//    recomputation must be deterministic (no dropout RNG here).
//  - gathered() is the plain form for parameters used in several places (a tied embedding and
//    lm head): a differentiable all-gather whose backward reduce-scatters; the whole values
//    stay alive until the backward has used them.
// Every rank computes its own loss as the mean over its own tokens (equal counts), so the
// averaged gradients are the whole batch's: no DDP on top (the reduce-scatter is the data-
// parallel reduction). Gradient accumulation works as with any leaf: each backward adds into
// the shard's .grad. Both are collectives: every rank must run the same units in the same order.
// A shard's padding never changes: its gradient is zero there (the gather drops it).
//
// Note [ZeRO-3 prefetch]
// set_prefetch(forward_next, backward_next) chains the units in the order a step runs them: when a
// unit gathers its parameters (forward in apply() or gathered(), backward in the recompute) it
// issues the all-gathers of the next unit of that pass asynchronously (CommOptions::async_op: on
// the group's communication stream, the compute stream not held), so the next unit's parameters
// travel while this unit computes; that unit's gather then only makes the compute stream wait for
// them. Two units' whole parameters are alive at once. A prefetched gather is used only if every
// shard's version counter is what it was at the prefetch (an optimizer step or load() in between
// bumps it): otherwise it is dropped and the gather runs again, so a stale value is never used.
// Over Gloo the collectives are synchronous: the prefetch is an early gather with the same result.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "bludist/process_group.h"

namespace bludist {

class Zero3Unit {
 public:
  using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>& params, const std::vector<Tensor>& inputs)>;

  // Takes the whole initial values (the same on every rank; any device, one dtype per tensor)
  // and keeps this rank's pieces as new leaves that require grad.
  Zero3Unit(const std::vector<Tensor>& whole, std::shared_ptr<ProcessGroup> pg);

  const std::vector<Tensor>& shards() const { return shards_; }
  Tensor& mutable_shard(std::size_t i) { return shards_.at(i); }  // for optimizers holding pointers
  std::size_t size() const { return shards_.size(); }
  const blu::Shape& whole_shape(std::size_t i) const { return shapes_.at(i); }
  int64_t whole_numel(std::size_t i) const { return numels_.at(i); }
  const std::shared_ptr<ProcessGroup>& group() const { return pg_; }
  // Collective: the whole values (new tensors, no autograd), e.g. for checkpoints and sampling.
  std::vector<Tensor> gather() const;
  // The whole value of flat per-element state laid out like shard i (an AdamW moment), collective.
  Tensor gather_like(std::size_t i, const Tensor& shard_state) const;
  // The elements [begin, end) of parameter i's flat whole value that rank `rank` holds (its shard's
  // first end - begin elements; the rest is padding, empty past the end).
  std::pair<int64_t, int64_t> piece_range(std::size_t i, int rank) const;
  // This rank's piece of a whole tensor of parameter i's shape (checkpoint loading), as a new tensor.
  Tensor piece_of(std::size_t i, const Tensor& whole) const;
  // Copies this rank's pieces of whole values into the shards (no autograd).
  void load(const std::vector<Tensor>& whole);

  // Note [ZeRO-3]: fn over the gathered parameters, recomputed in backward.
  std::vector<Tensor> apply(const Fn& fn, const std::vector<Tensor>& inputs);
  // Note [ZeRO-3]: the whole parameters as differentiable tensors for the rest of the step.
  std::vector<Tensor> gathered();
  // Note [ZeRO-3 prefetch]: the units whose gathers start when this one gathers (null: none).
  void set_prefetch(Zero3Unit* forward_next, Zero3Unit* backward_next) {
    forward_next_ = forward_next;
    backward_next_ = backward_next;
  }
  // Starts the asynchronous all-gathers of this unit's parameters (no-op if some are pending).
  void prefetch() const;

 private:
  std::vector<Tensor> gather_values() const;                      // whole, no autograd (a valid prefetch if any)
  std::vector<Tensor> reduce_grads(const std::vector<Tensor>& whole_grads) const;  // per shard

  std::shared_ptr<ProcessGroup> pg_;
  std::vector<Tensor> shards_;
  std::vector<blu::Shape> shapes_;
  std::vector<int64_t> numels_;
  int64_t n_ = 1;
  // Note [ZeRO-3 prefetch]
  Zero3Unit* forward_next_ = nullptr;
  Zero3Unit* backward_next_ = nullptr;
  struct Pending {
    std::vector<Tensor> all, mine;   // gather outputs and inputs, alive until used
    std::vector<Work> work;
    std::vector<uint64_t> versions;  // of the shards when the gathers were issued
  };
  mutable std::unique_ptr<Pending> pending_;
  bool prefetch_is_fresh() const;  // pending, and every shard as it was when the gathers started
  // The pending prefetch (null if none), its collectives waited for on the compute stream: after
  // this its buffers may be read or freed.
  std::unique_ptr<Pending> take_prefetch() const;
};

}  // namespace bludist
