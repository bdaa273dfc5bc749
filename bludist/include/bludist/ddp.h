// bludist/ddp.h: data parallelism. DistributedDataParallel averages the gradients of a list of
// parameter Tensors across a ProcessGroup, bucket by bucket as autograd finalises them;
// all_reduce_gradients does the same for a trainer that keeps every gradient in one flat buffer.
//
// Note [DDP buckets]
// Parameters are packed into buckets of at most bucket_cap_bytes (25 MiB by default) in reverse
// parameter order: autograd finalises the last layers' gradients first, so reverse order is
// roughly gradient-ready order. Each parameter's grad-ready hook (blutensor's
// Tensor::register_grad_ready_hook, fired by AccumulateGrad once .grad is final for this
// backward) copies its gradient into the bucket's flat buffer; a full bucket is all-reduced
// (average) at once as an async collective, so on GPUs its communication overlaps the rest of
// backward. Buckets are launched strictly in bucket order (a bucket that fills early waits for
// the ones before it) so every rank issues the same sequence of collectives. When the last bucket
// is launched, the hook waits for all of them (on CUDA: the compute stream waits on events, the
// host never does) and copies the averages back into each .grad. Parameters that get no gradient
// in a backward (unused) keep their bucket open: call finish_gradient_sync() after backward(),
// which reduces them as zeros. Inside a no_sync() scope the hooks do nothing: gradients of
// accumulation micro-steps add up locally in .grad, and the first backward outside the scope
// reduces the accumulated sums. Losses must be averaged per rank (mean over the local batch):
// averaging across ranks then gives the gradient of the global-batch mean.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "bludist/process_group.h"

namespace bludist {

struct DDPOptions {
  std::size_t bucket_cap_bytes = std::size_t(25) << 20;
  bool broadcast_parameters = true;  // copy rank 0's values into every rank at construction
};

class DistributedDataParallel {
 public:
  // params: leaves that require grad, contiguous, on pg's device (any floating dtype).
  DistributedDataParallel(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> pg, DDPOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // RAII scope without gradient reduction (accumulation micro-steps).
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_enabled_) { ddp.sync_enabled_ = false; }
    ~NoSync() { ddp_.sync_enabled_ = previous_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }
  void set_gradient_sync(bool enabled) { sync_enabled_ = enabled; }
  bool gradient_sync() const { return sync_enabled_; }

  // Completes the current backward's reduction (Note [DDP buckets]); a no-op when the hooks
  // already did. Parameters without a gradient contribute zeros and get a gradient.
  void finish_gradient_sync();
  // Copies rank `root`'s parameter values into every rank (the constructor does it for 0).
  void broadcast_parameters(int root = 0);

  std::size_t num_buckets() const { return buckets_.size(); }
  // Indices into the constructor's parameter list, in bucket order.
  std::vector<std::size_t> bucket_parameters(std::size_t bucket) const;
  // Bucket all-reduces launched so far (tests, metrics).
  int64_t buckets_reduced() const { return buckets_reduced_; }
  ProcessGroup& process_group() const { return *pg_; }

 private:
  struct Slot {
    std::size_t param;   // index into params_
    int64_t offset;      // elements into the bucket's flat buffer
    bool ready = false;
  };
  struct Bucket {
    Tensor flat;
    std::vector<Slot> slots;
    int pending = 0;     // slots not ready in the current backward
    bool launched = false;
    Work work;
  };

  void on_grad_ready(std::size_t param);
  void launch_ready_buckets();
  void launch(Bucket& b);
  void complete();
  void reset_backward_state();

  std::vector<Tensor> params_;
  std::shared_ptr<ProcessGroup> pg_;
  DDPOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<std::size_t, std::size_t>> where_;  // param -> (bucket, slot)
  std::vector<int> hook_ids_;
  std::size_t next_bucket_ = 0;
  bool in_backward_ = false;
  bool sync_enabled_ = true;
  int64_t buckets_reduced_ = 0;
};

// Averages n fp32 gradients in place across the group (a trainer that keeps all gradients in one
// flat buffer, e.g. blutrain's fused step). On CUDA the all-reduce runs on the group's
// communication stream ordered after `stream` (the host never waits); without async_op, `stream`
// waits for the result before later work; with it, call wait() on the returned Work first. To
// overlap with backward, call it on sub-ranges as their gradients become final (in the same order
// on every rank). CPU (Gloo) groups ignore the stream.
Work all_reduce_gradients(ProcessGroup& pg, float* flat_grads, std::size_t n, cudaStream_t stream,
                          bool async_op = false);

}  // namespace bludist
