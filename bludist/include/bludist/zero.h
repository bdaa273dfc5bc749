// bludist/zero.h: ZeRO stages 1 and 2, an AdamW whose state (and, at stage 2, gradients) is
// sharded across the data-parallel group.
//
// Note [ZeRO-1]
// The parameters (one dtype, f32 or f64, on the group's device) are viewed as one flat vector of
// `total` elements, cut into chunks of ~bucket_cap_bytes (a multiple of the group size; the last
// one padded); rank r owns the r-th 1/size of every chunk (its "piece"), and its pieces make its
// shard. step(): chunk by chunk, each rank's local gradients (.grad, not yet averaged: do not
// combine with DistributedDataParallel) are packed into a chunk buffer and reduce-scattered
// (average), so rank r receives the averaged gradient of its pieces only; r updates its pieces of
// the parameters in place with AdamW (blutensor's multi-tensor adamw_step_ on views of the
// parameters, moments of its shard only: 2 x total / size state elements per rank instead of
// 2 x total); then, chunk by chunk, the updated pieces are all-gathered and copied back into the
// parameters. Same arithmetic as blu::optim::AdamW on the averaged gradient (weight decay on every
// parameter), so the loss curve matches DDP + AdamW. Communication per step: reduce-scatters + all-
// gathers of one all-reduce's volume.
//
// Note [ZeRO-1 for a trainer]
// What blutrain's AdamW does beyond the plain update, done here on the shards:
//  - decay groups: `decay[i]` says whether parameter i takes weight decay (blutrain: 2-D weights
//    only). The shard is cut where parameters begin and end; the pieces go to adamw_step_ as two
//    lists (decayed, not), so every element sees its own parameter's decay.
//  - global-norm clipping of the averaged gradient: each rank takes the L2 norm of its shard
//    (blutensor's global_norm), one all-reduce (sum) of its square in f64 gives the global norm on
//    every rank (agreeing with one process's norm to f32 rounding), and each scales
//    its shard by max_norm / (norm + 1e-6) when the norm is larger (blutrain's clip_grad_norm).
//  - checkpoints: gather_state() gathers the moments into whole flat vectors (a collective,
//    temporary memory), so a checkpoint holds the one-process optimizer state and loads onto any
//    number of ranks; load_state() takes this rank's slice of such vectors. Without a gather:
//    owned_ranges(rank) says which flat elements a rank's shards hold (so each rank can write
//    its own and a reader on another rank count can find them), load_shard_state() takes shards.
//
// Note [ZeRO memory]
// In units of the parameter count P, per rank of n, besides the parameters themselves: DDP + AdamW
// holds the gradients (1) and two moments (2): 3 (+ DDP's bucket buffers). ZeRO-1 holds the
// gradients (1), the averaged gradient shard and two moment shards (3 / n), one chunk and one
// piece of staging: 1 + 3 / n. ZeRO-2 frees each .grad once its chunks are reduced: 3 / n (+ the
// gradients of chunks still open during backward). No parameter shard: the pieces are updated in
// place through views of the parameters (an earlier version kept a shard copy, 1 / n more, and a
// whole flat vector of staging at stage 1, 1 more: stage 1 then saved nothing on 2 ranks; 2x H100,
// 2026-11-26, GPT-2 124M fp32: 1.86 GiB after the step for DDP and ZeRO-1 alike, 1.43 ZeRO-2).
//
// Note [ZeRO-2]
// Stage 2 also shards the gradients, in the chunk layout of Note [ZeRO-1]. A grad-ready hook per parameter (as DDP's, Note [DDP buckets])
// counts the parameters of each chunk; once a chunk's gradients are all final it is packed into a
// chunk-sized staging buffer and reduce-scattered (average) at once, so the reduction overlaps the
// rest of backward, each rank adds its piece into its gradient shard, and a parameter whose chunks
// are all reduced loses its .grad (freed: that is the memory stage 2 saves). Chunks are reduced in
// descending order (autograd finalises the last parameters first), strictly, so every rank issues
// the same collectives. Accumulation micro-steps need no special scope: each backward's
// gradients are reduced and added into the shard (the sum of averages is the average of sums).
// Parameters that get no gradient keep their chunk open: call finish_gradient_sync() after such a
// backward (step() calls it); missing gradients count as zeros. step() then clips, updates and
// all-gathers chunk by chunk as stage 1 does (Note [ZeRO memory]).

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "bludist/process_group.h"
#include "blutensor/optim.h"

