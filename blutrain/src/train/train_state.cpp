// train_state.cpp: a training checkpoint: HF-layout weights + config.json (gpt2_io.cpp), AdamW
// moments in our layout (optimizer.safetensors), and state.json (step, cursor, RNG, losses,
// config) written last, so its presence marks a complete checkpoint.
#include "train/train_state.h"

#include <cstring>
#include <sstream>

#include "blutensor/error.h"
#include "blutrain/checkpoint_dir.h"
#include "blutrain/files.h"
#include "blutrain/json.h"
#include "blutrain/safetensors.h"
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
  for (const json::Value& p : v.items) {
    BLU_CHECK(p.is_array() && p.items.size() == 2, what, ": bad loss entry");
    out.push_back({p.items[0].as_int64(what), p.items[1].as_double(what)});
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
  std::vector<std::vector<float>> host;
  std::vector<SafetensorsEntryView> entries;
  const auto& params = opt.params();
  host.reserve(2 * params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    host.push_back(tensor_to_floats(opt.exp_avg()[i]));
    host.push_back(tensor_to_floats(opt.exp_avg_sq()[i]));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const Shape& s = params[i].tensor->sizes();
    entries.push_back({"exp_avg." + params[i].name, "F32", s, host[2 * i].data(), host[2 * i].size() * 4});
    entries.push_back({"exp_avg_sq." + params[i].name, "F32", s, host[2 * i + 1].data(), host[2 * i + 1].size() * 4});
  }
  write_safetensors(staging.file("optimizer.safetensors"), entries,
                    {{"format", "pt"}, {"adamw_step", std::to_string(opt.step_count())}});
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
  json::Value s = json::parse(read_file(state_path, "checkpoint state"), state_path);
  return s.at("model", state_path).as_string(state_path);
}

TrainState load_checkpoint(const std::string& dir, GPT2& model, AdamW* opt) {
  const std::string state_path = dir + "/state.json";
  BLU_CHECK(file_exists(state_path), "checkpoint '", dir, "': no state.json (not a complete blutrain checkpoint)");
  json::Value s = json::parse(read_file(state_path, "checkpoint state"), state_path);
  const std::string model_name = s.at("model", state_path).as_string(state_path);
  BLU_CHECK(model_name == model.config().name, "checkpoint '", dir, "' is of model '", model_name,
            "', not '", model.config().name, "' (pass --model ", model_name, " or another --out-dir)");
  load_hf_weights(model, dir);
  TrainState st;
  st.step = s.at("step", state_path).as_int64(state_path);
  const json::Value& c = s.at("data_cursor", state_path);
  st.cursor.shard = c.at("shard", state_path).as_int64(state_path);
  st.cursor.position = c.at("position", state_path).as_int64(state_path);
  st.cursor.epoch = c.at("epoch", state_path).as_int64(state_path);
  st.sample_rng = std::stoull(s.at("sample_rng", state_path).as_string(state_path));
  st.train_losses = losses_from(s.at("train_losses", state_path), state_path);
  st.val_losses = losses_from(s.at("val_losses", state_path), state_path);
  if (opt != nullptr) {
    SafetensorsFile f = SafetensorsFile::read(dir + "/optimizer.safetensors");
    const auto& params = opt->params();
    for (size_t i = 0; i < params.size(); ++i) {
      const Shape& shape = params[i].tensor->sizes();
      for (int which = 0; which < 2; ++which) {
        const std::string name = (which == 0 ? "exp_avg." : "exp_avg_sq.") + params[i].name;
        const SafetensorsEntryView& e = f.get(name, "F32", shape);
        std::vector<float> v(e.nbytes / 4);
        std::memcpy(v.data(), e.data, e.nbytes);
        floats_to_tensor(v, which == 0 ? opt->exp_avg()[i] : opt->exp_avg_sq()[i]);
      }
    }
    opt->set_step_count(s.at("adamw_step", state_path).as_int64(state_path));
  }
  return st;
}

}  // namespace blu::train
