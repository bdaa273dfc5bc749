// tokenize_stream_test.cpp: Note [Streaming tokenize]: the streamed tokenize equals the whole-text
// encode wherever the input is cut (every chunk size from 1 byte: cuts inside multi-byte UTF-8
// characters, invalid sequences, contractions, whitespace runs and words), the shard layout and
// val split equal the in-memory reference, and tokenizing 256 MiB grows the peak RSS (VmHWM) by
// less than kTokenizeMemoryBoundBytes. Uses a small hand-made vocabulary (always available) and
// GPT-2's when installed.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "blutensor/error.h"
#include "blutrain/data.h"
#include "blutrain/files.h"
#include "blutrain/tokenizer.h"
#include "data/ordered_encode.h"

using namespace blu::train;
namespace fs = std::filesystem;

namespace {

// GPT-2's byte -> character alphabet (printable bytes stand for themselves, the rest U+0100..).
std::string spelled(const std::string& bytes) {
  std::vector<int> cp(256, -1);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    cp[b] = printable ? b : 256 + n++;
  }
  std::string out;
  for (unsigned char c : bytes) {
    const int u = cp[c];
    if (u < 0x80) {
      out += static_cast<char>(u);
    } else {
      out += static_cast<char>(0xC0 | (u >> 6));
      out += static_cast<char>(0x80 | (u & 0x3F));
    }
  }
  return out;
}

std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

// 256 byte tokens plus the merges below, in order.
Tokenizer small_tokenizer(const fs::path& dir) {
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"t", "h"},  {"th", "e"},      {" ", "t"},           {" t", "he"},         {"a", "n"},
      {"an", "d"}, {" ", "a"},       {" a", "nd"},         {"'", "s"},           {"'", "l"},
      {"'l", "l"}, {"\xc3", "\xa9"}, {"\xe4\xb8", "\xad"}, {"\xe4", "\xb8"},     {"1", "2"},
      {" ", "1"},  {"\n", "\n"},     {" ", " "},           {"\xef\xbf", "\xbd"}, {"\xef", "\xbf"}};
  fs::create_directories(dir);
  std::ofstream enc(dir / "encoder.json");
  enc << "{";
  int id = 0;
  for (int b = 0; b < 256; ++b)
    enc << (b ? "," : "") << json_string(spelled(std::string(1, static_cast<char>(b)))) << ":"
        << id++;
  for (const auto& [a, b] : merges) enc << "," << json_string(spelled(a + b)) << ":" << id++;
  enc << "}";
  enc.close();
  std::ofstream bpe(dir / "vocab.bpe");
  bpe << "#version: 0.2\n";
  for (const auto& [a, b] : merges) bpe << spelled(a) << " " << spelled(b) << "\n";
  bpe.close();
  return Tokenizer::from_dir(dir.string());
}

// Text that exercises every boundary the stream must get right.
std::string tricky_text(uint32_t seed, size_t approx_bytes) {
  static const std::vector<std::string> parts = {"the",
                                                 " the",
                                                 " and",
                                                 "and",
                                                 "'s",
                                                 "'ll",
                                                 "'l",
                                                 "'",
                                                 " ",
                                                 "  ",
                                                 "   ",
                                                 "\n",
                                                 "\n\n",
                                                 " \n ",
                                                 "\t",
                                                 "12",
                                                 " 123",
                                                 "4567",
                                                 "é",
                                                 "café",
                                                 " 中文",
                                                 "中",
                                                 "😀",
                                                 " 😀!",
                                                 "!!",
                                                 "?",
                                                 ".",
                                                 ",\"",
                                                 "\xff",
                                                 "\xe2\x82",
                                                 "\xed\xa0\x80",
                                                 "\xc3",
                                                 "\xf0\x9f\x98",
                                                 "x",
                                                 " word",
                                                 "Word",
                                                 "\xc2\xa0",
                                                 "\xe3\x80\x80"};
  std::mt19937 rng(seed);
  std::string s;
  while (s.size() < approx_bytes) s += parts[rng() % parts.size()];
  return s;
}

