// tokenize_corpus.cpp: text documents -> train/val token shards (the `tokenize` step), streamed
// (Note [Streaming tokenize] in blutrain/data.h). Documents are split deterministically (every
// k-th document to val), each is preceded by <|endoftext|>, and shards are cut every
// `shard_tokens` tokens.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "blutensor/error.h"
#include "blutrain/data.h"
#include "blutrain/files.h"
#include "blutrain/tokenizer.h"
#include "common/splitmix64.h"
#include "data/cache_install.h"
#include "data/ordered_encode.h"
#include "data/shard_writer.h"

namespace blu::train {
namespace {

// A spill folder of this call's own (Note [Parallel tokenize]): two runs into one output folder,
// or a folder of that name the user has, are never touched.
std::string spill_dir_for(const std::string& out_dir) {
  static std::atomic<int> calls{0};
  return out_dir + "/.tokenize-spill-" + std::to_string(::getpid()) + "-" + std::to_string(calls++);
}

TokenizeResult tokenize_stream(const Tokenizer& tok, size_t n_docs, const DocumentReader& read,
                               const TokenizeOptions& opt) {
  BLU_CHECK(n_docs > 0, "tokenize: no input documents");
  BLU_CHECK(opt.val_fraction >= 0.0 && opt.val_fraction < 1.0, "tokenize: val fraction ",
            opt.val_fraction, " must be in [0, 1)");
  BLU_CHECK(opt.shard_tokens > 0 && opt.shard_tokens < (int64_t{1} << 31),
            "tokenize: shard size ", opt.shard_tokens, " must be in (0, 2^31)");
  BLU_CHECK(opt.chunk_bytes > 0, "tokenize: chunk size must be positive");
  BLU_CHECK(!opt.out_dir.empty(), "tokenize: no output directory");
  std::filesystem::create_directories(opt.out_dir);

  const int64_t every = opt.val_fraction > 0 ? std::max<int64_t>(1, std::llround(1.0 / opt.val_fraction)) : 0;
  const bool split_by_document = every > 0 && static_cast<int64_t>(n_docs) >= every;
  ShardSplitWriter train(opt.out_dir, opt.name, "train", opt.shard_tokens);
  ShardSplitWriter val(opt.out_dir, opt.name, "val", opt.shard_tokens);
  BLU_CHECK(opt.jobs >= 1, "tokenize: jobs ", opt.jobs, " must be at least 1");
  ShardSplitWriter* dst = &train;
  encode_in_order(
      tok, n_docs, read, opt.jobs, spill_dir_for(opt.out_dir),
      [&](size_t i) {
        const bool to_val = split_by_document && static_cast<int64_t>(i % static_cast<size_t>(every)) == every - 1;
        dst = to_val ? &val : &train;
        const int32_t eot = Tokenizer::kEndOfText;
        dst->append(std::span<const int32_t>(&eot, 1));
      },
      [&](std::span<const int32_t> ids) { dst->append(ids); });
  TokenizeResult r;
  r.documents = static_cast<int64_t>(n_docs);
  r.train_shards = train.finish();
  if (every > 0 && !split_by_document) {
    // Too few documents to split by document: the tail of the token stream is the val split,
    // moved out of the train shards once the total is known.
    const auto n_val = static_cast<int64_t>(std::llround(opt.val_fraction * static_cast<double>(train.tokens())));
    move_tail_tokens(r.train_shards, n_val, val);
    r.train_tokens = train.tokens() - n_val;
  } else {
    r.train_tokens = train.tokens();
  }
  r.val_tokens = val.tokens();
  r.val_shards = val.finish();
  return r;
}

}  // namespace

std::vector<TextDocument> read_text_files(const std::vector<std::string>& paths) {
  std::vector<TextDocument> docs;
  for (const std::string& p : paths) docs.push_back({p, read_file(p, "tokenize: input text")});
  return docs;
}

TokenizeResult tokenize_documents(const Tokenizer& tok, const std::vector<TextDocument>& docs,
                                  const TokenizeOptions& opt) {
  const size_t chunk = static_cast<size_t>(std::max<int64_t>(opt.chunk_bytes, 1));
  return tokenize_stream(
      tok, docs.size(),
      [&](size_t i, const std::function<void(std::string_view)>& slice) {
        const std::string_view text = docs[i].text;
        for (size_t at = 0; at < text.size(); at += chunk) slice(text.substr(at, chunk));
      },
      opt);
}

TokenizeResult tokenize_files(const Tokenizer& tok, const std::vector<std::string>& paths,
                              const TokenizeOptions& opt) {
  for (const std::string& p : paths) {
    std::error_code ec;
    BLU_CHECK(!std::filesystem::is_directory(p, ec), "tokenize: input '", p, "' is a directory, not a text file");
    std::ifstream probe(p, std::ios::binary);
    BLU_CHECK(probe.good(), "tokenize: cannot open input '", p, "': ", std::strerror(errno));
  }
  return tokenize_stream(
      tok, paths.size(),
      [&](size_t i, const std::function<void(std::string_view)>& slice) {  // on several threads
        std::vector<char> buf(static_cast<size_t>(std::max<int64_t>(opt.chunk_bytes, 1)));
        std::ifstream in(paths[i], std::ios::binary);
        BLU_CHECK(in.good(), "tokenize: cannot open input '", paths[i], "': ", std::strerror(errno));
        while (in) {
          in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
          const auto n = static_cast<size_t>(in.gcount());
          if (n > 0) slice(std::string_view(buf.data(), n));
        }
        BLU_CHECK(!in.bad(), "tokenize: error reading '", paths[i], "'");
      },
      opt);
}

}  // namespace blu::train

