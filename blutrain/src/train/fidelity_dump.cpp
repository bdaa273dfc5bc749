// fidelity_dump.cpp: `blutrain fidelity-dump`: the inputs and our outputs of one forward and
// backward pass, in Hugging Face layout, for blutrain/tools/hf_fidelity.py to compare against
// transformers' GPT2LMHeadModel loaded from the same model.safetensors.
#include <cstring>
#include <filesystem>
#include <ostream>

#include "blutensor/autograd.h"
#include "blutensor/cuda_stream.h"
#include "blutensor/ops.h"
#include "blutrain/checkpoint_dir.h"
#include "blutrain/safetensors.h"
#include "blutrain/trainer.h"
#include "train/train_state.h"

namespace blu::train {

int run_fidelity_dump(const TrainConfig& cfg, std::ostream& out) {
  const Device device(cfg.device);
  const Precision precision = parse_precision(cfg.precision);
  if (device.is_cuda()) {
    blu::cuda::set_device(device.index);
    set_matmul_precision(precision == Precision::kTf32 ? MatmulPrecision::kHigh : MatmulPrecision::kHighest);
  }
  const GPT2Config mcfg = gpt2_config(cfg.checkpoint.empty() ? cfg.model : checkpoint_model_name(cfg.checkpoint));
  GPT2 model(mcfg, device);
  model.init_weights(cfg.seed);
  if (!cfg.checkpoint.empty()) load_checkpoint(cfg.checkpoint, model, nullptr);
  const std::string dir = cfg.out_dir;
  std::filesystem::create_directories(dir);
  save_hf_weights(model, dir);

  // A seeded random batch of real-vocabulary tokens.
  const int64_t B = cfg.batch_size, T = cfg.seq_len, V = mcfg.vocab_size, N = B * T;
  SampleRng rng{cfg.seed * 7919 + 17};
  std::vector<int32_t> idx(static_cast<size_t>(N)), tgt(static_cast<size_t>(N));
  std::vector<int64_t> idx64(static_cast<size_t>(N)), tgt64(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    idx[static_cast<size_t>(i)] = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(V));
    tgt[static_cast<size_t>(i)] = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(V));
    idx64[static_cast<size_t>(i)] = idx[static_cast<size_t>(i)];
    tgt64[static_cast<size_t>(i)] = tgt[static_cast<size_t>(i)];
  }
  write_safetensors(dir + "/batch.safetensors", {{"idx", "I64", {B, T}, idx64.data(), idx64.size() * 8},
                                                 {"targets", "I64", {B, T}, tgt64.data(), tgt64.size() * 8}},
                    {{"format", "pt"}});

  Tensor x = from_vector(idx, {B, T}).to(device);
  Tensor y = from_vector(tgt, {B, T}).to(device);
  Tensor logits;
  Tensor loss = model.forward(x, y, precision, &logits);
  loss.backward();
  const float loss_value = static_cast<float>(loss.item());
  std::vector<float> logits_host = tensor_to_floats(logits.detach().narrow(2, 0, V));

  std::vector<std::vector<float>> grads;
  std::vector<SafetensorsEntryView> entries;
  std::vector<NamedParam> params = model.parameters();
  grads.reserve(params.size());
  for (const NamedParam& p : params) {
    std::vector<float> g = tensor_to_floats(p.tensor->grad());
    Shape s = p.tensor->sizes();
    if (p.name == "wte.weight") {
      s[0] = V;
      g.resize(static_cast<size_t>(V * mcfg.n_embd));
    } else if (p.hf_transposed) {
      std::vector<float> t(g.size());
      for (int64_t r = 0; r < s[0]; ++r) {
        for (int64_t c = 0; c < s[1]; ++c) t[static_cast<size_t>(c * s[0] + r)] = g[static_cast<size_t>(r * s[1] + c)];
      }
      g = std::move(t);
      std::swap(s[0], s[1]);
    }
    grads.push_back(std::move(g));
    entries.push_back({"grad." + p.name, "F32", s, grads.back().data(), grads.back().size() * 4});
  }
  entries.push_back({"logits", "F32", {B, T, V}, logits_host.data(), logits_host.size() * 4});
  entries.push_back({"loss", "F32", {}, &loss_value, 4});
  write_safetensors(dir + "/ours.safetensors", entries,
                    {{"format", "pt"}, {"precision", cfg.precision}, {"model", mcfg.name}});
  out << "fidelity dump of " << mcfg.name << " (" << cfg.precision << ", B=" << B << " T=" << T << ") in " << dir
      << ": loss " << loss_value << "\n";
  return 0;
}

}  // namespace blu::train
