// write_pattern_shards (support/pattern_shards.h).
#include "support/pattern_shards.h"

#include <cstdint>
#include <filesystem>
#include <vector>

#include "blutrain/data.h"

namespace blu::train::test {

void write_pattern_shards(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<int32_t> period;
  for (int i = 0; i < 24; ++i) period.push_back(1000 + (i * 37) % 24);
  std::vector<int32_t> train, val;
  for (int i = 0; i < 20000; ++i) train.push_back(period[static_cast<size_t>(i) % period.size()]);
  for (int i = 0; i < 4000; ++i) val.push_back(period[static_cast<size_t>(i + 5) % period.size()]);
  write_shard(dir + "/pat_train_000000.bin", train);
  write_shard(dir + "/pat_val_000000.bin", val);
}

}  // namespace blu::train::test
