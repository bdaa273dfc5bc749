// gpt2.cpp: GPT-2 configs, parameters, initialisation and the forward pass on blutensor ops.
// Pre-LayerNorm blocks: x += proj(attn(ln_1(x))); x += fc_proj(gelu(fc(ln_2(x)))); ln_f; tied
// head. In bf16 mode the fp32 master weights are cast per forward (the casts are differentiable,
// so gradients land in fp32 .grad) and the loss is computed from fp32 logits. Under --tp the
// same blocks run on this rank's shards (Note [Tensor-parallel GPT-2] in blutrain/gpt2.h).
#include "blutrain/gpt2.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "bludist/context_parallel.h"
#include "bludist/process_group.h"
#include "bludist/tensor_parallel.h"
#include "bludist/zero3.h"
#include "blutensor/autograd.h"
#include "blutensor/env_switch.h"
#include "blutensor/ops.h"
#include "blutensor/random.h"
#include "blutrain/nvtx.h"

namespace blu::train {

namespace {

// Note [Model shapes]: besides the GPT-2 family by name, `--model LxHxC` is any GPT-2-shaped model
// of L layers, H heads and width C (C a multiple of H; the fused engine also needs C / H = 64). The
// name is what a checkpoint records, so a resumed run rebuilds the same shape from it. Small shapes
// make the whole trainer cheap to run under tools that slow kernels 100x (compute-sanitizer's
// memcheck on the fused engine: 2x2x128 instead of d12).
bool parse_model_shape(const std::string& name, GPT2Config& c) {
  int v[3] = {0, 0, 0};
  size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    if (i > 0) {
      if (pos >= name.size() || name[pos] != 'x') return false;
      ++pos;
    }
    const size_t start = pos;
    long long x = 0;
    while (pos < name.size() && name[pos] >= '0' && name[pos] <= '9' && pos - start < 7) {
      x = x * 10 + (name[pos] - '0');
      ++pos;
    }
    if (pos == start || x <= 0) return false;
    v[i] = static_cast<int>(x);
  }
  if (pos != name.size()) return false;
  BLU_CHECK(v[0] <= 1024 && v[1] <= 1024 && v[2] <= 65536, "model shape '", name,
            "': at most 1024 layers, 1024 heads and width 65536");
  BLU_CHECK(v[2] % v[1] == 0, "model shape '", name, "': the width ", v[2], " is not a multiple of the ", v[1],
            " heads");
  c.n_layer = v[0], c.n_head = v[1], c.n_embd = v[2];
  return true;
}

}  // namespace

GPT2Config gpt2_config(const std::string& name) {
  GPT2Config c;
  c.name = name;
  if (name == "tiny") {
    c.n_layer = 4;
    c.n_head = 4;
    c.n_embd = 128;
    c.block_size = 256;
  } else if (name == "d12") {
    c.n_layer = 12, c.n_head = 12, c.n_embd = 768;
  } else if (name == "d24") {
    c.n_layer = 24, c.n_head = 16, c.n_embd = 1024;
  } else if (name == "d36") {
    c.n_layer = 36, c.n_head = 20, c.n_embd = 1280;
  } else if (name == "d48") {
    c.n_layer = 48, c.n_head = 25, c.n_embd = 1600;
  } else if (!parse_model_shape(name, c)) {
    BLU_THROW("unknown model size '", name,
              "' (expected tiny, d12, d24, d36, d48, or LxHxC: layers x heads x width, e.g. 2x2x128)");
  }
  return c;
}

Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::kFp32;
  if (s == "tf32") return Precision::kTf32;
  if (s == "bf16") return Precision::kBf16;
  BLU_THROW("unknown precision '", s, "' (expected fp32, tf32, bf16)");
}

TpSplit tp_split(const std::string& name) {
  auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (name == "wte.weight") return TpSplit::kRows;
  if (ends_with("attn.c_attn.weight") || ends_with("attn.c_attn.bias")) return TpSplit::kFusedQkv;
  if (ends_with("attn.c_proj.weight") || ends_with("mlp.c_proj.weight")) return TpSplit::kCols;
  if (ends_with("mlp.c_fc.weight") || ends_with("mlp.c_fc.bias")) return TpSplit::kRows;
  return TpSplit::kReplicated;
}

