// shard_writer.h (internal): writes one split's token shards as a stream (bounded memory):
// <out_dir>/<name>_<split>_NNNNNN.bin, a new shard every shard_tokens tokens, each written to a
// temp file whose header count and checksum are filled in at the end, fsync'ed and renamed into
// place (Note [Shard format], Note [Shard checksums], Note [Streaming tokenize] in
// blutrain/data.h).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace blu::train {

// The header words a shard of `count` tokens whose bytes have CRC-32C `crc` begins with (magic,
// version, count, kShardChecksumTag, crc); the other 251 words are zero.
using ShardHeaderWords = std::array<int32_t, 5>;
ShardHeaderWords shard_header_words(int64_t count, uint32_t crc);

class ShardSplitWriter {
 public:
  ShardSplitWriter(std::string out_dir, std::string name, std::string split, int64_t shard_tokens);
  ~ShardSplitWriter();  // removes an unfinished temp file
  ShardSplitWriter(const ShardSplitWriter&) = delete;
  ShardSplitWriter& operator=(const ShardSplitWriter&) = delete;

  void append(std::span<const int32_t> ids);
  // Closes the last shard; the paths of all shards written, in order.
  std::vector<std::string> finish();
  int64_t tokens() const { return total_; }

 private:
  void open_shard();
  void flush();
  void close_shard();

  std::string out_dir_, name_, split_;
  int64_t shard_tokens_;
  int64_t total_ = 0;
  int64_t in_shard_ = 0;
  uint32_t crc_ = 0;  // of the tokens written to the open shard so far
  int fd_ = -1;
  std::string path_, tmp_path_;
  std::vector<uint16_t> buf_;
  std::vector<std::string> paths_;
};

// Moves the last `n` tokens of a split written as `paths` (shards of shard_tokens) to `to`:
// reads them back in blocks, shortens the shard holding the boundary (header count and checksum
// of the tokens it keeps, truncate) and deletes the shards after it. `paths` is updated.
void move_tail_tokens(std::vector<std::string>& paths, int64_t n, ShardSplitWriter& to);

}  // namespace blu::train
