// Test support: a small learnable token corpus in shard form (a fixed pseudo-random sequence of
// 24 distinct ids, repeated), so training tests need neither the Brown corpus nor its cache.
#pragma once

#include <string>

namespace blu::train::test {

// Writes <dir>/pat_train_000000.bin (20000 tokens) and <dir>/pat_val_000000.bin (4000).
void write_pattern_shards(const std::string& dir);

}  // namespace blu::train::test
