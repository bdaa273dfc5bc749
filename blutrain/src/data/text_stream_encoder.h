// text_stream_encoder.h (internal): encodes one document fed in slices of any size, giving the same
// ids as Tokenizer::encode of the whole document while holding only a bounded tail
// (Note [Streaming tokenize] in blutrain/data.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "blutrain/tokenizer.h"

namespace blu::train {

class TextStreamEncoder {
 public:
  // Text held back past this many bytes is cut even inside one pre-token (the only way the
  // stream can differ from encode(): a single pre-token longer than 64 KiB).
  static constexpr size_t kMaxCarryBytes = size_t{64} << 10;

  explicit TextStreamEncoder(const Tokenizer& tok) : tok_(tok) {}

  // The next slice of the document (any bytes, cut anywhere, even inside a UTF-8 character):
  // appends to `out` the ids of the text that no later slice can change.
  void feed(std::string_view bytes, std::vector<int32_t>& out);
  // End of the document: appends the ids of everything held back; ready for the next document.
  void finish(std::vector<int32_t>& out);

 private:
  const Tokenizer& tok_;
  std::string raw_tail_;  // <= 3 bytes: an unfinished UTF-8 sequence at the end of the last slice
  std::string carry_;     // sanitized text whose pre-tokens a later slice may still change
  std::string scratch_;
};

// Bytes at the end of `raw` that begin a UTF-8 sequence it does not finish (0..3).
size_t unfinished_utf8_suffix(std::string_view raw);

}  // namespace blu::train
