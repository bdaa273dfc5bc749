// data_parallel.h (internal): the trainer's data parallelism (--dp N, --zero 0|1) through
// bludist: the launch check against the launcher's environment, the process group, DDP or ZeRO-1
// over the model's parameters, and the per-step figures rank 0 reports.
//
// Note [Data-parallel training]
// One process per rank, started by blurun (or torchrun / Slurm: the same variables). --dp must
// equal WORLD_SIZE. CPU ranks talk through Gloo, GPU ranks through NCCL (one GPU per rank, cuda:
// LOCAL_RANK). Every rank builds the model from the same seed and rank 0's weights are broadcast
// anyway (DDP's constructor, ZeroAdamW's), so a resumed or --init-from start agrees too.
//  - Data: DataLoader strides by rank (Note [Rank-strided cursors]): with B per rank, rank r
//    reads rows r*B .. r*B+B-1 of the global batch of B*dp rows, so the ranks together see exactly
//    the tokens, in the same rows, of a one-process run with --batch-size B*dp. Validation reads
//    the val split the same way and averages.
//  - Gradients, --zero 0: DistributedDataParallel hooks every parameter's grad-ready hook
//    (blutensor's AccumulateGrad fires it once the gradient of this backward is final), so the
//    buckets are all-reduced (average) while the autograd engine is still producing the earlier
//    layers' gradients: communication inside backward, not after it. Accumulation micro-steps
//    run with gradient sync off; the last one reduces the sums. finish_gradient_sync() after the
//    last backward covers parameters that got no gradient. Then clipping and AdamW run as in one
//    process, on identical averaged gradients, so every rank takes the same step.
//  - Gradients, --zero 1: no DDP (ZeroAdamW reduce-scatters the raw local gradients itself, after
//    backward: it needs all of them at once); clipping and decay groups happen on the shards
//    (Note [ZeRO-1 for a trainer] in bludist/zero.h); the AdamW moments of only 1/dp of the
//    parameters live on each rank. blutrain's AdamW object holds no moments then. Checkpoints are
//    sharded by default: each rank writes its ranges and a resume on any number of ranks reads
//    only its own (Note [Sharded checkpoints] in sharded_checkpoint.h); --checkpoint-format whole
//    gathers them for the save and drops them after, and a resume from a whole checkpoint loads
//    them and keeps this rank's slice.
//  - Gradients, --zero 2: as --zero 1, but ZeroAdamW's grad-ready hooks reduce-scatter the
//    gradients chunk by chunk (--dp-bucket-mb) while backward runs and free each .grad once its
//    chunks are reduced (Note [ZeRO-2] in bludist/zero.h); every micro-step is reduced and summed
//    into the shard.
//  - Losses: every micro-batch loss is a mean over the rank's B*T tokens; the mean over ranks is
//    the global-batch mean (equal token counts), the number a one-process run prints.
//  - Output: only rank 0 prints, writes metrics, checkpoints, samples and the plot; the other
//    ranks' progress output is dropped. Per step, one all-gather of [loss, memory, comm time]
//    gives rank 0 the global loss, the largest per-rank memory (GPU: caching allocator peak; CPU:
//    peak RSS) and the largest per-rank communication time (host time inside collectives: the
//    communication itself on Gloo; the host's share on NCCL).
//  - The fused CUDA engine (--engine fused, --zero 0): no DDP object. The fused step gets the
//    process group (process_group()) and averages its flat gradient buffer itself, bucket by
//    bucket inside the last micro-batch's backward and inside its CUDA graph, then clips and
//    updates as one process would (Note [Data-parallel fused step: streams and events under
//    capture] in src/engine/grad_sync.h); it broadcasts rank 0's weights when it is built. Its
//    communication is on the device only, so the reported comm time is 0. --zero 1 with the
//    fused engine is refused (config.cpp): ZeRO-1 there is not built.
#pragma once

#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bludist/process_group.h"
#include "blutensor/device.h"
#include "blutrain/config.h"
#include "blutrain/gpt2.h"
#include "blutrain/optimizer.h"
#include "train/sharded_checkpoint.h"
#include "train/train_state.h"