GPT2::GPT2(const GPT2Config& cfg, Device device, std::shared_ptr<bludist::ProcessGroup> tp,
           std::shared_ptr<bludist::ProcessGroup> cp)
    : cfg_(cfg), device_(device) {
  // A/B switches, read once: BLU_LINEAR_CROSS_ENTROPY=0 keeps the lm head's logits and
  // cross_entropy; BLU_LINEAR_CROSS_ENTROPY_ROWS sets its chunk rows (0 or unset: Note [Classifier
  // chunk rows] on CUDA, linear_cross_entropy's default on the CPU).
  linear_cross_entropy_ = env_switch_on("BLU_LINEAR_CROSS_ENTROPY");
  if (const char* v = std::getenv("BLU_LINEAR_CROSS_ENTROPY_ROWS"))
    linear_cross_entropy_rows_ = std::max<int64_t>(0, std::strtoll(v, nullptr, 10));
  BLU_CHECK(cfg.n_embd % cfg.n_head == 0, "GPT2: n_embd ", cfg.n_embd, " not divisible by n_head ", cfg.n_head);
  if (cp && cp->size() > 1) {  // Note [Context-parallel GPT-2]
    BLU_CHECK(!(tp && tp->size() > 1), "GPT2: tensor and context parallelism together are not implemented");
    cp_ = std::move(cp);
  }
  if (tp && tp->size() > 1) {  // Note [Tensor-parallel GPT-2]
    tp_ = std::move(tp);
    tp_size_ = tp_->size();
    tp_rank_ = tp_->rank();
    BLU_CHECK(cfg.n_head % tp_size_ == 0, "--tp ", tp_size_, ": the ", cfg.name, " model's ", cfg.n_head,
              " attention heads do not split into ", tp_size_, " equal parts (tensor parallelism cuts whole heads)");
    BLU_CHECK(cfg.padded_vocab % tp_size_ == 0, "--tp ", tp_size_, ": the padded vocabulary of ", cfg.padded_vocab,
              " rows (", cfg.vocab_size, " tokens) does not split into ", tp_size_, " equal parts");
  }
  const int64_t C = cfg.n_embd, V = cfg.padded_vocab, n = tp_size_;
  auto param = [&](const Shape& shape) { return zeros(shape, TensorOptions(device).requires_grad(true)); };
  wte_ = param({V / n, C});
  wpe_ = param({cfg.block_size, C});
  for (int l = 0; l < cfg.n_layer; ++l) {
    Block b;
    b.ln1_w = param({C});
    b.ln1_b = param({C});
    b.qkv_w = param({3 * C / n, C});
    b.qkv_b = param({3 * C / n});
    b.proj_w = param({C, C / n});
    b.proj_b = param({C});
    b.ln2_w = param({C});
    b.ln2_b = param({C});
    b.fc_w = param({4 * C / n, C});
    b.fc_b = param({4 * C / n});
    b.fcproj_w = param({C, 4 * C / n});
    b.fcproj_b = param({C});
    blocks_.push_back(std::move(b));
  }
  lnf_w_ = param({C});
  lnf_b_ = param({C});
  std::vector<float> mask(static_cast<size_t>(V), 0.0f);
  for (int64_t i = cfg.vocab_size; i < V; ++i) mask[static_cast<size_t>(i)] = -1e30f;
  vocab_mask_ = from_vector(mask, {V}).narrow(0, tp_rank_ * (V / n), V / n).contiguous().to(device);
  positions_ = arange(static_cast<double>(cfg.block_size), TensorOptions(kInt64)).to(device);
}

Shape GPT2::full_shape(const NamedParam& p) const {
  Shape s = p.tensor->sizes();
  switch (tp_split(p.name)) {
    case TpSplit::kRows:
    case TpSplit::kFusedQkv: s[0] *= tp_size_; break;
    case TpSplit::kCols: s[1] *= tp_size_; break;
    case TpSplit::kReplicated: break;
  }
  return s;
}

