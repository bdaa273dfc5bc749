// trainer.cpp: the training loop: data, model, AdamW, gradient accumulation to the target
// tokens per step, warmup + cosine LR, clipping, the non-finite step policy (Note [Non-finite
// steps] in nonfinite.h), validation, sampling, progress line, JSONL metrics, checkpoints and
// resume (Note [Deterministic resume] in blutrain/trainer.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <ostream>

#include "bludist/process_group.h"
#include "blutensor/autograd.h"
#include "blutensor/cuda_stream.h"
#if BLU_WITH_CUDA  // device name and memory stats; a CPU-only build has neither (Note [CPU-only build])
#include <cuda_runtime.h>

#include "blutensor/cuda_allocator.h"
#endif
#include "blutensor/ops.h"
#include "blutensor/safetensors.h"
#include "blutrain/checkpoint_dir.h"
#include "blutrain/data.h"
#include "blutensor/json.h"
#include "common/kernel_trace.h"
#include "blutrain/files.h"
#include "blutrain/fused_step.h"
#include "engine/captured_step.h"
#include "blutrain/nvtx.h"
#include "blutrain/optimizer.h"
#include "blutrain/corpus_vocab.h"
#include "blutrain/tokenizer.h"
#include "blutrain/trainer.h"
#include "train/data_parallel.h"
#include "train/nonfinite.h"
#include "train/sharded_checkpoint.h"
#include "train/tensor_parallel.h"
#include "train/train_state.h"

namespace blu::train {
namespace {

using Clock = std::chrono::steady_clock;
[[maybe_unused]] constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;  // CUDA builds only

ShardSet resolve_data(const TrainConfig& cfg, const Tokenizer* tok) {
  const std::string cache = cfg.cache_dir.empty() ? default_cache_dir() : cfg.cache_dir;
  if (cfg.data == "brown") {
    BLU_CHECK(tok != nullptr, "data: the Brown corpus needs the GPT-2 tokenizer");
    return ensure_brown_shards(*tok, default_brown_dir(), cache);
  }
  if (cfg.data == "synthetic") return ensure_synthetic_shards(cache, 1 << 23, cfg.seed);
  return find_shard_set(cfg.data, cfg.data_name);
}

// Moves a host batch to the model's device (through pinned double-buffered staging on CUDA).
class BatchFeeder {
 public:
  BatchFeeder(Device device, int B, int T) : device_(device), B_(B), T_(T), x_(size_t(B) * T), y_(size_t(B) * T) {
    if (device.is_cuda()) stager_ = std::make_unique<BatchStager>(int64_t{B} * T);
  }
  // The fused step's staging: the next batch straight into its fixed device buffers.
  void next_into(DataLoader& loader, int32_t* inputs, int32_t* targets, cudaStream_t stream) {
    BLU_NVTX_RANGE("data");
    BLU_CHECK(stager_ != nullptr, "BatchFeeder: device staging needs a CUDA device");
    loader.next_batch(stager_->host_inputs(), stager_->host_targets());
    stager_->stage(inputs, targets, stream);
  }
  std::pair<Tensor, Tensor> next(DataLoader& loader) {
    BLU_NVTX_RANGE("data");
    if (!stager_) {
      loader.next_batch(x_, y_);
      return {from_vector(x_, {B_, T_}), from_vector(y_, {B_, T_})};
    }
    loader.next_batch(stager_->host_inputs(), stager_->host_targets());
    Tensor x = empty({B_, T_}, TensorOptions(kInt32).device(device_));
    Tensor y = empty({B_, T_}, TensorOptions(kInt32).device(device_));
    stager_->stage(x.data_ptr<int32_t>(), y.data_ptr<int32_t>(), blu::cuda::current_stream(device_.index));
    return {x, y};
  }

