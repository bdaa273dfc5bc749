// sampling.cpp: autoregressive sampling (temperature, top-k) and the `sample` subcommand.
// Sampling recomputes the (cropped) context each token: simple and exact, and the tiny model and
// short samples make a KV cache unnecessary here.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <ostream>

#include "blutensor/autograd.h"
#include "blutensor/json.h"
#include "blutensor/ops.h"
#include "blutrain/checkpoint_dir.h"
#include "blutrain/corpus_vocab.h"
#include "blutrain/tokenizer.h"
#include "blutrain/trainer.h"
#include "common/splitmix64.h"
#include "train/train_state.h"

namespace blu::train {

uint64_t SampleRng::next_u64() { return splitmix64_next(state); }

double SampleRng::next_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

std::vector<int32_t> generate(GPT2& model, Precision precision, const std::vector<int32_t>& prompt, int n_tokens,
                              double temperature, int top_k, SampleRng& rng) {
  NoGradGuard no_grad;
  const GPT2Config& cfg = model.config();
  std::vector<int32_t> seq =
      prompt.empty() ? std::vector<int32_t>{to_model_id(cfg.vocab_ids, Tokenizer::kEndOfText)} : prompt;
  std::vector<int32_t> out;
  for (int i = 0; i < n_tokens; ++i) {
    const size_t ctx = std::min<size_t>(seq.size(), static_cast<size_t>(cfg.block_size));
    std::vector<int32_t> window(seq.end() - static_cast<std::ptrdiff_t>(ctx), seq.end());
    Tensor idx = from_vector(window, {1, static_cast<int64_t>(ctx)}).to(model.device());
    Tensor logits = model.logits(idx, precision);  // [1, ctx, Vp]
    Tensor last = logits.select(1, static_cast<int64_t>(ctx) - 1).select(0, 0).narrow(0, 0, cfg.vocab_size);
    std::vector<double> z = last.to_double_vector();
    int32_t next;
    if (temperature <= 0) {
      next = static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
    } else {
      std::vector<int32_t> order(z.size());
      std::iota(order.begin(), order.end(), 0);
      size_t k = (top_k > 0 && static_cast<size_t>(top_k) < z.size()) ? static_cast<size_t>(top_k) : z.size();
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                        [&](int32_t a, int32_t b) { return z[static_cast<size_t>(a)] > z[static_cast<size_t>(b)] || (z[static_cast<size_t>(a)] == z[static_cast<size_t>(b)] && a < b); });
      const double zmax = z[static_cast<size_t>(order[0])];
      std::vector<double> p(k);
      double total = 0;
      for (size_t j = 0; j < k; ++j) total += p[j] = std::exp((z[static_cast<size_t>(order[j])] - zmax) / temperature);
      double u = rng.next_double() * total;
      size_t j = 0;
      while (j + 1 < k && u >= p[j]) u -= p[j++];
      next = order[j];
    }
    seq.push_back(next);
    out.push_back(next);
  }
  return out;
}

std::vector<int32_t> encode_prompt(const Tokenizer& tok, const GPT2Config& cfg, const std::string& text) {
  std::vector<int32_t> ids = text.empty() ? std::vector<int32_t>{} : tok.encode(text);
  for (int32_t& id : ids) {
    const int32_t m = to_model_id(cfg.vocab_ids, id);
    BLU_CHECK(m >= 0, "prompt token ", id, " (", json::quote(tok.decode(std::vector<int32_t>{id})),
              ") is not in the model's corpus vocabulary of ", cfg.vocab_ids.size(),
              " ids (Note [Corpus vocabulary]): rephrase the prompt");
    id = m;
  }
  return ids;
}

std::string decode_sample(const Tokenizer& tok, const GPT2Config& cfg, const std::vector<int32_t>& ids) {
  std::vector<int32_t> gpt2(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) gpt2[i] = to_gpt2_id(cfg.vocab_ids, ids[i]);
  return tok.decode(gpt2);
}

int run_sample(const TrainConfig& cfg, std::ostream& out) {
  const std::string dir = cfg.checkpoint.empty() ? latest_checkpoint(cfg.out_dir) : cfg.checkpoint;
  BLU_CHECK(!dir.empty(), "sample: no checkpoint in '", cfg.out_dir, "' (train first, or pass --checkpoint DIR)");
  GPT2 model(checkpoint_model_config(dir), Device(cfg.device));  // the checkpoint decides
  TrainState st = load_checkpoint(dir, model, nullptr);
  Tokenizer tok = Tokenizer::from_dir(cfg.vocab_dir.empty() ? Tokenizer::default_dir() : cfg.vocab_dir);
  SampleRng rng{cfg.seed};
  std::vector<int32_t> prompt = encode_prompt(tok, model.config(), cfg.prompt);
  std::vector<int32_t> ids = generate(model, parse_precision(cfg.precision), prompt, cfg.sample_tokens, cfg.temperature,
                                      cfg.top_k, rng);
  out << "checkpoint " << dir << " (step " << st.step << ")\n" << cfg.prompt << decode_sample(tok, model.config(), ids)
      << "\n";
  return 0;
}

}  // namespace blu::train
