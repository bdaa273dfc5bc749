// tokenize_corpus.cpp: text documents -> train/val token shards (the `tokenize` step).
// Documents are split deterministically (every k-th document to val), each is preceded by
// <|endoftext|>, and shards are cut every `shard_tokens` tokens.
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
