// token_shard_fuzz.cpp: libFuzzer target for blu::train::TokenShard::open (llm.c shard header:
// magic, version, token count against the file size), verify_checksum and validate_ids, through a
// memfd so the real open/fstat/mmap path runs (Note [Fuzzing parsers that read paths] in
// fuzz_util.h).
#include "blutensor/error.h"
#include "blutrain/data.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static blu_fuzz::MemFile file("shard.bin");
  const std::string& path = file.set({reinterpret_cast<const char*>(data), size});
  try {
    const blu::train::TokenShard shard = blu::train::TokenShard::open(path);
    // Every token the header promises must be readable (ASan sees a read past the mapping).
    uint32_t sum = 0;
    for (uint16_t t : shard.tokens()) sum += t;
    volatile uint32_t sink = sum;
    (void)sink;
    shard.verify_checksum();
    shard.validate_ids(50257);
  } catch (const blu::Error&) {
  }
  return 0;
}