std::vector<NamedParam> GPT2::parameters() {
  std::vector<NamedParam> out;
  out.push_back({"wte.weight", &wte_, true, false});
  out.push_back({"wpe.weight", &wpe_, true, false});
  for (int l = 0; l < cfg_.n_layer; ++l) {
    Block& b = blocks_[static_cast<size_t>(l)];
    const std::string p = "h." + std::to_string(l) + ".";
    out.push_back({p + "ln_1.weight", &b.ln1_w, false, false});
    out.push_back({p + "ln_1.bias", &b.ln1_b, false, false});
    out.push_back({p + "attn.c_attn.weight", &b.qkv_w, true, true});
    out.push_back({p + "attn.c_attn.bias", &b.qkv_b, false, false});
    out.push_back({p + "attn.c_proj.weight", &b.proj_w, true, true});
    out.push_back({p + "attn.c_proj.bias", &b.proj_b, false, false});
    out.push_back({p + "ln_2.weight", &b.ln2_w, false, false});
    out.push_back({p + "ln_2.bias", &b.ln2_b, false, false});
    out.push_back({p + "mlp.c_fc.weight", &b.fc_w, true, true});
    out.push_back({p + "mlp.c_fc.bias", &b.fc_b, false, false});
    out.push_back({p + "mlp.c_proj.weight", &b.fcproj_w, true, true});
    out.push_back({p + "mlp.c_proj.bias", &b.fcproj_b, false, false});
  }
  out.push_back({"ln_f.weight", &lnf_w_, false, false});
  out.push_back({"ln_f.bias", &lnf_b_, false, false});
  if (z3_root_) {  // Note [ZeRO-3 GPT-2]: the same names and decay flags, this rank's shards
    for (std::size_t i = 0; i < out.size(); ++i) {
      auto [unit, j] = z3_slot(i);
      out[i].tensor = &unit->mutable_shard(j);
    }
  }
  return out;
}

int64_t GPT2::num_params() const {
  // The whole model's count under --tp too (a split tensor holds 1/n of its elements); parameters()
  // only hands out pointers, nothing is changed here.
  int64_t n = 0;
  std::size_t i = 0;
  for (const NamedParam& p : const_cast<GPT2*>(this)->parameters()) {
    if (z3_root_) {  // a shard: the whole tensor's count
      auto [unit, j] = z3_slot(i++);
      n += unit->whole_numel(j);
      continue;
    }
    n += p.tensor->numel() * (tp_split(p.name) == TpSplit::kReplicated ? 1 : tp_size_);
  }
  return n;
}

void GPT2::init_weights(uint64_t seed) {
  NoGradGuard no_grad;
  Generator gen(seed);
  const double std_residual = 0.02 / std::sqrt(2.0 * cfg_.n_layer);
  for (NamedParam& p : parameters()) {
    // Under --tp the whole tensor is drawn (the one-process numbers) and this rank's part kept.
    Tensor t = tp_ ? zeros(full_shape(p), TensorOptions(device_)) : *p.tensor;
    const std::string& n = p.name;
    const bool is_ln_weight = n.find("ln_") != std::string::npos && n.find(".weight") != std::string::npos;
    if (is_ln_weight) {
      t.fill_(1.0);
    } else if (t.dim() == 1) {
      t.zero_();
    } else if (n.find("c_proj.weight") != std::string::npos) {
      t.normal_(0.0, std_residual, &gen);
    } else {
      t.normal_(0.0, 0.02, &gen);
    }
    // Padded embedding rows stay exactly zero (they get no gradient: Note [Padded vocabulary]).
    if (n == "wte.weight") t.narrow(0, cfg_.vocab_size, cfg_.padded_vocab - cfg_.vocab_size).zero_();
    if (tp_) p.tensor->copy_(tp_shard(t, tp_split(n)));
  }
}

Tensor GPT2::tp_shard(const Tensor& full, TpSplit split) const {
  if (!tp_) return full;
  switch (split) {
    case TpSplit::kRows: return bludist::shard_rows(full, *tp_);
    case TpSplit::kCols: return bludist::shard_cols(full, *tp_);
    case TpSplit::kFusedQkv: return bludist::shard_fused_qkv(full, cfg_.n_head, *tp_);
    case TpSplit::kReplicated: break;
  }
  return full;
}

namespace {
DType compute_dtype(Precision p) { return p == Precision::kBf16 ? kBFloat16 : kFloat32; }
}  // namespace

GPT2::~GPT2() = default;

namespace {
// A block's 12 tensors in parameters()' order (the ZeRO-3 unit's order), and back.
std::vector<Tensor> block_tensors(const GPT2::Block& b) {
  return {b.ln1_w, b.ln1_b, b.qkv_w, b.qkv_b, b.proj_w, b.proj_b, b.ln2_w, b.ln2_b, b.fc_w, b.fc_b, b.fcproj_w, b.fcproj_b};
}
GPT2::Block block_from(const std::vector<Tensor>& t) {
  return {t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11]};
}
}  // namespace

