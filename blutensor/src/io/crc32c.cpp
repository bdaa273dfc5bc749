// crc32c.cpp: CRC-32C, slicing-by-8 tables (portable) and the SSE4.2 crc32 instruction (x86-64),
// picked once per process (blutensor/crc32c.h).
#include "blutensor/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define BLU_CRC32C_X86 1
#endif

namespace blu {
namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;

// kTables[k][b]: the CRC contribution of byte b followed by k zero bytes (slicing-by-8).
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c & 1u) ? (c >> 1) ^ kPolyReflected : c >> 1;
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  }
  return t;
}

constexpr Tables kTables = make_tables();

uint32_t portable_raw(const unsigned char* p, std::size_t n, uint32_t c) {
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;  // little-endian host (safetensors I/O asserts it too)
    c = kTables[7][lo & 0xFF] ^ kTables[6][(lo >> 8) & 0xFF] ^ kTables[5][(lo >> 16) & 0xFF] ^
        kTables[4][lo >> 24] ^ kTables[3][hi & 0xFF] ^ kTables[2][(hi >> 8) & 0xFF] ^
        kTables[1][(hi >> 16) & 0xFF] ^ kTables[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFF];
  return c;
}

#ifdef BLU_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t hardware_raw(const unsigned char* p, std::size_t n,
                                                        uint32_t c) {
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (n-- > 0) c = _mm_crc32_u8(c, *p++);
  return c;
}

bool detect_hardware() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

using RawFn = uint32_t (*)(const unsigned char*, std::size_t, uint32_t);

RawFn pick() {
#ifdef BLU_CRC32C_X86
  if (detect_hardware()) return hardware_raw;
#endif
  return portable_raw;
}

}  // namespace

namespace detail {
uint32_t crc32c_portable(const void* data, std::size_t n, uint32_t crc) {
  return ~portable_raw(static_cast<const unsigned char*>(data), n, ~crc);
}
bool crc32c_hardware_available() {
#ifdef BLU_CRC32C_X86
  static const bool available = detect_hardware();
  return available;
#else
  return false;
#endif
}
uint32_t crc32c_hardware(const void* data, std::size_t n, uint32_t crc) {
#ifdef BLU_CRC32C_X86
  return ~hardware_raw(static_cast<const unsigned char*>(data), n, ~crc);
#else
  return crc32c_portable(data, n, crc);
#endif
}
}  // namespace detail

uint32_t crc32c(const void* data, std::size_t n, uint32_t crc) {
  static const RawFn raw = pick();
  return ~raw(static_cast<const unsigned char*>(data), n, ~crc);
}

std::string crc32c_hex(uint32_t crc) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s(8, '0');
  for (int i = 7; i >= 0; --i, crc >>= 4) s[static_cast<std::size_t>(i)] = kDigits[crc & 0xF];
  return s;
}

bool crc32c_from_hex(const std::string& hex, uint32_t& out) {
  if (hex.size() != 8) return false;
  uint32_t v = 0;
  for (char ch : hex) {
    int d = ch >= '0' && ch <= '9'   ? ch - '0'
            : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
            : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                     : -1;
    if (d < 0) return false;
    v = (v << 4) | static_cast<uint32_t>(d);
  }
  out = v;
  return true;
}

}  // namespace blu
