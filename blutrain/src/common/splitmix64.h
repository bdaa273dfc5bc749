// splitmix64.h (internal): SplitMix64, the one 64-bit generator step blutrain uses wherever it needs
// cheap seeded randomness (sampling, synthetic tokens, shuffled data windows).
#pragma once

#include <cstdint>

namespace blu::train {

// Advances `state` by the golden-ratio increment and returns its mix (Steele, Lea, Flood 2014).
inline uint64_t splitmix64_next(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace blu::train
