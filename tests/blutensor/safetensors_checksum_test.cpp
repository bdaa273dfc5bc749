// safetensors_checksum_test.cpp: Note [Safetensors checksums]: CRC-32C per tensor and for the
// header in __metadata__; damage anywhere in a checksummed file (64 bytes overwritten, any single
// bit flipped, any truncation) is an error naming the file, the tensor or "header", and the
// expected vs found CRC, never a silent load; files without checksums still load.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "blutensor/blutensor.h"
#include "blutensor/crc32c.h"
#include "support/error_of.h"

namespace {

using namespace blu;

using blu::test::error_of;

std::map<std::string, Tensor> sample_tensors() {
  Generator gen(11);
  std::map<std::string, Tensor> in;
  in["h.0.attn.c_attn.weight"] = randn({8, 24}, kFloat32, &gen);
  in["h.0.ln_1.bias"] = randn({8}, kFloat32, &gen);
  in["ids"] = randint(0, 50257, {5}, kInt32, &gen);
  in["empty"] = zeros({0, 3});
  return in;
}

bool same(const SafetensorsData& a, const SafetensorsData& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (const auto& [name, t] : a.tensors) {
    auto it = b.tensors.find(name);
    if (it == b.tensors.end() || it->second.dtype() != t.dtype() ||
        it->second.sizes() != t.sizes() ||
        std::memcmp(it->second.data_ptr(), t.data_ptr(), t.nbytes()) != 0) {
      return false;
    }
  }
  return true;
}

uint64_t header_len(const std::string& file) {
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  return n;
}

}  // namespace

TEST(SafetensorsChecksums, WrittenAsMetadataVerifiedAndStripped) {
  const auto in = sample_tensors();
  const std::string bytes = serialize_safetensors(in, {{"format", "pt"}}, Checksums::kCrc32c);
  const std::string header = bytes.substr(8, header_len(bytes));
  // Plain string metadata: what any safetensors reader accepts.
  const Tensor& w = in.at("h.0.attn.c_attn.weight");
  EXPECT_NE(header.find("\"blu.crc32c.h.0.attn.c_attn.weight\":\"" +
                        crc32c_hex(crc32c(w.data_ptr(), w.nbytes())) + "\""),
            std::string::npos)
      << header;
  EXPECT_NE(header.find("\"blu.header_crc32c\":\""), std::string::npos) << header;
  SafetensorsData out = parse_safetensors(bytes, "mem");
  EXPECT_EQ(out.checksummed_tensors, 4);
  EXPECT_TRUE(out.header_checksummed);
  EXPECT_EQ(out.metadata,
            (std::map<std::string, std::string>{{"format", "pt"}}));  // checksum keys stripped
  // Without checksums: the old format, still loadable, and says so.
  SafetensorsData plain = parse_safetensors(serialize_safetensors(in, {{"format", "pt"}}), "mem");
  EXPECT_FALSE(plain.has_checksums());
  EXPECT_TRUE(same(out, plain));
  // The keys are reserved.
  EXPECT_NE(error_of([&] {
              serialize_safetensors(in, {{"blu.crc32c.x", "00000000"}});
            }).find("reserved"),
            std::string::npos);
}

TEST(SafetensorsChecksums, OverwrittenBytesNameFileTensorAndBothChecksums) {
  const auto in = sample_tensors();
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("blu_st_ck_" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  save_safetensors(path, in, {}, Checksums::kCrc32c);
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  // The 64 bytes at the start of the weight (the first tensor in the data, sorted by name: "empty"
  // has no bytes, then h.0.attn.c_attn.weight).
  const size_t data0 = 8 + header_len(bytes);
  std::string damaged = bytes;
  std::memset(damaged.data() + data0 + 100, 0x5A, 64);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << damaged;
  const std::string err = error_of([&] { load_safetensors(path); });
  std::remove(path.c_str());
  const Tensor& w = in.at("h.0.attn.c_attn.weight");
  const std::string expected = crc32c_hex(crc32c(w.data_ptr(), w.nbytes()));
  const std::string found = crc32c_hex(crc32c(damaged.data() + data0, w.nbytes()));
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_NE(err.find("tensor 'h.0.attn.c_attn.weight'"), std::string::npos) << err;
  EXPECT_NE(err.find("expected " + expected + ", found " + found), std::string::npos) << err;
}

TEST(SafetensorsChecksums, NoSingleBitFlipLoadsSilently) {
  const std::string bytes =
      serialize_safetensors(sample_tensors(), {{"format", "pt"}}, Checksums::kCrc32c);
  const SafetensorsData good = parse_safetensors(bytes, "mem");
  int detected = 0, harmless = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string b = bytes;
      b[i] = static_cast<char>(b[i] ^ (1 << bit));
      try {
        SafetensorsData r = parse_safetensors(b, "mem");
        // Loading is allowed only if nothing that was loaded changed (e.g. JSON whitespace).
        ASSERT_TRUE(same(r, good))
            << "a flip of bit " << bit << " of byte " << i << " loaded different content: ..."
            << b.substr(i < 30 ? 0 : i - 30, 60) << "...";
        ++harmless;
      } catch (const blu::Error&) {
        ++detected;
      }
    }
  }
  std::printf("%d of %zu single-bit flips detected, %d harmless (e.g. whitespace)\n", detected,
              bytes.size() * 8, harmless);
  // Every flip in the data section is detected.
  EXPECT_GE(detected, static_cast<int>((bytes.size() - 8 - header_len(bytes)) * 8));
}

TEST(SafetensorsChecksums, EveryTruncationIsAnError) {
  const std::string bytes = serialize_safetensors(sample_tensors(), {}, Checksums::kCrc32c);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(parse_safetensors(bytes.substr(0, n), "mem"), blu::Error) << "truncated to " << n;
  }
}

TEST(SafetensorsChecksums, DamagedChecksumEntriesAreErrors) {
  const auto in = sample_tensors();
  std::string bytes = serialize_safetensors(in, {}, Checksums::kCrc32c);
  auto with_header_edit = [&](const std::string& from, const std::string& to) {
    std::string b = bytes;
    const size_t at = b.find(from, 8);
    EXPECT_NE(at, std::string::npos) << from;
    b.replace(at, from.size(), to);  // same length: offsets stay valid
    EXPECT_EQ(b.size(), bytes.size());
    return b;
  };
  // A checksum key whose tensor name changed: one tensor without, one name the file lacks.
  EXPECT_NE(error_of([&] {
              parse_safetensors(with_header_edit("blu.crc32c.ids", "blu.crc32c.idz"), "mem");
            }).find("does not hold"),
            std::string::npos);
  // A checksum value that is not hex.
  const std::string key = "\"blu.crc32c.ids\":\"";
  const size_t at = bytes.find(key) + key.size();
  EXPECT_NE(error_of([&] {
              parse_safetensors(with_header_edit(bytes.substr(at, 8), "zzzzzzzz"), "mem");
            }).find("not an 8-digit hex"),
            std::string::npos);
  // A changed shape of the same size (the header checksum catches what the layout checks cannot).
  std::string b = serialize_safetensors({{"m", zeros({2, 3})}}, {}, Checksums::kCrc32c);
  const size_t s = b.find("[2,3]");
  ASSERT_NE(s, std::string::npos) << b;
  b.replace(s, 5, "[3,2]");
  const std::string err = error_of([&] { parse_safetensors(b, "mem"); });
  EXPECT_NE(err.find("checksum mismatch in the header"), std::string::npos) << err;
}
