// safetensors reader/writer (safetensors.h). Reading trusts nothing: the header length, the JSON,
// every dtype/shape/offset pair and the ranges are validated before a byte of data is copied.
#include "blutensor/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <sstream>

#include "blutensor/autograd.h"
#include "blutensor/crc32c.h"
#include "blutensor/json.h"

namespace blu {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's limit

const char* st_dtype_name(DType t) {
  switch (t) {
    case DType::F64: return "F64";
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U16: return "U16";
  }
  return "?";
}

bool st_dtype_from_name(const std::string& s, DType& out) {
  static const std::pair<const char*, DType> kNames[] = {
      {"F64", DType::F64}, {"F32", DType::F32}, {"BF16", DType::BF16}, {"F16", DType::F16},
      {"I32", DType::I32}, {"I64", DType::I64}, {"U16", DType::U16}};
  for (auto& [name, t] : kNames) {
    if (s == name) {
      out = t;
      return true;
    }
  }
  return false;
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

// Note [Safetensors checksums] (safetensors.h): the reserved metadata keys.
const std::string kTensorCrcPrefix = "blu.crc32c.";
const std::string kHeaderCrcKey = "blu.header_crc32c";

bool is_checksum_key(const std::string& k) { return k == kHeaderCrcKey || k.rfind(kTensorCrcPrefix, 0) == 0; }

// CRC-32C of the header's meaning: entries by name, then the non-checksum metadata pairs, each
// field NUL-separated, so spacing and key order of the JSON do not matter.
uint32_t header_crc(std::vector<const Entry*> entries, const std::map<std::string, std::string>& metadata) {
  std::sort(entries.begin(), entries.end(), [](const Entry* a, const Entry* b) { return a->name < b->name; });
  std::string canon = "safetensors-header-v1\n";
  for (const Entry* e : entries) {
    canon += e->name;
    canon += '\0';
    canon += st_dtype_name(e->dtype);
    canon += '\0';
    for (int64_t d : e->shape) canon += std::to_string(d) + ",";
    canon += '\0';
    canon += std::to_string(e->begin) + "," + std::to_string(e->end) + "\n";
  }
  for (const auto& [k, v] : metadata) {
    if (is_checksum_key(k)) continue;
    canon += k;
    canon += '\0';
    canon += v;
    canon += '\n';
  }
  return crc32c(canon.data(), canon.size());
}

}  // namespace

std::string serialize_safetensors(const std::map<std::string, Tensor>& tensors,
                                  const std::map<std::string, std::string>& metadata, Checksums checksums) {
  NoGradGuard ng;
  for (const auto& kv : metadata) {
    BLU_CHECK(!is_checksum_key(kv.first), "save_safetensors: metadata key '", kv.first,
              "' is reserved for checksums (Note [Safetensors checksums])");
  }
  std::map<std::string, json::Value> header;
  std::map<std::string, std::string> all_metadata = metadata;
  std::vector<Entry> entries;
  std::vector<Tensor> host;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    BLU_CHECK(name != "__metadata__" && !name.empty(), "save_safetensors: bad tensor name '", name, "'");
    BLU_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    Tensor h = t.detach().to(kCPU).contiguous();
    uint64_t bytes = h.nbytes();
    std::vector<json::Value> shape, offs;
    for (int64_t s : h.sizes()) shape.push_back(json::Value::integer(s));
    offs.push_back(json::Value::integer(static_cast<int64_t>(offset)));
    offs.push_back(json::Value::integer(static_cast<int64_t>(offset + bytes)));
    header[name] = json::Value::object({{"dtype", json::Value::string(st_dtype_name(h.dtype()))},
                                        {"shape", json::Value::array(shape)},
                                        {"data_offsets", json::Value::array(offs)}});
    if (checksums == Checksums::kCrc32c) {
      all_metadata[kTensorCrcPrefix + name] = crc32c_hex(crc32c(h.data_ptr(), bytes));
      entries.push_back({name, h.dtype(), h.sizes(), offset, offset + bytes});
    }
    offset += bytes;
    host.push_back(h);
  }
  if (checksums == Checksums::kCrc32c) {
    std::vector<const Entry*> ptrs;
    for (const Entry& e : entries) ptrs.push_back(&e);
    all_metadata[kHeaderCrcKey] = crc32c_hex(header_crc(ptrs, all_metadata));
  }
  if (!all_metadata.empty()) {
    std::map<std::string, json::Value> meta;
    for (const auto& [k, v] : all_metadata) meta[k] = json::Value::string(v);
    header["__metadata__"] = json::Value::object(meta);
  }
  std::string text = json::Value::object(header).dump();
  while ((8 + text.size()) % 8 != 0) text += ' ';
  std::string out;
  out.reserve(8 + text.size() + offset);
  uint64_t n = text.size();
  char len[8];
  std::memcpy(len, &n, 8);
  out.append(len, 8);
  out += text;
  for (const Tensor& h : host) out.append(static_cast<const char*>(h.data_ptr()), h.nbytes());
  return out;
}

