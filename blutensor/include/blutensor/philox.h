// blutensor/philox.h: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC'11), a counter-based generator usable from host and device code, and the mapping from
// (seed, offset, element index) to uniform / normal floats that CPU and CUDA share.
//
// Note [Random streams]
// A draw of n values from a Generator {seed, offset} uses counters offset .. offset + ceil(n / 4)
// (uniform, dropout) or offset .. offset + ceil(n / 2) (normal), then advances the generator past
// them. Element i (row-major index of the contiguous output) reads:
//   uniform: counter offset + i / 4, lane i % 4, u = (x >> 8) * 2^-24 in [0, 1)
//   normal:  counter offset + i / 2, lanes 2 (i % 2) and 2 (i % 2) + 1, Box-Muller (cos branch)
// so CPU and CUDA produce the same bits for uniforms and masks, and normals equal up to rare last-bit
// rounding differences of log/cos in double.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define BLU_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define BLU_HOST_DEVICE inline
#endif

namespace blu::philox {

struct U32x4 {
  uint32_t x, y, z, w;
};

BLU_HOST_DEVICE void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// Ten rounds of Philox4x32 on the 128-bit counter (counter_lo, counter_hi, 0, 0) with key = seed.
BLU_HOST_DEVICE U32x4 philox4x32_10(uint64_t seed, uint64_t counter) {
  U32x4 c{static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u};
  uint32_t k0 = static_cast<uint32_t>(seed);
  uint32_t k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, c.x, hi0, lo0);
    mulhilo(0xCD9E8D57u, c.z, hi1, lo1);
    c = U32x4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

BLU_HOST_DEVICE uint32_t lane(const U32x4& r, int i) {
  return i == 0 ? r.x : (i == 1 ? r.y : (i == 2 ? r.z : r.w));
}

// Uniform float in [0, 1) with 24 random bits (exact in float, identical on host and device).
BLU_HOST_DEVICE float u32_to_unit_float(uint32_t x) {
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}

BLU_HOST_DEVICE float uniform_at(uint64_t seed, uint64_t offset, uint64_t index) {
  U32x4 r = philox4x32_10(seed, offset + index / 4);
  return u32_to_unit_float(lane(r, static_cast<int>(index % 4)));
}

// Counters a draw of n elements consumes (Note [Random streams]).
BLU_HOST_DEVICE uint64_t uniform_counters(uint64_t n) { return (n + 3) / 4; }
BLU_HOST_DEVICE uint64_t normal_counters(uint64_t n) { return (n + 1) / 2; }

BLU_HOST_DEVICE float normal_at(uint64_t seed, uint64_t offset, uint64_t index) {
  U32x4 r = philox4x32_10(seed, offset + index / 2);
  int base = static_cast<int>(index % 2) * 2;
  // u1 in (0, 1] so that log(u1) is finite.
  float u1 = 1.0f - u32_to_unit_float(lane(r, base));
  float u2 = u32_to_unit_float(lane(r, base + 1));
  // Computed in double on host and device, then rounded: equal floats except in rare ties.
  double radius = ::sqrt(-2.0 * ::log(static_cast<double>(u1)));
  return static_cast<float>(radius * ::cos(6.283185307179586 * static_cast<double>(u2)));
}

// Dropout keeps element `index` when its uniform is >= p (Note [Random streams]).
BLU_HOST_DEVICE bool dropout_keep(uint64_t seed, uint64_t offset, uint64_t index, float p) {
  return uniform_at(seed, offset, index) >= p;
}

}  // namespace blu::philox
