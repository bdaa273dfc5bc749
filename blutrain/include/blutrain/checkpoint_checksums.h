// blutrain/checkpoint_checksums.h: the checkpoint's manifest of whole-file CRC-32Cs and verified
// reads of the files it lists.
//
// Note [Checkpoint checksums]
//   Two layers, so that damage is both always caught and precisely named:
//   - model.safetensors and optimizer.safetensors carry a CRC-32C per tensor and one for their
//     header in `__metadata__` (Note [Safetensors checksums] in blutensor/safetensors.h), so a
//     damaged tensor is named and the weights stay self-checking when copied alone (--init-from)
//     and loadable by any safetensors reader.
//   - CheckpointStaging::commit writes `checksums.crc32c` into the directory before it is renamed
//     into place: one line "<crc32c hex> <bytes> <name>" per file (state.json, config.json, the
//     safetensors files). Loading reads every file through read_checkpoint_file, which checks
//     size and CRC against that line, so state.json's step and data cursor are covered too.
//     For a .safetensors file whose whole-file CRC fails, the per-tensor checks run first to name
//     the damaged tensor; if they all pass the error names the file ("outside the tensor data").
//   A checkpoint without the manifest (written before checksums existed) loads, unverified, with
//   a note on stderr. A manifest that lists the file with another size or CRC, does not list it,
//   or is itself malformed is an error naming the checkpoint file, expected and found values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace blu::train {

inline constexpr const char* kChecksumManifest = "checksums.crc32c";

// One manifest line: a file's CRC-32C and size.
struct FileChecksum {
  uint32_t crc = 0;
  uint64_t bytes = 0;
};

// Writes <dir>/checksums.crc32c for every regular file in dir (streamed: bounded memory); a file
// named in `known` takes that sum instead of being read (it must exist).
void write_checksum_manifest(const std::string& dir, const std::map<std::string, FileChecksum>& known = {});

// The manifest's line for <dir>/<name>: false when the checkpoint has no manifest; an error naming
// the file when the manifest exists but does not list it.
bool manifest_checksum(const std::string& dir, const std::string& name, FileChecksum* out);

// True when <dir>/checksums.crc32c exists.
bool has_checksum_manifest(const std::string& dir);

// The bytes of <dir>/<name>; verified against the manifest when the checkpoint has one.
std::string read_checkpoint_file(const std::string& dir, const std::string& name,
                                 std::string_view what);

}  // namespace blu::train
