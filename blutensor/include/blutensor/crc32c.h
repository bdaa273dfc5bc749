// blutensor/crc32c.h: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, init and final xor
// 0xFFFFFFFF; the checksum of iSCSI, ext4 and SCTP), used to make checkpoints self-checking.
// On x86-64 CPUs with SSE4.2 it runs on the crc32 instruction (chosen once at run time), elsewhere
// on a slicing-by-8 table; both give the same value (tested against RFC 3720's vectors).
//
// Note [Why CRC-32C for checkpoints]
//   The threat is accidental damage (a bad disk block, a torn copy, a stray write), not an
//   adversary. CRC-32C detects every burst of up to 32 flipped bits and misses random damage with
//   probability 2^-32 per checksummed range; with one checksum per tensor that is far below any
//   other failure rate of a training run. It is the fastest strong checksum available without a
//   library (the crc32 instruction: ~8 bytes per cycle-and-a-bit), so verifying a GPT-2 124M
//   checkpoint (0.5 GB of weights + 1 GB of AdamW moments) costs well under a second, and its
//   value is reproducible by standard tools (e.g. Python's crc32c package, `gsutil hash -c`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace blu {

// CRC-32C of `n` bytes. Pass a previous result as `crc` to extend it:
// crc32c(b, nb, crc32c(a, na)) == crc32c(a followed by b).
uint32_t crc32c(const void* data, std::size_t n, uint32_t crc = 0);

// 8 lowercase hex digits, and back (false for anything else).
std::string crc32c_hex(uint32_t crc);
bool crc32c_from_hex(const std::string& hex, uint32_t& out);

namespace detail {
uint32_t crc32c_portable(const void* data, std::size_t n, uint32_t crc);
bool crc32c_hardware_available();
uint32_t crc32c_hardware(const void* data, std::size_t n, uint32_t crc);  // only if available
}  // namespace detail

}  // namespace blu
