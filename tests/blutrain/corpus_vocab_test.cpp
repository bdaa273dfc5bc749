// corpus_vocab_test.cpp: the corpus vocabulary (Note [Corpus vocabulary]): the ids a corpus uses
// plus end-of-text, its compact shards map back to the source, the cache is reused and rebuilt
// when the source changes, the id maps and their errors; a tiny model trains on it, its
// checkpoint carries the ids, resumes with them and refuses a run with another vocabulary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "blutensor/error.h"
#include "blutrain/checkpoint_dir.h"
#include "blutrain/config.h"
#include "blutrain/corpus_vocab.h"
#include "blutrain/data.h"
#include "blutrain/tokenizer.h"
#include "blutrain/trainer.h"
#include "support/pattern_shards.h"
#include "support/tiny_config.h"

namespace fs = std::filesystem;
using namespace blu::train;

namespace {

class CorpusVocabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("blu_cv_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string p(const std::string& f) const { return (root_ / f).string(); }
  fs::path root_;
};

std::vector<int32_t> read_all(const std::string& path) {
  TokenShard s = TokenShard::open(path);
  return std::vector<int32_t>(s.tokens().begin(), s.tokens().end());
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const blu::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_F(CorpusVocabTest, IdsShardsAndCache) {
  // Train uses 7, 300, 50000; val adds 12 (an id only in val still gets a row).
  std::vector<int32_t> train = {300, 7, 7, 50000, 300, 7, 300, 300, 50000, 7, 7, 300};
  std::vector<int32_t> val = {12, 300, 7, 50000, 12, 7};
  write_shard(p("d_train_000000.bin"), train);
  write_shard(p("d_val_000000.bin"), val);
  ShardSet src{{p("d_train_000000.bin")}, {p("d_val_000000.bin")}};
  CorpusVocab v = ensure_corpus_vocab(src, p("cache"));
  EXPECT_EQ(v.ids, (std::vector<int32_t>{7, 12, 300, 50000, Tokenizer::kEndOfText}));
  ASSERT_EQ(v.shards.train.size(), 1u);
  ASSERT_EQ(v.shards.val.size(), 1u);
  for (auto [compact, original] : {std::pair{v.shards.train[0], train}, std::pair{v.shards.val[0], val}}) {
    std::vector<int32_t> c = read_all(compact);
    ASSERT_EQ(c.size(), original.size());
    for (size_t i = 0; i < c.size(); ++i) {
      ASSERT_LT(c[i], static_cast<int32_t>(v.ids.size()));
      EXPECT_EQ(to_gpt2_id(v.ids, c[i]), original[i]) << i;
      EXPECT_EQ(to_model_id(v.ids, original[i]), c[i]) << i;
    }
  }
  // Reused: same ids, the compact shard not rewritten.
  const auto written = fs::last_write_time(v.shards.train[0]);
  CorpusVocab again = ensure_corpus_vocab(src, p("cache"));
  EXPECT_EQ(again.ids, v.ids);
  EXPECT_EQ(fs::last_write_time(again.shards.train[0]), written);
  // A changed source (a new id) rebuilds it.
  train.push_back(9);
  write_shard(p("d_train_000000.bin"), train);
  CorpusVocab rebuilt = ensure_corpus_vocab(src, p("cache"));
  EXPECT_EQ(rebuilt.ids, (std::vector<int32_t>{7, 9, 12, 300, 50000, Tokenizer::kEndOfText}));
  EXPECT_EQ(read_all(rebuilt.shards.train[0]).back(), 1);  // 9 -> compact 1
  // One directory per source under the cache (Note [Atomic data caches]): the first source's is kept.
  EXPECT_NE(fs::path(rebuilt.shards.train[0]).parent_path(), fs::path(v.shards.train[0]).parent_path());
  EXPECT_TRUE(fs::exists(v.shards.train[0]));
  // A damaged manifest is rebuilt too, not an error.
  const fs::path dir = fs::path(rebuilt.shards.train[0]).parent_path();
  {
    std::ofstream(dir / "manifest.json") << "{ not json";
  }
  EXPECT_EQ(ensure_corpus_vocab(src, p("cache")).ids, rebuilt.ids);
  EXPECT_EQ(read_all((dir / fs::path(rebuilt.shards.train[0]).filename()).string()).back(), 1);
}

// Note [Atomic data caches]: processes (here threads) building the same cache at once, and two
// sources whose directories share a name, each get a complete cache of their own source; no
// staging directory is left behind. (CI, session 15: two tests wrote one corpus cache at once.)
TEST_F(CorpusVocabTest, ConcurrentBuildersAndSameNamedSourcesGetTheirOwnCompleteCache) {
  fs::create_directories(p("a"));
  fs::create_directories(p("b"));
  std::vector<int32_t> train_a(20000), train_b(20000);
  for (size_t i = 0; i < train_a.size(); ++i) {
    train_a[i] = static_cast<int32_t>(3197 + (i * 7) % 4000);
    train_b[i] = static_cast<int32_t>(i % 24);
  }
  write_shard(p("a/d_train_000000.bin"), train_a);
  write_shard(p("b/d_train_000000.bin"), train_b);
  const ShardSet src_a{{p("a/d_train_000000.bin")}, {}}, src_b{{p("b/d_train_000000.bin")}, {}};
  std::vector<CorpusVocab> got(6);
  std::vector<std::string> errors(6);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] {
      errors[t] = error_of([&] { got[t] = ensure_corpus_vocab(t % 2 ? src_b : src_a, p("cache")); });
    });
  }
  for (std::thread& th : threads) th.join();
  for (size_t t = 0; t < got.size(); ++t) {
    ASSERT_EQ(errors[t], "") << "builder " << t;
    const std::vector<int32_t>& original = t % 2 ? train_b : train_a;
    ASSERT_EQ(got[t].shards.train.size(), 1u);
    const std::vector<int32_t> c = read_all(got[t].shards.train[0]);
    ASSERT_EQ(c.size(), original.size()) << "builder " << t;
    for (size_t i = 0; i < c.size(); i += 97) EXPECT_EQ(to_gpt2_id(got[t].ids, c[i]), original[i]) << t << " " << i;
  }
  EXPECT_EQ(got[1].ids.size(), 25u);  // b: 24 ids + end of text
  for (const auto& e : fs::directory_iterator(p("cache"))) {
    const std::string name = e.path().filename().string();
    EXPECT_EQ(name.find(".tmp-"), std::string::npos) << name;
    EXPECT_EQ(name.find(".old-"), std::string::npos) << name;
  }
}

