// blutrain/config.h: the trainer's configuration: one struct, one table of flags that drives
// parsing, the config file and --help, so a setting documented in --help is exactly a setting
// that can be given.
//
// Note [Config precedence]
// Built-in defaults < a config file (--config FILE: "key = value" lines, '#' comments, keys are
// the flag names without "--") < command-line flags. "auto" values are resolved afterwards by
// resolve_auto() from the device: no GPU -> the tiny model on CPU for a few minutes; a GPU ->
// GPT-2 124M (d12) at B16 T1024 in bf16.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace blu::train {

struct TrainConfig {
  // model and precision
  std::string model = "auto";      // tiny | d12 | d24 | d36 | d48 | auto
  std::string device = "auto";     // cpu | cuda | cuda:N | auto
  std::string precision = "auto";  // fp32 | tf32 | bf16 | auto (bf16 on GPU, fp32 on CPU)
  int block_size = 0;              // context: positions in the table (0 = the model's: 1024, tiny 256)
  // CUDA step (Note [Fused step] in blutrain/fused_step.h)
  std::string engine = "auto";     // fused | autograd | auto (fused on CUDA, autograd on the CPU)
  bool graph = true;               // fused: capture the step as a CUDA graph (--no-graph: eager)
  std::string plan = "";          // --engine captured: bind this blu-plan (Note [Step runtime])
  bool compile = false;            // captured engine + blu-plan on its record (Note [blutrain --compile])
  bool capture_verify = true;      // blutrain capture: replay the graph and compare with the eager step
  std::string recompute = "auto";  // fused: none | gelu | layernorm | block | auto
  std::string attention = "auto";  // fused, fp32: strict | 3xtf32 | auto
  int64_t logits_chunk = 0;        // fused: rows of logits per classifier chunk (0 = auto)
  std::string weight_copy = "auto";  // fused, bf16: whole | layer | auto (Note [Per-layer bf16 weight copy])
  std::string init_from = "";      // initial weights: a Hugging Face GPT-2 safetensors file
  int64_t profile_step = 0;        // trace the kernels of this step (CUPTI), 0 = none
  std::string profile_json = "";   // where the trace's per-family breakdown goes
  std::string dump = "";           // fused: activations / gradients to write (Note [Precision logger])
  int64_t dump_step = 1;           // ... after this step (1-based)
  std::string dump_file = "";      // ... to this safetensors file ("" = <out-dir>/dump_step<N>.safetensors)
  // data
  std::string data = "brown";      // "brown" (embedded corpus), "synthetic", or a shard directory
  std::string data_name = "";      // shard prefix in that directory (<name>_train_*.bin); "" = detect
  std::string shuffle = "auto";    // train windows at random offsets: on | off | auto (on for brown)
  std::string vocab = "auto";      // gpt2 | corpus (the ids the data uses) | auto (corpus: tiny on brown)
  std::string vocab_dir = "";      // encoder.json + vocab.bpe; "" = default location
  std::string cache_dir = "";      // tokenized-corpus cache; "" = data/cache
  // batch
  int batch_size = 0;              // micro-batch B (0 = auto)
  int seq_len = 0;                 // T (0 = auto)
  int64_t total_batch_tokens = 0;  // tokens per optimizer step, all ranks (0 = one micro-batch per rank)
  // data parallelism (Note [Data-parallel training] in src/train/data_parallel.h)
  int dp = 1;                      // data-parallel ranks: must equal the launcher's WORLD_SIZE
  double dp_bucket_mb = 25;         // --dp > 1: gradient bucket size (MiB): the fused engine, --zero 2
  std::string dp_embedding_grad = "allreduce";  // fused engine, --dp > 1: allreduce | gather (Note [Embedding gradient by all-gather])
  int zero = 0;                    // ZeRO stage: 0 (replicated AdamW state) | 1 (state sharded over --dp)
  // tensor parallelism (Note [Tensor-parallel GPT-2] in blutrain/gpt2.h); WORLD_SIZE = dp * tp
  int tp = 1;                      // tensor-parallel ranks (consecutive ranks form a group)
  int tp_overlap = 1;              // --tp > 1: row chunks of the overlapped region GEMMs (Note [Async TP]); 1 = off
  int cp = 1;                      // context-parallel ranks (consecutive ranks form a group)
  // schedule
  int64_t max_steps = 0;           // 0 = auto
  double time_limit_s = 0;         // stop after this many seconds of training (0 = no limit)
  double lr = 0;                   // peak learning rate (0 = auto)
  double min_lr_ratio = 0.1;       // final lr = lr * min_lr_ratio (cosine)
  int64_t warmup_steps = -1;       // -1 = auto
  double weight_decay = 0.1;       // on 2-D weights only
  double beta1 = 0.9;
  double beta2 = 0;                // 0 = auto: 0.95; tiny 0.99 (Note [Tiny CPU recipe] in config.cpp)
  double adam_eps = 0;             // 0 = auto: 1e-8; tiny 1e-4 (Note [Tiny CPU recipe] in config.cpp)
  double grad_clip = 1.0;          // global L2 norm; 0 = off
  std::string nonfinite = "stop";  // NaN/inf loss or gradient norm: stop | skip (Note [Non-finite steps])
  int nonfinite_max_skips = 10;    // skip: stop at this many non-finite steps in a row
  uint64_t seed = 1337;
  // evaluation, sampling, output
  int64_t val_every = 0;           // 0 = auto
  int val_batches = 0;             // 0 = auto
  int final_val_batches = -2;      // after the last step: -1 = the whole val split, 0 = none, -2 = auto (CPU: -1)
  int64_t sample_every = 0;        // 0 = only at the end
  int sample_tokens = 64;
  double temperature = 1.0;
  int top_k = 40;
  std::string prompt = "";         // sampling prompt ("" = start from <|endoftext|>)
  std::string out_dir = "";        // "" = out/<model>
  int64_t ckpt_every = 0;          // 0 = only at the end
  int keep_checkpoints = 2;
  std::string checkpoint_format = "auto";  // whole | sharded | auto (Note [Sharded checkpoints] in src/train/sharded_checkpoint.h)
  std::string resume = "auto";     // auto (latest in out_dir if any) | none | a checkpoint dir
  int64_t log_every = 1;
  bool plot = true;                // loss-curve PNG at the end
  int threads = 0;                 // CPU threads (0 = all cores)
  bool save = true;                // write checkpoints
  std::string summary_json = "";  // write {"e2e.<precision>.tok_s": .., ".peak_gib": ..} here
  // tools
  std::string checkpoint = "";     // sample / fidelity-dump: checkpoint directory to load
  int stop_after_steps = 0;        // test hook: exit (as if killed) after this many steps
};

struct FlagInfo {
  std::string name;      // without "--"
  std::string value;     // placeholder, e.g. "N", "PATH", "" for a switch
  std::string help;
  std::string default_value;
};

// All flags of the trainer with their defaults (from a default TrainConfig), for --help.
std::vector<FlagInfo> train_flags();

// Sets one key ("lr", "batch-size" or "batch_size") from text; throws blu::Error naming the key
// and the bad value, or "unknown option" for an unknown key.
void set_option(TrainConfig& cfg, const std::string& key, const std::string& value);
// Reads a config file (Note [Config precedence]); errors name the file and line.
void load_config_file(TrainConfig& cfg, const std::string& path);
// Parses argv[first..argc) as flags: --key=value, --key value, --switch / --no-switch,
// --config FILE (applied first, whatever its position). Positional arguments are errors.
TrainConfig parse_train_flags(int argc, char** argv, int first);
// The whole config as "key = value" lines (readable back by load_config_file).
std::string config_to_text(const TrainConfig& cfg);

// The --help text for the program (all subcommands and every flag).
std::string help_text();

// Resolves every "auto"/0 setting for the device (see Note [Config precedence]); checks ranges.
void resolve_auto(TrainConfig& cfg, bool have_gpu);

}  // namespace blu::train
