// shard_writer.cpp: ShardSplitWriter and move_tail_tokens (POSIX I/O, blocks of 64 Ki tokens).
#include "data/shard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "blutensor/crc32c.h"
#include "blutensor/error.h"
#include "blutrain/data.h"

namespace blu::train {
namespace {

constexpr size_t kBlockTokens = size_t{64} << 10;

void write_all(int fd, const void* data, size_t bytes, int64_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = offset >= 0 ? ::pwrite(fd, p, bytes, offset) : ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    BLU_CHECK(n > 0, "tokenize: writing '", path, "' failed: ", std::strerror(errno));
    p += n;
    bytes -= static_cast<size_t>(n);
    if (offset >= 0) offset += n;
  }
}

void write_header(int fd, int64_t count, uint32_t crc, const std::string& path) {
  const ShardHeaderWords header = shard_header_words(count, crc);
  write_all(fd, header.data(), sizeof(header), 0, path);
}

}  // namespace

ShardHeaderWords shard_header_words(int64_t count, uint32_t crc) {
  return {kShardMagic, kShardVersion, static_cast<int32_t>(count), kShardChecksumTag,
          static_cast<int32_t>(crc)};
}

ShardSplitWriter::ShardSplitWriter(std::string out_dir, std::string name, std::string split,
                                   int64_t shard_tokens)
    : out_dir_(std::move(out_dir)),
      name_(std::move(name)),
      split_(std::move(split)),
      shard_tokens_(shard_tokens) {
  BLU_CHECK(shard_tokens_ > 0 && shard_tokens_ < (int64_t{1} << 31), "tokenize: shard size ",
            shard_tokens_, " must be in (0, 2^31)");
  buf_.reserve(kBlockTokens);
}

ShardSplitWriter::~ShardSplitWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

void ShardSplitWriter::open_shard() {
  char file[64];
  std::snprintf(file, sizeof(file), "_%s_%06zu.bin", split_.c_str(), paths_.size());
  path_ = out_dir_ + "/" + name_ + file;
  tmp_path_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  BLU_CHECK(fd_ >= 0, "tokenize: cannot create '", tmp_path_, "': ", std::strerror(errno));
  const std::vector<char> header(static_cast<size_t>(kShardHeaderBytes), '\0');
  write_all(fd_, header.data(), header.size(), -1, tmp_path_);
  in_shard_ = 0;
  crc_ = 0;
}

void ShardSplitWriter::flush() {
  if (buf_.empty()) return;
  write_all(fd_, buf_.data(), buf_.size() * 2, -1, tmp_path_);
  crc_ = crc32c(buf_.data(), buf_.size() * 2, crc_);
  buf_.clear();
}

void ShardSplitWriter::close_shard() {
  flush();
  write_header(fd_, in_shard_, crc_, tmp_path_);
  const bool ok = ::fsync(fd_) == 0;
  const int e = errno;
  ::close(fd_);
  fd_ = -1;
  BLU_CHECK(ok, "tokenize: fsync '", tmp_path_, "' failed: ", std::strerror(e));
  BLU_CHECK(::rename(tmp_path_.c_str(), path_.c_str()) == 0, "tokenize: cannot rename '", tmp_path_,
            "' to '", path_, "': ", std::strerror(errno));
  paths_.push_back(path_);
}

void ShardSplitWriter::append(std::span<const int32_t> ids) {
  for (size_t i = 0; i < ids.size(); ++i) {
    BLU_CHECK(ids[i] >= 0 && ids[i] <= 0xFFFF, "tokenize: token ", ids[i], " does not fit uint16");
    if (fd_ < 0) open_shard();
    buf_.push_back(static_cast<uint16_t>(ids[i]));
    ++total_;
    if (++in_shard_ == shard_tokens_) {
      close_shard();
    } else if (buf_.size() == kBlockTokens) {
      flush();
    }
  }
}

std::vector<std::string> ShardSplitWriter::finish() {
  if (fd_ >= 0) close_shard();
  return paths_;
}

void move_tail_tokens(std::vector<std::string>& paths, int64_t n, ShardSplitWriter& to) {
  if (n <= 0) return;
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (const std::string& p : paths) {
    counts.push_back(TokenShard::open(p).size());
    total += counts.back();
  }
  BLU_CHECK(n <= total, "tokenize: cannot move ", n, " tokens out of ", total);
  int64_t start = 0;
  const int64_t boundary = total - n;
  std::vector<uint16_t> block(kBlockTokens);
  std::vector<int32_t> ids;
  std::vector<std::string> kept;
  for (size_t k = 0; k < paths.size(); ++k) {
    const int64_t end = start + counts[k];
    if (end <= boundary) {
      kept.push_back(paths[k]);
      start = end;
      continue;
    }
    const int64_t from =
        std::max<int64_t>(boundary - start, 0);  // first token of this shard to move
    const int fd = ::open(paths[k].c_str(), O_RDWR);
    BLU_CHECK(fd >= 0, "tokenize: cannot open '", paths[k], "': ", std::strerror(errno));
    for (int64_t i = from; i < counts[k];) {
      const size_t m =
          static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(kBlockTokens), counts[k] - i));
      const ssize_t got = ::pread(fd, block.data(), m * 2, kShardHeaderBytes + 2 * i);
      BLU_CHECK(got == static_cast<ssize_t>(m * 2), "tokenize: reading '", paths[k],
                "' back failed");
      ids.assign(block.begin(), block.begin() + static_cast<std::ptrdiff_t>(m));
      to.append(ids);
      i += static_cast<int64_t>(m);
    }
    if (from > 0) {
      uint32_t crc = 0;  // of the tokens the shard keeps, read back
      for (int64_t i = 0; i < from;) {
        const size_t m =
            static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(kBlockTokens), from - i));
        const ssize_t got = ::pread(fd, block.data(), m * 2, kShardHeaderBytes + 2 * i);
        BLU_CHECK(got == static_cast<ssize_t>(m * 2), "tokenize: reading '", paths[k],
                  "' back failed");
        crc = crc32c(block.data(), m * 2, crc);
        i += static_cast<int64_t>(m);
      }
      write_header(fd, from, crc, paths[k]);
      BLU_CHECK(::ftruncate(fd, kShardHeaderBytes + 2 * from) == 0 && ::fsync(fd) == 0,
                "tokenize: cannot shorten '", paths[k], "': ", std::strerror(errno));
      kept.push_back(paths[k]);
    }
    ::close(fd);
    if (from == 0) std::filesystem::remove(paths[k]);
    start = end;
  }
  paths = kept;
}

}  // namespace blu::train
