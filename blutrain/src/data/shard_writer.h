// shard_writer.h (internal): writes one split's token shards as a stream (bounded memory):
// <out_dir>/<name>_<split>_NNNNNN.bin, a new shard every shard_tokens tokens, each written to a
// temp file whose header count is filled in at the end, fsync'ed and renamed into place
// (Note [Shard format], Note [Streaming tokenize] in blutrain/data.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace blu::train {

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
  int fd_ = -1;
  std::string path_, tmp_path_;
  std::vector<uint16_t> buf_;
  std::vector<std::string> paths_;
};

// Moves the last `n` tokens of a split written as `paths` (shards of shard_tokens) to `to`:
// reads them back in blocks, shortens the shard holding the boundary (header count + truncate)
// and deletes the shards after it. `paths` is updated.
void move_tail_tokens(std::vector<std::string>& paths, int64_t n, ShardSplitWriter& to);

}  // namespace blu::train