namespace blu::train {

ShardSet ensure_synthetic_shards(const std::string& cache_dir, int64_t train_tokens, uint64_t seed) {
  const std::string dir = cache_dir + "/synthetic";
  const std::string tag = "synthetic_" + std::to_string(train_tokens) + "_" + std::to_string(seed);
  const auto complete = [&tag](const std::string& d) {
    const std::string manifest = d + "/manifest.txt";
    return file_exists(manifest) && read_file(manifest, "synthetic data manifest") == tag;
  };
  if (!complete(dir)) {  // Note [Atomic data caches]: written aside, installed by one rename
    install_cache_dir(
        dir,
        [&](const std::string& staging) {
          uint64_t state = seed;
          auto next = [&state] { return splitmix64_next(state); };
          auto make = [&](int64_t n) {
            std::vector<int32_t> t(static_cast<size_t>(n));
            for (auto& v : t) v = static_cast<int32_t>(next() % Tokenizer::kGpt2VocabSize);
            return t;
          };
          write_shard(staging + "/synthetic_train_000000.bin", make(train_tokens));
          write_shard(staging + "/synthetic_val_000000.bin", make(std::max<int64_t>(train_tokens / 16, 1 << 16)));
          write_file_atomic(staging + "/manifest.txt", tag);
        },
        complete);
  }
  return ShardSet{find_shards(dir, "synthetic", "train"), find_shards(dir, "synthetic", "val")};
}

ShardSet find_shard_set(const std::string& dir, const std::string& name) {
  std::string prefix = name;
  if (prefix.empty()) {
    std::error_code ec;
    BLU_CHECK(std::filesystem::is_directory(dir, ec), "data: '", dir,
              "' is not a directory (--data takes 'brown', 'synthetic' or a directory of token shards)");
    std::vector<std::string> found;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string f = e.path().filename().string();
      size_t at = f.find("_train_");
      if (at != std::string::npos && f.size() > 4 && f.substr(f.size() - 4) == ".bin") {
        std::string p = f.substr(0, at);
        if (std::find(found.begin(), found.end(), p) == found.end()) found.push_back(p);
      }
    }
    BLU_CHECK(found.size() == 1, "data: '", dir, "' has ", found.size(),
              " shard prefixes with *_train_*.bin files; pass --data-name");
    prefix = found[0];
  }
  ShardSet s;
  s.train = find_shards(dir, prefix, "train");
  try {
    s.val = find_shards(dir, prefix, "val");
  } catch (const blu::Error&) {
    s.val.clear();
  }
  return s;
}

}  // namespace blu::train
