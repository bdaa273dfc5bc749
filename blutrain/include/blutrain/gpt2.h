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
// numbers with 47 fewer columns and no mask. Under tensor parallelism every device uses the
// padded rows and the mask (Note [Tensor-parallel GPT-2]).
//
// Note [Tensor-parallel GPT-2]
// GPT2 built with a tensor-parallel group of n ranks (blutrain train --tp n) holds only this
// rank's shard of the large matrices, Megatron-style, with bludist's region boundaries (Note
// [Tensor-parallel regions] in bludist/tensor_parallel.h):
//  - attention: c_attn weight and bias cut by heads (shard_fused_qkv: rank r's q, k and v rows of
//    heads [r H/n, (r+1) H/n)), so attention runs on the local heads; c_proj weight cut by columns
//    (the same heads), its output all-reduced, the bias (replicated) added after the reduction;
//  - MLP: c_fc weight and bias cut by rows, GELU on the local shard, mlp.c_proj weight by columns,
//    bias replicated and added after the all-reduce;
//  - wte cut by vocabulary rows (padded vocabulary, so it splits evenly; Note [Vocabulary-parallel
//    embedding and cross-entropy]): the embedding sums the owners' rows, the tied head gives this
//    rank's [N, Vp/n] logit columns (plus its part of the -1e30 padding mask) and the loss is
//    bludist::vocab_parallel_cross_entropy, the same value on every rank;
//  - wpe and the LayerNorms are replicated. Every rank runs the same forward on the same batch.
// Replicated parameters get the same gradient on every rank: every path from the loss to them
// passes the region boundaries, whose backward all-reduces the input gradients
// (tests/blutrain/tp_model_test.cpp checks it bitwise). parameters() lists the local tensors in
// the one-process order and names; tp_split() says how each is cut. init_weights() draws every
// FULL tensor in the one-process order from the same generator and keeps this rank's part, so a
// --tp n model starts with exactly the one-process weights. The gradient norm, checkpoints and
// sampling need the group too: src/train/tensor_parallel.h (Note [Tensor-parallel training]).
//
// Note [Context-parallel GPT-2]
// Under --cp n every rank of the group holds the whole (replicated) model and the same batch; it
// computes only its part of each sequence: T is cut into 2n chunks of T / (2n) and rank r takes
// chunks r and 2n-1-r (the balanced causal layout of Note [Ring attention]), with their positions
// (wpe rows) and targets. Everything but attention is per position; attention is
// bludist::ring_attention over the group (K/V blocks passed around the ring, log-sum-exp merging).
// The loss is the mean over this rank's T / n positions; every rank has as many, so the mean of
// the ranks' losses is the whole batch's loss and the mean of their gradients its gradient: the
// trainer averages gradients (DDP / ZeRO) over all dp x cp ranks (Note [Context-parallel
// training] in src/train/data_parallel.h).
//
// Note [ZeRO-3 GPT-2]
// Under --zero 3 (Note [ZeRO-3] in bludist/zero3.h) the model keeps only its shards: one unit for
// wte, wpe and ln_f (gathered once per forward: wte serves the embedding and the tied head) and
// one unit per block, gathered inside the block's forward and again in its backward, where the
// block is recomputed (activation checkpointing per block comes with it). parameters() hands out
// the shards under the usual names and decay flags, so blutrain's AdamW holds 1/n of the moments
// with no change; whole checkpoints gather the whole weights and moments into the one-process
// format (zero3_whole) and a resume takes this rank's pieces (zero3_piece); sharded ones write and
// read each rank's pieces (zero3_piece_range; Note [Sharded checkpoints]).
#pragma once

#include <cstdint>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "blutensor/tensor.h"

namespace bludist {
class ProcessGroup;
class Zero3Unit;
}  // namespace bludist

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
// (350M), "d36" (774M), "d48" (1.5B), or "LxHxC" (L layers, H heads, width C; Note [Model shapes]
// in gpt2.cpp). Throws blu::Error for any other name.
GPT2Config gpt2_config(const std::string& name);

enum class Precision { kFp32, kTf32, kBf16 };
Precision parse_precision(const std::string& s);

struct NamedParam {
  std::string name;  // Hugging Face GPT-2 name, e.g. "h.0.attn.c_attn.weight"
  Tensor* tensor;    // our layout: linear weights [out, in] (HF Conv1D stores [in, out])
  bool decay;        // AdamW weight decay: 2-D weights only (not biases, LayerNorm, ...)
  bool hf_transposed;  // stored transposed in Hugging Face files
};

