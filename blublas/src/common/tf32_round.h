// tf32_round.h (internal, host and device): fp32 -> tf32 rounding, nearest with ties away from
// zero (what cvt.rna.tf32.f32 computes), as two integer instructions.
//
// Note [tf32 rounding by integer add]
// tf32 keeps fp32's sign, exponent and top 10 mantissa bits (the low 13 bits zero). Adding half a
// tf32 ulp (bit 12) to the bit pattern and clearing the low 13 bits rounds the magnitude to
// nearest, ties away from zero: a carry out of the mantissa moves into the exponent, which is the
// correct next value (and overflows the largest finite values to infinity, as rna does). On
// sm_90 ptxas lowers cvt.rna.tf32.f32 to the same add and mask plus an FSETP that skips the add
// for infinities and NaNs: three instructions. Without the guard the results are bit-identical
// for every finite value, both infinities and the canonical NaN (+0x1000 stays inside its
// payload); only a NaN whose payload bits 12..22 are all set wraps to a zero or an infinity.
// The attention's split products (Note [3xTF32 split] in attention/sm80_mma_tiles.cuh) still
// see such a NaN: its small part x - big is NaN. Two instructions instead of three per rounding:
// the 3xTF32 attention rounds every operand twice (big and small). Checked against an
// independent reference on the CPU (tests/blublas/tf32_round_test.cpp).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define BLUBLAS_HD __host__ __device__ __forceinline__
#else
#define BLUBLAS_HD inline
#endif

namespace blublas::detail {

BLUBLAS_HD constexpr uint32_t tf32_rna_bits(uint32_t fp32_bits) {
  return (fp32_bits + 0x1000u) & 0xffffe000u;
}

}  // namespace blublas::detail

#undef BLUBLAS_HD
