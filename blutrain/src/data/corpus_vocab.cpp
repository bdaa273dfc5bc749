// corpus_vocab.cpp: the corpus vocabulary and its compact-id shard cache (Note [Corpus
// vocabulary] in blutrain/corpus_vocab.h).
#include "blutrain/corpus_vocab.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <utility>
#include <sstream>
#include <tuple>

#include "blutensor/crc32c.h"
#include "blutensor/error.h"
#include "blutrain/files.h"
#include "blutrain/tokenizer.h"
#include "data/cache_install.h"
#include "data/shard_writer.h"

namespace blu::train {
namespace {

constexpr const char* kCacheVersion = "corpus-vocab-1";
constexpr int32_t kGpt2Vocab = Tokenizer::kGpt2VocabSize;

// "path size crc" of every source shard, in order: the cache key.
std::string source_key(const ShardSet& source) {
  std::ostringstream k;
  for (const auto* split : {&source.train, &source.val}) {
    for (const std::string& p : *split) {
      TokenShard s = TokenShard::open(p);
      k << std::filesystem::path(p).filename().string() << ' ' << s.size() << ' '
        << crc32c_hex(crc32c(s.tokens().data(), s.tokens().size_bytes())) << '\n';
    }
  }
  return k.str();
}

}  // namespace

std::string vocab_ids_json(const std::vector<int32_t>& ids) {
  std::ostringstream o;
  o << '[';
  for (size_t i = 0; i < ids.size(); ++i) o << (i ? "," : "") << ids[i];
  o << ']';
  return o.str();
}

std::vector<int32_t> vocab_ids_from_json(const json::Value& v, const std::string& where) {
  BLU_CHECK(v.is_array(), where, ": not an array");
  std::vector<int32_t> ids;
  for (const json::Value& id : v.as_array()) {
    BLU_CHECK(id.is_integer() && id.as_integer() >= 0 && id.as_integer() < kGpt2Vocab, where, ": holds ",
              id.dump(), ", not a GPT-2 id");
    ids.push_back(static_cast<int32_t>(id.as_integer()));
  }
  validate_vocab_ids(ids, where);
  return ids;
}

void validate_vocab_ids(const std::vector<int32_t>& ids, const std::string& where) {
  BLU_CHECK(!ids.empty(), where, ": an empty vocabulary");
  for (size_t i = 0; i < ids.size(); ++i) {
    BLU_CHECK(ids[i] >= 0 && ids[i] < kGpt2Vocab, where, ": vocabulary id ", ids[i], " at ", i,
              " is not a GPT-2 id (0..", kGpt2Vocab - 1, ")");
    BLU_CHECK(i == 0 || ids[i] > ids[i - 1], where, ": vocabulary ids must increase (", ids[i - 1], " then ",
              ids[i], " at ", i, ")");
  }
  BLU_CHECK(std::binary_search(ids.begin(), ids.end(), Tokenizer::kEndOfText), where,
            ": the vocabulary lacks the end-of-text id ", Tokenizer::kEndOfText);
}

int32_t to_model_id(const std::vector<int32_t>& ids, int32_t gpt2_id) {
  if (ids.empty()) return gpt2_id;
  auto it = std::lower_bound(ids.begin(), ids.end(), gpt2_id);
  return it != ids.end() && *it == gpt2_id ? static_cast<int32_t>(it - ids.begin()) : -1;
}

int32_t to_gpt2_id(const std::vector<int32_t>& ids, int32_t model_id) {
  if (ids.empty()) return model_id;
  BLU_CHECK(model_id >= 0 && model_id < static_cast<int32_t>(ids.size()), "token id ", model_id,
            " outside the model's vocabulary of ", ids.size());
  return ids[static_cast<size_t>(model_id)];
}

void set_model_vocab(GPT2Config& cfg, const std::vector<int32_t>& ids) {
  cfg.vocab_ids = ids;
  cfg.vocab_size = ids.empty() ? kGpt2Vocab : static_cast<int>(ids.size());
  cfg.padded_vocab = (cfg.vocab_size + 127) / 128 * 128;  // Note [Padded vocabulary]
}

// The cache in `dir` when it is complete and made from the source with `key`; nothing otherwise.
static std::optional<CorpusVocab> load_corpus_vocab(const std::string& dir, const std::string& key, bool with_val) {
  const std::string manifest_path = dir + "/manifest.json";
  if (!file_exists(manifest_path)) return std::nullopt;
  try {
    json::Value m = parse_json(read_file(manifest_path, "corpus vocabulary manifest"), manifest_path);
    if (json_member(m, "version", manifest_path).as_string() != kCacheVersion ||
        json_member(m, "source", manifest_path).as_string() != key)
      return std::nullopt;
    CorpusVocab v;
    v.ids = vocab_ids_from_json(json_member(m, "ids", manifest_path), manifest_path + " \"ids\"");
    v.shards.train = find_shards(dir, "corpus", "train");
    if (with_val) v.shards.val = find_shards(dir, "corpus", "val");
    for (const auto* split : {&v.shards.train, &v.shards.val})
      for (const std::string& p : *split) TokenShard::open(p).verify_checksum();
    return v;
  } catch (const blu::Error&) {
    return std::nullopt;  // a stale or damaged cache is rebuilt
  }
}

CorpusVocab ensure_corpus_vocab(const ShardSet& source, const std::string& cache_dir) {
  BLU_CHECK(!source.train.empty(), "--vocab corpus: no train shards");
  const std::string key = source_key(source);
  // One directory per source (its key's CRC), so that different corpora of one name never share it.
  const std::string dir = cache_dir + "/" + crc32c_hex(crc32c(key.data(), key.size()));
  const bool with_val = !source.val.empty();
  if (std::optional<CorpusVocab> v = load_corpus_vocab(dir, key, with_val)) return *v;
  std::vector<char> used(kGpt2Vocab, 0);
  used[Tokenizer::kEndOfText] = 1;
  for (const auto* split : {&source.train, &source.val}) {
    for (const std::string& p : *split) {
      TokenShard s = TokenShard::open(p);
      s.validate_ids(kGpt2Vocab);
      for (uint16_t t : s.tokens()) used[t] = 1;
    }
  }
  std::vector<int32_t> ids;
  std::vector<int32_t> compact(kGpt2Vocab, -1);
  for (int32_t id = 0; id < kGpt2Vocab; ++id) {
    if (!used[static_cast<size_t>(id)]) continue;
    compact[static_cast<size_t>(id)] = static_cast<int32_t>(ids.size());
    ids.push_back(id);
  }
  // Note [Atomic data caches]: written aside, installed by one rename.
  install_cache_dir(
      dir,
      [&](const std::string& staging) {
        for (const auto& [split, src] :
             {std::pair{"train", &source.train}, std::pair{"val", &source.val}}) {
          ShardSplitWriter writer(staging, "corpus", split, TokenizeOptions{}.shard_tokens);
          for (const std::string& path : *src) {
            TokenShard s = TokenShard::open(path);
            std::vector<int32_t> out(static_cast<size_t>(s.size()));
            for (size_t j = 0; j < out.size(); ++j) out[j] = compact[s.tokens()[j]];
            writer.append(out);
          }
          writer.finish();
        }
        std::ostringstream m;
        m << "{\"version\": " << json::quote(kCacheVersion) << ", \"source\": " << json::quote(key)
          << ", \"ids\": " << vocab_ids_json(ids) << "}\n";
        write_file_atomic(staging + "/manifest.json", m.str());
      },
      [&](const std::string& d) { return load_corpus_vocab(d, key, with_val).has_value(); });
  std::optional<CorpusVocab> v = load_corpus_vocab(dir, key, with_val);
  BLU_CHECK(v.has_value(), "--vocab corpus: the cache in '", dir, "' was written but does not load");
  return *v;
}

}  // namespace blu::train
