// tensor_parallel.h (internal): the trainer's tensor parallelism (--tp N) around a GPT2 built on a
// tensor-parallel group (Note [Tensor-parallel GPT-2] in blutrain/gpt2.h): the dp x tp mesh, the
// gradient norm over the shards, whole-model checkpoints and --init-from.
//
// Note [Tensor-parallel training]
// One process per rank (blurun), WORLD_SIZE = dp x tp. The ranks form a dp x tp mesh (bludist's
// make_mesh_2d): world rank d * tp + t is tensor-parallel rank t of data-parallel row d, so a
// tensor-parallel group is tp consecutive ranks (on one host, where its per-layer all-reduces
// belong) and a data-parallel group links the ranks holding the same shards (t, t + tp, ...).
//  - Data: the ranks of a tensor-parallel group read the same batch (the DataLoader strides by the
//    data-parallel rank and size only); every rank computes the same loss.
//  - Gradients: with --dp, DDP all-reduces each shard's gradient over its data-parallel group (ZeRO
//    with --tp is refused in config.cpp). Clipping uses the norm of the whole model: the squares of
//    the sharded gradients summed over the tensor-parallel group (one all-reduce of one double)
//    plus those of the replicated parameters, counted once (they are identical on every rank of
//    the group). AdamW then updates this rank's shards and its copy of the replicated tensors.
//  - Checkpoints are the one-process format: the shards and their AdamW moments are all-gathered
//    into whole tensors of a GPT2 / AdamW without tensor parallelism and world rank 0 writes them
//    with save_checkpoint. A resume (or --init-from) reads the whole tensors on every rank and keeps
//    this rank's shards, so a --tp checkpoint resumes in one process and the other way round.
//  - Sampling: GPT2::logits all-gathers the vocabulary columns, so every rank of the group runs
//    generate() (same logits, same SampleRng: same tokens); only world rank 0 prints.
//  - Output: only world rank 0 prints and writes metrics; the progress line ends "| tp N".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "blutrain/config.h"
#include "blutrain/gpt2.h"
#include "blutrain/optimizer.h"
#include "train/train_state.h"

namespace bludist {
class ProcessGroup;
}  // namespace bludist

namespace blu::train {

class TensorParallel {
 public:
  // The mesh's groups of this rank for `world` (null: one process): dp (null for --dp 1) and tp
  // (null for --tp 1). Collective over world.
  // cp: the context-parallel group under --cp (then dp is the whole world: Note
  // [Context-parallel training] in data_parallel.h).
  struct Groups {
    std::shared_ptr<bludist::ProcessGroup> dp, tp, cp;
  };
  static Groups split_world(const TrainConfig& cfg, const std::shared_ptr<bludist::ProcessGroup>& world);

  // nullptr for --tp 1.
  static std::unique_ptr<TensorParallel> create(const TrainConfig& cfg, std::shared_ptr<bludist::ProcessGroup> tp);

  int size() const;
  int rank() const;
  const std::shared_ptr<bludist::ProcessGroup>& group() const { return pg_; }
  std::string describe() const;  // "tensor parallel over 2 ranks (gloo): ..."

  // The squared norm of the whole model's gradients from this rank's parameters (collective).
  double grad_sum_of_squares(const std::vector<NamedParam>& params) const;
  GradSumOfSquares sum_of_squares_fn() const;

  // Collective: whole-model copies of `model` and `opt` (weights, moments, step count) as a GPT2
  // and AdamW without tensor parallelism, for save_checkpoint.
  WholeModel gather(GPT2& model, AdamW& opt) const;
  // Reads a whole-model checkpoint and keeps this rank's shards (weights, moments, step count).
  TrainState load_checkpoint(const std::string& dir, GPT2& model, AdamW& opt) const;
  // --init-from: the whole Hugging Face weights, this rank's shards kept.
  void load_hf_safetensors(const std::string& path, GPT2& model, uint64_t seed) const;

 private:
  TensorParallel() = default;
  // The whole tensor from every rank's `local` part, cut as `split` says (collective).
  Tensor gather_whole(const Tensor& local, TpSplit split) const;
  // this rank's parts of `whole` into `model` / `opt` (the same parameter order).
  static void take_shards(GPT2& whole, AdamW* whole_opt, GPT2& model, AdamW* opt);

  std::shared_ptr<bludist::ProcessGroup> pg_;
};

}  // namespace blu::train
