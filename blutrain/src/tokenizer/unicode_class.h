// unicode_class.h: the code-point classes of GPT-2's pre-tokenizer (letter, number, whitespace,
// other) as a binary search over generated range tables (unicode_tables.cpp), plus a strict
// UTF-8 -> code point decoder for already-sanitised text.
#pragma once

#include <cstdint>

namespace blu::train::unicode {

enum class CodePointClass : uint8_t { kOther = 0, kLetter, kNumber, kSpace };

struct CodePointRange {
  uint32_t lo;
  uint32_t hi;  // inclusive
  CodePointClass cls;
};

extern const CodePointRange kCodePointRanges[];
extern const int kNumCodePointRanges;

// Class of one code point (ASCII through a small table, the rest by binary search).
CodePointClass classify(uint32_t cp);

}  // namespace blu::train::unicode
