// llama_block_bench: blutensor's Llama-style block (Note [Llama block]) as one training step
// (forward, mean(y^2) loss, autograd backward; no optimizer) run three ways in one process: eager
// autograd, the captured step replayed as a capture::Executable, and the captured step with
// blucomp's plan bound (blu-plan run as a child process). Times, launches, peak memory and the
// gradients' agreement to JSON, plus a safetensors file for bench/torch_llama_block.py.
// Note [Llama block benchmark].
//
//   llama_block_bench --out-dir DIR [--device cuda|cpu] [--modes fp32,bf16]
//       [--batch 8] [--seq 1024] [--dim 1024] [--heads 16] [--hidden 2816]
//       [--warmup 5] [--iters 20] [--blu-plan PATH] [--seed 1] [--plan-env "VAR=v ..."]
//       [--profile]
//
// Note [Llama block benchmark]
// What one "step" is: block.zero_grad() (gradients to undefined, like PyTorch's set_to_none),
// y = block(x, cos, sin), loss = mean(float32(y)^2), loss.backward(). The same batch x every
// step and no optimizer, so every step computes the same values: step 1's outputs are the
// reference of the later ones and of PyTorch. Per mode (fp32: strict fp32 matmuls, 3xTF32 flash
// attention, the trainer's fp32 and PyTorch's default fp32 contract; tf32: TF32 matmuls and
// attention; bf16: parameters, batch and activations in bf16, the loss reduced in fp32):
//  1. step 1 eagerly; its initial weights, x, the rotary tables, y, the loss and every parameter
//     gradient go to llama_block_<mode>.safetensors (torch_llama_block.py loads them);
//  2. eager: `warmup` steps, then `iters` steps, each between two CUDA events on the current
//     stream (no host sync inside the loop: the host may run ahead, as a training loop does);
//     the median is eager_ms. CPU: wall clock per step;
//  3. captured: step 2 recorded under capture::Scope (the graph JSON written for blu-plan) and
//     run as a capture::Executable (temporaries in its arena), timed the same way;
//  4. compiled: blu-plan (--blu-plan, else $BLU_PLAN) on that JSON -> plan + PTX, bound to a second
//     Executable of the same graph (blucomp Note [Step runtime]; the first one is destroyed before,
//     so the peaks do not add up), timed the same way. No blu-plan: no compiled_* metrics.
//  5. --plan-env "VAR=v ...": blu-plan again with those variables in its environment (e.g. blucomp's
//     BLU_PLAN_MULTI_OUTPUT=1 BLU_PLAN_BROADCAST=1), bound and timed as step 4, its metrics
//     prefixed compiled_env_ (ms, ratio, launches, gradients vs eager): an A/B of plans in one process.
//  6. --profile (CUDA, built with CUPTI): one more step of each variant (eager, captured, each plan)
//     under blutrain's kernel tracer (Note [Kernel trace]), its per-family and per-kernel breakdown
//     to llama_block_<mode>_<variant>_trace.json; torch_llama_block.py --profile writes PyTorch's
//     beside it (same families, bench/e2e/kernel_families.py). After the timing: no effect on it.
// Peak memory: the caching allocator's peak of allocated bytes, reset before each variant's
// warm-up (so it includes weights, batch and gradients, as torch.cuda.max_memory_allocated does;
// the captured and compiled peaks also the capture's snapshot of its inputs, Scope(true): weights,
// batch and rotary tables once more, ~0.09 GB in fp32 at the default shape).
// Launches per step: the graph's kernel launches (launches_before; the eager step launches the
// same calls), and with the plan bound launches_before - sum over bound kernels of (calls - 1).
// After each variant its loss and gradients are compared with step 1's (relative L2 per tensor,
// the largest reported): the captured step must give 0 (same calls, same order), the compiled
// one differs by GEMM-epilogue / fused-group rounding. Ratios are speed-ups, reference time over
// ours (> 1: ours is faster), like the tok/s ratios of comp_report.py.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "blucomp/step_runtime.h"
#include "blutensor/capture.h"
#include "blutensor/json.h"
#include "blutensor/llama.h"
#include "blutensor/random.h"
#include "blutensor/safetensors.h"
#include "common/kernel_trace.h"  // blutrain's CUPTI tracer (Note [Kernel trace])
#if BLU_WITH_CUDA
#include <cuda_runtime.h>

