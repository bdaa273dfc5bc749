// pretokenize.cpp: GPT-2's pre-tokenizer regex, by hand, plus WHATWG UTF-8 sanitising.
//
// Note [The regex by hand]
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ is a leftmost-first
// alternation tried at each position; every code point falls in one class (letter, number,
// space, other), so some alternative always matches and there are no empty matches. The only
// backtracking is \s+(?!\S): a whitespace run followed by a non-space keeps its last character
// for the next token (so " word" stays together); a run at the end of the text is taken whole.
// A run of one followed by a non-space falls through to \s+ and is taken alone. " ?" means
// U+0020 only, and \s is JavaScript's set (the reference encoder runs under Node).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "blutensor/json.h"
#include "blutrain/tokenizer.h"
#include "tokenizer/unicode_class.h"

namespace blu::train {
namespace {

using unicode::CodePointClass;

using json::append_utf8;

// A decoded code point of valid UTF-8 and its byte length.
struct CodePoint {
  uint32_t cp;
  int len;
};

CodePoint decode_valid(std::string_view s, size_t i) {
  unsigned char b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {b0, 1};
  auto cont = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F); };
  if (b0 < 0xE0) return {((b0 & 0x1Fu) << 6) | cont(1), 2};
  if (b0 < 0xF0) return {((b0 & 0x0Fu) << 12) | (cont(1) << 6) | cont(2), 3};
  return {((b0 & 0x07u) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3), 4};
}

}  // namespace

std::string sanitize_utf8(std::string_view bytes) {
  // The WHATWG Encoding Standard's UTF-8 decoder (what Node's TextDecoder implements).
  std::string out;
  out.reserve(bytes.size());
  uint32_t cp = 0;
  int needed = 0;
  int seen = 0;
  unsigned lower = 0x80;
  unsigned upper = 0xBF;
  size_t i = 0;
  while (i < bytes.size()) {
    unsigned b = static_cast<unsigned char>(bytes[i]);
    if (needed == 0) {
      ++i;
      if (b < 0x80) {
        out += static_cast<char>(b);
      } else if (b >= 0xC2 && b <= 0xDF) {
        needed = 1;
        cp = b & 0x1F;
      } else if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) lower = 0xA0;
        if (b == 0xED) upper = 0x9F;
        needed = 2;
        cp = b & 0x0F;
      } else if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) lower = 0x90;
        if (b == 0xF4) upper = 0x8F;
        needed = 3;
        cp = b & 0x07;
      } else {
        append_utf8(out, 0xFFFD);
      }
      continue;
    }
    if (b < lower || b > upper) {
      // Error: emit U+FFFD and reprocess this byte from the initial state (i is not advanced).
      cp = 0;
      needed = seen = 0;
      lower = 0x80;
      upper = 0xBF;
      append_utf8(out, 0xFFFD);
      continue;
    }
    ++i;
    lower = 0x80;
    upper = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
    if (++seen == needed) {
      append_utf8(out, cp);
      cp = 0;
      needed = seen = 0;
    }
  }
  if (needed != 0) append_utf8(out, 0xFFFD);
  return out;
}

std::vector<std::string_view> pretokenize(std::string_view text) {
  // Decode once into (class, byte offset) per code point.
  std::vector<CodePointClass> cls;
  std::vector<uint32_t> cps;
  std::vector<size_t> offset;
  cls.reserve(text.size());
  cps.reserve(text.size());
  offset.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size();) {
    CodePoint c = decode_valid(text, i);
    cls.push_back(unicode::classify(c.cp));
    cps.push_back(c.cp);
    offset.push_back(i);
    i += static_cast<size_t>(c.len);
  }
  const size_t n = cls.size();
  offset.push_back(text.size());

  auto is = [&](size_t k, CodePointClass c) { return k < n && cls[k] == c; };
  auto cp_is = [&](size_t k, uint32_t c) { return k < n && cps[k] == c; };
  auto run_end = [&](size_t k, auto pred) {
    while (k < n && pred(k)) ++k;
    return k;
  };

  std::vector<std::string_view> out;
  size_t p = 0;
  while (p < n) {
    size_t end = p;
    // 's|'t|'re|'ve|'m|'ll|'d
    if (cps[p] == '\'') {
      if (cp_is(p + 1, 's') || cp_is(p + 1, 't') || cp_is(p + 1, 'm') || cp_is(p + 1, 'd')) {
        end = p + 2;
      } else if ((cp_is(p + 1, 'r') && cp_is(p + 2, 'e')) || (cp_is(p + 1, 'v') && cp_is(p + 2, 'e')) ||
                 (cp_is(p + 1, 'l') && cp_is(p + 2, 'l'))) {
        end = p + 3;
      }
    }
    if (end == p) {
      size_t q = cps[p] == ' ' ? p + 1 : p;  // " ?"
      auto letter = [&](size_t k) { return cls[k] == CodePointClass::kLetter; };
      auto number = [&](size_t k) { return cls[k] == CodePointClass::kNumber; };
      auto other = [&](size_t k) { return cls[k] == CodePointClass::kOther; };
      if (is(q, CodePointClass::kLetter)) {
        end = run_end(q, letter);
      } else if (is(q, CodePointClass::kNumber)) {
        end = run_end(q, number);
      } else if (is(q, CodePointClass::kOther)) {
        end = run_end(q, other);
      }
    }
    if (end == p) {
      // Whitespace at p: \s+(?!\S) then \s+.
      auto space = [&](size_t k) { return cls[k] == CodePointClass::kSpace; };
      size_t run = run_end(p, space);
      if (run == n) {
        end = run;
      } else if (run - p >= 2) {
        end = run - 1;
      } else {
        end = run;
      }
    }
    out.push_back(text.substr(offset[p], offset[end] - offset[p]));
    p = end;
  }
  return out;
}

}  // namespace blu::train