// How a parameter is cut across a tensor-parallel group (Note [Tensor-parallel GPT-2]).
enum class TpSplit {
  kReplicated,  // every rank holds the whole tensor
  kRows,        // dimension 0 in n equal parts (wte, c_fc weight and bias)
  kCols,        // dimension 1 in n equal parts (c_proj weights)
  kFusedQkv,    // c_attn weight / bias: this rank's heads of q, k and v (bludist::shard_fused_qkv)
};
// By Hugging Face name, e.g. "h.0.attn.c_attn.weight" -> kFusedQkv.
TpSplit tp_split(const std::string& name);

class GPT2 {
 public:
  // tp: a tensor-parallel group (Note [Tensor-parallel GPT-2]); null or of size 1: the whole model.
  // cp: a context-parallel group (Note [Context-parallel GPT-2]); null or of size 1: none. Not both.
  GPT2(const GPT2Config& cfg, Device device, std::shared_ptr<bludist::ProcessGroup> tp = nullptr,
       std::shared_ptr<bludist::ProcessGroup> cp = nullptr);
  ~GPT2();

  const GPT2Config& config() const { return cfg_; }
  Device device() const { return device_; }
  // The tensor-parallel group (null without one) and its size (1 without one).
  const std::shared_ptr<bludist::ProcessGroup>& tp_group() const { return tp_; }
  int tp_size() const { return tp_size_; }
  // Row chunks of the overlapped tensor-parallel GEMMs (bludist Note [Async TP]); 1: plain regions.
  void set_tp_overlap(int chunks) { tp_overlap_ = chunks; }
  // The MLP's GELU output recomputed in the backward instead of saved (Note [GELU recompute] in
  // blutensor; not under --tp). Bit for bit the same step.
  void set_recompute_gelu(bool on) { recompute_gelu_ = on; }
  // GPT-2 init from `seed` (std 0.02; residual projections std 0.02/sqrt(2L); biases 0; LN 1/0;
  // padded embedding rows 0). Same numbers on CPU and CUDA.
  void init_weights(uint64_t seed);

  std::vector<NamedParam> parameters();  // under --tp: this rank's shards, same order and names
  int64_t num_params() const;  // with the padded embedding (what MFU counts); the whole model's under --tp

  // idx, targets: [B, T] int32 on the model's device. Returns the mean cross-entropy loss (f32
  // scalar); if logits_out, also the logits [B, T, padded_vocab] (CUDA; [B, T, vocab_size] on
  // the CPU: Note [Padded vocabulary]) in the compute dtype. Under --tp: collective (every rank
  // of the group calls it with the same batch), and logits_out is this rank's [B, T, Vp/n] columns.
  // Under --cp: collective (the same batch on every rank of the group); the loss is the mean over
  // this rank's 2 chunks of T / (2 n) positions, logits_out holds those positions only.
  Tensor forward(const Tensor& idx, const Tensor& targets, Precision precision,
                 Tensor* logits_out = nullptr);
  // The whole-model shape of a parameter's local tensor (itself without tensor parallelism).
  Shape full_shape(const NamedParam& p) const;
  // This rank's part of a whole-model tensor cut as `split` says (`full` itself without --tp).
  Tensor tp_shard(const Tensor& full, TpSplit split) const;

  // Logits only (no loss), e.g. for sampling; last dim as in forward(). Under --tp: collective,
  // the columns all-gathered, [B, T, padded_vocab] (padding at -1e30) on every rank. Under --cp:
  // not collective, the whole sequence on this rank (the weights are replicated).
  Tensor logits(const Tensor& idx, Precision precision);