#include "blutensor/cuda_allocator.h"
#include "blutensor/cuda_stream.h"
#endif

extern char** environ;

namespace {
using namespace blu;
namespace fs = std::filesystem;

struct Options {
  std::string device = "cuda", out_dir, blu_plan;
  std::vector<std::string> modes{"fp32", "bf16"};
  int64_t batch = 8, seq = 1024, dim = 1024, heads = 16, hidden = 2816;
  int warmup = 5, iters = 20;
  uint64_t seed = 1;
  std::string plan_env;  // step 5: "VAR=v ..." for a second blu-plan run
  bool profile = false;  // step 6
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, sep);)
    if (!item.empty()) out.push_back(item);
  return out;
}

Options parse_args(int argc, char** argv) {
  Options o;
  auto need = [&](int& i) -> std::string {
    BLU_CHECK(i + 1 < argc, "missing value after ", argv[i]);
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out-dir")
      o.out_dir = need(i);
    else if (a == "--device")
      o.device = need(i);
    else if (a == "--modes")
      o.modes = split(need(i), ',');
    else if (a == "--batch")
      o.batch = std::stoll(need(i));
    else if (a == "--seq")
      o.seq = std::stoll(need(i));
    else if (a == "--dim")
      o.dim = std::stoll(need(i));
    else if (a == "--heads")
      o.heads = std::stoll(need(i));
    else if (a == "--hidden")
      o.hidden = std::stoll(need(i));
    else if (a == "--warmup")
      o.warmup = std::stoi(need(i));
    else if (a == "--iters")
      o.iters = std::stoi(need(i));
    else if (a == "--blu-plan")
      o.blu_plan = need(i);
    else if (a == "--seed")
      o.seed = std::stoull(need(i));
    else if (a == "--profile")
      o.profile = true;
    else if (a == "--plan-env")
      o.plan_env = need(i);
    else
      BLU_THROW("unknown argument ", a, " (see the header of bench/comp/llama_block_bench.cpp)");
  }
  BLU_CHECK(!o.out_dir.empty(), "--out-dir is required");
  BLU_CHECK(o.device == "cuda" || o.device == "cpu", "--device cuda|cpu, got ", o.device);
  BLU_CHECK(o.iters > 0 && o.warmup >= 0, "--iters > 0 and --warmup >= 0");
  for (const std::string& m : o.modes)
    BLU_CHECK(m == "fp32" || m == "tf32" || m == "bf16", "unknown mode ", m);
  return o;
}

// Runs argv directly (no shell), stdout and stderr to `log`; true on exit status 0.
bool run_program(const std::vector<std::string>& args, const std::string& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> cargv;
  for (const std::string& a : args) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, cargv[0], &fa, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return false;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Per-step times of `iters` steps after `warmup`, in ms: CUDA events on the current stream, or
// the wall clock on the CPU.
double median_step_ms(const Device& dev, int warmup, int iters, const std::function<void()>& step) {
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> ms(static_cast<std::size_t>(iters));
#if BLU_WITH_CUDA
  if (dev.is_cuda()) {
    cudaStream_t stream = cuda::current_stream(dev.index);
    std::vector<cudaEvent_t> ev(2 * ms.size());
    for (cudaEvent_t& e : ev) BLU_CHECK(cudaEventCreate(&e) == cudaSuccess, "cudaEventCreate");
    for (std::size_t i = 0; i < ms.size(); ++i) {
      cudaEventRecord(ev[2 * i], stream);
      step();
      cudaEventRecord(ev[2 * i + 1], stream);
    }
    BLU_CHECK(cudaEventSynchronize(ev.back()) == cudaSuccess, "cudaEventSynchronize");
    for (std::size_t i = 0; i < ms.size(); ++i) {
      float t = 0;
      cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]);
      ms[i] = t;
    }
    for (cudaEvent_t e : ev) cudaEventDestroy(e);
  }
