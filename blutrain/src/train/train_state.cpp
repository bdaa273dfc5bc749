// train_state.cpp: a training checkpoint: HF-layout weights + config.json (gpt2_io.cpp), AdamW
// moments in our layout (optimizer.safetensors), and state.json (step, cursor, RNG, losses,
// config) written last, so its presence marks a complete checkpoint.
#include "train/train_state.h"

#include "train/sharded_checkpoint.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>

#include "blutensor/error.h"
#include "blutrain/checkpoint_checksums.h"
#include "blutrain/checkpoint_dir.h"
#include "blutrain/corpus_vocab.h"
#include "blutrain/files.h"
#include "blutensor/autograd.h"
#include "blutensor/json.h"
#include "blutensor/safetensors.h"
#include "blutrain/version.h"

namespace blu::train {
namespace {

// ",\n  \"vocab_ids\": [...]" for a corpus vocabulary (Note [Corpus vocabulary]); nothing for GPT-2's.
std::string vocab_member(const std::vector<int32_t>& ids) {
  return ids.empty() ? std::string() : ",\n  \"vocab_ids\": " + vocab_ids_json(ids);
}

// "GPT-2's 50257 ids" or "<n> corpus ids", for messages.
std::string vocab_name(const std::vector<int32_t>& ids) {
  return ids.empty() ? std::string("GPT-2's 50257 ids") : std::to_string(ids.size()) + " corpus ids";
}

std::string losses_json(const std::vector<LossPoint>& pts) {
  std::ostringstream os;
  os.precision(17);
  os << "[";
  for (size_t i = 0; i < pts.size(); ++i) os << (i ? "," : "") << "[" << pts[i].step << "," << pts[i].loss << "]";
  os << "]";
  return os.str();
}

std::vector<LossPoint> losses_from(const json::Value& v, const std::string& what) {
  std::vector<LossPoint> out;
  BLU_CHECK(v.is_array(), what, ": loss history is not an array");
  for (const json::Value& p : v.as_array()) {
    BLU_CHECK(p.is_array() && p.as_array().size() == 2 && p.as_array()[0].is_integer() && p.as_array()[1].is_number(),
              what, ": bad loss entry");
    out.push_back({p.as_array()[0].as_integer(), p.as_array()[1].as_number()});
  }
  return out;
}

}  // namespace

std::string checkpoint_state_json(const GPT2Config& mcfg, int64_t adamw_step, const TrainState& state,
                                  const TrainConfig& cfg) {
  std::ostringstream js;
  js << "{\n  \"blutrain_version\": " << json::quote(BLUTRAIN_VERSION_STRING) << ",\n  \"model\": "
     << json::quote(mcfg.name) << vocab_member(mcfg.vocab_ids) << ",\n  \"step\": " << state.step << ",\n  \"adamw_step\": "
     << adamw_step << ",\n  \"data_cursor\": {\"shard\": " << state.cursor.shard
     << ", \"position\": " << state.cursor.position << ", \"epoch\": " << state.cursor.epoch
     << "},\n  \"sample_rng\": \"" << state.sample_rng << "\",\n  \"train_losses\": " << losses_json(state.train_losses)
     << ",\n  \"val_losses\": " << losses_json(state.val_losses) << ",\n  \"config\": "
     << json::quote(config_to_text(cfg)) << "\n}\n";
  return js.str();
}

std::string save_checkpoint(const std::string& out_dir, int keep, GPT2& model, AdamW& opt, const TrainState& state,
                            const TrainConfig& cfg) {
  CheckpointStaging staging(out_dir, state.step);
  const std::string dir = staging.file("");
  save_hf_weights(model, dir.substr(0, dir.size() - 1));
  // Optimizer moments, our layout, fp32.
  std::map<std::string, Tensor> moments;
  const auto& params = opt.params();
  for (size_t i = 0; i < params.size(); ++i) {
    moments["exp_avg." + params[i].name] = opt.exp_avg()[i];
    moments["exp_avg_sq." + params[i].name] = opt.exp_avg_sq()[i];
  }
  write_file_atomic(staging.file("optimizer.safetensors"),
                    serialize_safetensors(moments, {{"format", "pt"}, {"adamw_step", std::to_string(opt.step_count())}},
                                          Checksums::kCrc32c));
  write_file_atomic(staging.file("state.json"), checkpoint_state_json(model.config(), opt.step_count(), state, cfg));
  return staging.commit(keep);
}

namespace {
CheckpointState read_checkpoint_state(const std::string& dir) {
  const std::string state_path = dir + "/state.json";
  BLU_CHECK(file_exists(state_path), "checkpoint '", dir, "': no state.json (not a complete blutrain checkpoint)");
  return parse_checkpoint_state(read_checkpoint_file(dir, "state.json", "checkpoint state"), state_path);
}
}  // namespace

GPT2Config checkpoint_model_config(const std::string& dir) {
  const CheckpointState cs = read_checkpoint_state(dir);
  GPT2Config c = gpt2_config(cs.model);
  set_model_vocab(c, cs.vocab_ids);
  return c;
}

// Note [state.json is input]
//   state.json is read back from disk, where it may be damaged or hand-edited, so each field is
//   checked for its type and range and every error names the file and the field: a non-numeric
//   "sample_rng" used to escape as std::invalid_argument ("stoull") from std::stoull, and a
//   negative cursor reached the data loader (found by tests/fuzz/checkpoint_fuzz.cpp).
CheckpointState parse_checkpoint_state(const std::string& text, const std::string& path) {
  json::Value s = parse_json(text, path);
  BLU_CHECK(s.is_object(), path, ": expected a JSON object");
  auto member = [&](const json::Value& obj, const std::string& key) -> const json::Value& {
    return json_member(obj, key, path);
  };
  auto count = [&](const json::Value& obj, const std::string& key) {
    const json::Value& v = member(obj, key);
    BLU_CHECK(v.is_integer() && v.as_integer() >= 0, path, ": \"", key, "\" is ", v.dump(),
              ", not a non-negative integer");
    return v.as_integer();
  };
  auto string = [&](const json::Value& obj, const std::string& key) -> const std::string& {
    const json::Value& v = member(obj, key);
    BLU_CHECK(v.is_string(), path, ": \"", key, "\" is not a string");
    return v.as_string();
  };
  CheckpointState out;
  out.model = string(s, "model");
  TrainState& st = out.state;
  st.step = count(s, "step");
  const json::Value& c = member(s, "data_cursor");
  BLU_CHECK(c.is_object(), path, ": \"data_cursor\" is not an object");
  st.cursor.shard = count(c, "shard");
  st.cursor.position = count(c, "position");
  st.cursor.epoch = count(c, "epoch");
  const std::string& rng = string(s, "sample_rng");
  errno = 0;
  char* end = nullptr;
  const unsigned long long seed = std::strtoull(rng.c_str(), &end, 10);
  BLU_CHECK(!rng.empty() && rng.size() <= 20 && std::isdigit(static_cast<unsigned char>(rng[0])) && errno == 0 &&
                end == rng.c_str() + rng.size(),
            path, ": \"sample_rng\" is ", json::quote(rng.substr(0, 40)), ", not a decimal uint64");
  st.sample_rng = seed;
  st.train_losses = losses_from(member(s, "train_losses"), path + " \"train_losses\"");
  st.val_losses = losses_from(member(s, "val_losses"), path + " \"val_losses\"");
  if (s.find("adamw_step") != nullptr) out.adamw_step = count(s, "adamw_step");
  if (const json::Value* v = s.find("vocab_ids"))  // Note [Corpus vocabulary]
    out.vocab_ids = vocab_ids_from_json(*v, path + " \"vocab_ids\"");
  return out;
}

CheckpointState load_checkpoint_state(const std::string& dir, const GPT2Config& mcfg, AdamW* opt) {
  if (!has_checksum_manifest(dir) && file_exists(dir + "/state.json")) {
    std::cerr << "note: checkpoint '" << dir << "' has no " << kChecksumManifest
              << " (written before checkpoints carried checksums): loading it unverified\n";
  }
  CheckpointState cs = read_checkpoint_state(dir);
  BLU_CHECK(cs.model == mcfg.name, "checkpoint '", dir, "' is of model '", cs.model, "', not '", mcfg.name,
            "' (pass --model ", cs.model, " or another --out-dir)");
  BLU_CHECK(cs.vocab_ids == mcfg.vocab_ids, "checkpoint '", dir, "' has a vocabulary of ", vocab_name(cs.vocab_ids),
            ", this run ", vocab_name(mcfg.vocab_ids),
            " (Note [Corpus vocabulary]: pass the same --vocab and data, or another --out-dir)");
  if (opt != nullptr) {
    BLU_CHECK(cs.adamw_step >= 0, dir + "/state.json", ": missing key \"adamw_step\"");
    opt->set_step_count(cs.adamw_step);
  }
  return cs;
}

TrainState load_checkpoint(const std::string& dir, GPT2& model, AdamW* opt) {
  CheckpointState cs = load_checkpoint_state(dir, model.config(), opt);
  if (is_sharded_checkpoint(dir)) {  // Note [Sharded checkpoints]: whole tensors from the shards
    ShardedCheckpointReader reader(dir);
    load_whole_from_shards(reader, model, opt);
    return cs.state;
  }
  load_hf_weights(model, dir);
  if (opt != nullptr) {
    const std::string path = dir + "/optimizer.safetensors";
    SafetensorsData data =
        parse_safetensors(read_checkpoint_file(dir, "optimizer.safetensors", "optimizer state"), "'" + path + "'");
    NoGradGuard no_grad;
    const auto& params = opt->params();
    for (size_t i = 0; i < params.size(); ++i) {
      for (int which = 0; which < 2; ++which) {
        const std::string name = (which == 0 ? "exp_avg." : "exp_avg_sq.") + params[i].name;
        Tensor& dst = which == 0 ? opt->exp_avg()[i] : opt->exp_avg_sq()[i];
        auto it = data.tensors.find(name);
        BLU_CHECK(it != data.tensors.end(), "'", path, "': no tensor '", name, "'");
        BLU_CHECK(it->second.dtype() == kFloat32 && it->second.sizes() == dst.sizes(), "'", path, "': tensor '", name,
                  "' is ", it->second.describe(), ", expected f32", dst.shape_str());
        dst.copy_(it->second);
      }
    }
  }
  return cs.state;
}

}  // namespace blu::train