Tensor GPT2::block(const Block& b, const Tensor& x_in, Precision precision, bool context_parallel) {
  BLU_NVTX_RANGE("block");
  // Under --tp: this rank's H/n heads, C/n channels of them (Note [Tensor-parallel GPT-2]).
  const int64_t B = x_in.size(0), T = x_in.size(1), D = cfg_.n_embd / cfg_.n_head, H = cfg_.n_head / tp_size_,
                C = H * D;
  // The block's tensors in the compute dtype: one multi-tensor cast (Note [Multi-tensor cast] in
  // blutensor; bf16: 2 launches a block forward and backward instead of 24), nothing in fp32.
  const Block c = block_from(to_dtype_all(block_tensors(b), compute_dtype(precision)));
  // A column-parallel layer (its input's gradient all-reduced) and a row-parallel one (its output
  // all-reduced, the bias added once after the sum); plain linears without --tp. --tp-overlap N:
  // each all-reduce in N row chunks under the GEMM of the next (bludist Note [Async TP]).
  auto column_linear = [&](const Tensor& in, const Tensor& weight, const Tensor& bias) {
    if (!tp_) return linear(in, weight, bias);
    return bludist::tp_column_linear_overlapped(in, weight, bias, tp_, tp_overlap_);
  };
  auto row_linear = [&](const Tensor& in, const Tensor& weight, const Tensor& bias) {
    if (!tp_) return linear(in, weight, bias);
    return bludist::tp_row_linear_overlapped(in, weight, tp_, tp_overlap_) + bias;
  };
  Tensor x = x_in;
  {
    BLU_NVTX_RANGE("attn");
    Tensor h = layer_norm(x, c.ln1_w, c.ln1_b);
    Tensor qkv = column_linear(h, c.qkv_w, c.qkv_b);  // [B, T, 3C]
    std::vector<Tensor> parts = qkv.split(C, -1);
    auto heads = [&](const Tensor& t) { return t.reshape({B, T, H, D}).transpose(1, 2); };  // [B, H, T, D]
    Tensor y = context_parallel  // Note [Context-parallel GPT-2]
                   ? bludist::ring_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), true, cp_, true)
                   : scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), true);
    y = y.transpose(1, 2).reshape({B, T, C});
    x = x + row_linear(y, c.proj_w, c.proj_b);
  }
  {
    BLU_NVTX_RANGE("mlp");
    Tensor h = layer_norm(x, c.ln2_w, c.ln2_b);
    h = column_linear(h, c.fc_w, c.fc_b);
    if (recompute_gelu_ && !tp_) {  // Note [GELU recompute] (blutensor): the GELU output not saved
      x = x + gelu_linear(h, c.fcproj_w, c.fcproj_b);
    } else {
      x = x + row_linear(gelu(h), c.fcproj_w, c.fcproj_b);
    }
  }
  return x;
}

GPT2::Root GPT2::root(Precision precision) {
  Root r;
  if (z3_root_) {  // Note [ZeRO-3 GPT-2]: gathered for the step, reduce-scattered in backward
    std::vector<Tensor> g = z3_root_->gathered();
    r = {g[0], g[1], g[2], g[3], Tensor()};
  } else {
    r = {wte_, wpe_, lnf_w_, lnf_b_, Tensor()};
  }
  r.wte_c = r.wte.to(compute_dtype(precision));
  return r;
}

Tensor GPT2::hidden(const Tensor& idx, const Tensor& pos_ids, const Root& r, Precision precision,
                    bool context_parallel) {
  BLU_CHECK(idx.dim() == 2, "GPT2.forward: idx must be [B, T], got ", idx.describe());
  const int64_t T = idx.size(1);
  BLU_CHECK(T >= 1 && T <= cfg_.block_size, "GPT2.forward: sequence length ", T, " exceeds the model's context ",
            cfg_.block_size);
  const DType cd = compute_dtype(precision);
  Tensor x;
  {
    BLU_NVTX_RANGE("embed");
    Tensor tok = tp_ ? bludist::vocab_parallel_embedding(r.wte_c, idx, tp_) : embedding(r.wte_c, idx);  // [B, T, C]
    Tensor pos = embedding(r.wpe.to(cd), pos_ids);                                                    // [T, C]
    x = tok + pos;
  }
  for (int l = 0; l < cfg_.n_layer; ++l) {
    if (z3_root_) {  // Note [ZeRO-3 GPT-2]: the block's parameters gathered, the block recomputed in backward
      x = z3_blocks_[static_cast<size_t>(l)]->apply(
          [this, precision, context_parallel](const std::vector<Tensor>& p, const std::vector<Tensor>& in) {
            return std::vector<Tensor>{block(block_from(p), in[0], precision, context_parallel)};
          },
          {x})[0];
    } else {
      x = block(blocks_[static_cast<size_t>(l)], x, precision, context_parallel);
    }
  }
  return layer_norm(x, r.lnf_w.to(cd), r.lnf_b.to(cd));
}