#endif
  if (!dev.is_cuda()) {
    for (double& t : ms) {
      const auto t0 = std::chrono::steady_clock::now();
      step();
      t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Step 6 (--profile): one step under blutrain's CUPTI tracer, its breakdown to `path`. A no-op on
// the CPU or without CUPTI (the report says which files exist).
void trace_step(const Options& o, const Device& dev, const std::string& path, const std::function<void()>& step) {
  if (!o.profile || !dev.is_cuda()) return;
  if (!train::KernelTrace::available()) {
    std::printf("--profile: this build has no CUPTI, no %s\n", path.c_str());
    return;
  }
  train::KernelTrace trace;
  trace.start();  // synchronises
  const auto t0 = std::chrono::steady_clock::now();
  step();
  trace.stop();   // waits for the device
  trace.set_wall_ms(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  std::ofstream(path) << trace.to_json() << "\n";
}

void reset_peak(const Device& dev) {
#if BLU_WITH_CUDA
  if (dev.is_cuda()) cuda::CachingAllocator::get().reset_peak(dev.index);
#else
  (void)dev;
#endif
}
// The allocator's peak since reset_peak in GiB; -1 on the CPU (no allocator statistics there).
double peak_gib_of(const Device& dev) {
#if BLU_WITH_CUDA
  if (dev.is_cuda())
    return static_cast<double>(
               cuda::CachingAllocator::get().stats(dev.index).peak_allocated_bytes) /
           (1 << 30);
#else
  (void)dev;
#endif
  return -1;
}

// metrics[name] = the peak, left out on the CPU.
void put_peak(const Device& dev, const std::string& name,
              std::map<std::string, json::Value>* metrics) {
  if (const double gib = peak_gib_of(dev); gib >= 0) (*metrics)[name] = json::Value::number(gib);
}

void synchronize(const Device& dev) {
#if BLU_WITH_CUDA
  if (dev.is_cuda()) cuda::synchronize_device(dev.index);
#else
  (void)dev;
#endif
}

// ||a - b|| / ||b|| and max |a - b| over two tensors of the same shape (any device and dtype).
std::pair<double, double> rel_l2(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_double_vector(), y = b.to_double_vector();
  BLU_CHECK(x.size() == y.size(), "rel_l2: ", a.describe(), " vs ", b.describe());
  double num = 0, den = 0, max_abs = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
    max_abs = std::max(max_abs, std::abs(x[i] - y[i]));
  }
  return {den > 0 ? std::sqrt(num / den) : std::sqrt(num), max_abs};
}

struct StepValues {
  Tensor loss;
  std::map<std::string, Tensor> grads;  // CPU copies, by parameter name
};

StepValues read_values(const nn::LlamaBlock& block, const Tensor& loss) {
  StepValues v;
  v.loss = loss.detach().to(Device::cpu()).reshape({1});
  for (const auto& [name, p] : block.named_parameters()) {
    BLU_CHECK(p.grad().defined(), "no gradient for ", name);
    v.grads[name] = p.grad().to(Device::cpu()).clone();
  }
  return v;
}

// The largest relative L2 difference over the loss and every gradient of `got` vs `ref`.
double max_rel_l2(const StepValues& got, const StepValues& ref) {
  double worst = rel_l2(got.loss, ref.loss).first;
  for (const auto& [name, g] : ref.grads)
    worst = std::max(worst, rel_l2(got.grads.at(name), g).first);
  return worst;
}

// launches_before minus what the bound kernels save: a bound kernel replaces its calls by one
// launch; a kept one (named in report.reasons by its first node) leaves them.
int launches_after(const std::string& plan_json, const comp::BindReport& report,
                   int launches_before) {
  std::set<int64_t> kept_first;
  const std::regex over(" over nodes ([0-9]+)\\.\\.:");
  for (const std::string& why : report.reasons) {
    std::smatch m;
    if (std::regex_search(why, m, over)) kept_first.insert(std::stoll(m[1].str()));
  }
  int after = launches_before;
  const json::Value root = json::parse(plan_json);
  if (const json::Value* kernels = root.find("kernels");
      kernels != nullptr && kernels->is_array()) {
    for (const json::Value& k : kernels->as_array()) {
      const json::Value* nodes = k.find("nodes");
      if (nodes == nullptr || !nodes->is_array() || nodes->as_array().empty()) continue;
      if (kept_first.count(nodes->as_array().front().as_integer()) != 0) continue;
      after -= static_cast<int>(nodes->as_array().size()) - 1;
    }
  }
  return after;
}

void set_mode(const std::string& mode) {
  // Note [Matmul precision], Note [Strict-fp32 attention] (blutensor/cuda_stream.h).
#if BLU_WITH_CUDA
  set_matmul_precision(mode == "tf32" ? MatmulPrecision::kHigh : MatmulPrecision::kHighest);
  set_fp32_attention(Fp32Attention::kSplit3TF32);
#else
  (void)mode;
#endif
}

// One mode: returns its metrics (names without the "comp.llama.<mode>." prefix) and info lines.
void run_mode(const Options& o, const std::string& mode,
              std::map<std::string, json::Value>* metrics,
              std::map<std::string, json::Value>* info) {
  const Device dev(o.device);
  const DType dtype = mode == "bf16" ? DType::BF16 : DType::F32;
  const TensorOptions opts = TensorOptions(dtype).device(dev);
  set_mode(mode);
  Generator gen(o.seed);
  nn::LlamaBlock block(o.dim, o.heads, o.hidden, opts, &gen);
  const Tensor x = randn({o.batch, o.seq, o.dim}, opts, &gen);
  const std::pair<Tensor, Tensor> tables = nn::rotary_tables(o.seq, o.dim / o.heads, 10000.0, opts);
  const Tensor cos = tables.first, sin = tables.second;
  auto step = [&]() {
    block.zero_grad();
    Tensor y = block.forward(x, cos, sin);
    Tensor loss = y.to(DType::F32).pow(2.0).mean();
    loss.backward();
    return std::make_pair(y, loss);
  };
  const std::string prefix = o.out_dir + "/llama_block_" + mode;
  const std::string matmul = mode == "bf16"   ? "bf16 tensor cores, fp32 accumulation"
                             : mode == "tf32" ? "tf32 (MatmulPrecision::kHigh)"
                                              : "strict fp32 (MatmulPrecision::kHighest)";
  const std::string attention = mode == "bf16" ? "bf16 flash attention"
                                : mode == "tf32"
                                    ? "tf32 flash attention"
                                    : "3xTF32 flash attention (Fp32Attention::kSplit3TF32)";
  (*info)["settings"] =
      json::Value::string(o.device == "cpu" ? "CPU backend" : matmul + "; " + attention);

  // 1. Step 1 and its record for PyTorch.
  std::map<std::string, Tensor> saved{{"x", x.to(Device::cpu())},
                                      {"rope.cos", cos.to(Device::cpu())},
                                      {"rope.sin", sin.to(Device::cpu())}};
  for (const auto& [name, p] : block.named_parameters())
    saved["w." + name] = p.detach().to(Device::cpu()).clone();
  StepValues ref;
  {
    auto [y, loss] = step();
    ref = read_values(block, loss);
    saved["eager.y"] = y.detach().to(Device::cpu());
  }
  saved["eager.loss"] = ref.loss;
  for (const auto& [name, g] : ref.grads) saved["eager.grad." + name] = g;
  std::printf("[%s] step 1: loss %.6f\n", mode.c_str(), ref.loss.item());

  // 2. Eager.
  synchronize(dev);
  reset_peak(dev);
  const double eager_ms = median_step_ms(dev, o.warmup, o.iters, [&] { step(); });
  synchronize(dev);
  (*metrics)["eager_ms"] = json::Value::number(eager_ms);
  put_peak(dev, "eager_peak_gib", metrics);
  trace_step(o, dev, prefix + "_eager_trace.json", [&] { step(); });
  block.zero_grad();

  // 3. Captured (step 2 recorded).
  capture::Graph graph;
  Tensor captured_loss;  // alive: an output of the step
  {
    capture::Scope scope(/*snapshot_inputs=*/true);
    captured_loss = step().second;
    graph = scope.finish();
  }
  const std::string graph_path = prefix + "_capture.json";
  std::ofstream(graph_path) << graph.to_json();
  const int launches_before = graph.launches();
  (*metrics)["launches_before"] = json::Value::integer(launches_before);
  (*info)["capture"] = json::Value::string(graph.summary());
  capture::Graph compiled_graph = graph;
  {
    capture::Executable exe(std::move(graph));
    synchronize(dev);
    reset_peak(dev);
    const double ms = median_step_ms(dev, o.warmup, o.iters, [&] { exe.run(); });
    synchronize(dev);
    (*metrics)["captured_ms"] = json::Value::number(ms);
    (*metrics)["captured_ratio_vs_eager"] = json::Value::number(eager_ms / ms);
    put_peak(dev, "captured_peak_gib", metrics);
    trace_step(o, dev, prefix + "_captured_trace.json", [&] { exe.run(); });
    (*metrics)["captured_arena_gib"] =
        json::Value::number(static_cast<double>(exe.arena().bytes) / (1 << 30));
    (*metrics)["captured_max_grad_rel_l2_vs_eager"] =
        json::Value::number(max_rel_l2(read_values(block, captured_loss), ref));
  }
  std::printf("[%s] eager %.3f ms, captured %.3f ms, %d launches per step\n", mode.c_str(),
              eager_ms, metrics->at("captured_ms").as_number(), launches_before);

  // 4. Compiled: blu-plan on the record, the plan bound to a second Executable.
  std::string tool = o.blu_plan;
  if (tool.empty() && std::getenv("BLU_PLAN") != nullptr) tool = std::getenv("BLU_PLAN");
  if (tool.empty()) {
    (*info)["compiled"] =
        json::Value::string("not run: no blu-plan (--blu-plan PATH or $BLU_PLAN)");
    std::printf("[%s] compiled: not run (no blu-plan: --blu-plan PATH or $BLU_PLAN)\n",
                mode.c_str());
  } else {
    // One plan variant: blu-plan with `env` set ("VAR=v ..."), bound, timed; metrics as `tag`_*.
    const auto run_plan = [&](const std::string& tag, const std::string& env, capture::Graph g) {
      const std::string plan_path = prefix + "_" + tag + "_plan.json", ptx_dir = prefix + "_" + tag + "_ptx",
                        log = prefix + "_" + tag + "_plan.log";
      // Step 4 keeps its metric names; step 5's carry compiled_env_.
      const std::string key = tag == "compiled" ? "" : tag.substr(std::string("compiled_").size()) + "_";
      const auto plain = [&](const std::string& name) { return key.empty() ? name : "compiled_" + key + name; };
      fs::remove_all(ptx_dir);
      fs::create_directories(ptx_dir);
      fs::remove(plan_path);
      std::vector<std::pair<std::string, std::string>> saved_env;
      for (const std::string& kv : split(env, ' ')) {
        const size_t eq = kv.find('=');
        if (kv.empty() || eq == std::string::npos) continue;
        const std::string name = kv.substr(0, eq);
        const char* old = std::getenv(name.c_str());
        saved_env.emplace_back(name, old != nullptr ? old : std::string("\x01"));
        setenv(name.c_str(), kv.substr(eq + 1).c_str(), 1);
      }
      const bool ok = run_program({tool, graph_path, "-o", plan_path, "--ptx-dir", ptx_dir}, log);
      for (const auto& [name, old] : saved_env) {
        if (old == "\x01") unsetenv(name.c_str());
        else setenv(name.c_str(), old.c_str(), 1);
      }
      BLU_CHECK(ok, tool, " failed on ", graph_path, " (see ", log, ")");
      const std::string plan = read_file(plan_path);
      capture::Executable exe(std::move(g));
      const comp::BindReport r = comp::bind_plan(exe, plan, ptx_dir);
      const int after = launches_after(plan, r, launches_before);
      std::vector<json::Value> reasons;
      for (const std::string& why : r.reasons) reasons.push_back(json::Value::string(why));
      (*info)[tag + "_kept"] = json::Value::array(reasons);
      if (!env.empty()) (*info)[tag + "_plan_env"] = json::Value::string(env);
      synchronize(dev);
      reset_peak(dev);
      const double ms = median_step_ms(dev, o.warmup, o.iters, [&] { exe.run(); });
      synchronize(dev);
      const StepValues got = read_values(block, captured_loss);
      (*metrics)["compiled_" + key + "ms"] = json::Value::number(ms);
      (*metrics)[key.empty() ? "ratio_vs_eager" : "compiled_" + key + "ratio_vs_eager"] = json::Value::number(eager_ms / ms);
      put_peak(dev, "compiled_" + key + "peak_gib", metrics);
      trace_step(o, dev, prefix + "_" + tag + "_trace.json", [&] { exe.run(); });
      (*metrics)[plain("kernels_bound")] = json::Value::integer(r.bound);
      (*metrics)[plain("kernels_kept")] = json::Value::integer(r.kept);
      (*metrics)[plain("launches_after")] = json::Value::integer(after);
      if (const json::Value* planned = json::parse(plan).find("launches_after");
          planned != nullptr && planned->is_integer())
        (*metrics)[plain("launches_after_planned")] = json::Value::integer(planned->as_integer());  // all bound
      (*metrics)["compiled_" + key + "max_grad_rel_l2_vs_eager"] = json::Value::number(max_rel_l2(got, ref));
      saved[tag + ".loss"] = got.loss;
      for (const auto& [name, gr] : got.grads) saved[tag + ".grad." + name] = gr;
      std::printf("[%s] %s %.3f ms (%d kernels bound, %d kept; %d -> %d launches)%s%s\n", mode.c_str(), tag.c_str(),
                  ms, r.bound, r.kept, launches_before, after, env.empty() ? "" : ", plan env ", env.c_str());
      for (const std::string& why : r.reasons)
        std::printf("[%s]   kept: %s\n", mode.c_str(), why.c_str());
    };
    if (!o.plan_env.empty()) run_plan("compiled_env", o.plan_env, compiled_graph);  // a copy
    run_plan("compiled", "", std::move(compiled_graph));
  }
  const std::map<std::string, std::string> meta{{"mode", mode},
                                                {"batch", std::to_string(o.batch)},
                                                {"seq", std::to_string(o.seq)},
                                                {"dim", std::to_string(o.dim)},
                                                {"heads", std::to_string(o.heads)},
                                                {"hidden", std::to_string(o.hidden)},
                                                {"rms_eps", "1e-6"},
                                                {"rope_base", "10000"},
                                                {"loss", "mean(float32(y)^2)"},
                                                {"matmul", matmul},
                                                {"attention", attention}};
  save_safetensors(prefix + ".safetensors", saved, meta);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse_args(argc, argv);
    fs::create_directories(o.out_dir);
    std::map<std::string, json::Value> metrics, config;
    std::string device_name = o.device;
#if BLU_WITH_CUDA
    if (o.device == "cuda") {
      cudaDeviceProp prop{};
      BLU_CHECK(cudaGetDeviceProperties(&prop, 0) == cudaSuccess, "no CUDA device");
      device_name = prop.name;
    }
#endif
    std::map<std::string, json::Value> infos;
    for (const std::string& mode : o.modes) {
      std::map<std::string, json::Value> m, info;
      run_mode(o, mode, &m, &info);
      for (auto& [k, v] : m) metrics["comp.llama." + mode + "." + k] = v;
      infos[mode] = json::Value::object(info);
    }
    config["batch"] = json::Value::integer(o.batch);
    config["seq"] = json::Value::integer(o.seq);
    config["dim"] = json::Value::integer(o.dim);
    config["heads"] = json::Value::integer(o.heads);
    config["hidden"] = json::Value::integer(o.hidden);
    config["warmup"] = json::Value::integer(o.warmup);
    config["iters"] = json::Value::integer(o.iters);
    const json::Value out = json::Value::object({{"device", json::Value::string(device_name)},
                                                 {"config", json::Value::object(config)},
                                                 {"metrics", json::Value::object(metrics)},
                                                 {"info", json::Value::object(infos)}});
    std::ofstream(o.out_dir + "/llama_block.json") << out.dump() << "\n";
    std::printf("wrote %s/llama_block.json\n", o.out_dir.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llama_block_bench: %s\n", e.what());
    return 1;
  }
}
