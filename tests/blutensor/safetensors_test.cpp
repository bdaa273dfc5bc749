// safetensors: round trips of every dtype (bitwise), metadata, the exact byte layout, and
// malformed files (truncated, bad offsets, overlaps, bad dtype, absurd header length, bad JSON)
// that must give blu::Error naming the problem. Also the JSON parser.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "blutensor/blutensor.h"
#include "support/error_of.h"

namespace {

using namespace blu;

using blu::test::error_of;

// A file from a header text and data bytes.
std::string make_file(const std::string& header, const std::string& data, int64_t length_override = -1) {
  uint64_t n = length_override >= 0 ? static_cast<uint64_t>(length_override) : header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

TEST(Safetensors, RoundTripEveryDtypeBitwise) {
  Generator gen(5);
  std::map<std::string, Tensor> in;
  in["f64"] = randn({3, 5}, kFloat64, &gen);
  in["f32"] = randn({7}, kFloat32, &gen);
  in["bf16"] = randn({2, 3, 3}, kBFloat16, &gen);
  in["f16"] = randn({5, 1}, kFloat16, &gen);
  in["i32"] = randint(-50, 50, {4}, kInt32, &gen);
  in["i64"] = randint(-5000000000LL, 5000000000LL, {3}, kInt64, &gen);
  in["u16"] = randint(0, 50257, {9}, kUInt16, &gen);
  in["scalar"] = scalar_tensor(2.5);
  in["empty"] = zeros({0, 4});
  in["strided"] = arange(12, kFloat32).view({3, 4}).t();  // written contiguous
  std::string path = (std::filesystem::temp_directory_path() / "blu_st_roundtrip.safetensors").string();
  save_safetensors(path, in, {{"format", "pt"}, {"note", "quote \" and \\ ok"}});
  SafetensorsData out = load_safetensors(path);
  std::remove(path.c_str());
  ASSERT_EQ(out.tensors.size(), in.size());
  EXPECT_EQ(out.metadata.at("format"), "pt");
  EXPECT_EQ(out.metadata.at("note"), "quote \" and \\ ok");
  for (auto& [name, t] : in) {
    const Tensor& r = out.tensors.at(name);
    SCOPED_TRACE(name);
    EXPECT_EQ(r.dtype(), t.dtype());
    EXPECT_EQ(r.sizes(), t.sizes());
    Tensor c = t.contiguous();
    ASSERT_EQ(r.nbytes(), c.nbytes());
    EXPECT_EQ(std::memcmp(r.data_ptr(), c.data_ptr(), c.nbytes()), 0);
  }
}

TEST(Safetensors, ByteLayoutMatchesTheFormat) {
  std::map<std::string, Tensor> in;
  in["a"] = from_vector(std::vector<float>{1.0f, 2.0f});
  std::string bytes = serialize_safetensors(in);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.rfind("{\"a\":{\"data_offsets\":[0,8],\"dtype\":\"F32\",\"shape\":[2]}}", 0), 0u) << header;
  ASSERT_EQ(bytes.size(), 8 + n + 8);
  float v[2];
  std::memcpy(v, bytes.data() + 8 + n, 8);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], 2.0f);
  // A header written by another tool (spaces, other key order) parses.
  std::string other = make_file(
      "{ \"__metadata__\" : {\"k\": \"v\"}, \"w\" : {\"shape\": [1], \"dtype\": \"I64\", \"data_offsets\": [0, 8]} }",
      std::string("\x07\0\0\0\0\0\0\0", 8));
  SafetensorsData d = parse_safetensors(other);
  EXPECT_EQ(d.tensors.at("w").item(), 7.0);
}

