// gpt2.cpp: GPT-2 configs, parameters, initialisation and the forward pass on blutensor ops.
// Pre-LayerNorm blocks: x += proj(attn(ln_1(x))); x += fc_proj(gelu(fc(ln_2(x)))); ln_f; tied
// head. In bf16 mode the fp32 master weights are cast per forward (the casts are differentiable,
// so gradients land in fp32 .grad) and the loss is computed from fp32 logits.
#include "blutrain/gpt2.h"

#include <cmath>

#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "blutensor/random.h"
#include "blutrain/nvtx.h"

namespace blu::train {

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
  } else {
    BLU_THROW("unknown model size '", name, "' (expected tiny, d12, d24, d36, d48)");
  }
  return c;
}

Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::kFp32;
  if (s == "tf32") return Precision::kTf32;
  if (s == "bf16") return Precision::kBf16;
  BLU_THROW("unknown precision '", s, "' (expected fp32, tf32, bf16)");
}

GPT2::GPT2(const GPT2Config& cfg, Device device) : cfg_(cfg), device_(device) {
  BLU_CHECK(cfg.n_embd % cfg.n_head == 0, "GPT2: n_embd ", cfg.n_embd, " not divisible by n_head ", cfg.n_head);
  const int64_t C = cfg.n_embd, V = cfg.padded_vocab;
  auto param = [&](const Shape& shape) { return zeros(shape, TensorOptions(device).requires_grad(true)); };
  wte_ = param({V, C});
  wpe_ = param({cfg.block_size, C});
  for (int l = 0; l < cfg.n_layer; ++l) {
    Block b;
    b.ln1_w = param({C});
    b.ln1_b = param({C});
    b.qkv_w = param({3 * C, C});
    b.qkv_b = param({3 * C});
    b.proj_w = param({C, C});
    b.proj_b = param({C});
    b.ln2_w = param({C});
    b.ln2_b = param({C});
    b.fc_w = param({4 * C, C});
    b.fc_b = param({4 * C});
    b.fcproj_w = param({C, 4 * C});
    b.fcproj_b = param({C});
    blocks_.push_back(std::move(b));
  }
  lnf_w_ = param({C});
  lnf_b_ = param({C});
  std::vector<float> mask(static_cast<size_t>(V), 0.0f);
  for (int64_t i = cfg.vocab_size; i < V; ++i) mask[static_cast<size_t>(i)] = -1e30f;
  vocab_mask_ = from_vector(mask, {V}).to(device);
  positions_ = arange(static_cast<double>(cfg.block_size), TensorOptions(kInt64)).to(device);
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
  return out;
}

int64_t GPT2::num_params() const {
  int64_t n = wte_.numel() + wpe_.numel() + lnf_w_.numel() + lnf_b_.numel();
  for (const Block& b : blocks_) {
    for (const Tensor* t : {&b.ln1_w, &b.ln1_b, &b.qkv_w, &b.qkv_b, &b.proj_w, &b.proj_b, &b.ln2_w, &b.ln2_b,
                            &b.fc_w, &b.fc_b, &b.fcproj_w, &b.fcproj_b}) {
      n += t->numel();
    }
  }
  return n;
}

void GPT2::init_weights(uint64_t seed) {
  NoGradGuard no_grad;
  Generator gen(seed);
  const double std_residual = 0.02 / std::sqrt(2.0 * cfg_.n_layer);
  for (NamedParam& p : parameters()) {
    Tensor& t = *p.tensor;
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
  }
  // Padded embedding rows stay exactly zero (they get no gradient: Note [Padded vocabulary]).
  wte_.narrow(0, cfg_.vocab_size, cfg_.padded_vocab - cfg_.vocab_size).zero_();
}

namespace {
DType compute_dtype(Precision p) { return p == Precision::kBf16 ? kBFloat16 : kFloat32; }
}  // namespace

Tensor GPT2::hidden(const Tensor& idx, const Tensor& wte_c, Precision precision) {
  BLU_CHECK(idx.dim() == 2, "GPT2.forward: idx must be [B, T], got ", idx.describe());
  const int64_t B = idx.size(0), T = idx.size(1), C = cfg_.n_embd, H = cfg_.n_head, D = C / H;
  BLU_CHECK(T >= 1 && T <= cfg_.block_size, "GPT2.forward: sequence length ", T, " exceeds the model's context ",
            cfg_.block_size);
  const DType cd = compute_dtype(precision);
  auto w = [cd](const Tensor& p) { return p.to(cd); };
  Tensor x;
  {
    BLU_NVTX_RANGE("embed");
    Tensor tok = embedding(wte_c, idx);                      // [B, T, C]
    Tensor pos = embedding(w(wpe_), positions_.narrow(0, 0, T));  // [T, C]
    x = tok + pos;
  }
  for (int l = 0; l < cfg_.n_layer; ++l) {
    BLU_NVTX_RANGE("block");
    const Block& b = blocks_[static_cast<size_t>(l)];
    {
      BLU_NVTX_RANGE("attn");
      Tensor h = layer_norm(x, w(b.ln1_w), w(b.ln1_b));
      Tensor qkv = linear(h, w(b.qkv_w), w(b.qkv_b));  // [B, T, 3C]
      std::vector<Tensor> parts = qkv.split(C, -1);
      auto heads = [&](const Tensor& t) { return t.reshape({B, T, H, D}).transpose(1, 2); };  // [B, H, T, D]
      Tensor y = scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), true);
      y = y.transpose(1, 2).reshape({B, T, C});
      x = x + linear(y, w(b.proj_w), w(b.proj_b));
    }
    {
      BLU_NVTX_RANGE("mlp");
      Tensor h = layer_norm(x, w(b.ln2_w), w(b.ln2_b));
      h = gelu(linear(h, w(b.fc_w), w(b.fc_b)));
      x = x + linear(h, w(b.fcproj_w), w(b.fcproj_b));
    }
  }
  return layer_norm(x, w(lnf_w_), w(lnf_b_));
}

Tensor GPT2::head(const Tensor& x, const Tensor& wte_c, Precision precision) {
  BLU_NVTX_RANGE("lm_head");
  if (device_.is_cpu()) return linear(x, wte_c.narrow(0, 0, cfg_.vocab_size));  // [B, T, V]
  return linear(x, wte_c, vocab_mask_.to(compute_dtype(precision)));            // [B, T, Vp]
}

Tensor GPT2::logits(const Tensor& idx, Precision precision) {
  const Tensor wte_c = wte_.to(compute_dtype(precision));
  return head(hidden(idx, wte_c, precision), wte_c, precision);
}

Tensor GPT2::forward(const Tensor& idx, const Tensor& targets, Precision precision, Tensor* logits_out) {
  BLU_CHECK(targets.sizes() == idx.sizes(), "GPT2.forward: targets ", targets.describe(), " do not match idx ",
            idx.describe());
  const Tensor wte_c = wte_.to(compute_dtype(precision));
  Tensor logits = head(hidden(idx, wte_c, precision), wte_c, precision);
  if (logits_out != nullptr) *logits_out = logits;
  BLU_NVTX_RANGE("loss");
  const int64_t N = idx.numel();
  Tensor flat = logits.reshape({N, logits.size(-1)});
  if (flat.dtype() != kFloat32) flat = flat.to(kFloat32);
  return cross_entropy(flat, targets.reshape({N}));
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

}  // namespace blu::train