std::vector<uint16_t> read_split(const std::vector<std::string>& paths,
                                 std::vector<int64_t>* sizes = nullptr) {
  std::vector<uint16_t> out;
  for (const std::string& p : paths) {
    TokenShard s = TokenShard::open(p);
    EXPECT_TRUE(s.has_checksum()) << p;  // Note [Shard checksums], also after the moved val tail
    s.verify_checksum();
    out.insert(out.end(), s.tokens().begin(), s.tokens().end());
    if (sizes) sizes->push_back(s.size());
  }
  return out;
}

// The reference: each document encoded whole, split as Note [Streaming tokenize] says.
void reference_split(const Tokenizer& tok, const std::vector<TextDocument>& docs,
                     const TokenizeOptions& opt, std::vector<uint16_t>& train,
                     std::vector<uint16_t>& val) {
  const int64_t every =
      opt.val_fraction > 0 ? std::max<int64_t>(1, std::llround(1.0 / opt.val_fraction)) : 0;
  const bool by_doc = every > 0 && static_cast<int64_t>(docs.size()) >= every;
  for (size_t i = 0; i < docs.size(); ++i) {
    auto& dst =
        by_doc && static_cast<int64_t>(i % static_cast<size_t>(every)) == every - 1 ? val : train;
    dst.push_back(Tokenizer::kEndOfText);
    for (int32_t id : tok.encode(docs[i].text)) dst.push_back(static_cast<uint16_t>(id));
  }
  if (every > 0 && !by_doc) {
    const auto n_val =
        static_cast<size_t>(std::llround(opt.val_fraction * static_cast<double>(train.size())));
    val.assign(train.end() - static_cast<std::ptrdiff_t>(n_val), train.end());
    train.resize(train.size() - n_val);
  }
}

class TokenizeStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("blu_tokstream_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

}  // namespace

TEST_F(TokenizeStreamTest, EveryChunkSizeGivesTheWholeTextIds) {
  std::vector<std::unique_ptr<Tokenizer>> toks;
  toks.push_back(std::make_unique<Tokenizer>(small_tokenizer(root_ / "vocab")));
  const std::string gpt2 = Tokenizer::default_dir();
  if (file_exists(gpt2 + "/encoder.json")) {
    toks.push_back(std::make_unique<Tokenizer>(Tokenizer::from_dir(gpt2)));
  } else {
    std::printf("note: GPT-2 vocabulary not at %s; the hand-made vocabulary only\n", gpt2.c_str());
  }
  for (size_t t = 0; t < toks.size(); ++t) {
    const Tokenizer& tok = *toks[t];
    std::vector<TextDocument> docs = {
        {"a", tricky_text(1, 3000)},
        {"b", tricky_text(2, 2000)},
        {"c", ""},
        {"d", std::string(5000, 'a') + " the end"},  // a long pre-token (longer than every small chunk)
        {"e", tricky_text(3, 1500) + "\xe2\x82"}};    // ends mid-character
    TokenizeOptions opt;
    opt.val_fraction = 0.4;  // every round(2.5) = 3rd document to val
    opt.shard_tokens = 777;
    std::vector<uint16_t> ref_train, ref_val;
    reference_split(tok, docs, opt, ref_train, ref_val);
    for (int64_t chunk : {1, 2, 3, 4, 5, 7, 13, 16, 17, 31, 64, 100, 4096, 1 << 20}) {
      SCOPED_TRACE("tokenizer " + std::to_string(t) + " chunk " + std::to_string(chunk));
      opt.chunk_bytes = chunk;
      opt.out_dir = (root_ / ("out_" + std::to_string(t) + "_" + std::to_string(chunk))).string();
      TokenizeResult r = tokenize_documents(tok, docs, opt);
      std::vector<int64_t> sizes;
      const std::vector<uint16_t> train = read_split(r.train_shards, &sizes);
      ASSERT_EQ(train.size(), ref_train.size());
      for (size_t i = 0; i < train.size(); ++i)
        ASSERT_EQ(train[i], ref_train[i]) << "train token " << i;
      EXPECT_EQ(read_split(r.val_shards), ref_val);
      EXPECT_EQ(r.train_tokens, static_cast<int64_t>(ref_train.size()));
      EXPECT_EQ(r.val_tokens, static_cast<int64_t>(ref_val.size()));
      for (size_t i = 0; i + 1 < sizes.size(); ++i) EXPECT_EQ(sizes[i], opt.shard_tokens);
      fs::remove_all(opt.out_dir);
    }
  }
}

