// gpt2_io.cpp: GPT-2 weights in Hugging Face's layout: model.safetensors (names like
// "h.0.attn.c_attn.weight", Conv1D weights [in, out], vocab 50257) plus config.json, so that
// transformers' GPT2LMHeadModel.from_pretrained(dir) loads what we train and we load GPT-2.
#include <map>
#include <sstream>

#include "blutensor/error.h"
#include "blutrain/checkpoint_checksums.h"
#include "blutrain/files.h"
#include "blutrain/gpt2.h"
#include "blutensor/autograd.h"
#include "blutensor/json.h"
#include "blutensor/safetensors.h"

namespace blu::train {
namespace {

// A parameter as Hugging Face stores it: the real vocabulary rows of wte, Conv1D weights [in, out].
Tensor hf_view(const NamedParam& p, const GPT2Config& cfg) {
  Tensor t = p.tensor->detach();
  if (p.name == "wte.weight") return t.narrow(0, 0, cfg.vocab_size);
  if (p.hf_transposed) return t.t();
  return t;
}

void load_hf_tensors(GPT2& model, const std::string& bytes, const std::string& path) {
  const GPT2Config& cfg = model.config();
  SafetensorsData data = parse_safetensors(bytes, "'" + path + "'");
  NoGradGuard no_grad;
  for (const NamedParam& p : model.parameters()) {
    auto it = data.tensors.find(p.name);
    if (it == data.tensors.end()) it = data.tensors.find("transformer." + p.name);
    BLU_CHECK(it != data.tensors.end(), "'", path, "': no tensor '", p.name, "'");
    const Tensor expected = hf_view(p, cfg);
    BLU_CHECK(it->second.dtype() == kFloat32 && it->second.sizes() == expected.sizes(), "'", path, "': tensor '",
              p.name, "' is ", it->second.describe(), ", expected f32", expected.shape_str(),
              " (a checkpoint of a different model?)");
    Tensor dst = hf_view(p, cfg);  // a view of the parameter: copying into it writes the parameter
    dst.copy_(it->second);
    if (p.name == "wte.weight") {
      p.tensor->detach().narrow(0, cfg.vocab_size, cfg.padded_vocab - cfg.vocab_size).zero_();
    }
  }
}

}  // namespace

std::string hf_config_json(const GPT2Config& cfg) {
  std::ostringstream js;
  js << "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
     << "  \"vocab_size\": " << cfg.vocab_size << ",\n  \"n_positions\": " << cfg.block_size
     << ",\n  \"n_ctx\": " << cfg.block_size << ",\n  \"n_embd\": " << cfg.n_embd << ",\n  \"n_layer\": " << cfg.n_layer
     << ",\n  \"n_head\": " << cfg.n_head << ",\n  \"n_inner\": null,\n  \"activation_function\": \"gelu_new\",\n"
     << "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n  \"layer_norm_epsilon\": 1e-05,\n"
     << "  \"initializer_range\": 0.02,\n  \"bos_token_id\": 50256,\n  \"eos_token_id\": 50256,\n"
     << "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"float32\",\n  \"blutrain_model\": "
     << json::quote(cfg.name) << "\n}\n";
  return js.str();
}

void save_hf_weights(GPT2& model, const std::string& dir) {
  const GPT2Config& cfg = model.config();
  std::map<std::string, Tensor> tensors;
  for (const NamedParam& p : model.parameters()) tensors[p.name] = hf_view(p, cfg).to(kFloat32);
  write_file_atomic(dir + "/model.safetensors",
                    serialize_safetensors(tensors, {{"format", "pt"}, {"blutrain_model", cfg.name}},
                                          Checksums::kCrc32c));
  write_file_atomic(dir + "/config.json", hf_config_json(cfg));
}

void load_hf_weights(GPT2& model, const std::string& dir) {
  const GPT2Config& cfg = model.config();
  const std::string config_path = dir + "/config.json";
  if (file_exists(config_path)) {
    json::Value c = parse_json(read_checkpoint_file(dir, "config.json", "model config"), config_path);
    const int64_t L = json_member(c, "n_layer", config_path).as_integer();
    const int64_t H = json_member(c, "n_head", config_path).as_integer();
    const int64_t C = json_member(c, "n_embd", config_path).as_integer();
    BLU_CHECK(L == cfg.n_layer && H == cfg.n_head && C == cfg.n_embd, "checkpoint '", dir, "' holds a model with ", L,
              " layers, ", H, " heads, ", C, " channels; the ", cfg.name, " model has ", cfg.n_layer, ", ", cfg.n_head,
              ", ", cfg.n_embd, " (pass the matching --model)");
  }
  load_hf_tensors(model, read_checkpoint_file(dir, "model.safetensors", "model weights"), dir + "/model.safetensors");
}

void load_hf_safetensors(GPT2& model, const std::string& path) {
  load_hf_tensors(model, read_file(path, "model weights"), path);
}

}  // namespace blu::train
