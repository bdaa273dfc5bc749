// blutrain/gpt2.h: the GPT-2 model on blutensor: configs, parameters (fp32 master weights),
// GPT-2 initialisation, the forward pass (loss and logits), and Hugging Face-compatible weights.
//
// Note [Padded vocabulary]
// The token embedding has 50304 rows (GPT-2's 50257 rounded up to a multiple of 128, as llm.c
// does) so the lm-head GEMM has aligned sizes. The head is tied to the embedding, so it produces
// 50304 logits; a constant bias of -1e30 on the 47 padded columns makes their softmax weight
// exactly 0. Loss, gradients and sampling are therefore those of the 50257-token model (what
// Hugging Face computes), the padded rows receive no gradient, and no logits copy is needed.
// On the CPU (no alignment to win) the head multiplies by the first 50257 rows only: the same
// numbers with 47 fewer columns and no mask.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "blutensor/tensor.h"

namespace blu::train {

struct GPT2Config {
  std::string name;
  int n_layer = 12;
  int n_head = 12;
  int n_embd = 768;
  int block_size = 1024;      // maximum sequence length (positions)
  int vocab_size = 50257;     // real tokens
  int padded_vocab = 50304;   // rows of the embedding (Note [Padded vocabulary])
  // Note [Corpus vocabulary] (blutrain/corpus_vocab.h): empty = GPT-2's ids; else model id i is
  // GPT-2 id vocab_ids[i] (vocab_size = its size).
  std::vector<int32_t> vocab_ids;
};

// "tiny" (4 layers, C 128, 4 heads, context 256: for the CPU), "d12" (GPT-2 124M), "d24"
// (350M), "d36" (774M), "d48" (1.5B). Throws blu::Error for any other name.
GPT2Config gpt2_config(const std::string& name);

enum class Precision { kFp32, kTf32, kBf16 };
Precision parse_precision(const std::string& s);

struct NamedParam {
  std::string name;  // Hugging Face GPT-2 name, e.g. "h.0.attn.c_attn.weight"
  Tensor* tensor;    // our layout: linear weights [out, in] (HF Conv1D stores [in, out])
  bool decay;        // AdamW weight decay: 2-D weights only (not biases, LayerNorm, ...)
  bool hf_transposed;  // stored transposed in Hugging Face files
};

class GPT2 {
 public:
  GPT2(const GPT2Config& cfg, Device device);

  const GPT2Config& config() const { return cfg_; }
  Device device() const { return device_; }
  // GPT-2 init from `seed` (std 0.02; residual projections std 0.02/sqrt(2L); biases 0; LN 1/0;
  // padded embedding rows 0). Same numbers on CPU and CUDA.
  void init_weights(uint64_t seed);

  std::vector<NamedParam> parameters();
  int64_t num_params() const;  // with the padded embedding (what MFU counts)

  // idx, targets: [B, T] int32 on the model's device. Returns the mean cross-entropy loss (f32
  // scalar); if logits_out, also the logits [B, T, padded_vocab] (CUDA; [B, T, vocab_size] on
  // the CPU: Note [Padded vocabulary]) in the compute dtype.
  Tensor forward(const Tensor& idx, const Tensor& targets, Precision precision,
                 Tensor* logits_out = nullptr);
  // Logits only (no loss), e.g. for sampling; last dim as in forward().
  Tensor logits(const Tensor& idx, Precision precision);

 private:
  // After ln_f, [B, T, C]; wte_c is the token embedding in the compute dtype (cast once per
  // forward, shared by the embedding and the tied head).
  Tensor hidden(const Tensor& idx, const Tensor& wte_c, Precision precision);
  Tensor head(const Tensor& x, const Tensor& wte_c, Precision precision);

  struct Block {
    Tensor ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
  };
  GPT2Config cfg_;
  Device device_;
  Tensor wte_, wpe_, lnf_w_, lnf_b_;
  std::vector<Block> blocks_;
  Tensor vocab_mask_;  // [padded_vocab]: 0 for real tokens, -1e30 for padding (not a parameter)
  Tensor positions_;   // int64 [block_size]
};

// Writes <dir>/model.safetensors (Hugging Face GPT-2 names and layouts, vocab 50257, fp32) and
// <dir>/config.json (GPT2Config), so GPT2LMHeadModel.from_pretrained(dir) loads it.
void save_hf_weights(GPT2& model, const std::string& dir);
// Reads them back (exact: fp32, transposes are lossless); padded embedding rows are set to 0
// unless `extra` provides them (see checkpoint). Errors name the file and tensor.
void load_hf_weights(GPT2& model, const std::string& dir);
// The weights alone from one safetensors file with Hugging Face GPT-2 names (optionally prefixed
// "transformer.") and layouts, f32 (blutrain train --init-from). Errors name the file and tensor.
void load_hf_safetensors(GPT2& model, const std::string& path);

// Host copies of a tensor's values as float / bytes in HF layout (used by checkpoints, dumps).
std::vector<float> tensor_to_floats(const Tensor& t);
void floats_to_tensor(const std::vector<float>& values, Tensor& t);

}  // namespace blu::train
