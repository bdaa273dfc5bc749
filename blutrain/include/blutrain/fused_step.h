// blutrain/fused_step.h: the fused GPT-2 training step on CUDA: forward, backward and AdamW as a
// fixed sequence of blublas launches over flat buffers, captured once as a CUDA graph and
// replayed every step. The autograd model (gpt2.h) stays the reference, the CPU engine, and the
// evaluation / sampling path; both share the same parameter and optimizer-state tensors, so
// checkpoints, resume and Hugging Face export are unchanged.
//
// Note [Fused step]
// What the step does, per micro-batch, and why (the design notes of each part are in
// fused_step.cpp and activation_plan.h):
//  - Activations stay in the compute dtype (bf16 in bf16 mode, f32 otherwise) from the embedding
//    to the logits: no fp32 round trips, no casts between ops.
//  - GEMM epilogues do the elementwise work: bias in the qkv / projection GEMMs, bias + GELU with
//    the pre-activation saved in the fc GEMM, bias gradients in the weight-gradient GEMMs.
//  - Residual adds are fused into the next LayerNorm (blublas::layernorm_forward with residual).
//  - The classifier is chunked (Note [Chunked classifier]): logits of R rows at a time, loss and
//    dlogits in place by the fused cross-entropy, then their two GEMMs; no B*T*V fp32 tensor.
//  - bf16 mode keeps fp32 master weights, fp32 gradients in one flat buffer, fp32 AdamW moments;
//    AdamW writes the bf16 weight copy (one flat buffer) in the same pass.
//  - All activations come from one planned arena (activation_plan.h); optional recompute.
//  - No host synchronisation inside the step; the learning rate reaches the captured AdamW
//    through device memory (Note [AdamW step scalars on the device] in blublas/adamw.h).
//  - Deterministic: every kernel has a fixed reduction order, so runs are bitwise reproducible.
#pragma once

#include "blutensor/cuda_fwd.h"  // cudaStream_t (an opaque handle in a CPU-only build)

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "blutrain/gpt2.h"
#include "blutrain/host_marks.h"
#include "blutrain/optimizer.h"

namespace bludist {
class ProcessGroup;
}  // namespace bludist

namespace blu::train {

struct FusedStepOptions {
  Precision precision = Precision::kBf16;
  int batch = 16;
  int seq_len = 1024;
  int64_t accum_steps = 1;           // micro-batches per optimizer step
  std::string recompute = "auto";    // none | gelu | layernorm | block | auto (bf16: none, f32: gelu)
  std::string attention = "auto";    // fp32 only: strict (SIMT FMA) | 3xtf32 | auto
  bool use_graph = true;             // capture the step as CUDA graph(s) (false: eager launches)
  int64_t logits_chunk_rows = 0;     // 0 = auto (~800 MiB of logits: 8192 rows bf16, 4096 f32)
  // bf16: whole | layer | auto (Note [Per-layer bf16 weight copy] in src/engine/fused_step.cpp).
  std::string weight_copy = "auto";
  double grad_clip = 1.0;            // global-norm clipping (0 = off)
  AdamWConfig adamw;
  // Data parallelism (--dp N, Note [Data-parallel fused step: streams and events under capture] in
  // src/engine/grad_sync.h): with a group of more than one rank, the last micro-batch's backward
  // averages the gradients across it in buckets of about dp_bucket_bytes, overlapped with the
  // backward and captured in the step's graph; clipping and AdamW then see the averaged gradients.
  // The weights must already agree on every rank (the trainer broadcasts rank 0's).
  std::shared_ptr<bludist::ProcessGroup> process_group;
  std::size_t dp_bucket_bytes = std::size_t(25) << 20;
  // Note [Embedding gradient by all-gather] in src/engine/fused_step.cpp (--dp-embedding-grad).
  bool dp_embedding_gather = false;
};

struct FusedStepResult {
  double loss = 0;       // mean loss over the step's micro-batches (this rank's rows)
  double grad_norm = 0;  // global gradient norm before clipping (of the averaged gradients)
};

class FusedGPT2Step {
 public:
  // Binds to the model's parameters and the optimizer's moments (CUDA model). Allocates the
  // gradient, bf16 weight-copy, activation and workspace buffers once.
  FusedGPT2Step(GPT2& model, AdamW& optimizer, const FusedStepOptions& options);
  ~FusedGPT2Step();
  FusedGPT2Step(const FusedGPT2Step&) = delete;
  FusedGPT2Step& operator=(const FusedGPT2Step&) = delete;

  // Fills the device token buffers of one micro-batch (B*T int32 inputs and targets) with work
  // issued on `stream` (e.g. BatchStager::stage).
  using StageFn = std::function<void(int32_t* inputs, int32_t* targets, cudaStream_t stream)>;

  // One optimizer step: accum_steps micro-batches (each staged by `stage`), gradient clipping and
  // AdamW at learning rate `lr` (the optimizer's step count advances by one). Waits for the step
  // to finish, then returns its loss and gradient norm. Throws blu::Error when a token id or
  // target was out of range (the device flags), naming which.
  FusedStepResult step(const StageFn& stage, double lr);

  // After the parameters changed outside the step (checkpoint load): refresh the bf16 copy.
  void sync_weights_from_model();

  // The gradient of the optimizer's parameter `index` (its params() order) left by the last
  // step, before clipping: an f32 view of the flat gradient buffer, shaped like the parameter.
  Tensor gradient(int index) const;

  // Note [Precision logger]
  // Activations and gradients of the last step by name, for tracing a numerical divergence to its
  // op: "h.<l>.x" (residual stream into block l), "h.<l>.ln_1", "h.<l>.attn.qkv", "h.<l>.attn.y"
  // (attention output), "h.<l>.x2" (x + attention), "h.<l>.ln_2", "h.<l>.mlp.pre" (the GELU
  // input), "h.<l>.mlp.gelu", "x_final", "ln_f", and "grad.<parameter name>" (Hugging Face names,
  // our [out, in] layout). A pattern ending in '*' matches every name with that prefix
  // ("grad.*", "h.3.*"). Activations of the last micro-batch; a buffer that the recompute mode
  // does not keep per layer is refused with a clear error. Values are in the compute dtype.
  std::vector<std::string> dump_names() const;
  std::map<std::string, Tensor> dump(const std::vector<std::string>& patterns) const;

  // The next step runs eagerly with an event after every launch (Note [Op timing]); afterwards
  // timing_json() holds its per-op and per-family device times (ms) and launch counts.
  void time_next_step();
  const std::string& timing_json() const;

  cudaStream_t stream() const;
  std::string describe() const;        // precision, attention, recompute, arena, graphs
  int64_t launches_per_step() const;   // kernel launches issued by one step (counted eagerly)
  HostMarks host_marks() const;        // the last step's (Note [Host issue time])

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace blu::train
