// blutensor/safetensors.h: read/write the safetensors format (huggingface/safetensors): 8-byte
// little-endian header length N, N bytes of JSON {"name": {"dtype": "F32", "shape": [..],
// "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v"}}, then raw little-endian data.
// Dtype names: F64 F32 BF16 F16 I64 I32 U16. Writing pads the header with spaces to 8 bytes.
// Reading validates everything (header length vs file size, JSON, dtypes, shapes, offsets in
// bounds, sizes = numel * element size, no overlapping ranges) and throws blu::Error naming the
// file and the problem; malformed input never crashes.
//
// Note [Safetensors checksums]
//   A writer may ask for Checksums::kCrc32c: every tensor's data bytes get a CRC-32C stored in
//   `__metadata__` as "blu.crc32c.<tensor name>": "<8 hex digits>", and the header itself (each
//   tensor's name, dtype, shape and data_offsets, and every other metadata pair, in a canonical
//   form independent of JSON spacing and key order) gets "blu.header_crc32c". Metadata is plain
//   strings, so any other safetensors reader (huggingface/safetensors, transformers) loads the
//   file unchanged. The reader verifies whatever checksums a file holds, before copying a byte:
//   a mismatch, a checksum for a tensor the file does not hold, or a tensor without one in a file
//   that has them is a blu::Error naming the file, the tensor (or "header") and the expected vs
//   found CRC. Files without checksums (older blutrain checkpoints, Hugging Face weights) load as
//   before; SafetensorsData says how much was verified so callers can say so. The checksum keys
//   are reserved: they are stripped from the metadata returned and refused in metadata passed in.
//
// Note [Ranged safetensors reads]
//   A reader that needs only some tensors of a large file (a rank resuming from a sharded
//   checkpoint: blutrain's Note [Sharded checkpoints]) reads the 8-byte length, then the header
//   (safetensors_header_bytes, parse_safetensors_header: every check of parse_safetensors that
//   needs no data, the header CRC included), then only the bytes of the tensors it wants, each
//   checked against its CRC with verify_safetensors_tensor before use. parse_safetensors is that
//   same header parse followed by every tensor's check and copy.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "blutensor/tensor.h"

namespace blu {

enum class Checksums { kNone, kCrc32c };

struct SafetensorsData {
  std::map<std::string, Tensor> tensors;  // CPU, contiguous
  std::map<std::string, std::string> metadata;  // without the checksum keys
  int64_t checksummed_tensors = 0;  // tensors whose CRC-32C was verified
  bool header_checksummed = false;  // the header's CRC-32C was verified
  bool has_checksums() const { return header_checksummed || checksummed_tensors > 0; }
};

// One tensor of a parsed header (Note [Ranged safetensors reads]); begin/end are offsets into the
// data section, which starts at SafetensorsHeader::data_start in the file.
struct SafetensorsEntry {
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0, end = 0;
  bool has_crc = false;
  uint32_t crc = 0;
};

struct SafetensorsHeader {
  uint64_t data_start = 0;  // 8 + the header length: the file offset of the data section
  std::map<std::string, SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;  // without the checksum keys
  bool header_checksummed = false;
};

// From the file's first 8 bytes and its size: the bytes of length field + header (data_start);
// throws naming `what` when the length is absurd or runs past the file.
uint64_t safetensors_header_bytes(std::string_view first8, uint64_t file_bytes, const std::string& what);
// Parses and checks the header: `head` holds at least the first safetensors_header_bytes bytes of
// a file of `file_bytes` bytes (all of parse_safetensors' checks but the tensors' CRCs).
SafetensorsHeader parse_safetensors_header(std::string_view head, uint64_t file_bytes, const std::string& what);
// Checks one tensor's data bytes against its CRC-32C (when the file has checksums); throws naming
// `what` and the tensor.
void verify_safetensors_tensor(const SafetensorsHeader& header, const std::string& name, const void* data,
                               uint64_t bytes, const std::string& what);

// Tensors may be on any device and strided (written contiguous).
std::string serialize_safetensors(const std::map<std::string, Tensor>& tensors,
                                  const std::map<std::string, std::string>& metadata = {},
                                  Checksums checksums = Checksums::kNone);
SafetensorsData parse_safetensors(const std::string& bytes, const std::string& what = "<memory>");

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {},
                      Checksums checksums = Checksums::kNone);
SafetensorsData load_safetensors(const std::string& path);

}  // namespace blu