namespace bludist {
class ProcessGroup;
class DistributedDataParallel;
class ZeroAdamW;
}  // namespace bludist

namespace blu::train {

// The launcher's view of this process: RANK, WORLD_SIZE, LOCAL_RANK (0, 1, 0 when not launched).
struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  bool launched = false;  // RANK (or Slurm's SLURM_PROCID) was set
};
LaunchInfo launch_info_from_environment();

// Checks --dp (times --tp) against the launch (clear errors naming the flags and both values).
void check_data_parallel_launch(const TrainConfig& cfg, const LaunchInfo& launch);
// After that check, the world group of the dp x tp ranks (nullptr for one process): Gloo for
// --device cpu, NCCL for CUDA, where *device_index becomes this rank's GPU (LOCAL_RANK; else -1).
std::shared_ptr<bludist::ProcessGroup> join_world_group(const TrainConfig& cfg, int* device_index);

// Note [Context-parallel training]
// --cp n (with --dp d: WORLD_SIZE = d x n, world rank i*n + j is context-parallel rank j of
// data-parallel row i, so a context-parallel group is n consecutive ranks) runs GPT2 on a cp group
// (Note [Context-parallel GPT-2]). The ranks of a group read the same batch (the DataLoader strides
// by the row i of d, not by world rank) and each computes its T / n positions of every sequence.
// Each rank's loss is a mean over as many tokens as any other's, so the whole batch's loss and
// gradient are the means over all d x n ranks: DataParallel runs over the whole world (DDP buckets,
// or ZeRO shards over d x n ranks) and its reported loss is that mean. The weights stay replicated,
// so checkpoints, --init-from and sampling are the one-process ones (rank 0 writes and prints).

class DataParallel {
 public:
  // nullptr for --dp 1. Data parallelism over `group` (the world, or this rank's column of the
  // dp x tp mesh) of --dp ranks; device_index as join_world_group gave it.
  static std::unique_ptr<DataParallel> create(const TrainConfig& cfg, std::shared_ptr<bludist::ProcessGroup> group,
                                              int device_index);
  ~DataParallel();

  int rank() const;
  int size() const;
  bool is_main() const { return rank() == 0; }  // of this group (the trainer's main rank is world rank 0)
  // The CUDA device index of this rank (LOCAL_RANK) for --device cuda; -1 on the CPU.
  int device_index() const { return device_index_; }
  std::string describe() const;  // "data parallel over 2 ranks (gloo), ZeRO-1"
  void barrier();

  // Wraps the model after any resume: DDP hooks (zero 0) or ZeroAdamW (zero 1, taking the
  // moments `opt` loaded, if any, and then dropping them). Broadcasts rank 0's weights. With the
  // fused engine it does nothing: the fused step does both (give it process_group()).
  // resume: a sharded checkpoint to take this rank's part of (Note [Sharded checkpoints]): ZeRO-1/2
  // rank 0's weights and every rank's moment ranges, ZeRO-3 every rank's pieces.
  void attach(GPT2& model, AdamW& opt, const AdamWConfig& acfg, bool opt_has_moments,
              ShardedCheckpointReader* resume = nullptr);
  // Gradient sync for the coming backward (off on all but the last micro-step).
  void set_gradient_sync(bool on);
  // After the last backward: completes DDP's gradient reduction (nothing for ZeRO-1).
  void finish_gradients();
  // Then: clips to grad_clip and updates with lr (Note [Data-parallel training]), or, when the
  // global norm is not finite (the same on every rank, so every rank skips together), leaves
  // weights and AdamW state alone and names the first non-finite gradient (Note [Non-finite
  // steps]; with ZeRO from the averaged gradient shards, the same on every rank). Zeroes the
  // gradients.
  // sum_of_squares: the gradient norm's, under --tp (Note [Tensor-parallel training]).
  UpdateResult clip_and_step(AdamW& opt, double grad_clip, double lr, const GradSumOfSquares& sum_of_squares = {});
  // ZeRO: fills rank 0's opt moments (whole tensors) for the checkpoint it writes (collective:
  // every rank calls it; the others get none); release_moments() drops them again. No-ops with
  // --zero 0.
  void gather_moments(AdamW& opt);
  void release_moments(AdamW& opt);
  // --zero 3 (Note [ZeRO-3 GPT-2]): whether the model is sharded, and (collective) a whole GPT2
  // and AdamW (weights, moments, step count) in the one-process format for a checkpoint, on
  // rank 0 only (the others join the gathers and get an empty WholeModel).
  bool zero3() const;
  WholeModel gather_whole(GPT2& model, AdamW& opt);
  // Note [Sharded checkpoints] (--zero 1/2/3, --checkpoint-format sharded; zero_checkpoint.cpp):
  // collective: every rank writes the weights and moments it owns, rank 0 the index and
  // `rank0_files` (config.json, state.json), and commits. Returns the directory on every rank.
  std::string save_sharded(const std::string& out_dir, int keep, int64_t step, AdamW& opt,
                           const std::map<std::string, std::string>& rank0_files);

