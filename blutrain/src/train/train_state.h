// train_state.h (internal): saving and loading a whole training checkpoint
// (Note [Checkpoint layout] in blutrain/checkpoint_dir.h, Note [Deterministic resume] in
// blutrain/trainer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "blutrain/config.h"
#include "blutrain/data.h"
#include "blutrain/gpt2.h"
#include "blutrain/metrics.h"
#include "blutrain/optimizer.h"

namespace blu::train {

struct TrainState {
  int64_t step = 0;  // optimizer steps completed
  DataCursor cursor;
  uint64_t sample_rng = 0;
  std::vector<LossPoint> train_losses;
  std::vector<LossPoint> val_losses;
};

// A whole-model copy (weights, AdamW moments and step count) in the one-process format, gathered
// from a sharded model for save_checkpoint (--tp: TensorParallel::gather; --zero 3:
// DataParallel::gather_whole). Ranks that do not write the checkpoint may hold none.
struct WholeModel {
  std::unique_ptr<GPT2> model;
  std::unique_ptr<AdamW> opt;
};

// What state.json holds (besides the informational config text).
struct CheckpointState {
  std::string model;        // "tiny", "d12", ...
  std::vector<int32_t> vocab_ids;  // Note [Corpus vocabulary]; empty: GPT-2's
  int64_t adamw_step = -1;  // -1 when absent (only needed with an optimizer)
  TrainState state;
};
// Parses state.json's text; every error is a blu::Error naming `path` and the field. The values
// are checked for what they are (types; non-negative step, adamw_step and cursor), not against a
// data set (DataLoader::set_cursor does that).
CheckpointState parse_checkpoint_state(const std::string& text, const std::string& path);

// state.json's text (Note [Checkpoint layout]): model, vocabulary, step, AdamW step count, data
// cursor, sampling RNG, loss history and the config (informational).
std::string checkpoint_state_json(const GPT2Config& mcfg, int64_t adamw_step, const TrainState& state,
                                  const TrainConfig& cfg);
// Reads a checkpoint's state.json (verified) and checks it against the model configuration (size,
// vocabulary); sets opt's step count when opt is given. Loads no tensors.
CheckpointState load_checkpoint_state(const std::string& dir, const GPT2Config& mcfg, AdamW* opt);

// Writes a complete checkpoint for `state.step` atomically; returns its directory.
std::string save_checkpoint(const std::string& out_dir, int keep, GPT2& model, AdamW& opt, const TrainState& state,
                            const TrainConfig& cfg);
// The model configuration a checkpoint holds (from its state.json): the size ("tiny", "d12", ...)
// and the vocabulary (Note [Corpus vocabulary]).
GPT2Config checkpoint_model_config(const std::string& dir);
// Loads weights, optimizer moments and step into a whole (unsharded) model, from a whole or a
// sharded checkpoint (Note [Sharded checkpoints]); returns the rest. Errors name the file.
TrainState load_checkpoint(const std::string& dir, GPT2& model, AdamW* opt);

}  // namespace blu::train
