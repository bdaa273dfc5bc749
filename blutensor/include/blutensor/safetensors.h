// blutensor/safetensors.h: read/write the safetensors format (huggingface/safetensors): 8-byte
// little-endian header length N, N bytes of JSON {"name": {"dtype": "F32", "shape": [..],
// "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v"}}, then raw little-endian data.
// Dtype names: F64 F32 BF16 F16 I64 I32 U16. Writing pads the header with spaces to 8 bytes.
// Reading validates everything (header length vs file size, JSON, dtypes, shapes, offsets in
// bounds, sizes = numel * element size, no overlapping ranges) and throws blu::Error naming the
// file and the problem; malformed input never crashes.
#pragma once

#include <map>
#include <string>

#include "blutensor/tensor.h"

namespace blu {

struct SafetensorsData {
  std::map<std::string, Tensor> tensors;  // CPU, contiguous
  std::map<std::string, std::string> metadata;
};

// Tensors may be on any device and strided (written contiguous).
std::string serialize_safetensors(const std::map<std::string, Tensor>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});
SafetensorsData parse_safetensors(const std::string& bytes, const std::string& what = "<memory>");

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
SafetensorsData load_safetensors(const std::string& path);

}  // namespace blu