uint64_t safetensors_header_bytes(std::string_view first8, uint64_t file_bytes, const std::string& what) {
  const std::string ctx = "safetensors " + what + ": ";
  BLU_CHECK(file_bytes >= 8 && first8.size() >= 8, ctx, "file is ", file_bytes,
            " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, first8.data(), 8);
  BLU_CHECK(n <= kMaxHeaderBytes, ctx, "header length ", n, " is absurd (limit ", kMaxHeaderBytes, " bytes)");
  BLU_CHECK(n <= file_bytes - 8, ctx, "header length ", n, " exceeds the ", file_bytes - 8,
            " bytes after the length field (truncated file?)");
  BLU_CHECK(n >= 2, ctx, "header of ", n, " bytes cannot hold a JSON object");
  return 8 + n;
}

SafetensorsHeader parse_safetensors_header(std::string_view head, uint64_t file_bytes, const std::string& what) {
  const std::string ctx = "safetensors " + what + ": ";
  const uint64_t start = safetensors_header_bytes(head, file_bytes, what);
  BLU_CHECK(head.size() >= start, ctx, "only ", head.size(), " of the ", start, " header bytes were read");
  const uint64_t n = start - 8;
  json::Value header;
  try {
    header = json::parse(std::string(head.substr(8, n)));
  } catch (const Error& e) {
    BLU_THROW(ctx, "bad JSON header: ", e.what());
  }
  BLU_CHECK(header.is_object(), ctx, "header is not a JSON object");
  const uint64_t data_size = file_bytes - start;
  SafetensorsHeader out;
  out.data_start = start;
  std::vector<Entry> entries;
  for (const auto& [name, v] : header.as_object()) {
    if (name == "__metadata__") {
      BLU_CHECK(v.is_object(), ctx, "__metadata__ is not an object");
      for (const auto& [k, s] : v.as_object()) {
        BLU_CHECK(s.is_string(), ctx, "__metadata__ value for '", k, "' is not a string");
        out.metadata[k] = s.as_string();
      }
      continue;
    }
    // An empty tensor name is refused as the writer refuses it (found by
    // tests/fuzz/safetensors_fuzz.cpp in session 17: a file with a tensor "" parsed, and writing
    // it back threw).
    BLU_CHECK(!name.empty(), ctx, "a tensor has an empty name");
    BLU_CHECK(v.is_object(), ctx, "entry '", name, "' is not an object");
    const json::Value* dt = v.find("dtype");
    const json::Value* shape = v.find("shape");
    const json::Value* offs = v.find("data_offsets");
    BLU_CHECK(dt && dt->is_string(), ctx, "entry '", name, "' has no string dtype");
    BLU_CHECK(shape && shape->is_array(), ctx, "entry '", name, "' has no shape array");
    BLU_CHECK(offs && offs->is_array() && offs->as_array().size() == 2, ctx, "entry '", name,
              "' needs data_offsets [begin, end]");
    Entry e;
    e.name = name;
    BLU_CHECK(st_dtype_from_name(dt->as_string(), e.dtype), ctx, "entry '", name, "' has unsupported dtype '",
              dt->as_string(), "' (F64 F32 BF16 F16 I64 I32 U16)");
    uint64_t numel = 1;
    // Note [Empty tensors with huge dims]: a 0 in the shape makes numel 0 whatever the other dims,
    // but the tensor's contiguous strides are products of the other dims (each at least 1) and
    // must fit int64 too: [0, 2^62, 4] passed the numel check and then overflowed in
    // contiguous_strides (found by tests/fuzz/safetensors_fuzz.cpp).
    int64_t span = 1;
    BLU_CHECK(shape->as_array().size() <= 16, ctx, "entry '", name, "' has more than 16 dims");
    for (const json::Value& d : shape->as_array()) {
      BLU_CHECK(d.is_integer() && d.as_integer() >= 0, ctx, "entry '", name, "' has a bad dimension ", d.dump());
      uint64_t dim = static_cast<uint64_t>(d.as_integer());
      BLU_CHECK(!__builtin_mul_overflow(numel, dim, &numel), ctx, "entry '", name, "': shape overflows");
      BLU_CHECK(!__builtin_mul_overflow(span, std::max<int64_t>(d.as_integer(), 1), &span), ctx, "entry '", name,
                "': shape ", shape->dump(), " overflows int64 strides");
      e.shape.push_back(d.as_integer());
    }
    uint64_t nbytes = 0;
    BLU_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(e.dtype)), &nbytes), ctx, "entry '",
              name, "': size overflows");
    const json::Value& b = offs->as_array()[0];
    const json::Value& en = offs->as_array()[1];
    BLU_CHECK(b.is_integer() && en.is_integer() && b.as_integer() >= 0 && en.as_integer() >= b.as_integer(), ctx,
              "entry '", name, "' has bad data_offsets ", offs->dump());
    e.begin = static_cast<uint64_t>(b.as_integer());
    e.end = static_cast<uint64_t>(en.as_integer());
    BLU_CHECK(e.end <= data_size, ctx, "entry '", name, "' data_offsets ", offs->dump(), " run past the ", data_size,
              " data bytes (truncated file?)");
    BLU_CHECK(e.end - e.begin == nbytes, ctx, "entry '", name, "' spans ", e.end - e.begin, " bytes but ",
              dt->as_string(), shape_str(e.shape), " needs ", nbytes);
    entries.push_back(e);
  }
  std::vector<const Entry*> sorted;
  for (const Entry& e : entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    const Entry* prev = sorted[i - 1];
    const Entry* cur = sorted[i];
    if (prev->begin == prev->end || cur->begin == cur->end) continue;  // empty tensors overlap nothing
    BLU_CHECK(cur->begin >= prev->end, ctx, "data ranges of '", prev->name, "' [", prev->begin, ", ", prev->end,
              ") and '", cur->name, "' [", cur->begin, ", ", cur->end, ") overlap");
  }
  // Checksums (Note [Safetensors checksums]): the header's here, the tensors' by the caller.
  std::map<std::string, std::string> sums;
  for (auto it = out.metadata.begin(); it != out.metadata.end();) {
    if (is_checksum_key(it->first)) {
      sums.insert(*it);
      it = out.metadata.erase(it);
    } else {
      ++it;
    }
  }
  auto recorded = [&](const std::string& key, const std::string& hex) {
    uint32_t v = 0;
    BLU_CHECK(crc32c_from_hex(hex, v), ctx, "__metadata__ \"", key, "\" is '", hex,
              "', not an 8-digit hex CRC-32C (damaged header)");
    return v;
  };
  if (auto h = sums.find(kHeaderCrcKey); h != sums.end()) {
    const uint32_t expected = recorded(h->first, h->second);
    std::vector<const Entry*> ptrs;
    for (const Entry& e : entries) ptrs.push_back(&e);
    const uint32_t found = header_crc(ptrs, out.metadata);
    BLU_CHECK(found == expected, ctx, "checksum mismatch in the header (tensor names, dtypes, shapes, offsets, ",
              "metadata): crc32c expected ", crc32c_hex(expected), ", found ", crc32c_hex(found),
              "; the file is damaged");
    out.header_checksummed = true;
  }
  for (const Entry& e : entries) out.entries[e.name] = SafetensorsEntry{e.dtype, e.shape, e.begin, e.end, false, 0};
  for (const auto& [k, v] : sums) {
    if (k == kHeaderCrcKey) continue;
    const std::string name = k.substr(kTensorCrcPrefix.size());
    const auto e = out.entries.find(name);
    BLU_CHECK(e != out.entries.end(), ctx, "__metadata__ holds a checksum for tensor '", name,
              "', which the file does not hold (damaged header)");
    e->second.has_crc = true;
    e->second.crc = recorded(k, v);
  }
  // All or nothing: a checksummed file whose header lost a checksum key (a flipped bit in the key
  // turns it into plain metadata) must not load as a partly verified one.
  if (!sums.empty()) {
    BLU_CHECK(sums.count(kHeaderCrcKey), ctx, "the file has tensor checksums but no \"", kHeaderCrcKey,
              "\" (damaged header)");
    for (const auto& [name, e] : out.entries) {
      BLU_CHECK(e.has_crc, ctx, "tensor '", name, "' has no checksum while the file has checksums (damaged header)");
    }
  }
  return out;
}

