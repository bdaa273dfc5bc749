// config_file_fuzz.cpp: libFuzzer target for blutrain's --config reader (load_config_file: 'key =
// value' lines, comments, quotes, every flag's number parsing) and resolve_auto's checks on what
// it read (CPU: no GPU here). What loads must also survive config_to_text and load back to the
// same text, as config.h promises.
#include "blutensor/error.h"
#include "blutrain/config.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static blu_fuzz::MemFile file("train.conf");
  static blu_fuzz::MemFile again("again.conf");
  const std::string& path = file.set({reinterpret_cast<const char*>(data), size});
  blu::train::TrainConfig cfg;
  try {
    blu::train::load_config_file(cfg, path);
  } catch (const blu::Error&) {
    return 0;
  }
  const std::string text = blu::train::config_to_text(cfg);
  blu::train::TrainConfig back;
  blu::train::load_config_file(back, again.set(text));  // must not throw
  if (blu::train::config_to_text(back) != text) __builtin_trap();
  try {
    blu::train::resolve_auto(cfg, /*have_gpu=*/false);
  } catch (const blu::Error&) {
  }
  return 0;
}