Tensor GPT2::head(const Tensor& x, const Tensor& wte_c, Precision precision) {
  BLU_NVTX_RANGE("lm_head");
  if (tp_) return linear(bludist::tp_copy_to_region(x, tp_), wte_c, vocab_mask_.to(compute_dtype(precision)));
  if (device_.is_cpu()) return linear(x, wte_c.narrow(0, 0, cfg_.vocab_size));  // [B, T, V]
  return linear(x, wte_c, vocab_mask_.to(compute_dtype(precision)));            // [B, T, Vp]
}

Tensor GPT2::logits(const Tensor& idx, Precision precision) {
  const Root r = root(precision);
  Tensor local = head(hidden(idx, positions_.narrow(0, 0, idx.size(1)), r, precision, false), r.wte_c, precision);
  if (!tp_) return local;
  // [B, T, Vp/n] on each rank -> [n, B, T, Vp/n] in rank order -> [B, T, Vp].
  NoGradGuard no_grad;
  const int64_t B = local.size(0), T = local.size(1), cols = local.size(2);
  Tensor mine = local.detach().contiguous();
  Tensor all = empty({tp_size_, B, T, cols}, TensorOptions(mine.dtype()).device(mine.device()));
  tp_->all_gather(all, mine);
  return all.permute({1, 2, 0, 3}).reshape({B, T, tp_size_ * cols});
}

Tensor GPT2::forward(const Tensor& idx, const Tensor& targets, Precision precision, Tensor* logits_out) {
  BLU_CHECK(targets.sizes() == idx.sizes(), "GPT2.forward: targets ", targets.describe(), " do not match idx ",
            idx.describe());
  const Root r = root(precision);
  Tensor ids = idx, tgt = targets, pos = positions_.narrow(0, 0, idx.size(1));
  if (cp_) {  // Note [Context-parallel GPT-2]: this rank's chunks r and 2n-1-r of every sequence
    const int64_t n = cp_->size(), rk = cp_->rank(), T = idx.size(1);
    BLU_CHECK(T % (2 * n) == 0, "GPT2.forward: --cp ", n, " cuts each sequence into ", 2 * n,
              " equal chunks, but T = ", T, " is not a multiple of ", 2 * n);
    const int64_t c = T / (2 * n);
    auto mine = [&](const Tensor& t, int64_t dim) {
      return cat({t.narrow(dim, rk * c, c), t.narrow(dim, (2 * n - 1 - rk) * c, c)}, dim).contiguous();
    };
    ids = mine(idx, 1);
    tgt = mine(targets, 1);
    pos = mine(pos, 0);
  }
  Tensor h = hidden(ids, pos, r, precision, cp_ != nullptr);
  if (logits_out == nullptr && !tp_ && linear_cross_entropy_) {
    // Note [Linear cross-entropy] (blutensor): the loss without the [N, V] logits or their
    // gradient, in every precision (bf16: the chunks widened to fp32 inside the loss kernels).
    BLU_NVTX_RANGE("lm_head_loss");
    const int64_t N = ids.numel();
    const int64_t rows = linear_cross_entropy_rows_ > 0 || device_.is_cpu()
                             ? linear_cross_entropy_rows_
                             : auto_logits_chunk_rows(cfg_.padded_vocab, static_cast<int64_t>(h.element_size()));
    if (device_.is_cpu())
      return linear_cross_entropy(h, r.wte_c.narrow(0, 0, cfg_.vocab_size), Tensor(), tgt.reshape({N}), -100, rows);
    return linear_cross_entropy(h, r.wte_c, vocab_mask_.to(h.dtype()), tgt.reshape({N}), -100, rows);
  }
  Tensor logits = head(h, r.wte_c, precision);
  if (logits_out != nullptr) *logits_out = logits;
  BLU_NVTX_RANGE("loss");
  const int64_t N = ids.numel();
  Tensor flat = logits.reshape({N, logits.size(-1)});
  if (flat.dtype() != kFloat32) flat = flat.to(kFloat32);
  if (tp_) return bludist::vocab_parallel_cross_entropy(flat, tgt.reshape({N}), tp_);
  return cross_entropy(flat, tgt.reshape({N}));
}

