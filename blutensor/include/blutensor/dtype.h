// blutensor/dtype.h: the element types of a Tensor (f64, f32, bf16, f16, i32, i64, u16) and the
// host-side 16-bit float types. Design choice: ops never promote silently; mixed dtypes are an
// error naming the op (cast with Tensor::to(DType)). bf16/f16 are computed in float on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ostream>

namespace blu {

enum class DType : uint8_t { F64 = 0, F32, BF16, F16, I32, I64, U16 };

inline constexpr DType kFloat64 = DType::F64;
inline constexpr DType kFloat32 = DType::F32;
inline constexpr DType kBFloat16 = DType::BF16;
inline constexpr DType kFloat16 = DType::F16;
inline constexpr DType kInt32 = DType::I32;
inline constexpr DType kInt64 = DType::I64;
inline constexpr DType kUInt16 = DType::U16;

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64: return 8;
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U16: return 2;
  }
  return 0;
}
constexpr bool is_floating(DType t) {
  return t == DType::F64 || t == DType::F32 || t == DType::BF16 || t == DType::F16;
}
constexpr bool is_integral(DType t) { return !is_floating(t); }
// "f64", "f32", "bf16", "f16", "i32", "i64", "u16"
const char* dtype_name(DType t) noexcept;
// PyTorch's spelling, used by printing: "torch.float32" style without the prefix ("float32").
const char* dtype_torch_name(DType t) noexcept;
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// bfloat16 on the host: the top 16 bits of a float, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a number
  operator float() const { return to_float(bits); }
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
  static float to_float(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// IEEE binary16 on the host (software conversion, round to nearest even, subnormals kept).
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(from_float(f)) {}  // NOLINT
  operator float() const { return to_float(bits); }
  static uint16_t from_float(float f);
  static float to_float(uint16_t h);
};

// The C++ type stored for each dtype (bf16 -> BFloat16, f16 -> Half).
template <DType D> struct dtype_traits;
template <> struct dtype_traits<DType::F64> { using type = double; };
template <> struct dtype_traits<DType::F32> { using type = float; };
template <> struct dtype_traits<DType::BF16> { using type = BFloat16; };
template <> struct dtype_traits<DType::F16> { using type = Half; };
template <> struct dtype_traits<DType::I32> { using type = int32_t; };
template <> struct dtype_traits<DType::I64> { using type = int64_t; };
template <> struct dtype_traits<DType::U16> { using type = uint16_t; };

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::BF16; }
template <> constexpr DType dtype_of<Half>() { return DType::F16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::U16; }

}  // namespace blu