  // Note [ZeRO-3 GPT-2]: keeps only this rank's shards of every parameter (collective setup; the
  // whole values must be the same on every rank). parameters() then lists the shards (same names,
  // decay flags and order); forward() and logits() become collective over pg.
  void shard_zero3(std::shared_ptr<bludist::ProcessGroup> pg);
  bool zero3() const { return z3_root_ != nullptr; }
  // This rank's piece of a whole tensor shaped like parameter i (a checkpoint's moment).
  Tensor zero3_piece(std::size_t i, const Tensor& whole) const;
  // The elements [begin, end) of parameter i's flat whole value held by rank `rank` (the first
  // end - begin elements of its shard; Note [Sharded checkpoints] in src/train/sharded_checkpoint.h).
  std::pair<int64_t, int64_t> zero3_piece_range(std::size_t i, int rank) const;
  // Collective: the whole value of per-element state laid out like parameter i's shard (an
  // AdamW moment); and a GPT2 with the whole weights.
  Tensor zero3_gather_like(std::size_t i, const Tensor& shard_state) const;
  // keep = false: the collectives only (the ranks that do not write the checkpoint hold no copy).
  std::unique_ptr<GPT2> zero3_whole(bool keep = true);

  struct Block {
    Tensor ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
  };

 private:
  // After ln_f, [B, T, C]; wte_c is the token embedding in the compute dtype (cast once per
  // forward, shared by the embedding and the tied head).
  // The parameters outside the blocks for one forward (gathered under ZeRO-3) and wte in the
  // compute dtype (cast once per forward, shared by the embedding and the tied head).
  struct Root {
    Tensor wte, wpe, lnf_w, lnf_b, wte_c;
  };
  Root root(Precision precision);
  // pos: the positions of idx's columns (int64 [T]); context_parallel: attention by
  // bludist::ring_attention over the cp group (idx holds this rank's chunks).
  Tensor hidden(const Tensor& idx, const Tensor& pos, const Root& r, Precision precision, bool context_parallel);
  Tensor block(const Block& b, const Tensor& x, Precision precision, bool context_parallel);
  Tensor head(const Tensor& x, const Tensor& wte_c, Precision precision);
  // ZeRO-3: the unit and index holding parameter i of parameters().
  std::pair<bludist::Zero3Unit*, std::size_t> z3_slot(std::size_t i) const;
  GPT2Config cfg_;
  Device device_;
  std::shared_ptr<bludist::ProcessGroup> tp_;  // null: no tensor parallelism
  int tp_overlap_ = 1;
  bool recompute_gelu_ = false;
  bool linear_cross_entropy_ = true;      // Note [Linear cross-entropy] (blutensor)
  int64_t linear_cross_entropy_rows_ = 0;  // its chunk rows; 0: Note [Classifier chunk rows]
  int tp_size_ = 1, tp_rank_ = 0;
  std::shared_ptr<bludist::ProcessGroup> cp_;  // null: no context parallelism
  Tensor wte_, wpe_, lnf_w_, lnf_b_;
  std::vector<Block> blocks_;
  Tensor vocab_mask_;  // [padded_vocab] (this rank's [Vp/n] under --tp): 0 for real tokens, -1e30 for padding
  Tensor positions_;   // int64 [block_size]
  std::unique_ptr<bludist::Zero3Unit> z3_root_;  // ZeRO-3: wte, wpe, ln_f weight and bias
  std::vector<std::unique_ptr<bludist::Zero3Unit>> z3_blocks_;  // ZeRO-3: one unit per block
};

// Note [Classifier chunk rows]
// The rows of logits the classifier materialises at once on CUDA when not told otherwise (fused
// engine: --logits-chunk 0; the autograd model, so the captured and compiled steps:
// BLU_LINEAR_CROSS_ENTROPY_ROWS unset): ~800 MiB of 16-bit or ~1.6 GiB of fp32 logits, a multiple
// of 1024 rows, at least 1024; 8192 rows at GPT-2's 50304. One rule for every engine, so the
// engines race with the same classifier: each chunk's dW GEMM reads and writes the whole fp32
// [V, C] accumulator, so fewer, larger chunks are faster (fused, H200 session 7: 8192 bf16 rows 1%
// faster than 4096; compiled, H100 session 22: 8192 rows 458.6K tok/s against 453.45K with the
// 2624 of linear_cross_entropy's own 512-MiB-of-fp32 default). The CPU keeps that default.
int64_t auto_logits_chunk_rows(int64_t padded_vocab, int64_t elem_bytes);

// Writes <dir>/model.safetensors (Hugging Face GPT-2 names and layouts, vocab 50257, fp32) and
// <dir>/config.json (GPT2Config), so GPT2LMHeadModel.from_pretrained(dir) loads it.
void save_hf_weights(GPT2& model, const std::string& dir);
// The config.json save_hf_weights writes (Hugging Face GPT2Config), for the model `cfg`.
std::string hf_config_json(const GPT2Config& cfg);
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
