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
// A checkpoint is written into <out_dir>/.step_00000100.tmp-<pid>/, every file fsync'ed, then the
// directory is renamed into place (exchanged atomically with an existing directory of the same
// step, renameat2 RENAME_EXCHANGE) and only then `latest` is replaced (itself atomically). A crash
// at any point leaves the previous checkpoints and `latest` intact; stale .tmp directories are
// ignored (and removed by the next commit). Older checkpoints beyond `keep` are deleted last.
#pragma once

#include <cstdint>
#include <string>

namespace blu::train {

std::string checkpoint_dir_name(int64_t step);  // "step_00000100"

class CheckpointStaging {
 public:
  CheckpointStaging(const std::string& out_dir, int64_t step);
  ~CheckpointStaging();  // removes the temp directory unless committed
  CheckpointStaging(const CheckpointStaging&) = delete;
  CheckpointStaging& operator=(const CheckpointStaging&) = delete;

  // Path of a file inside the (temporary) checkpoint directory.
  std::string file(const std::string& name) const;
  // Moves the directory into place, points `latest` at it, prunes to the `keep` newest; returns
  // the final directory.
  std::string commit(int keep);

 private:
  std::string out_dir_;
  std::string tmp_dir_;
  std::string final_dir_;
  bool committed_ = false;
};

// The newest complete checkpoint directory in out_dir ("" when there is none): `latest` if it
// names a directory with state.json, else the highest step_* directory holding state.json.
std::string latest_checkpoint(const std::string& out_dir);

}  // namespace blu::train