  // Collective. Returns on rank 0 the mean of `local_loss` over ranks and sets the step's
  // largest per-rank memory (GiB) and communication time (ms); other ranks get their own loss.
  struct StepReport {
    double loss = 0;
    double max_rank_mem_gib = 0;
    double max_comm_ms = -1;          // < 0: not measured (no timed collective this step, on any
    double max_comm_exposed_ms = -1;  // rank: a graph-captured step, BLUDIST_COMM_TIMING=0)
    // This rank's own communication fields from its step's collectives (bludist Note
    // [Communication timing]): what one tensor-parallel group reports without a data-parallel one.
    static StepReport of(const bludist::CommTiming& comm);
  };
  // Collective. `comm`: this rank's collectives of the step over all its groups.
  StepReport report_step(double local_loss, double rank_mem_gib, const bludist::CommTiming& comm);
  // Collective: the mean over ranks (validation losses).
  double mean(double local_value);
  // The world group (the fused step's gradient all-reduce).
  std::shared_ptr<bludist::ProcessGroup> process_group() const { return pg_; }

 private:
  DataParallel() = default;

  const TrainConfig* cfg_ = nullptr;
  int device_index_ = -1;
  std::shared_ptr<bludist::ProcessGroup> pg_;
  std::unique_ptr<bludist::DistributedDataParallel> ddp_;
  std::unique_ptr<bludist::ZeroAdamW> zero_;
  // --zero 3: the model, which holds shards (Note [ZeRO-3 GPT-2]; no DDP on top), for its pieces'
  // ranges (Note [Sharded checkpoints]); null otherwise.
  const GPT2* zero3_model_ = nullptr;
  std::vector<Shape> whole_shapes_;  // the parameters' whole shapes (as attach() found them)

  // Note [Sharded checkpoints]: parameter `param`'s elements [begin, end) held by a rank, at
  // `local` in its storage (ZeRO-1/2: the moment shard; ZeRO-3: the parameter's shard).
  struct OwnedSlice {
    std::size_t param = 0;
    int64_t begin = 0, end = 0, local = 0;
  };
  std::vector<OwnedSlice> owned_slices(int rank, std::size_t n_params) const;
  ShardIndex shard_index(const AdamW& opt) const;
  // Runs part on every rank; when it threw on any, every rank throws (Note [Failing together]).
  void fail_together(const std::function<void()>& part);
  void load_sharded_weights(ShardedCheckpointReader& reader, AdamW& opt);  // ZeRO-1/2, before ZeroAdamW
  void load_sharded_moments(ShardedCheckpointReader& reader, AdamW& opt);  // ZeRO-1/2, after it
  void load_sharded_pieces(ShardedCheckpointReader& reader, AdamW& opt);  // ZeRO-3
};

// This process's peak resident memory (VmHWM), GiB; 0 when unknown.
double process_peak_rss_gib();

// Collective over pg: one double summed (mean = false) or averaged over the ranks, in f64 on the
// group's device (gradient norms, validation means).
double all_reduce_double(bludist::ProcessGroup& pg, double value, bool mean = false);

}  // namespace blu::train