 private:
  Device device_;
  int64_t B_, T_;
  std::vector<int32_t> x_, y_;
  std::unique_ptr<BatchStager> stager_;
};

double evaluate(GPT2& model, Precision precision, DataLoader& val, BatchFeeder& feeder, int batches) {
  BLU_NVTX_RANGE("validation");
  NoGradGuard no_grad;
  val.reset();
  double total = 0;
  for (int i = 0; i < batches; ++i) {
    auto [x, y] = feeder.next(val);
    total += model.forward(x, y, precision).item();
  }
  return total / batches;
}

void sync_device(Device d) {
  if (d.is_cuda()) blu::cuda::synchronize_device(d.index);
}

// What one rank holds (Note [Data-parallel training]): the caching allocator's peak on a GPU,
// the process's peak resident memory on the CPU.
double rank_memory_gib(Device d) {
#if BLU_WITH_CUDA
  if (d.is_cuda())
    return static_cast<double>(blu::cuda::CachingAllocator::get().stats(d.index).peak_allocated_bytes) / kGiB;
#endif
  (void)d;
  return process_peak_rss_gib();
}

}  // namespace

void use_device(const Device& device, Precision precision, const std::string& attention) {
  if (!device.is_cuda()) return;
  blu::cuda::set_device(device.index);
  set_matmul_precision(precision == Precision::kTf32 ? MatmulPrecision::kHigh : MatmulPrecision::kHighest);
  set_fp32_attention(attention == "strict" ? Fp32Attention::kComposite : Fp32Attention::kSplit3TF32);
}

AdamWConfig adamw_config(const TrainConfig& cfg) {
  AdamWConfig a;
  a.beta1 = cfg.beta1;
  a.beta2 = cfg.beta2;
  a.eps = cfg.adam_eps;
  a.weight_decay = cfg.weight_decay;
  return a;
}

TrainResult run_training(const TrainConfig& cfg, std::ostream& progress) {
  // Note [Data-parallel training], Note [Tensor-parallel training]: --dp D --tp T joins the
  // launcher's gang of D*T ranks (a D x T mesh); only world rank 0 reports.
  int device_index = -1;
  const std::shared_ptr<bludist::ProcessGroup> world_group = join_world_group(cfg, &device_index);
  const TensorParallel::Groups groups = TensorParallel::split_world(cfg, world_group);
  std::unique_ptr<DataParallel> dp = DataParallel::create(cfg, groups.dp, device_index);
  std::unique_ptr<TensorParallel> tp = TensorParallel::create(cfg, groups.tp);
  std::vector<std::shared_ptr<bludist::ProcessGroup>> mesh_groups;  // each once: whose collectives a step times
  for (const auto& g : {groups.dp, groups.tp, groups.cp}) {
    if (g && std::find(mesh_groups.begin(), mesh_groups.end(), g) == mesh_groups.end()) mesh_groups.push_back(g);
  }
  const bool is_main = !world_group || world_group->rank() == 0;
  std::ostream dropped(nullptr);
  std::ostream& out = is_main ? progress : dropped;
  const Device device = device_index >= 0 ? Device::cuda(device_index) : Device(cfg.device);
  // The data-parallel row of this rank and their count: the loader's stride (under --cp the ranks
  // of a context-parallel group read the same batch: Note [Context-parallel training]).
  const int rank = dp ? dp->rank() / cfg.cp : 0, world = dp ? dp->size() / cfg.cp : 1;
  const Precision precision = parse_precision(cfg.precision);
  use_device(device, precision, cfg.attention);
  GPT2Config mcfg = gpt2_config(cfg.model);
  if (cfg.block_size > 0) mcfg.block_size = cfg.block_size;
  BLU_CHECK(cfg.seq_len <= mcfg.block_size, "--seq-len ", cfg.seq_len, " exceeds the ", cfg.model, " model's context ",
            mcfg.block_size);

  // Tokenizer: for the Brown corpus and for printing samples (optional otherwise).
  std::unique_ptr<Tokenizer> tok;
  const std::string vocab_dir = cfg.vocab_dir.empty() ? Tokenizer::default_dir() : cfg.vocab_dir;
  if (cfg.data == "brown" || file_exists(vocab_dir + "/encoder.json")) {
    tok = std::make_unique<Tokenizer>(Tokenizer::from_dir(vocab_dir));
  }
  if (world_group && !is_main) world_group->barrier();  // rank 0 fills a first-use data cache alone
  ShardSet shards = resolve_data(cfg, tok.get());
  if (cfg.vocab == "corpus") {  // Note [Corpus vocabulary]
    const std::string cache = cfg.cache_dir.empty() ? default_cache_dir() : cfg.cache_dir;
    const std::string name = cfg.data == "brown" || cfg.data == "synthetic"
                                 ? cfg.data
                                 : std::filesystem::path(cfg.data).lexically_normal().filename().string();
    CorpusVocab cv = ensure_corpus_vocab(shards, cache + "/corpus_vocab/" + name);
    shards = cv.shards;
    set_model_vocab(mcfg, cv.ids);
  }
  if (world_group && is_main) world_group->barrier();
  const int B = cfg.batch_size, T = cfg.seq_len;
  DataLoader train_loader(shards.train, B, T, rank, world, mcfg.vocab_size);
  if (cfg.shuffle == "on") train_loader.set_shuffle(cfg.seed ^ 0x5348554646ull);  // "SHUFF": Note [Shuffled windows]
  std::unique_ptr<DataLoader> val_loader;
  if (!shards.val.empty() && cfg.val_batches > 0) {
    val_loader = std::make_unique<DataLoader>(shards.val, B, T, rank, world, mcfg.vocab_size);
  }
  const int64_t micro_tokens = int64_t{B} * T * world;  // one micro-batch of every rank
  const int64_t accum = cfg.total_batch_tokens / micro_tokens;
  BatchFeeder feeder(device, B, T);

  // Note [Tensor-parallel GPT-2]: this rank's shards; Note [Context-parallel GPT-2]: its chunks.
  GPT2 model(mcfg, device, tp ? tp->group() : nullptr, groups.cp);
  model.set_tp_overlap(cfg.tp_overlap);
  // --recompute for the autograd-recorded step (the fused engine reads it itself): the GELU output
  // (Note [GELU recompute]) for gelu, layernorm and block, the part this engine implements; auto as
  // the fused engine: in fp32/tf32, not in bf16.
  model.set_recompute_gelu(cfg.recompute == "auto" ? precision != Precision::kBf16 : cfg.recompute != "none");
  model.init_weights(cfg.seed);
  if (!cfg.init_from.empty()) {
    if (tp) {
      tp->load_hf_safetensors(cfg.init_from, model, cfg.seed);
    } else {
      load_hf_safetensors(model, cfg.init_from);
    }
    out << "initial weights from " << cfg.init_from << "\n";
  }
  const AdamWConfig acfg = adamw_config(cfg);
  AdamW opt(model.parameters(), acfg, /*allocate_moments=*/cfg.zero == 0);  // ZeRO-1: sharded in dp

  TrainResult result;
  TrainState state;
  state.sample_rng = cfg.seed ^ 0x5A4D504C45ull;  // "SAMPLE"
  std::string resume_dir;
  if (cfg.resume == "auto") {
    resume_dir = latest_checkpoint(cfg.out_dir);
  } else if (cfg.resume != "none") {
    resume_dir = cfg.resume;
  }
  // Note [Sharded checkpoints]: under --zero 1/2/3 a sharded checkpoint is read in attach(), each
  // rank taking only its part; anything else loads whole tensors here (a sharded one assembled).
  std::unique_ptr<ShardedCheckpointReader> sharded_resume;
  if (!resume_dir.empty()) {
    if (dp && cfg.zero >= 1 && is_sharded_checkpoint(resume_dir)) {
      sharded_resume = std::make_unique<ShardedCheckpointReader>(resume_dir);
      state = load_checkpoint_state(resume_dir, model.config(), &opt).state;
    } else {
      opt.allocate_moments();  // ZeRO-1 takes its slice in attach() and drops the rest
      state = tp ? tp->load_checkpoint(resume_dir, model, opt) : load_checkpoint(resume_dir, model, &opt);
    }
    train_loader.set_cursor(state.cursor);
    result.resumed_from = state.step;
    out << "resumed from " << resume_dir << " at step " << state.step << "\n";
  }

  // Note [Non-finite steps]: the test hook (autograd engine only); with --zero 2 it writes inside
  // backward, so its grad-ready hook goes in before the data-parallel ones.
  NonfiniteInjection inject = NonfiniteInjection::from_environment(opt.params());
  int64_t inject_step = 0;  // the step being run, 1-based, for an injection armed in backward
  if (dp && cfg.zero == 2) inject.arm_in_backward(opt.params(), &inject_step);
  if (dp) {
    dp->attach(model, opt, acfg, !resume_dir.empty() && !sharded_resume, sharded_resume.get());  // rank 0's weights everywhere
    out << dp->describe() << "\n";
    if (sharded_resume) {
      const ShardIndex& ix = sharded_resume->index();
      char buf[200];
      std::snprintf(buf, sizeof(buf), "sharded resume: %d -> %d ranks; rank 0 read %.3f of %.3f MiB of shard data\n",
                    ix.world_size, dp->size(), static_cast<double>(sharded_resume->bytes_read()) / (1 << 20),
                    static_cast<double>(sharded_resume->bytes_total()) / (1 << 20));
      out << buf;
      sharded_resume.reset();
    }
  }
  if (tp) out << tp->describe() << "\n";
  if (groups.cp) {
    out << "context parallel over " << groups.cp->size() << " ranks (" << bludist::backend_name(groups.cp->backend())
        << "): each sequence in " << 2 * groups.cp->size()
        << " chunks (balanced causal layout), ring attention; weights replicated, gradients averaged over all "
        << (dp ? dp->size() : 1) << " ranks\n";
  }
  const GradSumOfSquares tp_norm_squares = tp ? tp->sum_of_squares_fn() : GradSumOfSquares{};
  // The CUDA step (Note [Fused step]); built after a resume so its bf16 copy sees the weights.
  std::unique_ptr<FusedGPT2Step> fused;
  if (cfg.engine == "fused") {
    BLU_CHECK(device.is_cuda(), "--engine fused needs a CUDA device");
    FusedStepOptions fo;
    fo.precision = precision;
    fo.batch = B;
    fo.seq_len = T;
    fo.accum_steps = accum;
    fo.recompute = cfg.recompute;
    fo.attention = cfg.attention;
    fo.use_graph = cfg.graph;
    fo.logits_chunk_rows = cfg.logits_chunk;
    fo.weight_copy = cfg.weight_copy;
    fo.grad_clip = cfg.grad_clip;
    fo.adamw = acfg;
    if (dp) {  // Note [Data-parallel training]: the step averages its gradients over the group
      fo.process_group = dp->process_group();
      fo.dp_bucket_bytes = static_cast<std::size_t>(cfg.dp_bucket_mb * 1024.0 * 1024.0);
      fo.dp_embedding_gather = cfg.dp_embedding_grad == "gather";
    }
    fused = std::make_unique<FusedGPT2Step>(model, opt, fo);
    out << fused->describe() << "\n";
  }

  // Note [Captured engine] (engine/captured_step.h).
  std::unique_ptr<CapturedStep> captured;
  if (cfg.engine == "captured") {
    BLU_CHECK(accum == 1, "--engine captured takes one micro-batch per step (--total-batch-tokens ",
              cfg.total_batch_tokens, " makes ", accum, "); pass --engine autograd");
    captured = std::make_unique<CapturedStep>(model, opt, precision, cfg.grad_clip,
                                              cfg.plan.empty() ? std::string() : read_file(cfg.plan, "--plan"),
                                              is_main ? cfg.out_dir + "/captured_step.json" : std::string(),
                                              cfg.plan.empty() ? std::string()
                                                               : std::filesystem::path(cfg.plan).parent_path().string(),
                                              cfg.compile && is_main ? cfg.out_dir : std::string());
  }

  // Note [Non-finite steps]: the policy.
  NonfinitePolicy nonfinite(cfg.nonfinite, cfg.nonfinite_max_skips);
  BLU_CHECK(!inject.enabled() || !captured, kInjectNonfiniteEnv, " needs --engine autograd or fused");
  BLU_CHECK(!inject.enabled() || !fused || inject.target != "loss", kInjectNonfiniteEnv,
            " with --engine fused poisons a weight (Note [Non-finite steps]): name a parameter, not loss");

  const int64_t n_params = model.num_params();
  const double flops_tok = flops_per_token(n_params, mcfg.n_layer, mcfg.n_embd, T);
  std::string gpu_name;
#if BLU_WITH_CUDA
  if (device.is_cuda()) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device.index) == cudaSuccess) gpu_name = prop.name;
  }
