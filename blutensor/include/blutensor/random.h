// blutensor/random.h: the seeded Generator behind randn/rand/dropout. A Generator is a
// (seed, offset) pair over the Philox counter space (philox.h); each draw reserves a range of
// counters, so results do not depend on the device or on how kernels are split.
#pragma once

#include <cstdint>

#include "blutensor/tensor.h"

namespace blu {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : seed_(seed) {}
  void manual_seed(uint64_t seed) { seed_ = seed; offset_ = 0; }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset) { offset_ = offset; }
  // Returns the current offset and advances past `counters` Philox counters.
  uint64_t reserve(uint64_t counters) {
    uint64_t o = offset_;
    offset_ += counters;
    return o;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

Generator& default_generator();
void manual_seed(uint64_t seed);  // reseeds default_generator(), offset 0

Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);  // [0, 1)
// Integers uniform in [low, high) (token batches in tests).
Tensor randint(int64_t low, int64_t high, const Shape& shape,
               TensorOptions options = TensorOptions(kInt64), Generator* gen = nullptr);

}  // namespace blu