namespace bludist {

struct ZeroOptions {
  int stage = 1;  // 1: sharded AdamW state; 2: also sharded gradients (Note [ZeRO-2])
  std::size_t bucket_cap_bytes = std::size_t(25) << 20;  // bytes of the flat vector per chunk (Note [ZeRO-1])
};

class ZeroAdamW {
 public:
  // Broadcasts rank 0's parameter values to every rank (as DDP does). decay: one entry per
  // parameter, whether options.weight_decay applies to it (empty: to every parameter).
  ZeroAdamW(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> pg, blu::optim::AdamWOptions options = {},
            std::vector<bool> decay = {}, ZeroOptions zero = {});
  ~ZeroAdamW();
  ZeroAdamW(const ZeroAdamW&) = delete;
  ZeroAdamW& operator=(const ZeroAdamW&) = delete;
  // Stage 2: reduces the chunks the last backward left open (parameters without a gradient count
  // as zeros). A no-op at stage 1 and when every chunk was reduced by the hooks.
  void finish_gradient_sync();
  int stage() const { return zero_.stage; }
  int64_t num_chunks() const { return nchunks_; }
  int64_t chunks_reduced() const { return chunks_reduced_; }  // reduce-scatters so far (tests)
  // After a step() that skipped a non-finite update: the first parameter (constructor order) whose
  // averaged gradient holds a NaN or infinity, the same on every rank (found on the shards, so it
  // works at stage 2 where .grad is gone); -1 when none or when the last step was not skipped.
  int64_t first_nonfinite_param() const { return first_nonfinite_; }
  void step() { step(0.0, false); }  // parameters without a gradient count as zero gradient
  // The same update after clipping the averaged gradient to global L2 norm max_grad_norm (> 0;
  // <= 0: no clipping). Returns that norm before clipping when it was computed (clipping, or
  // compute_norm), else 0 (Note [ZeRO-1 for a trainer]). skip_nonfinite: the norm is computed and,
  // when it is NaN or infinite (the same verdict on every rank: one all-reduced value), nothing is
  // updated, parameters, moments and step count alike (blutrain's --nonfinite policy).
  double step(double max_grad_norm, bool compute_norm = true, bool skip_nonfinite = false);
  void zero_grad();  // sets every .grad undefined
  int64_t total_numel() const { return total_; }
  int64_t shard_numel() const { return shard_; }
  int64_t step_count() const { return step_; }
  void set_lr(double lr) { options_.lr = lr; }
  void set_step_count(int64_t step) { step_ = step; }
  // Where parameter i starts in the flat vector (elements).
  int64_t offset(std::size_t i) const { return offsets_.at(i); }
  // Collective: the whole moments as flat vectors of total_numel() elements (parameter i at
  // offset(i)), in new memory, on every rank (root < 0: all-gather) or on rank `root` only (the
  // others get undefined tensors and hold no whole copy: a checkpoint that one rank writes).
  std::pair<Tensor, Tensor> gather_state(int root = -1);
  // Takes this rank's slice of whole flat moments (total_numel() elements each, any device).
  void load_state(const Tensor& exp_avg, const Tensor& exp_avg_sq);
  // The flat elements rank `rank` owns (Note [ZeRO-2] layout), in shard order, padding left out:
  // elements [flat_begin, flat_begin + length) of the flat vector sit at shard_begin of its shard.
  // Sharded checkpoints write and read these ranges (blutrain's Note [Sharded checkpoints]).
  struct OwnedRange {
    int64_t flat_begin = 0, length = 0, shard_begin = 0;
  };
  std::vector<OwnedRange> owned_ranges(int rank) const;
  // Takes this rank's moments as shards (shard_numel() elements each, any device; padding zero).
  void load_shard_state(const Tensor& exp_avg_shard, const Tensor& exp_avg_sq_shard);
  // This rank's moments (shard_numel() elements each, in the chunked layout of Note [ZeRO-2]).
  const Tensor& exp_avg_shard() const { return exp_avg_; }
  const Tensor& exp_avg_sq_shard() const { return exp_avg_sq_; }

 private:
  std::vector<Tensor> params_;
  std::vector<int64_t> offsets_;
  std::vector<bool> decay_;
  std::shared_ptr<ProcessGroup> pg_;
  blu::optim::AdamWOptions options_;
  ZeroOptions zero_;
  int64_t total_ = 0, shard_ = 0, step_ = 0;
  // Layout (Note [ZeRO-2]): nchunks_ chunks of chunk_ flat elements; rank r owns elements
  // [k chunk_ + r piece_, k chunk_ + (r + 1) piece_) of chunk k at shard positions [k piece_, ...).
  int64_t chunk_ = 0, piece_ = 0, nchunks_ = 0, chunks_reduced_ = 0;
  Tensor staging_;  // one chunk: gradients before its reduce-scatter, parameters after its all-gather
  Tensor piece_tmp_;  // one piece: stage 2's reduced piece before it is added into grad_shard_; this
                     // rank's updated parameters before their all-gather
  Tensor grad_shard_, exp_avg_, exp_avg_sq_;
  // Stage 2 bookkeeping: the parameters of each chunk, the chunks of each parameter.
  std::vector<std::vector<std::size_t>> chunk_params_;
  std::vector<std::vector<int64_t>> param_chunks_;
  std::vector<int> chunk_pending_;  // parameters of each chunk not yet ready in this backward
  std::vector<bool> param_ready_;
  std::vector<int> hook_ids_;
  int64_t next_chunk_ = -1;  // the next chunk to reduce (descending); -1: none this backward
  int64_t first_nonfinite_ = -1;
  bool in_backward_ = false;

  std::pair<int64_t, int64_t> overlap(std::size_t i, int64_t lo, int64_t hi) const;
  void pack_chunk(int64_t k, bool grads);
  void unpack_chunk(int64_t k);
  void pack_own_piece(int64_t k);
  void reduce_chunk(int64_t k, bool accumulate);
  void on_grad_ready(std::size_t param);
  void reset_backward_state();
  int64_t find_first_nonfinite();
};

}  // namespace bludist
