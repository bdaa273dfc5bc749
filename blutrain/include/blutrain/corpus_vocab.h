// blutrain/corpus_vocab.h: a model vocabulary of the GPT-2 token ids a corpus actually uses
// (Note [Corpus vocabulary]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "blutensor/json.h"
#include "blutrain/data.h"
#include "blutrain/gpt2.h"

namespace blu::train {

// Note [Corpus vocabulary]
// The tiny CPU model spends most of its step on the vocabulary: the lm head's three GEMMs, the
// log-softmax and the AdamW update of the tied embedding all scale with its rows. GPT-2 has
// 50,257 ids; the Brown corpus uses 32,882 of them. `--vocab corpus` keeps only those: compact id
// i stands for GPT-2 id ids[i] (increasing; the end-of-text id always included, so sampling can
// start from it). The shards are rewritten once in compact ids (cached under the data cache's
// corpus_vocab/<data name>, keyed by the source shards' sizes and CRC-32C) and the model has
// ids.size() real rows (padded to a multiple of 128: Note [Padded vocabulary]). Text goes through
// the GPT-2 tokenizer as always and is mapped on the way in and out; a checkpoint stores the ids
// (state.json "vocab_ids"), so `sample`, resume and fidelity-dump rebuild the same model. Both
// splits count: an id only in the val split still gets a row (its loss is a real prediction, not
// an unknown-token shortcut).
struct CorpusVocab {
  std::vector<int32_t> ids;  // compact id -> GPT-2 id
  ShardSet shards;           // the corpus in compact ids
};

// The corpus vocabulary of `source` (train and val shards), its shards rewritten in compact ids
// under `cache_dir`/<the source's CRC> (reused when the cache matches the source; built aside and
// installed by one rename: Note [Atomic data caches]). GPT-2 ids only (< 50257).
CorpusVocab ensure_corpus_vocab(const ShardSet& source, const std::string& cache_dir);

// Sets cfg's vocabulary to `ids` (empty: GPT-2's): vocab_size, padded_vocab (a multiple of 128:
// Note [Padded vocabulary]), vocab_ids.
void set_model_vocab(GPT2Config& cfg, const std::vector<int32_t>& ids);

// GPT-2 id -> compact id, or -1 when the vocabulary lacks it; identity for an empty vocabulary.
int32_t to_model_id(const std::vector<int32_t>& ids, int32_t gpt2_id);
// Compact id -> GPT-2 id; identity for an empty vocabulary.
int32_t to_gpt2_id(const std::vector<int32_t>& ids, int32_t model_id);

// Checks a vocabulary read from outside (a checkpoint): increasing GPT-2 ids with the end of
// text; errors name `where`.
void validate_vocab_ids(const std::vector<int32_t>& ids, const std::string& where);

// The ids as a JSON array ("[7,12,...]"), and back: a JSON array of integers, each a GPT-2 id,
// validated as above (the cache manifest and a checkpoint's state.json hold them this way).
std::string vocab_ids_json(const std::vector<int32_t>& ids);
std::vector<int32_t> vocab_ids_from_json(const json::Value& v, const std::string& where);

}  // namespace blu::train