void verify_safetensors_tensor(const SafetensorsHeader& header, const std::string& name, const void* data,
                               uint64_t bytes, const std::string& what) {
  const auto e = header.entries.find(name);
  BLU_CHECK(e != header.entries.end(), "safetensors ", what, ": no tensor '", name, "'");
  BLU_CHECK(bytes == e->second.end - e->second.begin, "safetensors ", what, ": tensor '", name, "' has ",
            e->second.end - e->second.begin, " bytes, ", bytes, " were given");
  if (!e->second.has_crc) return;
  const uint32_t found = crc32c(data, bytes);
  BLU_CHECK(found == e->second.crc, "safetensors ", what, ": checksum mismatch in tensor '", name, "' (", bytes,
            " bytes at data offset ", e->second.begin, "): crc32c expected ", crc32c_hex(e->second.crc), ", found ",
            crc32c_hex(found), "; the file is damaged");
}

SafetensorsData parse_safetensors(const std::string& bytes, const std::string& what) {
  const SafetensorsHeader header = parse_safetensors_header(bytes, bytes.size(), what);
  const char* data = bytes.data() + header.data_start;
  SafetensorsData out;
  out.metadata = header.metadata;
  out.header_checksummed = header.header_checksummed;
  for (const auto& [name, e] : header.entries) {  // every checksum before a byte is copied
    if (!e.has_crc) continue;
    verify_safetensors_tensor(header, name, data + e.begin, e.end - e.begin, what);
    ++out.checksummed_tensors;
  }
  for (const auto& [name, e] : header.entries) {
    Tensor t = empty(e.shape, e.dtype);
    if (e.end > e.begin) std::memcpy(t.data_ptr(), data + e.begin, e.end - e.begin);
    out.tensors[name] = t;
  }
  return out;
}

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata, Checksums checksums) {
  std::string bytes = serialize_safetensors(tensors, metadata, checksums);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  BLU_CHECK(f.good(), "save_safetensors: cannot open '", path, "' for writing");
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  BLU_CHECK(f.good(), "save_safetensors: writing '", path, "' failed");
}

SafetensorsData load_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  BLU_CHECK(f.good(), "load_safetensors: cannot open '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return parse_safetensors(ss.str(), "'" + path + "'");
}

}  // namespace blu
