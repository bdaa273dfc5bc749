// blutrain/checkpoint_dir.h: the checkpoint directory layout and its atomic commit.
//
// Note [Checkpoint layout]
//   <out_dir>/step_00000100/model.safetensors      weights, Hugging Face GPT-2 names and layouts
//                          /config.json            Hugging Face GPT2Config (from_pretrained works)
//                          /optimizer.safetensors  AdamW moments (+ what HF's layout drops)
//                          /state.json             step, data cursors, RNG state, config, losses
//                          /checksums.crc32c       CRC-32C and size of each file above
//                                                  (Note [Checkpoint checksums])
//   <out_dir>/latest                               "step_00000100": the newest complete checkpoint
// Under --zero 1/2/3 the default is a sharded checkpoint instead: per-rank model/optimizer shards,
// shard_index.json, config.json, state.json, checksums.crc32c, written by all ranks into one
// staging directory and committed the same way (Note [Sharded checkpoints] in
// src/train/sharded_checkpoint.h).
// A checkpoint is written into <out_dir>/.step_00000100.tmp-<pid>/, every file fsync'ed, then the
// directory is renamed into place (exchanged atomically with an existing directory of the same
// step, renameat2 RENAME_EXCHANGE) and only then `latest` is replaced (itself atomically). A crash
// at any point leaves the previous checkpoints and `latest` intact; stale .tmp directories are
// ignored (and removed by the next commit). Older checkpoints beyond `keep` are deleted last.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "blutrain/checkpoint_checksums.h"

namespace blu::train {

std::string checkpoint_dir_name(int64_t step);  // "step_00000100"

class CheckpointStaging {
 public:
  CheckpointStaging(const std::string& out_dir, int64_t step);
  // A staging directory shared by the ranks of a sharded checkpoint (Note [Sharded checkpoints] in
  // src/train/sharded_checkpoint.h): .<name>.tmp-<tag>, the same tag on every rank. The owner
  // (rank 0) creates it (removing a leftover of that name), commits it, and removes it when it
  // goes uncommitted; the others only name files in it.
  CheckpointStaging(const std::string& out_dir, int64_t step, const std::string& tag, bool owner);
  ~CheckpointStaging();  // the owner removes the temp directory unless committed
  CheckpointStaging(const CheckpointStaging&) = delete;
  CheckpointStaging& operator=(const CheckpointStaging&) = delete;

  // Path of a file inside the (temporary) checkpoint directory.
  std::string file(const std::string& name) const;
  // Moves the directory into place, points `latest` at it, prunes to the `keep` newest; returns
  // the final directory.
  std::string commit(int keep);
  // The same, with the whole-file sums of some files already known (the other ranks' shards:
  // Note [Sharded checkpoints]), so they are not read back.
  std::string commit(int keep, const std::map<std::string, FileChecksum>& known_sums);

 private:
  std::string out_dir_;
  std::string tmp_dir_;
  std::string final_dir_;
  bool committed_ = false;
  bool owner_ = true;
};

// The newest complete checkpoint directory in out_dir ("" when there is none): `latest` if it
// names a directory with state.json, else the highest step_* directory holding state.json.
std::string latest_checkpoint(const std::string& out_dir);

}  // namespace blu::train
