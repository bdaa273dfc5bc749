// data_loader.cpp: the memory-mapped batch loader (Note [Rank-strided cursors] in data.h).
// Shards are opened lazily and their checksums and ids validated once, on the host, when first
// used (Note [Shard checksums] in blutrain/data.h).
#include <algorithm>
#include <utility>

#include "blutensor/error.h"
#include "blutrain/data.h"
#include "common/splitmix64.h"

namespace blu::train {

DataLoader::DataLoader(std::vector<std::string> shard_paths, int batch_size, int seq_len, int rank,
                       int world_size, int32_t vocab_size)
    : paths_(std::move(shard_paths)), B_(batch_size), T_(seq_len), rank_(rank),
      world_size_(world_size), vocab_size_(vocab_size) {
  BLU_CHECK(!paths_.empty(), "DataLoader: no shards given");
  BLU_CHECK(B_ > 0 && T_ > 0, "DataLoader: batch size ", B_, " and sequence length ", T_,
            " must be positive");
  BLU_CHECK(world_size_ > 0 && rank_ >= 0 && rank_ < world_size_, "DataLoader: rank ", rank_,
            " outside world size ", world_size_);
  BLU_CHECK(vocab_size_ > 0 && vocab_size_ <= 65536, "DataLoader: vocab size ", vocab_size_,
            " must be in (0, 65536] for uint16 shards");
  shards_.resize(paths_.size());
  int64_t largest = 0;
  for (size_t i = 0; i < paths_.size(); ++i) {
    // Open each once to check its header and size; keep only the first mapped.
    TokenShard s = TokenShard::open(paths_[i]);
    shard_sizes_.push_back(s.size());
    largest = std::max(largest, s.size());
    if (i == 0) {
      s.verify_checksum();
      s.validate_ids(vocab_size_);
      shards_[0] = std::make_unique<TokenShard>(std::move(s));
    }
  }
  const int64_t need = global_batch_tokens() + 1;
  for (size_t i = 0; i < paths_.size(); ++i) {
    BLU_CHECK(shard_sizes_[i] >= need, "DataLoader: shard '", paths_[i], "' has ", shard_sizes_[i],
              " tokens, fewer than one global batch needs (B=", B_, " x T=", T_, " x world ",
              world_size_, " + 1 = ", need, "): the batch is larger than the data");
  }
}

DataLoader::~DataLoader() = default;
DataLoader::DataLoader(DataLoader&&) noexcept = default;

const TokenShard& DataLoader::shard(int64_t i) {
  auto& slot = shards_[static_cast<size_t>(i)];
  if (!slot) {
    // Keep at most the current shard mapped (plus the one being opened).
    for (auto& other : shards_) other.reset();
    TokenShard s = TokenShard::open(paths_[static_cast<size_t>(i)]);
    BLU_CHECK(s.size() == shard_sizes_[static_cast<size_t>(i)], "DataLoader: shard '", s.path(),
              "' changed size while training");
    s.verify_checksum();
    s.validate_ids(vocab_size_);
    slot = std::make_unique<TokenShard>(std::move(s));
  }
  return *slot;
}

void DataLoader::set_cursor(const DataCursor& c) {
  BLU_CHECK(c.shard >= 0 && c.shard < static_cast<int64_t>(paths_.size()) && c.position >= 0 &&
                c.epoch >= 0,
            "DataLoader: cursor (shard ", c.shard, ", position ", c.position, ", epoch ", c.epoch,
            ") outside the ", paths_.size(), " shards");
  // Written as a bound on position: a cursor from a damaged state.json may hold any int64, and
  // position + batch would overflow (Note [state.json is input] in train_state.cpp).
  BLU_CHECK(c.position <= shard_sizes_[static_cast<size_t>(c.shard)] - global_batch_tokens() - 1,
            "DataLoader: cursor position ", c.position, " does not leave a batch in shard '",
            paths_[static_cast<size_t>(c.shard)], "' of ", shard_sizes_[static_cast<size_t>(c.shard)],
            " tokens");
  cursor_ = c;
}

void DataLoader::next_batch(std::span<int32_t> inputs, std::span<int32_t> targets) {
  const size_t n = static_cast<size_t>(B_) * static_cast<size_t>(T_);
  BLU_CHECK(inputs.size() == n && targets.size() == n, "DataLoader::next_batch: buffers of ",
            inputs.size(), " and ", targets.size(), " entries, expected B*T = ", n);
  const TokenShard& s = shard(cursor_.shard);
  if (shuffle_) {  // Note [Shuffled windows]
    const int64_t starts = s.size() - T_;  // a window of T + 1 tokens starts in [0, size - T - 1]
    for (int b = 0; b < B_; ++b) {
      uint64_t h = seed_;
      for (uint64_t v : {static_cast<uint64_t>(cursor_.epoch), static_cast<uint64_t>(cursor_.shard),
                         static_cast<uint64_t>(cursor_.position),
                         static_cast<uint64_t>(rank_) * static_cast<uint64_t>(B_) + static_cast<uint64_t>(b)}) {
        uint64_t state = h ^ v;
        h = splitmix64_next(state);
      }
      const uint16_t* window = s.tokens().data() + static_cast<int64_t>(h % static_cast<uint64_t>(starts));
      for (int t = 0; t < T_; ++t) {
        inputs[static_cast<size_t>(b) * T_ + t] = window[t];
        targets[static_cast<size_t>(b) * T_ + t] = window[t + 1];
      }
    }
  } else {
    const uint16_t* window = s.tokens().data() + cursor_.position + static_cast<int64_t>(rank_) * B_ * T_;
    for (size_t i = 0; i < n; ++i) {
      inputs[i] = window[i];
      targets[i] = window[i + 1];
    }
  }
  cursor_.position += global_batch_tokens();
  if (cursor_.position + global_batch_tokens() + 1 > shard_sizes_[static_cast<size_t>(cursor_.shard)]) {
    cursor_.position = 0;
    if (++cursor_.shard == static_cast<int64_t>(paths_.size())) {
      cursor_.shard = 0;
      ++cursor_.epoch;
    }
  }
}

int64_t DataLoader::total_tokens() const {
  int64_t total = 0;
  for (int64_t s : shard_sizes_) total += s;
  return total;
}

int64_t DataLoader::batches_per_epoch() const {
  int64_t n = 0;
  for (int64_t s : shard_sizes_) n += (s - 1) / global_batch_tokens();
  return n;
}

}  // namespace blu::train
