// config_test.cpp: flag parsing, config-file precedence, --help completeness, auto resolution
// and the errors for bad settings.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "blutensor/error.h"
#include "blutrain/config.h"
#include "blutrain/gpt2.h"

using namespace blu::train;
namespace fs = std::filesystem;

namespace {
TrainConfig parse(std::vector<std::string> args) {
  std::vector<char*> argv;
  std::string prog = "blutrain";
  argv.push_back(prog.data());
  for (auto& a : args) argv.push_back(a.data());
  return parse_train_flags(static_cast<int>(argv.size()), argv.data(), 1);
}
std::string error_of(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const blu::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Config, FlagsInBothSpellings) {
  TrainConfig c = parse({"--lr=3e-4", "--batch-size", "4", "--model", "d24", "--no-plot", "--top_k=5"});
  EXPECT_DOUBLE_EQ(c.lr, 3e-4);
  EXPECT_EQ(c.batch_size, 4);
  EXPECT_EQ(c.model, "d24");
  EXPECT_FALSE(c.plot);
  EXPECT_EQ(c.top_k, 5);
  EXPECT_TRUE(parse({"--plot"}).plot);
}

TEST(Config, FileThenFlagsOverride) {
  fs::path p = fs::temp_directory_path() / ("blu_cfg_" + std::to_string(::getpid()) + ".conf");
  std::ofstream(p) << "# a comment\nmodel = tiny\nlr = 0.002   # trailing comment\nseq_len=32\nprompt = \"Once upon\"\n";
  TrainConfig c = parse({"--lr=0.005", "--config", p.string()});
  EXPECT_EQ(c.model, "tiny");
  EXPECT_DOUBLE_EQ(c.lr, 0.005);  // the flag wins even though --config came later
  EXPECT_EQ(c.seq_len, 32);
  EXPECT_EQ(c.prompt, "Once upon");
  // The config round-trips through its text form.
  std::ofstream(p) << config_to_text(c);
  TrainConfig d = parse({"--config=" + p.string()});
  EXPECT_EQ(config_to_text(d), config_to_text(c));
  std::ofstream(p) << "model = tiny\nbogus line\n";
  std::string err = error_of({"--config", p.string()});
  EXPECT_NE(err.find("line 2"), std::string::npos) << err;
  std::ofstream(p) << "learning_rate = 1\n";
  err = error_of({"--config", p.string()});
  EXPECT_NE(err.find("unknown option --learning-rate"), std::string::npos) << err;
  fs::remove(p);
  EXPECT_NE(error_of({"--config", "/nonexistent/x.conf"}).find("cannot open"), std::string::npos);
}

// Note [Config path checks]: a path that cannot be a config is an error naming --config and the path.
TEST(Config, ConfigPathsThatAreNotConfigFilesAreRejected) {
  const fs::path dir = fs::temp_directory_path() / ("blu_cfgdir_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string err = error_of({"--config", dir.string()});
  EXPECT_NE(err.find("--config '" + dir.string() + "' is a directory"), std::string::npos) << err;
  err = error_of({"--config=" + fs::temp_directory_path().string()});
  EXPECT_NE(err.find("is a directory"), std::string::npos) << err;
  err = error_of({"--config="});
  EXPECT_NE(err.find("--config: the path is empty"), std::string::npos) << err;
  err = error_of({"--config", ""});
  EXPECT_NE(err.find("--config: the path is empty"), std::string::npos) << err;
  const fs::path empty = dir / "empty.conf";
  std::ofstream(empty).flush();
  err = error_of({"--config", empty.string()});
  EXPECT_NE(err.find("--config '" + empty.string() + "' is empty"), std::string::npos) << err;
  err = error_of({"--config", (dir / "missing.conf").string()});
  EXPECT_NE(err.find("--config '" + (dir / "missing.conf").string() + "': cannot open"), std::string::npos) << err;
  if (::geteuid() != 0) {  // root reads a mode-000 file anyway
    const fs::path locked = dir / "locked.conf";
    std::ofstream(locked) << "model = tiny\n";
    fs::permissions(locked, fs::perms::none);
    err = error_of({"--config", locked.string()});
    EXPECT_NE(err.find("--config '" + locked.string() + "': cannot open"), std::string::npos) << err;
  }
  // Only comments is a valid config (all defaults).
  const fs::path comments = dir / "comments.conf";
  std::ofstream(comments) << "# nothing set\n";
  EXPECT_EQ(config_to_text(parse({"--config", comments.string()})), config_to_text(parse({})));
  fs::remove_all(dir);
}

TEST(Config, BadValuesAreClearErrors) {
  EXPECT_NE(error_of({"--lr=abc"}).find("--lr: 'abc' is not a valid number"), std::string::npos);
  EXPECT_NE(error_of({"--batch-size=1.5"}).find("not a valid integer"), std::string::npos);
  EXPECT_NE(error_of({"--whatever=1"}).find("unknown option --whatever"), std::string::npos);
  EXPECT_NE(error_of({"stray"}).find("unexpected argument 'stray'"), std::string::npos);
  EXPECT_NE(error_of({"--lr"}).find("needs a value"), std::string::npos);
  EXPECT_NE(error_of({"--seed=-1"}).find("not a valid integer"), std::string::npos);
}

TEST(Config, HelpDocumentsEveryFlag) {
  const std::string help = help_text();
  for (const FlagInfo& f : train_flags()) {
    EXPECT_NE(help.find("--" + f.name), std::string::npos) << f.name;
    EXPECT_FALSE(f.help.empty()) << f.name;
  }
  // Every TrainConfig field is reachable from a flag: config_to_text lists each flag once.
  EXPECT_EQ(std::count(help.begin(), help.end(), '\n') > 30, true);
  for (const char* sub : {"tokenize", "sample", "fidelity-dump"}) EXPECT_NE(help.find(sub), std::string::npos);
}

TEST(Config, AutoResolvesForCpuAndGpu) {
  TrainConfig cpu;
  resolve_auto(cpu, false);
  EXPECT_EQ(cpu.device, "cpu");
  EXPECT_EQ(cpu.model, "tiny");
  EXPECT_EQ(cpu.precision, "fp32");
  EXPECT_EQ(cpu.total_batch_tokens, int64_t{cpu.batch_size} * cpu.seq_len);
  EXPECT_GT(cpu.time_limit_s, 0);
  // Note [Tiny CPU recipe]: 2500 steps, AdamW beta2 0.99 and eps 1e-4 for the tiny CPU run;
  // GPT-2's 0.95 and 1e-8 elsewhere.
  EXPECT_EQ(cpu.max_steps, 2500);
  EXPECT_DOUBLE_EQ(cpu.beta2, 0.99);
  EXPECT_DOUBLE_EQ(cpu.adam_eps, 1e-4);
  TrainConfig gpu;
  resolve_auto(gpu, true);
  EXPECT_EQ(gpu.model, "d12");
  EXPECT_DOUBLE_EQ(gpu.beta2, 0.95);
  EXPECT_DOUBLE_EQ(gpu.adam_eps, 1e-8);
  EXPECT_EQ(gpu.batch_size, 16);
  EXPECT_EQ(gpu.seq_len, 1024);
  EXPECT_EQ(gpu.precision, "bf16");
  EXPECT_EQ(gpu.out_dir, "out/d12");
  // Note [Shuffled windows]: on for the Brown corpus (the default data), off for shard directories
  // and synthetic data unless asked for; a bad value is a clear error.
  EXPECT_EQ(cpu.shuffle, "on");
  TrainConfig shards;
  shards.data = "/some/llmc/shards";
  resolve_auto(shards, true);
  EXPECT_EQ(shards.shuffle, "off");
  TrainConfig forced;
  forced.data = "synthetic";
  forced.shuffle = "on";
  resolve_auto(forced, true);
  EXPECT_EQ(forced.shuffle, "on");
  TrainConfig bad;
  bad.shuffle = "sometimes";
  try {
    resolve_auto(bad, false);
    ADD_FAILURE() << "--shuffle sometimes accepted";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--shuffle 'sometimes'"), std::string::npos) << e.what();
  }
}

TEST(Config, ConfigsThatDoNotFitAreRejected) {
  auto err = [](TrainConfig c, bool gpu) {
    try {
      resolve_auto(c, gpu);
    } catch (const blu::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  TrainConfig c;
  c.model = "d13";
  EXPECT_NE(err(c, false).find("unknown model size"), std::string::npos);
  // Note [Model shapes]: LxHxC, strictly three positive numbers; the width a multiple of the heads.
  for (const char* bad : {"2x2", "2x2x128x1", "0x2x128", "2x0x128", "2x2x-128", "2x2x128 ", "x2x128", "2X2X128",
                          "2x3x128", "99999999x1x64", "2x2x100000"}) {
    c = TrainConfig();
    c.model = bad;
    const std::string e = err(c, false);
    EXPECT_NE(e.find("--model: "), std::string::npos) << bad;
    EXPECT_TRUE(e.find("unknown model size") != std::string::npos || e.find("model shape") != std::string::npos)
        << bad << ": " << e;
  }
  c = TrainConfig();
  c.model = "2x2x128";
  EXPECT_EQ(err(c, false), "");
  // --weight-copy (Note [Per-layer bf16 weight copy]): whole, layer or auto.
  for (const char* ok : {"whole", "layer", "auto"}) {
    c = TrainConfig();
    c.weight_copy = ok;
    EXPECT_EQ(err(c, false), "") << ok;
  }
  c = TrainConfig();
  c.weight_copy = "half";
  EXPECT_NE(err(c, false).find("--weight-copy 'half': expected whole, layer or auto"), std::string::npos);
  EXPECT_EQ(parse({"--weight-copy", "layer"}).weight_copy, "layer");
  {
    const GPT2Config m = gpt2_config("3x2x128");
    EXPECT_EQ(m.n_layer, 3);
    EXPECT_EQ(m.n_head, 2);
    EXPECT_EQ(m.n_embd, 128);
    EXPECT_EQ(m.name, "3x2x128");
  }
  c = TrainConfig();
  c.device = "cuda";
  EXPECT_NE(err(c, false).find("no CUDA device"), std::string::npos);
  c = TrainConfig();
  c.precision = "bf16";
  EXPECT_NE(err(c, false).find("needs a GPU"), std::string::npos);
  c = TrainConfig();
  c.batch_size = 4;
  c.seq_len = 64;
  c.total_batch_tokens = 300;
  EXPECT_NE(err(c, false).find("not a multiple of B*T"), std::string::npos);
  c = TrainConfig();
  c.seq_len = 2048;
  EXPECT_NE(err(c, true).find("exceeds the model's context"), std::string::npos);
  // Note [Non-finite steps]: the policy names, the streak bound, and skip needing the autograd engine.
  c = parse({"--nonfinite", "ignore"});
  EXPECT_NE(err(c, false).find("--nonfinite 'ignore': expected stop or skip"), std::string::npos) << err(c, false);
  c = parse({"--nonfinite=skip", "--nonfinite-max-skips=0"});
  EXPECT_NE(err(c, false).find("--nonfinite-max-skips 0 must be at least 1"), std::string::npos);
  c = parse({"--nonfinite=skip"});
  EXPECT_EQ(err(c, false), "");  // the CPU's engine is autograd
  EXPECT_NE(err(c, true).find("--nonfinite skip with --engine fused"), std::string::npos) << err(c, true);
  c = parse({"--nonfinite=skip", "--engine=autograd"});
  EXPECT_EQ(err(c, true), "");
  EXPECT_EQ(TrainConfig().nonfinite, "stop");
  EXPECT_EQ(TrainConfig().nonfinite_max_skips, 10);
}

// Note [Tensor-parallel training]: --tp runs on the autograd engine, without ZeRO; on a GPU the
// engine must be chosen explicitly (auto picks the fused one there).
TEST(Config, TensorParallelFlagCombinations) {
  auto err = [](TrainConfig c, bool gpu) {
    try {
      resolve_auto(c, gpu);
    } catch (const blu::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(TrainConfig().tp, 1);
  EXPECT_EQ(err(parse({"--tp", "2"}), false), "");
  EXPECT_EQ(err(parse({"--tp=2", "--engine=autograd"}), true), "");
  EXPECT_NE(err(parse({"--tp", "2"}), true).find("--tp 2 with --engine fused: tensor parallelism runs on the "
                                                 "autograd engine only"),
            std::string::npos)
      << err(parse({"--tp", "2"}), true);
  EXPECT_NE(err(parse({"--tp", "0"}), false).find("--tp 0: expected the number of tensor-parallel ranks"),
            std::string::npos);
  EXPECT_NE(err(parse({"--tp", "2", "--dp", "2", "--zero", "2"}), false).find("--tp 2 with --zero 2"),
            std::string::npos);
  EXPECT_NE(err(parse({"--tp", "2048", "--dp", "1024"}), false).find("too many ranks"), std::string::npos);
}

// Note [Sharded checkpoints]: --checkpoint-format auto is sharded under --zero 1/2/3, whole
// otherwise; sharded without ZeRO and unknown formats are errors naming the flag.
TEST(Config, CheckpointFormat) {
  auto resolved = [](TrainConfig c) {
    try {
      resolve_auto(c, false);
    } catch (const blu::Error& e) {
      return std::string("error: ") + e.what();
    }
    return c.checkpoint_format;
  };
  EXPECT_EQ(TrainConfig().checkpoint_format, "auto");
  EXPECT_EQ(resolved(parse({})), "whole");
  EXPECT_EQ(resolved(parse({"--dp", "2"})), "whole");
  for (const char* zero : {"1", "2", "3"}) EXPECT_EQ(resolved(parse({"--dp", "2", "--zero", zero})), "sharded");
  EXPECT_EQ(resolved(parse({"--dp", "2", "--zero", "1", "--checkpoint-format", "whole"})), "whole");
  EXPECT_NE(resolved(parse({"--dp", "2", "--checkpoint-format", "sharded"}))
                .find("--checkpoint-format sharded with --zero 0: each rank writes the state it owns"),
            std::string::npos);
  EXPECT_NE(resolved(parse({"--checkpoint-format", "zip"})).find("--checkpoint-format 'zip': expected whole, sharded"),
            std::string::npos);
}

// Found by tests/fuzz/config_file_fuzz.cpp: B*T*dp from a config file overflowed int64 in
// resolve_auto (signed overflow, then a garbage total batch); it is now an error naming the flags.
TEST(Config, TokensPerStepOverflowIsAnError) {
  TrainConfig c;
  c.batch_size = 2147483647;
  c.seq_len = 256;
  c.dp = 2147483647;
  c.engine = "autograd";
  try {
    resolve_auto(c, false);
    FAIL() << "B*T*dp beyond int64 was accepted";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("overflow int64"), std::string::npos) << e.what();
  }
  // Unsigned flags refuse a sign after leading white space too (strtoull wraps "-1").
  EXPECT_NE(error_of({"--seed=\v-1"}).find("not a valid integer"), std::string::npos);
}
