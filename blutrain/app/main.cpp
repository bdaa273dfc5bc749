// main.cpp: the `blutrain` program: subcommands train (default), tokenize, sample,
// fidelity-dump, capture. The only place that catches blu::Error: it prints the message and exits 1.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "blutensor/error.h"
#include "blutrain/config.h"
#include "blutrain/data.h"
#include "blutrain/tokenizer.h"
#include "blutrain/trainer.h"
#include "blutrain/version.h"

namespace {

using namespace blu::train;

int run_tokenize(int argc, char** argv) {
  // Positional arguments are input files; the rest are flags.
  std::vector<std::string> inputs;
  std::vector<char*> flags = {argv[0]};
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) == 0) {
      flags.push_back(argv[i]);
      if (a.find('=') == std::string::npos && i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
        flags.push_back(argv[++i]);
      }
    } else {
      inputs.push_back(a);
    }
  }
  TrainConfig cfg = parse_train_flags(static_cast<int>(flags.size()), flags.data(), 1);
  BLU_CHECK(!inputs.empty(), "tokenize: no input files (usage: blutrain tokenize --out-dir DIR FILE...)");
  BLU_CHECK(!cfg.out_dir.empty(), "tokenize: --out-dir is required");
  Tokenizer tok = Tokenizer::from_dir(cfg.vocab_dir.empty() ? Tokenizer::default_dir() : cfg.vocab_dir);
  TokenizeOptions opt;
  opt.out_dir = cfg.out_dir;
  opt.name = cfg.data_name.empty() ? "data" : cfg.data_name;
  // Note [Parallel tokenize]: --threads N encodes N files at once (0: the cores, at most 8).
  opt.jobs = cfg.threads > 0 ? cfg.threads
                             : static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  TokenizeResult r = tokenize_files(tok, inputs, opt);  // streamed: Note [Streaming tokenize]
  std::cout << "tokenized " << r.documents << " document(s): " << r.train_tokens << " train tokens in "
            << r.train_shards.size() << " shard(s), " << r.val_tokens << " val tokens in " << r.val_shards.size()
            << " shard(s) under " << opt.out_dir << " (train with --data " << opt.out_dir << ")\n";
  return 0;
}

void apply_threads(int argc, char** argv) {
  // OpenMP reads OMP_NUM_THREADS when its first parallel region starts: set it before any op.
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string v;
    if (a.rfind("--threads=", 0) == 0) v = a.substr(10);
    if (a == "--threads" && i + 1 < argc) v = argv[i + 1];
    if (!v.empty() && v != "0") setenv("OMP_NUM_THREADS", v.c_str(), 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string sub = "train";
    int first = 1;
    if (argc > 1 && argv[1][0] != '-') {
      sub = argv[1];
      first = 2;
    }
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
        std::cout << help_text();
        return 0;
      }
      if (std::strcmp(argv[i], "--version") == 0) {
        std::cout << "blutrain " << BLUTRAIN_VERSION_STRING << "\n";
        return 0;
      }
    }
    apply_threads(argc, argv);
    if (sub == "tokenize") return run_tokenize(argc, argv);
    BLU_CHECK(sub == "train" || sub == "sample" || sub == "fidelity-dump" || sub == "capture", "unknown subcommand '",
              sub, "' (expected train, tokenize, sample, fidelity-dump, capture; see blutrain --help)");
    TrainConfig cfg = parse_train_flags(argc, argv, first);
    if (sub == "capture") {
      // Small defaults: the graph, not a benchmark (synthetic tokens).
      if (cfg.batch_size == 0) cfg.batch_size = 2;
      if (cfg.seq_len == 0) cfg.seq_len = 64;
      if (cfg.out_dir.empty()) cfg.out_dir = "out/capture";
    }
    if (sub == "fidelity-dump") {
      // Small fp32 defaults: a comparison, not a benchmark.
      if (cfg.batch_size == 0) cfg.batch_size = 4;
      if (cfg.seq_len == 0) cfg.seq_len = 64;
      if (cfg.precision == "auto") cfg.precision = "fp32";
      if (cfg.out_dir.empty()) cfg.out_dir = "out/fidelity";
    }
#if !BLU_WITH_CUDA  // Note [CPU-only build]: say why, rather than "no CUDA device is available"
    BLU_CHECK(cfg.device.rfind("cuda", 0) != 0, "--device ", cfg.device,
              ": this blutrain was built without CUDA (BLU_WITH_CUDA=OFF: no nvcc was found, or it was "
              "asked for); train on the CPU (--device cpu) or rebuild with the CUDA toolkit");
#endif
    resolve_auto(cfg, cuda_device_present());
    if (sub == "sample") return run_sample(cfg, std::cout);
    if (sub == "fidelity-dump") return run_fidelity_dump(cfg, std::cout);
    if (sub == "capture") return run_capture(cfg, std::cout);
    TrainResult r = run_training(cfg, std::cout);
    if (r.stopped_early) return 3;
    return 0;
  } catch (const blu::Error& e) {
    std::fprintf(stderr, "blutrain: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "blutrain: unexpected error: %s\n", e.what());
    return 1;
  }
}