#endif
  const double peak = device.is_cuda() ? dense_peak_flops(gpu_name, cfg.precision) : 0.0;
  out << "model " << mcfg.name << ": " << n_params << " parameters (" << mcfg.n_layer << " layers, " << mcfg.n_embd
      << " channels, " << mcfg.n_head << " heads) on " << device.str() << (gpu_name.empty() ? "" : " (" + gpu_name + ")")
      << ", " << cfg.precision << "\n"
      << "data " << cfg.data << ": " << train_loader.total_tokens() << " train tokens"
      << (val_loader ? ", " + std::to_string(val_loader->total_tokens()) + " val tokens" : std::string(", no val split"))
      << "; B=" << B << (world > 1 ? " per rank x " + std::to_string(world) + " ranks" : std::string()) << " T=" << T
      << ", " << accum << " micro-batch(es) = " << cfg.total_batch_tokens << " tokens per step"
      << (train_loader.shuffled() ? ", windows shuffled" : "")
      << (mcfg.vocab_ids.empty() ? std::string()
                                 : ", corpus vocabulary of " + std::to_string(mcfg.vocab_ids.size()) + " GPT-2 ids")
      << "\n";

  if (is_main) std::filesystem::create_directories(cfg.out_dir);
  std::unique_ptr<MetricsLog> metrics =
      is_main ? std::make_unique<MetricsLog>(cfg.out_dir + "/metrics.jsonl") : std::make_unique<MetricsLog>();
  const double min_lr = cfg.lr * cfg.min_lr_ratio;
  const Clock::time_point t_start = Clock::now();
  std::vector<double> tok_rates;
  std::vector<double> launching_ms, launch_ms, wait_ms;  // Note [Host issue time], the same steps as tok_rates
  int64_t steps_this_process = 0;
  double device_used_max_gib = 0;
  double state_gib = 0;  // allocated after the last step: weights, gradients, optimizer state, what persists
  std::string profile_trace_json;  // the CUPTI breakdown of --profile-step (Note [Step profile])  // device memory in use by the process (context included), max over steps
  auto checkpoint = [&] {
    if (!cfg.save) return;
    state.cursor = train_loader.cursor();
    if (cfg.checkpoint_format == "sharded") {  // Note [Sharded checkpoints]: no gather (collective)
      const std::string dir = dp->save_sharded(
          cfg.out_dir, cfg.keep_checkpoints, state.step, opt,
          {{"config.json", hf_config_json(model.config())},
           {"state.json", checkpoint_state_json(model.config(), opt.step_count(), state, cfg)}});
      if (is_main) {
        result.checkpoint_dir = dir;
        out << "checkpoint " << dir << " (sharded over " << dp->size() << " ranks)\n";
      }
      return;
    }
    if (dp) dp->gather_moments(opt);  // ZeRO-1: whole moments for the save (collective)
    // Note [Tensor-parallel training] / [ZeRO-3 GPT-2]: whole tensors, the one-process format.
    WholeModel whole;
    if (tp) {
      whole = tp->gather(model, opt);
    } else if (dp && dp->zero3()) {
      whole = dp->gather_whole(model, opt);
    }
    if (is_main) {
      result.checkpoint_dir = save_checkpoint(cfg.out_dir, cfg.keep_checkpoints, whole.model ? *whole.model : model,
                                              whole.opt ? *whole.opt : opt, state, cfg);
      out << "checkpoint " << result.checkpoint_dir << "\n";
    }
    if (dp) dp->release_moments(opt);
  };
  auto print_sample = [&](int64_t step) {
    // Under --tp every rank of the group takes part (the logits are all-gathered), and under
    // --zero 3 every rank (the weights are gathered); rank 0 prints.
    if (cfg.sample_tokens <= 0 || !tok || (!is_main && !tp && !model.zero3())) return;
    SampleRng rng{state.sample_rng};
    std::vector<int32_t> prompt = encode_prompt(*tok, model.config(), cfg.prompt);
    std::vector<int32_t> ids = generate(model, precision, prompt, cfg.sample_tokens, cfg.temperature, cfg.top_k, rng);
    state.sample_rng = rng.state;
    result.sample_text = cfg.prompt + decode_sample(*tok, model.config(), ids);
    out << "--- sample at step " << step << " ---\n" << result.sample_text << "\n---\n";
  };
  // The val loss over the split's first `batches` micro-batches, the same on every rank.
  auto val_loss = [&](int batches) {
    double v = evaluate(model, precision, *val_loader, feeder, batches);
    return dp ? dp->mean(v) : v;  // each rank read its rows of the same val batches
  };
  auto validate = [&](int64_t step) {
    if (!val_loader) return;
    const double v = val_loss(cfg.val_batches);
    state.val_losses.push_back({step, v});
    metrics->write("val", {{"step", static_cast<double>(step)}, {"val_loss", v}});
    char buf[96];
    std::snprintf(buf, sizeof(buf), "val loss %.4f at step %lld", v, static_cast<long long>(step));
    out << buf << "\n";
  };

  // Note [Non-finite steps]: the metrics event, then the report (a throw) or the warning line.
  auto report_nonfinite = [&](NonfinitePolicy::Action verdict, int64_t at_step, double loss, double norm,
                              const std::string& first_nonfinite) {
    const bool stop = verdict == NonfinitePolicy::Action::kStop;
    const std::string what = describe_nonfinite_step(at_step, loss, norm, first_nonfinite);
    metrics->write("nonfinite",
                   {{"step", static_cast<double>(at_step)}, {"loss", loss}, {"grad_norm", norm},
                    {"consecutive", static_cast<double>(nonfinite.consecutive())}},
                   {{"action", stop ? "stop" : "skip"}, {"first_nonfinite_gradient", first_nonfinite}});
    if (!stop) {
      out << "warning: non-finite " << what << ": update skipped (" << nonfinite.consecutive()
          << " in a row; --nonfinite skip stops at " << nonfinite.max_skips() << ")" << std::endl;
      return;
    }
    const std::string last = latest_checkpoint(cfg.out_dir);
    const std::string streak = nonfinite.skips() ? "; " + std::to_string(nonfinite.consecutive()) +
                                                       " non-finite steps in a row, the limit of --nonfinite-max-skips"
                                                 : std::string();
    BLU_THROW("non-finite ", what, streak, ". Training stopped (--nonfinite ", cfg.nonfinite, "): ",
              fused ? "the fused step had applied the update; " : "the update was not applied; ",
              "nothing is saved after step ", at_step - 1,
              ". Last checkpoint: ", last.empty() ? std::string("none") : last,
              " (resume from it with a lower --lr or other data, or use --nonfinite skip)");
  };

  int64_t step = state.step;
  while (step < cfg.max_steps) {
    bool out_of_time =
        cfg.time_limit_s > 0 && std::chrono::duration<double>(Clock::now() - t_start).count() > cfg.time_limit_s;
    if (world_group && cfg.time_limit_s > 0) {  // all ranks stop together
      Tensor any = from_vector(std::vector<double>{out_of_time ? 1.0 : 0.0}, {1}, TensorOptions(kFloat64))
                       .to(world_group->device());
      world_group->all_reduce(any, bludist::ReduceOp::kMax);
      out_of_time = any.item() > 0;
    }
    if (out_of_time) {
      out << "time limit of " << cfg.time_limit_s << " s reached at step " << step << "\n";
      break;
    }
    if (cfg.val_every > 0 && step % cfg.val_every == 0) validate(step);
    if (cfg.sample_every > 0 && step > 0 && step % cfg.sample_every == 0) print_sample(step);
    BLU_NVTX_RANGE("step");
    sync_device(device);
    for (const auto& g : mesh_groups) g->take_comm_timing();  // the window opens with the step
    const Clock::time_point t0 = Clock::now();
    const double lr = learning_rate(step, cfg.lr, min_lr, cfg.warmup_steps, cfg.max_steps);
    double loss = 0, norm = 0;
    bool step_nonfinite = false;    // Note [Non-finite steps]
    std::string first_nonfinite;    // then: the first parameter whose gradient is not finite
    // Note [Step profile]: step N is traced as it runs (CUPTI: every kernel, graph replays too);
    // with the fused engine step N+1 runs eagerly with an event after every op (its op timing).
    const bool tracing = cfg.profile_step > 0 && step + 1 == cfg.profile_step;
    const bool op_timing = fused && cfg.profile_step > 0 && step + 1 == cfg.profile_step + 1;
    const bool profiling = tracing || op_timing;
    if (op_timing) fused->time_next_step();
    std::unique_ptr<KernelTrace> trace;
    if (tracing && device.is_cuda()) {
      if (KernelTrace::available()) {
        try {
          trace = std::make_unique<KernelTrace>();
          trace->start();
        } catch (const blu::Error& e) {
          trace.reset();
          profile_trace_json = std::string("{\"available\": false, \"error\": ") + json::quote(e.what()) + "}";
        }
      } else {
        profile_trace_json = "{\"available\": false, \"error\": \"built without CUPTI\"}";
      }
    }
    if (fused) {
      if (inject.active(step + 1)) {  // Note [Non-finite steps]; written before the graph's stream reads it
        inject.poison_weight(opt.params());
        sync_device(device);
        fused->sync_weights_from_model();  // the GEMMs' bf16 copy sees the poisoned weight too
      }
      const FusedStepResult r = fused->step(
          [&](int32_t* x, int32_t* y, cudaStream_t s) { feeder.next_into(train_loader, x, y, s); }, lr);
      loss = r.loss;
      norm = r.grad_norm;
      // The update is already applied (inside the graph): only --nonfinite stop reaches here.
      step_nonfinite = !std::isfinite(norm) || (!dp && !std::isfinite(loss));
      if (step_nonfinite) {
        for (size_t i = 0; i < opt.params().size() && first_nonfinite.empty(); ++i) {
          if (!all_finite(fused->gradient(static_cast<int>(i)))) first_nonfinite = opt.params()[i].name;
        }
      }
    } else if (captured) {
      const bool was_captured = captured->captured();
      UpdateResult u;
      if (int32_t* xs = captured->staged_inputs(); xs != nullptr) {  // Note [Staged captured inputs]
        feeder.next_into(train_loader, xs, captured->staged_targets(), blu::cuda::current_stream(device.index));
        u = captured->step_staged(lr, &loss);
      } else {
        auto [x, y] = feeder.next(train_loader);
        u = captured->step(x, y, lr, &loss);
      }
      if (!was_captured && captured->captured()) out << captured->describe();
      out << captured->take_news();
      norm = u.grad_norm;
      step_nonfinite = !u.applied;
      first_nonfinite = u.first_nonfinite;
    } else {
      double loss_sum = 0;
      inject_step = step + 1;
      for (int64_t micro = 0; micro < accum; ++micro) {
        if (dp) dp->set_gradient_sync(micro + 1 == accum);  // DDP buckets reduce in the last backward
        auto [x, y] = feeder.next(train_loader);
        Tensor micro_loss;
        {
          BLU_NVTX_RANGE("forward");
          micro_loss = model.forward(x, y, precision);
        }
        {
          BLU_NVTX_RANGE("backward");
          (accum > 1 ? micro_loss / static_cast<double>(accum) : micro_loss).backward();
        }
        loss_sum += micro_loss.item();
      }
      loss = loss_sum / static_cast<double>(accum);
      if (dp) dp->finish_gradients();
      if (inject.active(step + 1)) inject.apply(opt.params(), loss);
      UpdateResult u;
      if (dp) {
        u = dp->clip_and_step(opt, cfg.grad_clip, lr, tp_norm_squares);  // the verdict is the shared norm's
      } else {
        u = clip_and_update(opt, cfg.grad_clip, lr, std::isfinite(loss), tp_norm_squares);
        opt.zero_grad();
      }
      norm = u.grad_norm;
      step_nonfinite = !u.applied;
      first_nonfinite = u.first_nonfinite;
    }
    sync_device(device);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    // bludist Note [Communication timing]: this step's collectives over every group of the mesh
    // (report_step's own all-gather falls in the next window, discarded where the next step opens).
    bludist::CommTiming comm;
    for (const auto& g : mesh_groups) comm += g->take_comm_timing();
    DataParallel::StepReport dp_report;
    if (dp) {
      dp_report = dp->report_step(loss, rank_memory_gib(device), comm);
      loss = dp_report.loss;  // the global-batch mean
    } else if (tp) {  // one tensor-parallel group: ranks are symmetric, world rank 0 reports its own
      dp_report = DataParallel::StepReport::of(comm);
    }
    if (fused && !cfg.dump.empty() && step + 1 == cfg.dump_step) {
      std::vector<std::string> patterns;
      std::string item;
      for (char ch : cfg.dump + ",") {
        if (ch == ',') {
          if (!item.empty()) patterns.push_back(item);
          item.clear();
        } else if (ch != ' ') {
          item += ch;
        }
      }
      const std::string path = cfg.dump_file.empty()
                                   ? cfg.out_dir + "/dump_step" + std::to_string(cfg.dump_step) + ".safetensors"
                                   : cfg.dump_file;
      const std::map<std::string, Tensor> values = fused->dump(patterns);
      save_safetensors(path, values, {{"step", std::to_string(cfg.dump_step)}, {"precision", cfg.precision}});
      out << "dumped " << values.size() << " tensors of step " << cfg.dump_step << " to " << path << "\n";
    }
    if (trace) {
      trace->set_wall_ms(ms);
      trace->stop();
      profile_trace_json = trace->to_json();
      trace.reset();
    }
    if ((tracing && !fused) || op_timing) {
      const std::string path = cfg.profile_json.empty() ? cfg.out_dir + "/profile.json" : cfg.profile_json;
      write_file_atomic(path, "{\"engine\": \"" + cfg.engine + "\", \"precision\": \"" + cfg.precision +
                                  "\", \"step\": " + std::to_string(cfg.profile_step) + ", \"kernel_trace\": " +
                                  (profile_trace_json.empty() ? "null" : profile_trace_json) + ", \"op_timing\": " +
                                  (op_timing ? fused->timing_json() : std::string("null")) + "}\n");
      out << "profile of step " << cfg.profile_step << " written to " << path << "\n";
    }
    ++step;
    ++steps_this_process;
    state.step = step;
    const NonfinitePolicy::Action verdict = nonfinite.on_step(step_nonfinite);
    const bool skipped = verdict == NonfinitePolicy::Action::kSkip;
    if (verdict != NonfinitePolicy::Action::kContinue) {
      report_nonfinite(verdict, step, loss, norm, first_nonfinite);  // throws for a stop
    }
    if (std::isfinite(loss)) state.train_losses.push_back({step, loss});  // skipped steps' too, when finite

    ProgressInfo p;
    p.step = step;
    p.max_steps = cfg.max_steps;
    p.loss = loss;
    p.lr = lr;
    p.grad_norm = norm;
    p.step_ms = ms;
    if (dp) {
      p.dp_ranks = world;
      p.rank_mem_gib = dp_report.max_rank_mem_gib;
    }
    if (dp || tp) {
      p.comm_ms = dp_report.max_comm_ms;
      p.comm_exposed_ms = dp_report.max_comm_exposed_ms;
    }
    if (tp) p.tp_ranks = tp->size();
    if (cfg.cp > 1) p.cp_ranks = cfg.cp;
    p.tokens_per_s = static_cast<double>(cfg.total_batch_tokens) / (ms / 1000.0);
    if (steps_this_process > 3 && !profiling && !skipped) {
      tok_rates.push_back(p.tokens_per_s);
      // Note [Host issue time] (blutrain/host_marks.h): the graph engines' host marks from t0.
      const HostMarks hm = fused ? fused->host_marks() : captured ? captured->host_marks() : HostMarks();
      if (hm.valid() && hm.launching >= t0) {
        launching_ms.push_back(std::chrono::duration<double, std::milli>(hm.launching - t0).count());
        launch_ms.push_back(std::chrono::duration<double, std::milli>(hm.launched - t0).count());
        wait_ms.push_back(std::chrono::duration<double, std::milli>(hm.waiting - t0).count());
      }
    }
    if (peak > 0) p.mfu = flops_tok * p.tokens_per_s / peak;
#if BLU_WITH_CUDA
    if (device.is_cuda()) {
      const blu::cuda::MemoryStats ms_stats = blu::cuda::CachingAllocator::get().stats(device.index);
      p.mem_allocated_gib = static_cast<double>(ms_stats.allocated_bytes) / kGiB;
      p.mem_reserved_gib = static_cast<double>(ms_stats.reserved_bytes) / kGiB;
      p.mem_peak_gib = static_cast<double>(ms_stats.peak_allocated_bytes) / kGiB;
      result.peak_allocated_gib = p.mem_peak_gib;
      size_t free_b = 0, total_b = 0;
      if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) p.device_used_gib = static_cast<double>(total_b - free_b) / kGiB;
      device_used_max_gib = std::max(device_used_max_gib, p.device_used_gib);
      state_gib = p.mem_allocated_gib;
    }
