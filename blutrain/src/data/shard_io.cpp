// shard_io.cpp: writing llm.c-format token shards (atomically, with a CRC-32C of the tokens in
// the header's spare words) and opening them memory-mapped with every header field checked
// against the file (Note [Shard format], Note [Shard checksums] in blutrain/data.h).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "blutensor/crc32c.h"
#include "blutensor/error.h"
#include "blutrain/data.h"
#include "blutrain/files.h"
#include "data/shard_writer.h"

namespace blu::train {

void write_shard(const std::string& path, std::span<const int32_t> tokens) {
  BLU_CHECK(tokens.size() < (size_t{1} << 31), "write_shard '", path, "': ", tokens.size(),
            " tokens do not fit one shard (the header count is int32)");
  std::string bytes(static_cast<size_t>(kShardHeaderBytes) + 2 * tokens.size(), '\0');
  uint16_t* out = reinterpret_cast<uint16_t*>(bytes.data() + kShardHeaderBytes);
  for (size_t i = 0; i < tokens.size(); ++i) {
    BLU_CHECK(tokens[i] >= 0 && tokens[i] <= 0xFFFF, "write_shard '", path, "': token ", i, " = ",
              tokens[i], " does not fit uint16");
    out[i] = static_cast<uint16_t>(tokens[i]);
  }
  const ShardHeaderWords header =
      shard_header_words(static_cast<int64_t>(tokens.size()), crc32c(out, 2 * tokens.size()));
  std::memcpy(bytes.data(), header.data(), sizeof(header));
  write_file_atomic(path, bytes);
}

TokenShard TokenShard::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  BLU_CHECK(fd >= 0, "token shard '", path, "': cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    BLU_THROW("token shard '", path, "': cannot stat: ", std::strerror(e));
  }
  const int64_t file_bytes = st.st_size;
  if (file_bytes < kShardHeaderBytes) {
    ::close(fd);
    BLU_THROW("token shard '", path, "': corrupt: ", file_bytes, " bytes, shorter than the ",
              kShardHeaderBytes, "-byte header");
  }
  void* map = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  ::close(fd);
  BLU_CHECK(map != MAP_FAILED, "token shard '", path, "': mmap failed: ", std::strerror(map_errno));
  TokenShard s;
  s.path_ = path;
  s.map_ = map;
  s.map_bytes_ = static_cast<size_t>(file_bytes);
  int32_t header[5];
  std::memcpy(header, map, sizeof(header));
  // From here on `s` owns the mapping: a throw unmaps it.
  BLU_CHECK(header[0] == kShardMagic, "token shard '", path, "': corrupt: bad magic ", header[0],
            " (expected ", kShardMagic, "; is this an llm.c token shard?)");
  BLU_CHECK(header[1] == kShardVersion, "token shard '", path, "': unsupported version ", header[1],
            " (expected ", kShardVersion, ": uint16 tokens)");
  BLU_CHECK(header[2] >= 0, "token shard '", path, "': corrupt: negative token count ", header[2]);
  const int64_t expected = kShardHeaderBytes + 2 * static_cast<int64_t>(header[2]);
  BLU_CHECK(file_bytes == expected, "token shard '", path, "': corrupt: header says ", header[2],
            " tokens (", expected, " bytes) but the file has ", file_bytes, " bytes",
            file_bytes < expected ? " (truncated)" : "");
  s.count_ = header[2];
  s.tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(map) + kShardHeaderBytes);
  s.has_checksum_ = header[3] == kShardChecksumTag;
  s.checksum_ = static_cast<uint32_t>(header[4]);
  return s;
}

TokenShard::TokenShard(TokenShard&& o) noexcept
    : path_(std::move(o.path_)), map_(o.map_), map_bytes_(o.map_bytes_), tokens_(o.tokens_),
      count_(o.count_), has_checksum_(o.has_checksum_), checksum_(o.checksum_) {
  o.map_ = nullptr;
  o.map_bytes_ = 0;
}

TokenShard& TokenShard::operator=(TokenShard&& o) noexcept {
  if (this != &o) {
    if (map_ != nullptr) ::munmap(map_, map_bytes_);
    path_ = std::move(o.path_);
    map_ = o.map_;
    map_bytes_ = o.map_bytes_;
    tokens_ = o.tokens_;
    count_ = o.count_;
    has_checksum_ = o.has_checksum_;
    checksum_ = o.checksum_;
    o.map_ = nullptr;
    o.map_bytes_ = 0;
  }
  return *this;
}

TokenShard::~TokenShard() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

void TokenShard::validate_ids(int32_t vocab_size) const {
  const uint16_t* t = tokens_;
  uint16_t max_id = 0;
  for (int64_t i = 0; i < count_; ++i) max_id = std::max(max_id, t[i]);
  if (count_ == 0 || max_id < vocab_size) return;
  for (int64_t i = 0; i < count_; ++i) {
    BLU_CHECK(t[i] < vocab_size, "token shard '", path_, "': token ", i, " has id ", t[i],
              ", outside the model's vocabulary [0, ", vocab_size, ")");
  }
}

void TokenShard::verify_checksum() const {
  if (!has_checksum_) return;
  const uint32_t found = crc32c(tokens_, 2 * static_cast<size_t>(count_));
  BLU_CHECK(found == checksum_, "token shard '", path_, "': checksum mismatch in the tokens (",
            count_, " tokens, CRC-32C): expected ", crc32c_hex(checksum_), ", found ",
            crc32c_hex(found), " (the file is damaged; re-create or restore it)");
}

std::vector<std::string> find_shards(const std::string& dir, const std::string& name,
                                     const std::string& split) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  BLU_CHECK(fs::is_directory(dir, ec), "data: '", dir, "' is not a directory");
  const std::string prefix = name + "_" + split + "_";
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (file.rfind(prefix, 0) == 0 && file.size() > 4 && file.substr(file.size() - 4) == ".bin") {
      out.push_back(entry.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  BLU_CHECK(!out.empty(), "data: no shards '", prefix, "*.bin' in '", dir, "'");
  return out;
}

}  // namespace blu::train
