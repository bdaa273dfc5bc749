// blutrain/trainer.h: the training loop and the tools around it (sampling, the fidelity dump).
//
// Note [Deterministic resume]
// Everything a step depends on is in the checkpoint: fp32 weights (exact through safetensors),
// AdamW moments and step count, the data cursor, the sampling RNG state and the step. A run
// resumed from step k therefore computes bit-identical losses for steps > k to a run that was
// never interrupted (given deterministic kernels, which blutensor guarantees), and
// tests/blutrain/resume_test.cpp checks exactly that.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "blutrain/config.h"
#include "blutrain/gpt2.h"
#include "blutrain/optimizer.h"
#include "blutrain/metrics.h"

namespace blu::train {

class Tokenizer;

struct TrainResult {
  std::vector<LossPoint> train_losses;  // every step of the run (including before a resume)
  std::vector<LossPoint> val_losses;
  double final_val_loss = -1;  // --final-val-batches' validation after the last step (-1: none)
  int64_t final_step = 0;      // optimizer steps completed
  int64_t resumed_from = -1;   // step of the checkpoint resumed from, -1 if none
  bool stopped_early = false;  // --stop-after-steps fired (no final checkpoint, like a kill)
  std::string checkpoint_dir;  // last checkpoint written ("" if none)
  std::string sample_text;
  double median_tokens_per_s = 0;
  double peak_allocated_gib = 0;
};

// Makes a CUDA device current and sets the matmul precision for `precision` (tf32: TF32 tensor
// cores; else strict fp32) and blutensor's strict-fp32 attention from --attention (auto / 3xtf32:
// the 3xTF32 flash kernel, as the fused engine runs; strict: the strict composite; blutensor Note
// [Strict-fp32 attention]); nothing for the CPU. Every subcommand starts with it.
void use_device(const Device& device, Precision precision, const std::string& attention = "auto");
// AdamW's settings from the flags (--beta1, --beta2, --adam-eps, --weight-decay).
AdamWConfig adamw_config(const TrainConfig& cfg);

// Runs training for a resolved config (resolve_auto called). Progress goes to `out`.
TrainResult run_training(const TrainConfig& cfg, std::ostream& out);

// A deterministic RNG for sampling whose whole state is one uint64 (saved in checkpoints).
struct SampleRng {
  uint64_t state = 0;
  uint64_t next_u64();
  double next_double();  // [0, 1)
};

// Autoregressive sampling: `n_tokens` after `prompt` (temperature 0 = greedy; top_k 0 = all).
std::vector<int32_t> generate(GPT2& model, Precision precision, const std::vector<int32_t>& prompt, int n_tokens,
                              double temperature, int top_k, SampleRng& rng);

// `blutrain sample`: loads a checkpoint, prints a sample.
int run_sample(const TrainConfig& cfg, std::ostream& out);

// A prompt in the model's ids (GPT-2's, or the corpus vocabulary's: Note [Corpus vocabulary]);
// a token the model's vocabulary lacks is an error naming it. Empty text: no tokens.
std::vector<int32_t> encode_prompt(const Tokenizer& tok, const GPT2Config& cfg, const std::string& text);
// Sampled model ids back to text.
std::string decode_sample(const Tokenizer& tok, const GPT2Config& cfg, const std::vector<int32_t>& ids);

// `blutrain fidelity-dump`: writes into cfg.out_dir the model (model.safetensors + config.json,
// Hugging Face layout, initialised from --seed or loaded from --checkpoint), a batch of seeded
// random tokens (batch.safetensors: idx, targets as I64 [B, T]) and our results in fp32
// (ours.safetensors: logits [B, T, 50257], loss [], and grad.<hf name> for every weight in HF
// layout). blutrain/tools/hf_fidelity.py compares them with transformers' GPT2LMHeadModel.
int run_fidelity_dump(const TrainConfig& cfg, std::ostream& out);

// `blutrain capture`: step 2 of the autograd engine recorded (Note [Step capture] in
// blutensor/capture.h), written to <out-dir>/step.json with its summary and cache key; with
// cfg.capture_verify replayed and compared bit for bit with the eager step (exit 1 if it differs).
int run_capture(const TrainConfig& cfg, std::ostream& out);

}  // namespace blu::train
