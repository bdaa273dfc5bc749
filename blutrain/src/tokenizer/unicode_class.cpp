// unicode_class.cpp: code-point classification by binary search over the generated ranges;
// ASCII (most of any English corpus) through a 128-entry table built once.
#include "tokenizer/unicode_class.h"

#include <array>

namespace blu::train::unicode {
namespace {

CodePointClass classify_by_search(uint32_t cp) {
  int lo = 0;
  int hi = kNumCodePointRanges - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    const CodePointRange& r = kCodePointRanges[mid];
    if (cp < r.lo) {
      hi = mid - 1;
    } else if (cp > r.hi) {
      lo = mid + 1;
    } else {
      return r.cls;
    }
  }
  return CodePointClass::kOther;
}

const std::array<CodePointClass, 128>& ascii_table() {
  static const std::array<CodePointClass, 128> table = [] {
    std::array<CodePointClass, 128> t{};
    for (uint32_t c = 0; c < 128; ++c) t[c] = classify_by_search(c);
    return t;
  }();
  return table;
}

}  // namespace

CodePointClass classify(uint32_t cp) {
  if (cp < 128) return ascii_table()[cp];
  return classify_by_search(cp);
}

}  // namespace blu::train::unicode
