// blutrain/safetensors.h: the safetensors file format (8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the packed data),
// written atomically and read with every offset validated, on raw bytes (no Tensor types), so
// Hugging Face / PyTorch read our checkpoints and we read theirs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace blu::train {

struct SafetensorsEntryView {
  std::string name;
  std::string dtype;           // "F32", "BF16", "F16", "F64", "I32", "I64", "U16", "U8"
  std::vector<int64_t> shape;
  const void* data = nullptr;  // row-major, shape-product * dtype size bytes
  size_t nbytes = 0;
};

// Bytes per element of a safetensors dtype name; throws for an unknown one.
size_t safetensors_dtype_size(const std::string& dtype);

// Writes the entries (in the given order) and string metadata to `path`, atomically.
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntryView>& entries,
                       const std::vector<std::pair<std::string, std::string>>& metadata = {});

class SafetensorsFile {
 public:
  // Reads and validates the whole file; errors name the file and the problem.
  static SafetensorsFile read(const std::string& path);

  bool has(const std::string& name) const;
  // Throws naming the file when missing.
  const SafetensorsEntryView& get(const std::string& name) const;
  // Like get(), and checks dtype and shape.
  const SafetensorsEntryView& get(const std::string& name, const std::string& dtype,
                                  const std::vector<int64_t>& shape) const;
  const std::vector<SafetensorsEntryView>& entries() const { return entries_; }
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string bytes_;
  std::vector<SafetensorsEntryView> entries_;
  std::vector<std::pair<std::string, std::string>> metadata_;
};

}  // namespace blu::train