TEST_F(CorpusVocabTest, MapsConfigAndValidation) {
  const std::vector<int32_t> ids = {5, 70, Tokenizer::kEndOfText};
  EXPECT_EQ(to_model_id(ids, 70), 1);
  EXPECT_EQ(to_model_id(ids, 71), -1);
  EXPECT_EQ(to_model_id({}, 71), 71);  // GPT-2's vocabulary: identity
  EXPECT_EQ(to_gpt2_id(ids, 2), Tokenizer::kEndOfText);
  EXPECT_NE(error_of([&] { to_gpt2_id(ids, 3); }).find("outside the model's vocabulary of 3"), std::string::npos);
  GPT2Config c = gpt2_config("tiny");
  set_model_vocab(c, ids);
  EXPECT_EQ(c.vocab_size, 3);
  EXPECT_EQ(c.padded_vocab, 128);
  set_model_vocab(c, {});
  EXPECT_EQ(c.vocab_size, 50257);
  EXPECT_EQ(c.padded_vocab, 50304);
  EXPECT_NE(error_of([] { validate_vocab_ids({5, 5, 50256}, "x"); }).find("must increase"), std::string::npos);
  EXPECT_NE(error_of([] { validate_vocab_ids({5, 60000}, "x"); }).find("not a GPT-2 id"), std::string::npos);
  EXPECT_NE(error_of([] { validate_vocab_ids({5, 6}, "x"); }).find("lacks the end-of-text id"), std::string::npos);
  EXPECT_NE(error_of([] { validate_vocab_ids({}, "x"); }).find("empty vocabulary"), std::string::npos);
}

TEST_F(CorpusVocabTest, TinyModelTrainsResumesAndRefusesAnotherVocabulary) {
  test::write_pattern_shards(p("data"));
  TrainConfig cfg = test::tiny_config(p("data"), p("out"));
  cfg.cache_dir = p("cache");
  cfg.vocab = "corpus";
  cfg.max_steps = 20;
  cfg.plot = false;
  std::ostringstream log;
  TrainResult r = run_training(cfg, log);
  // 24 pattern ids + end of text: 25 rows, padded to 64 (the log prints the parameter count).
  EXPECT_NE(log.str().find("model tiny:"), std::string::npos);
  ASSERT_FALSE(r.val_losses.empty());
  EXPECT_LT(r.val_losses.back().loss, 2.0) << log.str();  // a period-24 sequence: learnable
  const std::string ckpt = latest_checkpoint(cfg.out_dir);
  ASSERT_FALSE(ckpt.empty());
  std::ifstream st(ckpt + "/state.json");
  std::string state((std::istreambuf_iterator<char>(st)), std::istreambuf_iterator<char>());
  EXPECT_NE(state.find("\"vocab_ids\": [1000,"), std::string::npos) << state.substr(0, 400);
  // Resumes with the same vocabulary.
  TrainConfig more = cfg;
  more.max_steps = 22;
  more.resume = "auto";
  std::ostringstream log2;
  EXPECT_NO_THROW(run_training(more, log2)) << log2.str();
  // GPT-2's vocabulary against that checkpoint: a clear error naming both.
  TrainConfig other = more;
  other.vocab = "gpt2";
  other.max_steps = 24;
  const std::string err = error_of([&] {
    std::ostringstream l;
    run_training(other, l);
  });
  EXPECT_NE(err.find("has a vocabulary of 25 corpus ids, this run GPT-2's 50257 ids"), std::string::npos) << err;
}
