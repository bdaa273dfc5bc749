// activation_plan.cpp: offsets of the fused step's activations in one arena
// (Note [Activation arena] in activation_plan.h).
#include "blutrain/activation_plan.h"

#include <cstdio>

#include "blutensor/error.h"

namespace blu::train {

Recompute parse_recompute(const std::string& s) {
  if (s == "none") return Recompute::kNone;
  if (s == "gelu") return Recompute::kGelu;
  if (s == "layernorm") return Recompute::kLayerNorm;
  if (s == "block") return Recompute::kBlock;
  BLU_THROW("--recompute '", s, "': expected none, gelu, layernorm or block");
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kGelu: return "gelu";
    case Recompute::kLayerNorm: return "layernorm";
    case Recompute::kBlock: return "block";
  }
  return "?";
}

namespace {

constexpr std::size_t kAlign = 256;

struct Bump {
  std::size_t next = 0;
  std::size_t take(std::size_t bytes) {
    const std::size_t at = next;
    next += (bytes + kAlign - 1) / kAlign * kAlign;
    return at;
  }
};

}  // namespace

ActivationPlan plan_activations(const ActivationPlanInput& in) {
  BLU_CHECK(in.n_layer > 0 && in.n_embd > 0 && in.n_head > 0 && in.padded_vocab > 0 && in.batch > 0 &&
                in.seq_len > 0 && (in.act_bytes == 2 || in.act_bytes == 4),
            "plan_activations: bad sizes (layers ", in.n_layer, ", C ", in.n_embd, ", heads ", in.n_head, ", B ",
            in.batch, ", T ", in.seq_len, ", element bytes ", in.act_bytes, ")");
  const int64_t rows = in.batch * in.seq_len;
  BLU_CHECK(in.logits_chunk_rows >= 1 && in.logits_chunk_rows <= rows, "plan_activations: logits chunk of ",
            in.logits_chunk_rows, " rows for B*T = ", rows);
  const std::size_t btc = static_cast<std::size_t>(rows) * in.n_embd * in.act_bytes;
  const std::size_t row_f32 = static_cast<std::size_t>(rows) * sizeof(float);
  const std::size_t lse_bytes = static_cast<std::size_t>(in.batch) * in.n_head * in.seq_len * sizeof(float);

  ActivationPlan p;
  p.in = in;
  Bump arena;
  const bool save_gelu = in.recompute == Recompute::kNone;
  const bool save_ln = in.recompute == Recompute::kNone || in.recompute == Recompute::kGelu;
  const bool save_block = in.recompute != Recompute::kBlock;

  // Shared slots first (each used by whatever is not saved).
  LayerBuffers slot{};
  if (!save_block) {
    slot.qkv = arena.take(3 * btc);
    slot.atty = arena.take(btc);
    slot.lse = arena.take(lse_bytes);
    slot.x2 = arena.take(btc);
    slot.pre = arena.take(4 * btc);
  }
  if (!save_ln) {
    slot.ln1 = arena.take(btc);
    slot.ln2 = arena.take(btc);
  }
  if (!save_gelu) slot.gelu = arena.take(4 * btc);
  p.tmp = arena.take(btc);
  p.dres = arena.take(btc);
  p.dbig = arena.take(4 * btc);
  p.logits = arena.take(static_cast<std::size_t>(in.logits_chunk_rows) * in.padded_vocab * in.act_bytes);
  p.row_losses = arena.take(row_f32);
  p.scratch_bytes = arena.next;

  for (int l = 0; l < in.n_layer; ++l) {
    LayerBuffers b = slot;
    b.x = arena.take(btc);
    b.ln1_mean = arena.take(row_f32);
    b.ln1_rstd = arena.take(row_f32);
    b.ln2_mean = arena.take(row_f32);
    b.ln2_rstd = arena.take(row_f32);
    if (save_block) {
      b.qkv = arena.take(3 * btc);
      b.atty = arena.take(btc);
      b.lse = arena.take(lse_bytes);
      b.x2 = arena.take(btc);
      b.pre = arena.take(4 * btc);
    }
    if (save_ln) {
      b.ln1 = arena.take(btc);
      b.ln2 = arena.take(btc);
    }
    if (save_gelu) b.gelu = arena.take(4 * btc);
    p.layers.push_back(b);
  }
  p.x_final = arena.take(btc);
  p.lnf = arena.take(btc);
  p.lnf_mean = arena.take(row_f32);
  p.lnf_rstd = arena.take(row_f32);
  p.total_bytes = arena.next;
  p.saved_bytes = p.total_bytes - p.scratch_bytes;
  return p;
}

std::string ActivationPlan::describe() const {
  char buf[200];
  const double mib = 1024.0 * 1024.0;
  std::snprintf(buf, sizeof(buf), "activations (recompute %s): saved %.0f MiB + scratch %.0f MiB = %.0f MiB",
                recompute_name(in.recompute), saved_bytes / mib, scratch_bytes / mib, total_bytes / mib);
  return buf;
}

}  // namespace blu::train
