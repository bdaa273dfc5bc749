// fidelity_dump.cpp: `blutrain fidelity-dump`: the inputs and our outputs of one forward and
// backward pass, in Hugging Face layout, for blutrain/tools/hf_fidelity.py to compare against
// transformers' GPT2LMHeadModel loaded from the same model.safetensors.
#include <map>
#include <filesystem>
#include <ostream>

#include "blutensor/autograd.h"
#include "blutensor/cuda_stream.h"
#include "blutensor/ops.h"
#include "blutrain/checkpoint_dir.h"
#include "blutensor/safetensors.h"
#include "blutrain/files.h"
#include "blutrain/trainer.h"
#include "train/train_state.h"

namespace blu::train {

int run_fidelity_dump(const TrainConfig& cfg, std::ostream& out) {
  const Device device(cfg.device);
  const Precision precision = parse_precision(cfg.precision);
  use_device(device, precision, cfg.attention);
  const GPT2Config mcfg = cfg.checkpoint.empty() ? gpt2_config(cfg.model) : checkpoint_model_config(cfg.checkpoint);
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
  write_file_atomic(dir + "/batch.safetensors",
                    serialize_safetensors({{"idx", from_vector(idx64, {B, T})}, {"targets", from_vector(tgt64, {B, T})}},
                                          {{"format", "pt"}}));

  Tensor x = from_vector(idx, {B, T}).to(device);
  Tensor y = from_vector(tgt, {B, T}).to(device);
  Tensor logits;
  Tensor loss = model.forward(x, y, precision, &logits);
  loss.backward();
  const float loss_value = static_cast<float>(loss.item());
  std::map<std::string, Tensor> ours;
  ours["logits"] = logits.detach().narrow(2, 0, V).to(kFloat32);
  ours["loss"] = scalar_tensor(loss_value);
  for (const NamedParam& p : model.parameters()) {
    Tensor g = p.tensor->grad().to(kFloat32);
    if (p.name == "wte.weight") {
      g = g.narrow(0, 0, V);
    } else if (p.hf_transposed) {
      g = g.t();
    }
    ours["grad." + p.name] = g;
  }
  write_file_atomic(dir + "/ours.safetensors",
                    serialize_safetensors(ours, {{"format", "pt"}, {"precision", cfg.precision}, {"model", mcfg.name}}));
  out << "fidelity dump of " << mcfg.name << " (" << cfg.precision << ", B=" << B << " T=" << T << ") in " << dir
      << ": loss " << loss_value << "\n";
  return 0;
}

}  // namespace blu::train