TEST_F(TokenizeStreamTest, FilesEqualTheReferenceIncludingTheMovedValTail) {
  const Tokenizer tok = small_tokenizer(root_ / "vocab");
  // One document: val is the tail of the stream, moved out of the train shards at the end.
  for (int64_t shard_tokens : {50, 333, 100000}) {
    std::vector<TextDocument> docs = {{(root_ / "one.txt").string(), tricky_text(9, 20000)}};
    std::ofstream(docs[0].name, std::ios::binary) << docs[0].text;
    TokenizeOptions opt;
    opt.shard_tokens = shard_tokens;
    opt.chunk_bytes = 1000;
    opt.out_dir = (root_ / ("files_" + std::to_string(shard_tokens))).string();
    TokenizeResult r = tokenize_files(tok, {docs[0].name}, opt);
    std::vector<uint16_t> ref_train, ref_val;
    reference_split(tok, docs, opt, ref_train, ref_val);
    SCOPED_TRACE("shard_tokens " + std::to_string(shard_tokens));
    EXPECT_EQ(read_split(r.train_shards), ref_train);
    EXPECT_EQ(read_split(r.val_shards), ref_val);
    EXPECT_EQ(r.train_shards.size(), (ref_train.size() + shard_tokens - 1) / shard_tokens);
    EXPECT_EQ(r.val_shards.size(), (ref_val.size() + shard_tokens - 1) / shard_tokens);
    size_t bins = 0;
    for (const auto& e : fs::directory_iterator(opt.out_dir))
      bins += e.path().extension() == ".bin";
    EXPECT_EQ(bins, r.train_shards.size() + r.val_shards.size()) << "no stale or temp shards";
  }
  // A directory or a missing file as input is an error naming it.
  TokenizeOptions opt;
  opt.out_dir = (root_ / "bad").string();
  try {
    tokenize_files(tok, {root_.string()}, opt);
    ADD_FAILURE() << "a directory was accepted";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tokenize_files(tok, {(root_ / "missing.txt").string()}, opt), blu::Error);
}

// Note [Parallel tokenize]: 1-4 threads give byte-identical shard files (both val rules, chunk
// sizes down to 1 byte, documents of very different sizes, an empty one), equal to the in-memory
// reference, and leave no spill files; --threads reaches it through the program's flags.
namespace {
// A spill folder (<out>/.tokenize-spill-<pid>-<n>) left in out.
bool has_spill(const std::string& out) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out, ec))
    if (e.path().filename().string().rfind(".tokenize-spill", 0) == 0) return true;
  return false;
}
}  // namespace