#endif
    if (!skipped && (step % cfg.log_every == 0 || step == cfg.max_steps)) out << format_progress_line(p) << std::endl;
    std::vector<std::pair<std::string, double>> record = {
        {"step", static_cast<double>(step)}, {"loss", loss}, {"lr", lr}, {"grad_norm", norm}, {"step_ms", ms},
        {"tokens_per_s", p.tokens_per_s}, {"mfu", p.mfu}, {"mem_peak_gib", p.mem_peak_gib},
        {"mem_allocated_gib", p.mem_allocated_gib}};
    if (dp) {
      record.push_back({"dp_ranks", static_cast<double>(world)});
      record.push_back({"rank_mem_gib", p.rank_mem_gib});
    }
    if (p.comm_ms >= 0) record.push_back({"comm_ms", p.comm_ms});  // measured: --dp / --tp / --cp
    if (p.comm_exposed_ms >= 0) record.push_back({"comm_exposed_ms", p.comm_exposed_ms});
    if (tp) record.push_back({"tp_ranks", static_cast<double>(tp->size())});
    if (cfg.cp > 1) record.push_back({"cp_ranks", static_cast<double>(cfg.cp)});
    if (!skipped) metrics->write("train", record);  // a skipped step has its "nonfinite" event
    if (cfg.ckpt_every > 0 && step % cfg.ckpt_every == 0 && step < cfg.max_steps) checkpoint();
    if (cfg.stop_after_steps > 0 && steps_this_process >= cfg.stop_after_steps) {
      out << "stopping after " << steps_this_process << " steps (--stop-after-steps)\n";
      result.stopped_early = true;
      break;
    }
  }

  if (!result.stopped_early) {
    if (val_loader && (state.val_losses.empty() || state.val_losses.back().step != step)) validate(step);
    if (val_loader && cfg.final_val_batches != 0) {  // more of the split than the periodic check reads
      const int64_t n = cfg.final_val_batches < 0 ? val_loader->batches_per_epoch() : cfg.final_val_batches;
      const double v = val_loss(static_cast<int>(n));
      result.final_val_loss = v;
      metrics->write("val_final", {{"step", static_cast<double>(step)}, {"val_loss", v}, {"batches", static_cast<double>(n)}});
      char buf[160];
      std::snprintf(buf, sizeof(buf), "val loss %.4f at step %lld over %lld batches (%lld tokens%s)", v,
                    static_cast<long long>(step), static_cast<long long>(n),
                    static_cast<long long>(n * B * T * world), cfg.final_val_batches < 0 ? ": the whole val split" : "");
      out << buf << "\n";
    }
    print_sample(step);
    checkpoint();
    if (cfg.plot && is_main && !state.train_losses.empty()) {
      // The title carries the run's configuration, so a PNG passed around explains itself.
      char title[320];
      std::snprintf(title, sizeof(title), "blutrain %s (%.2fM params, %d layers, %d channels), %s on %s\n"
                    "data %s, B=%d T=%d, %lld tokens/step, lr %g, %lld steps",
                    mcfg.name.c_str(), static_cast<double>(n_params) / 1e6, mcfg.n_layer, mcfg.n_embd,
                    cfg.precision.c_str(), device.str().c_str(), cfg.data.c_str(), B, T,
                    static_cast<long long>(cfg.total_batch_tokens), cfg.lr, static_cast<long long>(step));
      const LossPlot plot = plot_loss_curve(cfg.out_dir + "/loss.png", state.train_losses, state.val_losses, title);
      out << "loss curve " << plot.path << " (" << plot.tool << ")\n";
      if (!plot.note.empty()) out << "loss curve: " << plot.note << "\n";
    }
  }
  const auto median = [](std::vector<double> r) {
    std::nth_element(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(r.size() / 2), r.end());
    return r[r.size() / 2];
  };
  if (!tok_rates.empty()) result.median_tokens_per_s = median(tok_rates);
  if (!launch_ms.empty()) {
    char buf[320];
    std::snprintf(buf, sizeof(buf),
                  "host: a step's graph launch began %.3f ms after its start and returned at %.3f ms, the host "
                  "waited from %.3f ms (medians of %zu steps; Note [Host issue time])\n",
                  median(launching_ms), median(launch_ms), median(wait_ms), launch_ms.size());
    out << buf;
  }
  if (!cfg.summary_json.empty() && is_main) {
    const char* m = cfg.precision.c_str();
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "{\"e2e.%s.tok_s\": %.1f, \"e2e.%s.peak_gib\": %.3f, \"e2e.%s.device_used_gib\": %.3f, "
                  "\"e2e.%s.state_gib\": %.3f, \"e2e.%s.launches_per_step\": %lld, \"e2e.%s.fused_engine\": %d}\n",
                  m, result.median_tokens_per_s, m, result.peak_allocated_gib, m, device_used_max_gib, m, state_gib,
                  m, static_cast<long long>(fused ? fused->launches_per_step() : -1), m, fused ? 1 : 0);
    std::string summary = buf;
    if (captured && captured->captured()) {  // Note [Step arena]: the captured step's planned arena
      const capture::ArenaStats a = captured->arena();
      const long long chunk_rows = static_cast<long long>(captured->classifier().chunk_rows);
      char more[512];
      std::snprintf(more, sizeof(more), ", \"e2e.%s.arena_gib\": %.3f, \"e2e.%s.arena_lower_bound_gib\": %.3f, "
                    "\"e2e.%s.arena_inplace_pairs\": %lld, \"e2e.%s.classifier_chunk_rows\": %lld, "
                    "\"e2e.%s.arena_bytes\": %llu, \"e2e.%s.arena_dropped_bytes\": %llu, "
                    "\"e2e.%s.arena_enabled\": %d}\n", m,
                    static_cast<double>(a.bytes) / (1 << 30), m, static_cast<double>(a.lower_bound_bytes) / (1 << 30),
                    m, a.inplace ? static_cast<long long>(a.inplace_pairs) : -1LL, m, chunk_rows, m,
                    static_cast<unsigned long long>(a.bytes), m, static_cast<unsigned long long>(a.dropped_bytes), m,
                    a.enabled ? 1 : 0);
      summary = summary.substr(0, summary.rfind('}')) + more;
    }
    write_file_atomic(cfg.summary_json, summary);
    out << summary;
  }
  result.train_losses = state.train_losses;
  result.val_losses = state.val_losses;
  result.final_step = step;
  return result;
}

}  // namespace blu::train
