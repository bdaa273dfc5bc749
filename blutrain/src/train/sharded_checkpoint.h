// sharded_checkpoint.h (internal): the sharded checkpoint format of --zero 1/2/3: per-rank
// safetensors files of tensor slices, the index that maps them, the collective commit, and the
// ranged reads that let a checkpoint written by N ranks load onto M.
//
// Note [Sharded checkpoints]
// Why: a whole checkpoint (Note [Checkpoint layout]) gathers every weight and AdamW moment onto
// rank 0, which holds them all at once and writes them alone: at scale that is the memory ZeRO
// saved and one rank's disk bandwidth. `--checkpoint-format sharded` (the default under --zero
// 1/2/3) has each rank write only what it owns, into the same staging directory:
//   step_00000100/model.rank00003-of-00008.safetensors      this rank's slices of the weights
//                /optimizer.rank00003-of-00008.safetensors  ... of exp_avg and exp_avg_sq
//                /shard_index.json   (rank 0) world size, ZeRO stage, the partitioning rule in
//                                    words, every tensor's global shape, every rank's slices
//                /config.json        (rank 0) Hugging Face GPT2Config, as in a whole checkpoint
//                /state.json         (rank 0, last) the same state.json as a whole checkpoint
//                /checksums.crc32c   every file above (Note [Checkpoint checksums])
// Tensors are blutrain's parameters in blutrain's layout (our names, Conv1D weights as we hold
// them, wte with its padded rows) and their moments "exp_avg.<name>", "exp_avg_sq.<name>"; all
// f32. A slice is elements [begin, end) of a tensor's row-major flat values, stored in its
// rank's file as a 1-D tensor named "<tensor>@<begin>" with its CRC-32C (Note [Safetensors
// checksums]); the file's metadata names its rank and the world size. What a rank owns:
//  - ZeRO-1/2: the ranges of the flat vector of all parameters that ZeroAdamW gives it (Note
//    [ZeRO-2]: rank r holds elements [k C + r P, k C + (r + 1) P) of chunk k), cut where
//    parameters begin and end; the weights of the same ranges (they are replicated, so the
//    weights' write is spread over the ranks too). Padding is not written.
//  - ZeRO-3: piece r of each parameter (Zero3Unit: ceil(numel / n) elements), weights and moments.
// The index lists every rank's slices explicitly (rank 0 computes them from the same rule the
// ranks write by), so a reader needs no ZeRO arithmetic: it checks that each tensor's slices tile
// [0, numel) exactly and reads what overlaps the range it wants.
//
// Commit (save_sharded_checkpoint, a collective over the data-parallel group): rank 0's pid is
// all-reduced into the staging name .step_N.tmp-<pid>, which rank 0 creates; a barrier; every rank
// serialises its two files, writes each atomically (fsync'ed) and computes their whole-file
// CRC-32C and size from the bytes it wrote; one all-gather of [ok, crc, size, crc, size] is the
// barrier after which every shard is durable, and brings rank 0 the sums (no shard is read back).
// Rank 0 then writes shard_index.json, config.json and state.json, the manifest (with the shards'
// reported sums; a shard file missing at that point is an error), renames the directory into
// place and updates `latest` (CheckpointStaging::commit, unchanged); a last all-reduce tells every
// rank whether that worked, so all ranks fail together. A rank that dies or fails mid-write
// (a full disk, a crash, a kill) leaves only the staging directory: it is never renamed, `latest`
// still names the previous checkpoint, which loads as before (a dead rank makes blurun stop the
// gang; a failed write makes every rank throw after the all-gather); the next commit removes the
// stale directory. The file system must be shared by all ranks (one node, or NFS/Lustre).
//
// Loading (ShardedCheckpointReader): the index (verified against the manifest), then for every
// listed file a stat: missing or of another size than the manifest says is an error naming the
// file, before any rank reads a byte. A rank reads a file's header (8 bytes + header, whose CRC
// is checked) and then only the slices that overlap what it needs, each whole (its CRC is checked
// before use: a flipped bit names the file and the slice); slices are written in blocks of at most
// kMaxSliceElements (1 MiB), so resharding N -> M reads at most 1 MiB more per boundary. Who
// reads what:
//  - --zero 1/2 on M ranks: rank 0 reads the whole weights (ZeroAdamW broadcasts rank 0's weights
//    anyway); every rank reads only its own ZeRO ranges of the moments (ZeroAdamW::owned_ranges
//    for M ranks), straight into its shards: no rank holds whole moments.
//  - --zero 3 on M ranks: every rank reads only its pieces of weights and moments.
//  - one process, --zero 0 (DDP), --tp, sample, fidelity-dump: whole tensors (load_checkpoint),
//    assembled slice by slice: every rank needs all of them there.
// The loaded values are the saved bits, so a resume from a sharded checkpoint computes what a
// resume from the whole checkpoint of the same step computes, bit for bit (at the same rank count,
// the uninterrupted run's losses). Whole -> sharded works by the existing path (whole moments read,
// this rank's slice kept); sharded -> whole by loading onto one process (its checkpoints are
// whole). With --tp the format is whole (TensorParallel gathers).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "blutensor/safetensors.h"
#include "blutensor/tensor.h"
#include "blutrain/gpt2.h"
#include "blutrain/optimizer.h"

