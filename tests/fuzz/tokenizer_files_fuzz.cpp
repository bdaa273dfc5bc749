// tokenizer_files_fuzz.cpp: libFuzzer target for blu::train::Tokenizer::from_files (encoder.json:
// token -> id in GPT-2's byte alphabet; vocab.bpe: the merge list). The input is both files, cut
// at the first NUL (fuzz_util.h). A vocabulary that loads must then encode and decode a fixed
// text, with merges that may name tokens the vocabulary lacks: only blu::Error may come out.
#include "blutensor/error.h"
#include "blutrain/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static blu_fuzz::MemFile encoder("encoder.json");
  static blu_fuzz::MemFile merges("vocab.bpe");
  const auto parts = blu_fuzz::split_at_nul(data, size, 2);
  encoder.set(parts[0]);
  merges.set(parts[1]);
  try {
    const blu::train::Tokenizer tok = blu::train::Tokenizer::from_files(encoder.path(), merges.path());
    const std::vector<int32_t> ids = tok.encode("Hello, world! It's 2024 \xff\xfe caf\xc3\xa9  \n\n ok");
    (void)tok.decode(ids);
  } catch (const blu::Error&) {
  }
  return 0;
}
