// grad_sync.h (internal): data parallelism inside the fused step. Averages the flat gradient
// buffer across the data-parallel ranks bucket by bucket while the backward is still running,
// through bludist's ProcessGroup (NCCL on GPUs), in a form that CUDA-graph capture records.
//
// Note [Data-parallel fused step: streams and events under capture]
// Three streams take part: the step's main stream, its weight-gradient side stream (Note [Weight
// gradients on a side stream] in fused_step.cpp) and the process group's communication stream.
//  - Ready point of a unit (Note [Gradient buckets of the fused step]): the fused backward makes
//    the main stream wait for the side stream's last weight gradient of the unit (for a block:
//    its qkv dW, the block's last side-stream op; the next block waits for it anyway before
//    overwriting dbig, so this adds no constraint), after which every write to the unit's slice
//    precedes the main stream's current position.
//  - unit_ready() then issues bludist all_reduce(avg, async) with CommOptions::stream = the main
//    stream: bludist records an event on the main stream, the communication stream waits for it,
//    NCCL runs there and a completion event is recorded there (Note [Collective ordering on
//    CUDA]). The main stream goes on with the earlier layers' backward at once: the all-reduce of
//    block l overlaps the backward of blocks l-1 .. 0. Nothing after a ready point writes that
//    unit's slice again in this micro-batch.
//  - Before clip + AdamW, wait_all() makes the main stream wait for the completion event of every
//    bucket: the norm and the update read averaged gradients only.
// Under stream capture (the step's graphs, Note [Graph capture of the step]) each of these is
// recorded, not run: an event record on a capturing stream followed by a wait on another stream
// forks that stream into the capture, the NCCL kernels (NCCL >= 2.9 supports capture) become
// graph nodes, and the final waits join the communication stream back into the main stream, so
// cudaStreamEndCapture sees no unjoined work. bludist's watchdog leaves events recorded under
// capture alone (they are nodes, not queryable); the host never waits inside the step. Every rank
// captures and replays the same sequence of collectives, in the same order (the bucket plan is a
// function of the model alone), which NCCL requires. The collectives of the trainer between
// steps (the loss report, validation means) run eagerly on the same communicator, after the step's
// graph has finished (the step waits for it).
#pragma once

#include "blutensor/cuda_fwd.h"  // cudaStream_t

#include <memory>
#include <string>
#include <vector>

#include "blutensor/dtype.h"
#include "engine/grad_buckets.h"

namespace bludist {
class ProcessGroup;
class Work;
}  // namespace bludist

namespace blu::train {

class FusedGradSync {
 public:
  // flat: the step's flat fp32 gradient buffer (on the group's device); buckets: the plan over it.
  // sum: the collectives add (the caller already scaled each rank's gradients by 1/ranks: Note
  // [Embedding gradient by all-gather] in fused_step.cpp); else they average.
  FusedGradSync(std::shared_ptr<bludist::ProcessGroup> pg, float* flat, std::vector<GradBucket> buckets,
                bool sum = false);
  ~FusedGradSync();
  FusedGradSync(const FusedGradSync&) = delete;
  FusedGradSync& operator=(const FusedGradSync&) = delete;

  // The ready point of ready unit `unit` on `stream` (units come in order 0, 1, ...): launches
  // the average of the bucket this unit completes, if any, on the communication stream.
  void unit_ready(int unit, cudaStream_t stream);
  // `stream` waits (on the device) for every bucket of this backward; the next backward starts
  // over. Throws if a bucket was never launched (a unit's ready point was skipped).
  void wait_all(cudaStream_t stream);
  // A range outside the bucket plan, reduced (as the buckets are) after the work issued so far on
  // `stream`, asynchronously; wait_early() makes a stream wait for it. One at a time.
  void reduce_early(float* begin, std::size_t n, cudaStream_t stream);
  void wait_early(cudaStream_t stream);
  // out[rank r's n values] = every rank's `in`, ordered after `stream`; `stream` waits for it.
  void all_gather(void* out, const void* in, std::size_t n, blu::DType dtype, cudaStream_t stream);

  int ranks() const;
  std::size_t num_buckets() const { return buckets_.size(); }
  std::string describe() const;  // "all-reduce over 2 ranks (nccl): 13 gradient bucket(s) of ..."

 private:
  bludist::Work reduce(float* begin, std::size_t n, cudaStream_t stream);
  std::shared_ptr<bludist::ProcessGroup> pg_;
  float* flat_;
  std::vector<GradBucket> buckets_;
  std::size_t next_bucket_ = 0;
  std::vector<bludist::Work> pending_;
  bool sum_ = false;
  std::vector<bludist::Work> early_;
};

}  // namespace blu::train
