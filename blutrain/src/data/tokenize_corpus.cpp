// tokenize_corpus.cpp: text documents -> train/val token shards (the `tokenize` step).
// Documents are split deterministically (every k-th document to val), each is preceded by
// <|endoftext|>, and shards are cut every `shard_tokens` tokens.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "blutensor/error.h"
#include "blutrain/data.h"
#include "blutrain/files.h"
#include "blutrain/tokenizer.h"

namespace blu::train {
namespace {

std::vector<std::string> write_split(const std::vector<int32_t>& tokens, const TokenizeOptions& opt,
                                     const std::string& split) {
  std::vector<std::string> paths;
  const int64_t total = static_cast<int64_t>(tokens.size());
  for (int64_t start = 0, index = 0; start < total; start += opt.shard_tokens, ++index) {
    const int64_t n = std::min<int64_t>(opt.shard_tokens, total - start);
    char file[64];
    std::snprintf(file, sizeof(file), "_%s_%06lld.bin", split.c_str(), static_cast<long long>(index));
    std::string path = opt.out_dir + "/" + opt.name + file;
    write_shard(path, std::span<const int32_t>(tokens.data() + start, static_cast<size_t>(n)));
    paths.push_back(path);
  }
  return paths;
}

}  // namespace

std::vector<TextDocument> read_text_files(const std::vector<std::string>& paths) {
  std::vector<TextDocument> docs;
  for (const std::string& p : paths) docs.push_back({p, read_file(p, "tokenize: input text")});
  return docs;
}

TokenizeResult tokenize_documents(const Tokenizer& tok, const std::vector<TextDocument>& docs,
                                  const TokenizeOptions& opt) {
  BLU_CHECK(!docs.empty(), "tokenize: no input documents");
  BLU_CHECK(opt.val_fraction >= 0.0 && opt.val_fraction < 1.0, "tokenize: val fraction ",
            opt.val_fraction, " must be in [0, 1)");
  BLU_CHECK(opt.shard_tokens > 0 && opt.shard_tokens < (int64_t{1} << 31),
            "tokenize: shard size ", opt.shard_tokens, " must be in (0, 2^31)");
  BLU_CHECK(!opt.out_dir.empty(), "tokenize: no output directory");
  std::filesystem::create_directories(opt.out_dir);

  const int64_t every = opt.val_fraction > 0 ? std::max<int64_t>(1, std::llround(1.0 / opt.val_fraction)) : 0;
  const bool split_by_document = every > 0 && static_cast<int64_t>(docs.size()) >= every;
  std::vector<int32_t> train, val;
  for (size_t i = 0; i < docs.size(); ++i) {
    const bool to_val = split_by_document && static_cast<int64_t>(i % static_cast<size_t>(every)) == every - 1;
    std::vector<int32_t>& dst = to_val ? val : train;
    dst.push_back(Tokenizer::kEndOfText);
    std::vector<int32_t> ids = tok.encode(docs[i].text);
    dst.insert(dst.end(), ids.begin(), ids.end());
  }
  if (every > 0 && !split_by_document) {
    // Too few documents to split by document: the tail of the token stream is the val split.
    const size_t n_val = static_cast<size_t>(std::llround(opt.val_fraction * static_cast<double>(train.size())));
    val.assign(train.end() - static_cast<std::ptrdiff_t>(n_val), train.end());
    train.resize(train.size() - n_val);
  }
  TokenizeResult r;
  r.documents = static_cast<int64_t>(docs.size());
  r.train_tokens = static_cast<int64_t>(train.size());
  r.val_tokens = static_cast<int64_t>(val.size());
  r.train_shards = write_split(train, opt, "train");
  r.val_shards = write_split(val, opt, "val");
  return r;
}

}  // namespace blu::train

namespace blu::train {

ShardSet ensure_synthetic_shards(const std::string& cache_dir, int64_t train_tokens, uint64_t seed) {
  const std::string dir = cache_dir + "/synthetic";
  const std::string tag = "synthetic_" + std::to_string(train_tokens) + "_" + std::to_string(seed);
  const std::string manifest = dir + "/manifest.txt";
  if (file_exists(manifest) && read_file(manifest, "synthetic data manifest") == tag) {
    return ShardSet{find_shards(dir, "synthetic", "train"), find_shards(dir, "synthetic", "val")};
  }
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  uint64_t state = seed;
  auto next = [&state] {  // SplitMix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  auto make = [&](int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& v : t) v = static_cast<int32_t>(next() % 50257);
    return t;
  };
  write_shard(dir + "/synthetic_train_000000.bin", make(train_tokens));
  write_shard(dir + "/synthetic_val_000000.bin", make(std::max<int64_t>(train_tokens / 16, 1 << 16)));
  write_file_atomic(manifest, tag);
  return ShardSet{{dir + "/synthetic_train_000000.bin"}, {dir + "/synthetic_val_000000.bin"}};
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
