// safetensors.cpp: safetensors writer (header padded with spaces to 8 bytes, as the reference
// implementation does) and a validating reader (offsets in bounds, contiguous, sizes matching).
#include "blutrain/safetensors.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "blutensor/error.h"
#include "blutrain/files.h"
#include "blutrain/json.h"

namespace blu::train {

size_t safetensors_dtype_size(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "BF16" || dtype == "F16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "U8" || dtype == "I8" || dtype == "BOOL") return 1;
  BLU_THROW("safetensors: unknown dtype '", dtype, "'");
}

namespace {
int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}
}  // namespace

void write_safetensors(const std::string& path, const std::vector<SafetensorsEntryView>& entries,
                       const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::ostringstream header;
  header << "{";
  bool first = true;
  if (!metadata.empty()) {
    header << "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i) {
      header << (i ? "," : "") << json::quote(metadata[i].first) << ":" << json::quote(metadata[i].second);
    }
    header << "}";
    first = false;
  }
  size_t offset = 0;
  for (const SafetensorsEntryView& e : entries) {
    const size_t expect = static_cast<size_t>(numel_of(e.shape)) * safetensors_dtype_size(e.dtype);
    BLU_CHECK(e.nbytes == expect, "safetensors '", path, "': tensor '", e.name, "' ", e.dtype,
              shape_text(e.shape), " needs ", expect, " bytes, got ", e.nbytes);
    header << (first ? "" : ",") << json::quote(e.name) << ":{\"dtype\":\"" << e.dtype << "\",\"shape\":[";
    for (size_t i = 0; i < e.shape.size(); ++i) header << (i ? "," : "") << e.shape[i];
    header << "],\"data_offsets\":[" << offset << "," << offset + e.nbytes << "]}";
    offset += e.nbytes;
    first = false;
  }
  header << "}";
  std::string h = header.str();
  while (h.size() % 8 != 0) h += ' ';
  std::string bytes;
  bytes.reserve(8 + h.size() + offset);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>((n >> (8 * i)) & 0xFF);
  bytes += h;
  for (const SafetensorsEntryView& e : entries) {
    bytes.append(static_cast<const char*>(e.data), e.nbytes);
  }
  write_file_atomic(path, bytes);
}

SafetensorsFile SafetensorsFile::read(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.bytes_ = read_file(path, "safetensors");
  const std::string& b = f.bytes_;
  BLU_CHECK(b.size() >= 8, "safetensors '", path, "': corrupt: ", b.size(), " bytes, no header");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(b[i])) << (8 * i);
  BLU_CHECK(n >= 2 && n <= b.size() - 8, "safetensors '", path, "': corrupt: header length ", n,
            " does not fit the ", b.size(), "-byte file");
  json::Value header = json::parse(std::string_view(b).substr(8, n), "safetensors '" + path + "' header");
  BLU_CHECK(header.is_object(), "safetensors '", path, "': header is not a JSON object");
  const size_t data_start = 8 + n;
  const size_t data_bytes = b.size() - data_start;
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const auto& [name, v] : header.members) {
    const std::string what = "safetensors '" + path + "' tensor '" + name + "'";
    if (name == "__metadata__") {
      for (const auto& [k, mv] : v.members) f.metadata_.emplace_back(k, mv.as_string(what));
      continue;
    }
    SafetensorsEntryView e;
    e.name = name;
    e.dtype = v.at("dtype", what).as_string(what);
    for (const json::Value& d : v.at("shape", what).items) {
      e.shape.push_back(d.as_int64(what));
      BLU_CHECK(e.shape.back() >= 0, what, ": negative dimension");
    }
    const json::Value& off = v.at("data_offsets", what);
    BLU_CHECK(off.is_array() && off.items.size() == 2, what, ": data_offsets must be [begin, end]");
    int64_t begin = off.items[0].as_int64(what);
    int64_t end = off.items[1].as_int64(what);
    BLU_CHECK(begin >= 0 && begin <= end && static_cast<size_t>(end) <= data_bytes, what,
              ": corrupt: data_offsets [", begin, ", ", end, "] outside the ", data_bytes,
              "-byte data (truncated file?)");
    const size_t expect = static_cast<size_t>(numel_of(e.shape)) * safetensors_dtype_size(e.dtype);
    BLU_CHECK(static_cast<size_t>(end - begin) == expect, what, ": ", e.dtype, shape_text(e.shape),
              " needs ", expect, " bytes, data_offsets give ", end - begin);
    e.data = b.data() + data_start + begin;
    e.nbytes = expect;
    ranges.emplace_back(static_cast<size_t>(begin), static_cast<size_t>(end));
    f.entries_.push_back(std::move(e));
  }
  std::sort(ranges.begin(), ranges.end());
  size_t at = 0;
  for (const auto& [begin, end] : ranges) {
    BLU_CHECK(begin == at, "safetensors '", path, "': corrupt: tensor data overlaps or has a hole at byte ", at);
    at = end;
  }
  BLU_CHECK(at == data_bytes, "safetensors '", path, "': corrupt: ", data_bytes - at,
            " trailing bytes after the last tensor");
  return f;
}

bool SafetensorsFile::has(const std::string& name) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const auto& e) { return e.name == name; });
}

const SafetensorsEntryView& SafetensorsFile::get(const std::string& name) const {
  for (const auto& e : entries_) {
    if (e.name == name) return e;
  }
  BLU_THROW("safetensors '", path_, "': no tensor '", name, "'");
}

const SafetensorsEntryView& SafetensorsFile::get(const std::string& name, const std::string& dtype,
                                                 const std::vector<int64_t>& shape) const {
  const SafetensorsEntryView& e = get(name);
  BLU_CHECK(e.dtype == dtype && e.shape == shape, "safetensors '", path_, "': tensor '", name, "' is ",
            e.dtype, shape_text(e.shape), ", expected ", dtype, shape_text(shape),
            " (a checkpoint of a different model?)");
  return e;
}

}  // namespace blu::train