namespace bludist {
class ProcessGroup;
}

namespace blu::train {

inline constexpr const char* kShardIndexFile = "shard_index.json";
inline constexpr const char* kShardFormat = "blutrain-sharded-checkpoint-v1";
inline constexpr const char* kShardKinds[] = {"model", "optimizer"};
// Slices are cut into blocks of at most this many elements (1 MiB of f32), each with its own CRC,
// so a reader whose ranges cut through a slice reads at most one block more per boundary.
inline constexpr int64_t kMaxSliceElements = int64_t{1} << 18;

// "optimizer.rank00003-of-00008.safetensors"
std::string shard_file_name(const std::string& kind, int rank, int world_size);
// The name of a slice inside its rank's file: "<tensor>@<begin>".
std::string slice_name(const std::string& tensor, int64_t begin);

// Elements [begin, end) of a tensor's row-major flat values.
struct TensorSlice {
  std::string tensor;
  int64_t begin = 0, end = 0;
};

struct ShardedTensorInfo {
  std::string kind;  // "model" | "optimizer": which of a rank's two files holds its slices
  Shape shape;
  int64_t flat_offset = -1;  // ZeRO-1/2: where the parameter starts in the flat vector (informational)
};

struct ShardIndex {
  int world_size = 0;
  int zero_stage = 0;
  std::string partitioning;  // the rule, in words (informational)
  std::map<std::string, ShardedTensorInfo> tensors;
  std::vector<std::vector<TensorSlice>> rank_slices;  // [rank]: the slices its files hold

  std::string to_json() const;
  // Parses and checks (every slice names a known tensor, lies in it, and each tensor's slices tile
  // [0, numel) exactly); errors name `path`.
  static ShardIndex from_json(const std::string& text, const std::string& path);
};

// True when dir holds shard_index.json.
bool is_sharded_checkpoint(const std::string& dir);

// Collective over pg: every rank writes `mine` (kind -> slice name -> 1-D values, any device)
// as its two files; rank 0 also writes the index (only rank 0's `index` is used) and `rank0_files`
// (name -> text; state.json is written last), and commits (Note [Sharded checkpoints]). Returns the
// checkpoint directory on every rank.
std::string save_sharded_checkpoint(bludist::ProcessGroup& pg, const std::string& out_dir, int keep, int64_t step,
                                    const ShardIndex& index,
                                    const std::map<std::string, std::map<std::string, Tensor>>& mine,
                                    const std::map<std::string, std::string>& rank0_files);

class ShardedCheckpointReader {
 public:
  // Reads and checks the index; checks that every shard file exists with the manifest's size.
  explicit ShardedCheckpointReader(std::string dir);
  ~ShardedCheckpointReader();
  ShardedCheckpointReader(const ShardedCheckpointReader&) = delete;
  ShardedCheckpointReader& operator=(const ShardedCheckpointReader&) = delete;

  const ShardIndex& index() const { return index_; }
  const std::string& dir() const { return dir_; }
  // An error naming the checkpoint unless it holds `name` with this shape.
  void expect(const std::string& name, const Shape& shape) const;
  // Elements [begin, end) of tensor `name`'s flat values (f32, CPU), from the slices overlapping
  // them (each read whole and CRC-checked).
  Tensor read(const std::string& name, int64_t begin, int64_t end);
  Tensor read_whole(const std::string& name);  // the tensor's shape
  uint64_t bytes_read() const { return bytes_read_; }    // slice data read so far
  uint64_t bytes_total() const { return bytes_total_; }  // slice data in the checkpoint

 private:
  struct OpenFile;
  OpenFile& open(int rank, const std::string& kind);
  Tensor slice_values(int rank, const TensorSlice& s);

  std::string dir_;
  ShardIndex index_;
  std::map<std::string, std::vector<std::pair<int, TensorSlice>>> by_tensor_;  // sorted by begin
  std::map<std::string, std::unique_ptr<OpenFile>> files_;
  std::string cached_key_;  // the last slice read (a neighbouring range often needs it again)
  Tensor cached_;
  uint64_t bytes_read_ = 0, bytes_total_ = 0;
};

// Whole tensors (weights; moments when opt) from a sharded checkpoint into an unsharded model.
void load_whole_from_shards(ShardedCheckpointReader& reader, GPT2& model, AdamW* opt);

}  // namespace blu::train