TEST_F(TokenizeStreamTest, ParallelFilesGiveTheShardsOfOneThread) {
  const Tokenizer tok = small_tokenizer(root_ / "vocab");
  std::vector<TextDocument> docs;
  std::vector<std::string> paths;
  for (uint32_t d = 0; d < 23; ++d) {
    const size_t bytes = d == 5 ? 0 : (d % 4 == 0 ? 9000 : 200 + 97 * d);
    docs.push_back({(root_ / ("doc" + std::to_string(d) + ".txt")).string(), tricky_text(100 + d, bytes)});
    std::ofstream(docs.back().name, std::ios::binary) << docs.back().text;
    paths.push_back(docs.back().name);
  }
  const auto file_bytes = [](const std::vector<std::string>& files) {
    std::vector<std::string> out;
    for (const std::string& f : files) {
      std::ifstream in(f, std::ios::binary);
      out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return out;
  };
  // val 0.1: every 10th document (23 >= 10); val 0.02: the tail (23 < 50 documents).
  for (double val_fraction : {0.1, 0.02}) {
    for (int64_t chunk : {int64_t{1}, int64_t{7}, int64_t{4096}}) {
      std::vector<std::string> one_train, one_val;
      for (int jobs : {1, 2, 3, 4}) {
        SCOPED_TRACE("val " + std::to_string(val_fraction) + " chunk " + std::to_string(chunk) + " jobs " +
                     std::to_string(jobs));
        TokenizeOptions opt;
        opt.val_fraction = val_fraction;
        opt.shard_tokens = 3001;
        opt.chunk_bytes = chunk;
        opt.jobs = jobs;
        opt.out_dir = (root_ / ("par_" + std::to_string(jobs))).string();
        fs::remove_all(opt.out_dir);
        const TokenizeResult r = tokenize_files(tok, paths, opt);
        EXPECT_EQ(r.documents, 23);
        EXPECT_FALSE(has_spill(opt.out_dir)) << "spill files left";
        if (jobs == 1) {
          one_train = file_bytes(r.train_shards);
          one_val = file_bytes(r.val_shards);
          std::vector<uint16_t> ref_train, ref_val;
          reference_split(tok, docs, opt, ref_train, ref_val);
          EXPECT_EQ(read_split(r.train_shards), ref_train);
          EXPECT_EQ(read_split(r.val_shards), ref_val);
          EXPECT_GT(one_train.size(), 2u);
        } else {
          EXPECT_EQ(file_bytes(r.train_shards), one_train);
          EXPECT_EQ(file_bytes(r.val_shards), one_val);
        }
      }
    }
  }
  // A missing file among many is the same clear error with several threads, and nothing is left.
  TokenizeOptions opt;
  opt.jobs = 4;
  opt.out_dir = (root_ / "par_missing").string();
  std::vector<std::string> with_missing = paths;
  with_missing.insert(with_missing.begin() + 7, (root_ / "missing.txt").string());
  try {
    tokenize_files(tok, with_missing, opt);
    ADD_FAILURE() << "a missing file was accepted";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.txt"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(has_spill(opt.out_dir));
  // Bad jobs: an error naming them.
  opt.jobs = 0;
  EXPECT_THROW(tokenize_files(tok, paths, opt), blu::Error);

  // A document failing on a worker thread halfway through: its error, in its turn (documents
  // before it delivered whole, none after it), on whichever thread read it; the workers stop and
  // no spill file is left.
  for (int jobs : {1, 3}) {
    SCOPED_TRACE("jobs " + std::to_string(jobs));
    const std::string spill = (root_ / ("spill_" + std::to_string(jobs))).string();
    std::vector<size_t> begun;
    std::atomic<int> readers_off_main{0};
    const std::thread::id main_id = std::this_thread::get_id();
    const DocumentReader read = [&](size_t i, const std::function<void(std::string_view)>& slice) {
      if (std::this_thread::get_id() != main_id) {
        ++readers_off_main;
      } else if (jobs > 1) {
        // On a loaded machine this thread could read every document before a worker runs: wait
        // (bounded) until one has, so the workers' path is what is tested.
        for (int k = 0; k < 5000 && readers_off_main.load() == 0; ++k)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      const std::string& text = docs[i].text;
      for (size_t at = 0; at < text.size(); at += 100) {
        if (i == 9 && at >= 300) throw blu::Error("document 9 could not be read");
        slice(std::string_view(text).substr(at, 100));
      }
    };
    try {
      encode_in_order(tok, docs.size(), read, jobs, spill, [&](size_t i) { begun.push_back(i); },
                      [](std::span<const int32_t>) {});
      ADD_FAILURE() << "the failing document was not reported";
    } catch (const blu::Error& e) {
      EXPECT_NE(std::string(e.what()).find("document 9"), std::string::npos) << e.what();
    }
    std::vector<size_t> expected;
    for (size_t i = 0; i < 10; ++i) expected.push_back(i);
    if (jobs > 1) expected.pop_back();  // a worker's document fails before its turn begins
    if (jobs > 1 && begun.size() == 10) expected.push_back(9);  // unless this thread read it itself
    EXPECT_EQ(begun, expected);
    EXPECT_FALSE(fs::exists(spill)) << "spill files left";
    if (jobs > 1) {
      EXPECT_GT(readers_off_main.load(), 0) << "no worker thread read a document";
    }
  }
}

namespace {
int64_t status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::string(field).size()));
  }
  return -1;
}
}  // namespace