// ---- ZeRO-3 (Note [ZeRO-3 GPT-2]) ----------------------------------------------------------
void GPT2::shard_zero3(std::shared_ptr<bludist::ProcessGroup> pg) {
  BLU_CHECK(!tp_ && !cp_, "GPT2: ZeRO-3 with tensor or context parallelism is not implemented");
  BLU_CHECK(!z3_root_, "GPT2::shard_zero3: already sharded");
  z3_root_ = std::make_unique<bludist::Zero3Unit>(std::vector<Tensor>{wte_, wpe_, lnf_w_, lnf_b_}, pg);
  for (Block& b : blocks_) {
    z3_blocks_.push_back(std::make_unique<bludist::Zero3Unit>(block_tensors(b), pg));
    b = Block{};  // the whole tensors go: only the shards stay
  }
  wte_ = wpe_ = lnf_w_ = lnf_b_ = Tensor();
  // Note [ZeRO-3 prefetch]: the embedding gather starts block 0's; block l's forward starts
  // block l + 1's, its backward (recompute) block l - 1's.
  const std::size_t n = z3_blocks_.size();
  if (n > 0) z3_root_->set_prefetch(z3_blocks_[0].get(), nullptr);
  for (std::size_t l = 0; l < n; ++l) {
    z3_blocks_[l]->set_prefetch(l + 1 < n ? z3_blocks_[l + 1].get() : nullptr, l > 0 ? z3_blocks_[l - 1].get() : nullptr);
  }
}

std::pair<bludist::Zero3Unit*, std::size_t> GPT2::z3_slot(std::size_t i) const {
  const std::size_t per_block = 12, last = 2 + per_block * blocks_.size();
  if (i < 2) return {z3_root_.get(), i};
  if (i >= last) return {z3_root_.get(), 2 + (i - last)};
  return {z3_blocks_[(i - 2) / per_block].get(), (i - 2) % per_block};
}

Tensor GPT2::zero3_piece(std::size_t i, const Tensor& whole) const {
  auto [unit, j] = z3_slot(i);
  return unit->piece_of(j, whole);
}

std::pair<int64_t, int64_t> GPT2::zero3_piece_range(std::size_t i, int rank) const {
  auto [unit, j] = z3_slot(i);
  return unit->piece_range(j, rank);
}

Tensor GPT2::zero3_gather_like(std::size_t i, const Tensor& shard_state) const {
  auto [unit, j] = z3_slot(i);
  return unit->gather_like(j, shard_state);
}

std::unique_ptr<GPT2> GPT2::zero3_whole(bool keep) {
  std::vector<NamedParam> mine = parameters();
  NoGradGuard no_grad;
  if (!keep) {
    for (std::size_t i = 0; i < mine.size(); ++i) (void)zero3_gather_like(i, *mine[i].tensor);
    return nullptr;
  }
  auto whole = std::make_unique<GPT2>(cfg_, device_);
  std::vector<NamedParam> theirs = whole->parameters();
  for (std::size_t i = 0; i < mine.size(); ++i) theirs[i].tensor->copy_(zero3_gather_like(i, *mine[i].tensor));
  return whole;
}

std::vector<float> tensor_to_floats(const Tensor& t) {
  Tensor c = t.detach().to(kCPU).to(kFloat32).contiguous();
  const float* p = c.data_ptr<float>();
  return std::vector<float>(p, p + c.numel());
}

void floats_to_tensor(const std::vector<float>& values, Tensor& t) {
  BLU_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "floats_to_tensor: ", values.size(),
            " values for ", t.describe());
  NoGradGuard no_grad;
  Tensor src = from_vector(values, t.sizes());
  t.copy_(src);
}

int64_t auto_logits_chunk_rows(int64_t padded_vocab, int64_t elem_bytes) {
  const int64_t budget_mib = elem_bytes >= 4 ? 1600 : 800;
  return std::max<int64_t>(1024, (budget_mib << 20) / (std::max<int64_t>(padded_vocab, 1) * elem_bytes) / 1024 * 1024);
}

}  // namespace blu::train
