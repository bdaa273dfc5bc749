// train_state.cpp: a training checkpoint: HF-layout weights + config.json (gpt2_io.cpp), AdamW
// moments in our layout (optimizer.safetensors), and state.json (step, cursor, RNG, losses,
// config) written last, so its presence marks a complete checkpoint.
#include "train/train_state.h"

#include <iostream>
#include <map>
#include <sstream>

#include "blutensor/error.h"
#include "blutrain/checkpoint_checksums.h"
#include "blutrain/checkpoint_dir.h"
#include "blutrain/files.h"
#include "blutensor/autograd.h"
#include "blutensor/json.h"
#include "blutensor/safetensors.h"
#include "blutrain/version.h"

namespace blu::train {
namespace {

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
  std::ostringstream js;
  js << "{\n  \"blutrain_version\": " << json::quote(BLUTRAIN_VERSION_STRING) << ",\n  \"model\": "
     << json::quote(model.config().name) << ",\n  \"step\": " << state.step << ",\n  \"adamw_step\": "
     << opt.step_count() << ",\n  \"data_cursor\": {\"shard\": " << state.cursor.shard
     << ", \"position\": " << state.cursor.position << ", \"epoch\": " << state.cursor.epoch
     << "},\n  \"sample_rng\": \"" << state.sample_rng << "\",\n  \"train_losses\": " << losses_json(state.train_losses)
     << ",\n  \"val_losses\": " << losses_json(state.val_losses) << ",\n  \"config\": "
     << json::quote(config_to_text(cfg)) << "\n}\n";
  write_file_atomic(staging.file("state.json"), js.str());
  return staging.commit(keep);
}

std::string checkpoint_model_name(const std::string& dir) {
  const std::string state_path = dir + "/state.json";
  BLU_CHECK(file_exists(state_path), "checkpoint '", dir, "': no state.json (not a complete blutrain checkpoint)");
  json::Value s = parse_json(read_checkpoint_file(dir, "state.json", "checkpoint state"), state_path);
  return json_member(s, "model", state_path).as_string();
}

TrainState load_checkpoint(const std::string& dir, GPT2& model, AdamW* opt) {
  const std::string state_path = dir + "/state.json";
  BLU_CHECK(file_exists(state_path), "checkpoint '", dir, "': no state.json (not a complete blutrain checkpoint)");
  if (!has_checksum_manifest(dir)) {
    std::cerr << "note: checkpoint '" << dir << "' has no " << kChecksumManifest
              << " (written before checkpoints carried checksums): loading it unverified\n";
  }
  json::Value s = parse_json(read_checkpoint_file(dir, "state.json", "checkpoint state"), state_path);
  auto member = [&](const json::Value& obj, const std::string& key) -> const json::Value& {
    return json_member(obj, key, state_path);
  };
  auto integer = [&](const json::Value& obj, const std::string& key) {
    const json::Value& v = member(obj, key);
    BLU_CHECK(v.is_integer(), state_path, ": \"", key, "\" is not an integer");
    return v.as_integer();
  };
  const std::string model_name = member(s, "model").as_string();
  BLU_CHECK(model_name == model.config().name, "checkpoint '", dir, "' is of model '", model_name,
            "', not '", model.config().name, "' (pass --model ", model_name, " or another --out-dir)");
  load_hf_weights(model, dir);
  TrainState st;
  st.step = integer(s, "step");
  const json::Value& c = member(s, "data_cursor");
  st.cursor.shard = integer(c, "shard");
  st.cursor.position = integer(c, "position");
  st.cursor.epoch = integer(c, "epoch");
  st.sample_rng = std::stoull(member(s, "sample_rng").as_string());
  st.train_losses = losses_from(member(s, "train_losses"), state_path);
  st.val_losses = losses_from(member(s, "val_losses"), state_path);
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
    opt->set_step_count(integer(s, "adamw_step"));
  }
  return st;
}

}  // namespace blu::train