TEST_F(TokenizeStreamTest, PeakMemoryStaysWithinTheBoundOn256MiB) {
#if defined(__SANITIZE_ADDRESS__)  // GCC
#define BLU_TEST_UNDER_ASAN 1
#elif defined(__has_feature)  // clang (GCC 12 cannot parse __has_feature(...) in the same #if)
#if __has_feature(address_sanitizer)
#define BLU_TEST_UNDER_ASAN 1
#endif
#endif
#ifdef BLU_TEST_UNDER_ASAN
  GTEST_SKIP() << "under AddressSanitizer the RSS holds its quarantine and shadow memory, not the program's";
#endif
  const Tokenizer tok = small_tokenizer(root_ / "vocab");
  // 256 MiB of varied text: a 256-byte phrase after each of ~1M distinct words, so the BPE cache
  // fills and is emptied many times over (Note [Bounded BPE cache]).
  const fs::path input = root_ / "big.txt";
  const int64_t input_bytes = int64_t{256} << 20;
  {
    std::ofstream out(input, std::ios::binary);
    const std::string phrase = tricky_text(5, 256);
    std::string block;
    for (int64_t written = 0, i = 0; written < input_bytes; ++i) {
      block += " w" + std::to_string(i * 7919) + "q ";
      block += phrase;
      if (block.size() >= (1u << 20)) {
        out << block;
        written += static_cast<int64_t>(block.size());
        block.clear();
      }
    }
  }
  ASSERT_GE(static_cast<int64_t>(fs::file_size(input)), input_bytes);
  // Reset the high-water mark to the current RSS (Linux: "5" > /proc/self/clear_refs).
  const bool reset = static_cast<bool>(std::ofstream("/proc/self/clear_refs") << "5");
  const int64_t base_kib = reset ? status_kib("VmHWM:") : status_kib("VmRSS:");
  TokenizeOptions opt;
  opt.out_dir = (root_ / "big_out").string();
  opt.shard_tokens = 20'000'000;
  TokenizeResult r = tokenize_files(tok, {input.string()}, opt);
  const int64_t peak_kib = status_kib("VmHWM:");
  const int64_t growth = (peak_kib - base_kib) * 1024;
  std::printf(
      "tokenized %lld MiB -> %lld + %lld tokens; peak RSS %lld KiB, growth %.1f MiB (bound %lld "
      "MiB)%s\n",
      static_cast<long long>(fs::file_size(input) >> 20), static_cast<long long>(r.train_tokens),
      static_cast<long long>(r.val_tokens), static_cast<long long>(peak_kib), growth / 1048576.0,
      static_cast<long long>(kTokenizeMemoryBoundBytes >> 20),
      reset ? "" : " (VmHWM not resettable)");
  EXPECT_GT(r.train_tokens, input_bytes / 8);
  EXPECT_LT(growth, kTokenizeMemoryBoundBytes);
}
