// checkpoint_fuzz.cpp: libFuzzer target for a checkpoint's metadata: the checksums.crc32c
// manifest (read_checkpoint_file) and state.json (parse_checkpoint_state: step, data cursor, RNG
// state, loss history). The input is both files, cut at the first NUL (fuzz_util.h); they are
// written into a checkpoint directory under $TMPDIR (the manifest names files, so it needs a real
// directory), then read the way load_checkpoint reads them; an input without a manifest part
// exercises state.json alone. Weights are safetensors_fuzz's job.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "blutensor/error.h"
#include "blutrain/checkpoint_checksums.h"
#include "fuzz_util.h"
#include "train/train_state.h"

namespace {

struct CheckpointDir {
  std::string path;
  CheckpointDir() {
    const char* tmp = std::getenv("TMPDIR");
    path = std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/blu_checkpoint_fuzz." + std::to_string(::getpid());
    std::filesystem::create_directories(path);
  }
  ~CheckpointDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  void write(const std::string& name, std::string_view bytes) const {
    std::ofstream(path + "/" + name, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static CheckpointDir dir;
  const auto parts = blu_fuzz::split_at_nul(data, size, 2);
  // An empty first part means no manifest: the unverified path of checkpoints written before
  // checksums existed, so state.json's parser is reached without a matching CRC.
  if (parts[0].empty()) {
    std::filesystem::remove(dir.path + "/" + blu::train::kChecksumManifest);
  } else {
    dir.write(blu::train::kChecksumManifest, parts[0]);
  }
  dir.write("state.json", parts[1]);
  try {
    const std::string text = blu::train::read_checkpoint_file(dir.path, "state.json", "checkpoint state");
    (void)blu::train::parse_checkpoint_state(text, dir.path + "/state.json");
  } catch (const blu::Error&) {
  }
  return 0;
}
