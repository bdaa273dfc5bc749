// crc32c_test.cpp: CRC-32C against RFC 3720's published vectors and "123456789", the portable and
// hardware paths against each other at every length and alignment, extension (crc of a || b from
// the crc of a), single-bit-flip detection, and the throughput (printed, not bounded).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "blutensor/crc32c.h"

using blu::crc32c;

TEST(Crc32c, KnownVectors) {
  // RFC 3720 (iSCSI), appendix B.4.
  std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[static_cast<size_t>(i)] = static_cast<unsigned char>(i);
    down[static_cast<size_t>(i)] = static_cast<unsigned char>(31 - i);
  }
  for (int path = 0; path < 3; ++path) {
    auto f = [&](const void* p, size_t n) {
      if (path == 0) return crc32c(p, n);
      if (path == 1) return blu::detail::crc32c_portable(p, n, 0);
      return blu::detail::crc32c_hardware(p, n, 0);
    };
    SCOPED_TRACE("path " + std::to_string(path));
    EXPECT_EQ(f(zeros.data(), 32), 0x8A9136AAu);
    EXPECT_EQ(f(ones.data(), 32), 0x62A8AB43u);
    EXPECT_EQ(f(up.data(), 32), 0x46DD794Eu);
    EXPECT_EQ(f(down.data(), 32), 0x113FDB5Cu);
    EXPECT_EQ(f("123456789", 9), 0xE3069283u);  // the CRC catalogue's check value
    EXPECT_EQ(f("", 0), 0u);
  }
}

TEST(Crc32c, PathsAgreeAtEveryLengthAndAlignmentAndExtend) {
  std::mt19937 rng(1234);
  std::vector<unsigned char> buf(4096 + 16);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  if (!blu::detail::crc32c_hardware_available())
    std::printf("note: no SSE4.2 crc32; portable path only\n");
  for (size_t off = 0; off < 9; ++off) {
    for (size_t n = 0; n <= 300; ++n) {
      const uint32_t a = blu::detail::crc32c_portable(buf.data() + off, n, 0);
      ASSERT_EQ(a, crc32c(buf.data() + off, n)) << "off " << off << " n " << n;
      ASSERT_EQ(a, blu::detail::crc32c_hardware(buf.data() + off, n, 0))
          << "off " << off << " n " << n;
      const size_t cut = n / 3;
      ASSERT_EQ(a, crc32c(buf.data() + off + cut, n - cut, crc32c(buf.data() + off, cut)))
          << "extend at " << cut;
    }
  }
}

TEST(Crc32c, EverySingleBitFlipChangesTheChecksum) {
  std::mt19937 rng(7);
  std::vector<unsigned char> buf(4096);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  const uint32_t good = crc32c(buf.data(), buf.size());
  for (size_t i = 0; i < buf.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      buf[i] ^= static_cast<unsigned char>(1u << bit);
      ASSERT_NE(crc32c(buf.data(), buf.size()), good) << "byte " << i << " bit " << bit;
      buf[i] ^= static_cast<unsigned char>(1u << bit);
    }
  }
}

TEST(Crc32c, HexRoundTrip) {
  EXPECT_EQ(blu::crc32c_hex(0xE3069283u), "e3069283");
  EXPECT_EQ(blu::crc32c_hex(0x0000000Fu), "0000000f");
  uint32_t v = 0;
  EXPECT_TRUE(blu::crc32c_from_hex("E3069283", v));
  EXPECT_EQ(v, 0xE3069283u);
  EXPECT_FALSE(blu::crc32c_from_hex("e306928", v));
  EXPECT_FALSE(blu::crc32c_from_hex("e306928g", v));
  EXPECT_FALSE(blu::crc32c_from_hex("+e306928", v));
}

TEST(Crc32c, Throughput) {
  std::vector<unsigned char> buf(64u << 20);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<unsigned char>(i * 131 + (i >> 9));
  for (int path = 0; path < 2; ++path) {
    auto t0 = std::chrono::steady_clock::now();
    uint32_t c = path == 0 ? crc32c(buf.data(), buf.size())
                           : blu::detail::crc32c_portable(buf.data(), buf.size(), 0);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("crc32c %s: %.0f MB/s (crc %08x)\n", path == 0 ? "dispatched" : "portable",
                buf.size() / s / 1e6, c);
  }
}
