// blutrain/activation_plan.h: the static memory plan of the fused GPT-2 step (Note [Activation arena]):
// which activations are saved per layer for the backward pass, which live in shared scratch
// slots, and the byte offset of each in one arena. Pure arithmetic (no CUDA), so it is unit
// tested on the CPU and its total is the step's activation memory, known before any allocation.
//
// Note [Activation arena]
// The fused step (blutrain/fused_step.h) allocates all its activations as ONE block from the
// caching allocator, at construction, and never allocates during a step, so the step can be
// captured as a CUDA graph and its memory is exactly what this plan says. Per layer l the
// forward saves what the backward reads:
//   x[l]      the residual stream entering block l (x[L] enters ln_f)           1 BTC
//   ln1, ln2  the LayerNorm outputs (inputs of the qkv and fc GEMMs)            2 BTC
//   qkv       the fused q, k, v projection                                      3 BTC
//   atty      the attention output (before the projection)                      1 BTC
//   x2        x[l] + attention projection (input of ln_2)                       1 BTC
//   pre       the fc pre-activation (the GELU input)                            4 BTC
//   gelu      gelu(pre) (input of the fc_proj weight gradient)                  4 BTC
//   lse, LayerNorm mean and rstd: fp32, per row
// Recompute modes trade FLOPs for memory (--recompute):
//   none       everything above is saved                                       16 BTC / layer
//   gelu       gelu is recomputed from pre in the backward (one elementwise pass) 12 BTC
//   layernorm  gelu, and ln1/ln2 recomputed from x / x2 with the saved stats    10 BTC
//   block      only x[l] (and the fp32 stats) are saved; the whole block forward is re-run
//              before its backward (about a third more GEMM work)              1 BTC
// What is not saved lives in a shared slot. Scratch is shared by the forward and the backward:
//   tmp   (1 BTC): attention-projection / fc_proj outputs in the forward; the gradient of an
//                  activation of width C in the backward (datty, dln1, dln2, dlnf)
//   dres  (1 BTC): the gradient of the residual stream
//   dbig  (4 BTC): d(gelu) / d(pre), then d(qkv)
//   logits (R x Vp): one chunk of R rows of logits, turned into dlogits in place by the fused
//                  cross-entropy (Note [Chunked classifier] in fused_step.cpp)
// Offsets are 256-byte aligned (16-byte vector and TMA alignment with room to spare).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace blu::train {

enum class Recompute { kNone, kGelu, kLayerNorm, kBlock };
Recompute parse_recompute(const std::string& s);  // none | gelu | layernorm | block
const char* recompute_name(Recompute r);

struct ActivationPlanInput {
  int n_layer = 12, n_embd = 768, n_head = 12, padded_vocab = 50304;
  int64_t batch = 16, seq_len = 1024;
  std::size_t act_bytes = 2;        // bytes per activation element (2: bf16, 4: f32)
  Recompute recompute = Recompute::kGelu;
  int64_t logits_chunk_rows = 4096;  // rows of logits materialised at once (<= B*T)
};

// Byte offsets into the arena; a per-layer buffer that is not saved points at its shared slot
// (so the same offset repeats across layers).
struct LayerBuffers {
  std::size_t x, ln1, qkv, atty, lse, x2, ln2, pre, gelu;
  std::size_t ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;
};

struct ActivationPlan {
  ActivationPlanInput in;
  std::vector<LayerBuffers> layers;  // n_layer entries
  std::size_t x_final = 0;           // x[L], the input of ln_f
  std::size_t lnf = 0, lnf_mean = 0, lnf_rstd = 0;
  std::size_t tmp = 0, dres = 0, dbig = 0, logits = 0;
  std::size_t row_losses = 0;        // f32 [B*T]
  std::size_t total_bytes = 0;
  std::size_t saved_bytes = 0;       // per-layer saved activations, all layers (for reports)
  std::size_t scratch_bytes = 0;     // shared slots + logits chunk

  std::string describe() const;  // one line: mode, saved / scratch / total in MiB
};

// Throws blu::Error for non-positive sizes or a chunk larger than B*T.
ActivationPlan plan_activations(const ActivationPlanInput& in);

}  // namespace blu::train
