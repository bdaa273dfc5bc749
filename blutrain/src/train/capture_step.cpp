// capture_step.cpp: `blutrain capture`: one training step of the autograd engine (forward,
// backward, gradient clipping, AdamW, zero_grad) recorded with blutensor's capture (Note [Step
// capture] in blutensor/capture.h), written as JSON for blucomp (blu-import), its summary and
// cache key printed, and (--capture-verify, default on) replayed from the recorded inputs and
// compared with the eager step bit for bit: weights, both AdamW moments.
#include <cstring>
#include <filesystem>
#include <ostream>

#include "blutensor/autograd.h"
#include "blutensor/capture.h"
#include "blutensor/cuda_stream.h"
#include "blutensor/ops.h"
#include "blutensor/random.h"
#include "blutrain/files.h"
#include "blutrain/optimizer.h"
#include "blutrain/trainer.h"
#include "engine/captured_step.h"

#if BLU_WITH_CUDA
#include <blublas/device_info.h>
#endif

namespace blu::train {

namespace {

std::vector<uint8_t> host_bytes(const Tensor& t) {
  Tensor b = capture::bytes_of(t).to(kCPU);
  std::vector<uint8_t> out(static_cast<size_t>(b.numel()) * b.element_size());
  std::memcpy(out.data(), b.data_ptr(), out.size());
  return out;
}

}  // namespace

int run_capture(const TrainConfig& cfg, std::ostream& out) {
  const Device device(cfg.device);
  const Precision precision = parse_precision(cfg.precision);
  use_device(device, precision, cfg.attention);
  const GPT2Config mcfg = gpt2_config(cfg.model);
  GPT2 model(mcfg, device);
  model.init_weights(cfg.seed);
  const AdamWConfig acfg = adamw_config(cfg);
  AdamW opt(model.parameters(), acfg);

  const int64_t B = cfg.batch_size, T = cfg.seq_len;
  Generator gen(cfg.seed * 7919 + 17);
  auto tokens = [&] { return randint(0, mcfg.vocab_size, {B, T}, TensorOptions(kInt32), &gen).to(device); };
  auto step = [&](const Tensor& x, const Tensor& y) {
    double value = 0;
    autograd_step(model, opt, precision, cfg.grad_clip, x, y, cfg.lr, &value);
    return value;
  };
  // Step 1 eagerly: the moments and the gradients' buffers exist from then on, as in training.
  const double first = step(tokens(), tokens());
  const Tensor x = tokens(), y = tokens();

  capture::Scope scope(/*snapshot_inputs=*/cfg.capture_verify);
  const double loss = step(x, y);
  capture::Graph g = scope.finish();

  std::string arch = "cpu";
#if BLU_WITH_CUDA
  if (device.is_cuda()) {
    blublas::DeviceInfo info;
    if (blublas::current_device_info(&info).ok()) arch = "sm_" + std::to_string(info.sm_version());
  }
#endif
  const std::string dir = cfg.out_dir;
  std::filesystem::create_directories(dir);
  write_file_atomic(dir + "/step.json", g.to_json());
  out << "captured step 2 of " << mcfg.name << " (" << cfg.precision << ", B=" << B << " T=" << T << ", "
      << device.str() << "): loss " << first << " -> " << loss << "\n"
      << g.summary() << "key " << g.key(arch) << "\n"
      << "graph: " << dir << "/step.json\n";

  if (!cfg.capture_verify) return 0;
  const std::map<int, Tensor> replayed = capture::replay(g);
  int compared = 0, differ = 0;
  auto check = [&](const std::string& name, const Tensor& t) {
    const int id = g.buffer_of(t);
    auto it = replayed.find(id);
    BLU_CHECK(it != replayed.end(), "blutrain capture: ", name, " is not an output of the captured step (buffer ", id,
              ")");
    ++compared;
    if (host_bytes(it->second) != host_bytes(t)) {
      ++differ;
      out << "replay differs: " << name << "\n";
    }
  };
  for (size_t i = 0; i < opt.params().size(); ++i) {
    const NamedParam& p = opt.params()[i];
    check(p.name, *p.tensor);
    check(p.name + " exp_avg", opt.exp_avg()[i]);
    check(p.name + " exp_avg_sq", opt.exp_avg_sq()[i]);
  }
  out << "replay: " << compared - differ << "/" << compared << " weights and moments bitwise equal to the eager step\n";
  return differ == 0 ? 0 : 1;
}

}  // namespace blu::train
