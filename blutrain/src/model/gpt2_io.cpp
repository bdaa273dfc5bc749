// gpt2_io.cpp: GPT-2 weights in Hugging Face's layout: model.safetensors (names like
// "h.0.attn.c_attn.weight", Conv1D weights [in, out], vocab 50257) plus config.json, so that
// transformers' GPT2LMHeadModel.from_pretrained(dir) loads what we train and we load GPT-2.
#include <cstring>
#include <sstream>

#include "blutensor/error.h"
#include "blutrain/files.h"
#include "blutrain/gpt2.h"
#include "blutrain/json.h"
#include "blutrain/safetensors.h"

namespace blu::train {
namespace {

std::vector<float> transpose2d(const std::vector<float>& a, int64_t rows, int64_t cols) {
  std::vector<float> t(a.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) t[static_cast<size_t>(c * rows + r)] = a[static_cast<size_t>(r * cols + c)];
  }
  return t;
}

// The HF-layout shape and values of one parameter.
struct HfTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

HfTensor to_hf(const NamedParam& p, const GPT2Config& cfg) {
  HfTensor h;
  h.values = tensor_to_floats(*p.tensor);
  h.shape = p.tensor->sizes();
  if (p.name == "wte.weight") {
    h.shape[0] = cfg.vocab_size;
    h.values.resize(static_cast<size_t>(cfg.vocab_size * cfg.n_embd));
  } else if (p.hf_transposed) {
    h.values = transpose2d(h.values, h.shape[0], h.shape[1]);
    std::swap(h.shape[0], h.shape[1]);
  }
  return h;
}

}  // namespace

void save_hf_weights(GPT2& model, const std::string& dir) {
  const GPT2Config& cfg = model.config();
  std::vector<HfTensor> hf;
  std::vector<SafetensorsEntryView> entries;
  std::vector<NamedParam> params = model.parameters();
  hf.reserve(params.size());
  for (const NamedParam& p : params) hf.push_back(to_hf(p, cfg));
  for (size_t i = 0; i < params.size(); ++i) {
    entries.push_back({params[i].name, "F32", hf[i].shape, hf[i].values.data(), hf[i].values.size() * 4});
  }
  write_safetensors(dir + "/model.safetensors", entries, {{"format", "pt"}, {"blutrain_model", cfg.name}});
  std::ostringstream js;
  js << "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
     << "  \"vocab_size\": " << cfg.vocab_size << ",\n  \"n_positions\": " << cfg.block_size
     << ",\n  \"n_ctx\": " << cfg.block_size << ",\n  \"n_embd\": " << cfg.n_embd << ",\n  \"n_layer\": " << cfg.n_layer
     << ",\n  \"n_head\": " << cfg.n_head << ",\n  \"n_inner\": null,\n  \"activation_function\": \"gelu_new\",\n"
     << "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n  \"layer_norm_epsilon\": 1e-05,\n"
     << "  \"initializer_range\": 0.02,\n  \"bos_token_id\": 50256,\n  \"eos_token_id\": 50256,\n"
     << "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"float32\",\n  \"blutrain_model\": "
     << json::quote(cfg.name) << "\n}\n";
  write_file_atomic(dir + "/config.json", js.str());
}

void load_hf_weights(GPT2& model, const std::string& dir) {
  const GPT2Config& cfg = model.config();
  const std::string config_path = dir + "/config.json";
  if (file_exists(config_path)) {
    json::Value c = json::parse(read_file(config_path, "model config"), config_path);
    const int64_t L = c.at("n_layer", config_path).as_int64(config_path);
    const int64_t H = c.at("n_head", config_path).as_int64(config_path);
    const int64_t C = c.at("n_embd", config_path).as_int64(config_path);
    BLU_CHECK(L == cfg.n_layer && H == cfg.n_head && C == cfg.n_embd, "checkpoint '", dir, "' holds a model with ", L,
              " layers, ", H, " heads, ", C, " channels; the ", cfg.name, " model has ", cfg.n_layer, ", ", cfg.n_head,
              ", ", cfg.n_embd, " (pass the matching --model)");
  }
  SafetensorsFile f = SafetensorsFile::read(dir + "/model.safetensors");
  for (const NamedParam& p : model.parameters()) {
    std::vector<int64_t> shape = p.tensor->sizes();
    if (p.name == "wte.weight") shape[0] = cfg.vocab_size;
    else if (p.hf_transposed) std::swap(shape[0], shape[1]);
    std::string name = p.name;
    if (!f.has(name) && f.has("transformer." + name)) name = "transformer." + name;
    const SafetensorsEntryView& e = f.get(name, "F32", shape);
    std::vector<float> v(e.nbytes / 4);
    std::memcpy(v.data(), e.data, e.nbytes);
    if (p.name == "wte.weight") {
      v.resize(static_cast<size_t>(cfg.padded_vocab * cfg.n_embd), 0.0f);  // padded rows: 0
    } else if (p.hf_transposed) {
      v = transpose2d(v, shape[0], shape[1]);
    }
    floats_to_tensor(v, *p.tensor);
  }
}

}  // namespace blu::train