TEST(Safetensors, MalformedFilesGiveErrors) {
  const std::string good_header = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  const std::string data8(8, '\1');
  struct Case {
    std::string name, bytes, expect;
  };
  std::vector<Case> cases = {
      {"empty file", "", "too short"},
      {"short length", std::string(5, '\0'), "too short"},
      {"absurd header length", make_file(good_header, data8, int64_t{1} << 60), "absurd"},
      {"header past end", make_file(good_header, data8, static_cast<int64_t>(good_header.size() + 100)),
       "exceeds"},
      {"truncated data", make_file(good_header, std::string(4, '\1')), "run past"},
      {"bad json", make_file("{\"a\":{\"dtype\":\"F32\",", data8), "bad JSON header"},
      {"not an object", make_file("[1,2]", ""), "not a JSON object"},
      {"bad dtype", make_file("{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", "\1\1"),
       "unsupported dtype 'F8_E4M3'"},
      {"size mismatch", make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", data8),
       "needs 12"},
      {"reversed offsets", make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", data8),
       "bad data_offsets"},
      {"negative dim", make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", data8),
       "bad dimension"},
      {"huge shape", make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
                               "\"data_offsets\":[0,8]}}", data8), "overflows"},
      // Note [Empty tensors with huge dims] (found by the safetensors fuzzer): numel 0, but the
      // strides of the other dims overflow int64.
      {"empty with huge dims", make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[0,4611686018427387904,4],"
                                         "\"data_offsets\":[0,0]}}", ""), "overflows int64 strides"},
      {"overlap", make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                            "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                            std::string(12, '\1')), "overlap"},
      {"missing offsets", make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", data8), "data_offsets"},
      // Found by safetensors_fuzz (session 17): the writer refuses an empty name, so must the reader.
      {"empty name", make_file("{\"\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data8),
       "empty name"},
      {"bad metadata", make_file("{\"__metadata__\":{\"k\":1}}", ""), "not a string"},
      {"duplicate key", make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                  "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data8),
       "duplicate key"},
      {"deep nesting", make_file(std::string(200, '[') + std::string(200, ']'), ""), "nesting"},
  };
  for (const Case& c : cases) {
    std::string e = error_of([&] { (void)parse_safetensors(c.bytes, c.name); });
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.name << ": got '" << e << "'";
    EXPECT_NE(e.find("safetensors"), std::string::npos) << c.name << ": " << e;
  }
  // Every truncation of a valid file is an error, never a crash.
  std::string valid = serialize_safetensors({{"w", randn({3, 3})}, {"b", zeros({3})}});
  for (std::size_t len = 0; len < valid.size(); ++len) {
    std::string e = error_of([&] { (void)parse_safetensors(valid.substr(0, len)); });
    EXPECT_NE(e, "(no error)") << "truncated to " << len;
  }
  EXPECT_NE(error_of([] { (void)load_safetensors("/nonexistent/x.safetensors"); }).find("cannot open"),
            std::string::npos);
}

TEST(Json, ParsesAndDumps) {
  json::Value v = json::parse(R"({"a": [1, -2.5e3, true, false, null], "s": "x\u00e9\ud83d\ude00\n", "big": 12345678901234})");
  EXPECT_EQ(v.find("a")->as_array()[0].as_integer(), 1);
  EXPECT_DOUBLE_EQ(v.find("a")->as_array()[1].as_number(), -2500.0);
  EXPECT_TRUE(v.find("a")->as_array()[2].as_bool());
  EXPECT_TRUE(v.find("a")->as_array()[4].is_null());
  EXPECT_EQ(v.find("s")->as_string(), "x\xc3\xa9\xf0\x9f\x98\x80\n");
  EXPECT_EQ(v.find("big")->as_integer(), 12345678901234LL);
  EXPECT_EQ(json::parse(v.dump()).dump(), v.dump());
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "01", "1.", "\"\\x\"", "\"abc", "tru", "{} x", "\"\\ud800\""}) {
    EXPECT_NE(error_of([&] { (void)json::parse(bad); }).find("json:"), std::string::npos) << bad;
  }
}

}  // namespace
