// text_stream_encoder.cpp: where a slice of text may be cut without changing the ids
// (Note [Streaming tokenize] in blutrain/data.h; the proofs are in the comments below).
#include "data/text_stream_encoder.h"

#include <span>

namespace blu::train {
namespace {

// A pre-token is final once at least this much text follows it: the pre-tokenizer decides a
// match from the match itself plus at most two code points after it ('ll after an apostrophe,
// the character after a whitespace run), i.e. at most 8 bytes; 16 leaves room.
constexpr size_t kLookaheadBytes = 16;

}  // namespace

size_t unfinished_utf8_suffix(std::string_view raw) {
  // A byte >= 0xC0 is never a continuation byte, so a WHATWG decoder is in its initial state at
  // every such byte: decoding the text before it and from it separately gives the same output as
  // decoding the whole. Holding back the last sequence that may still be unfinished is therefore
  // exact, whether that sequence turns out valid or not.
  const size_t n = raw.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<unsigned char>(raw[n - back]);
    if (b < 0x80) return 0;
    if (b < 0xC0) continue;  // a continuation byte: look further back
    const size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
    return back < need ? back : 0;
  }
  return 0;
}

void TextStreamEncoder::feed(std::string_view bytes, std::vector<int32_t>& out) {
  scratch_.assign(raw_tail_);
  scratch_.append(bytes);
  const size_t hold = unfinished_utf8_suffix(scratch_);
  raw_tail_.assign(scratch_, scratch_.size() - hold, hold);
  scratch_.resize(scratch_.size() - hold);
  carry_ += sanitize_utf8(scratch_);

  // Pre-token matches are leftmost and depend on no text before their start, so once a prefix of
  // pre-tokens is final (each followed by kLookaheadBytes of text, which the decision of its match
  // cannot reach past) the rest can be pre-tokenized again later from the first non-final one.
  const std::vector<std::string_view> pieces = pretokenize(carry_);
  auto end_of = [&](size_t i) {
    return static_cast<size_t>(pieces[i].data() + pieces[i].size() - carry_.data());
  };
  size_t n_final = 0;
  while (n_final < pieces.size() && end_of(n_final) + kLookaheadBytes <= carry_.size()) ++n_final;
  tok_.encode_pretokens(std::span<const std::string_view>(pieces.data(), n_final), out);
  size_t cut = n_final > 0 ? end_of(n_final - 1) : 0;
  if (carry_.size() - cut > kMaxCarryBytes) {
    // What is left is one pre-token (all but its last kLookaheadBytes) longer than kMaxCarryBytes:
    // its first half is encoded as a pre-token of its own, cut at a character boundary.
    size_t at = cut + kMaxCarryBytes / 2;
    while (at > cut && (static_cast<unsigned char>(carry_[at]) & 0xC0) == 0x80) --at;
    const std::string_view head(carry_.data() + cut, at - cut);
    tok_.encode_pretokens(std::span<const std::string_view>(&head, 1), out);
    cut = at;
  }
  carry_.erase(0, cut);
}

void TextStreamEncoder::finish(std::vector<int32_t>& out) {
  carry_ += sanitize_utf8(raw_tail_);  // an unfinished sequence at the end: U+FFFD
  raw_tail_.clear();
  const std::vector<std::string_view> pieces = pretokenize(carry_);
  tok_.encode_pretokens(pieces, out);
  carry_.clear();
}

}  // namespace blu::train
