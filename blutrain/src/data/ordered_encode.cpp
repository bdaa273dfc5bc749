// ordered_encode.cpp: encode_in_order (Note [Parallel tokenize] in blutrain/data.h): this thread
// streams the document it is at, worker threads encode the next ones into spill files, and the
// documents are delivered in order, so the output does not depend on the number of threads.
#include "data/ordered_encode.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "blutensor/error.h"
#include "data/text_stream_encoder.h"

namespace blu::train {
namespace {

using Emit = std::function<void(std::span<const int32_t>)>;

// Thrown out of a worker's reader when the run stops early (another document failed).
struct Cancelled {};

// strerror is not thread-safe; the workers report errors through this.
std::string error_text(int e) { return std::generic_category().message(e); }

void encode_document(TextStreamEncoder& enc, size_t i, const DocumentReader& read, const Emit& emit,
                     const std::atomic<bool>* stop = nullptr) {
  std::vector<int32_t> ids;
  read(i, [&](std::string_view slice) {
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) throw Cancelled{};
    ids.clear();
    enc.feed(slice, ids);
    if (!ids.empty()) emit(ids);
  });
  ids.clear();
  enc.finish(ids);
  if (!ids.empty()) emit(ids);
}

}  // namespace

void encode_in_order(const Tokenizer& tok, size_t n_docs, const DocumentReader& read, int jobs,
                     const std::string& spill_dir, const std::function<void(size_t i)>& begin, const Emit& emit) {
  if (jobs <= 1 || n_docs <= 1) {
    TextStreamEncoder enc(tok);
    for (size_t i = 0; i < n_docs; ++i) {
      begin(i);
      encode_document(enc, i, read, emit);
    }
    return;
  }
  enum class State { kFree, kClaimed, kDone };
  struct Slot {
    State state = State::kFree;
    std::exception_ptr error;
  };
  std::vector<Slot> slots(n_docs);
  std::mutex mu;
  std::condition_variable cv;
  size_t next = 0, consumed = 0;  // the first unclaimed document; documents delivered
  bool stop = false;
  std::atomic<bool> cancel{false};  // read without the lock by the workers' readers
  const size_t ahead = 2 * static_cast<size_t>(jobs);  // spill files at most
  const auto spill = [&spill_dir](size_t i) { return spill_dir + "/" + std::to_string(i) + ".ids"; };
  std::filesystem::create_directories(spill_dir);

  const auto worker = [&] {
    std::unique_ptr<Tokenizer> local;
    std::unique_ptr<TextStreamEncoder> enc;
    for (;;) {
      size_t i = 0;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return stop || next >= n_docs || next < consumed + ahead; });
        if (stop || next >= n_docs) return;
        i = next++;
        slots[i].state = State::kClaimed;
      }
      std::exception_ptr error;
      try {
        if (!enc) {
          local = std::make_unique<Tokenizer>(tok.copy());
          enc = std::make_unique<TextStreamEncoder>(*local);
        }
        std::ofstream out(spill(i), std::ios::binary | std::ios::trunc);
        BLU_CHECK(out.good(), "tokenize: cannot create the spill file '", spill(i), "': ", error_text(errno));
        encode_document(
            *enc, i, read,
            [&](std::span<const int32_t> ids) {
              out.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size_bytes()));
            },
            &cancel);
        out.close();
        BLU_CHECK(!out.fail(), "tokenize: cannot write the spill file '", spill(i), "' (disk full?)");
      } catch (...) {
        error = std::current_exception();
        enc.reset();  // its held-back text belongs to the failed document
      }
      {
        std::lock_guard<std::mutex> lk(mu);
        slots[i].error = error;
        slots[i].state = State::kDone;
      }
      cv.notify_all();
    }
  };

  std::vector<std::thread> threads;
  // Whatever way this returns: the workers stop and are joined, and no spill file stays.
  struct Cleanup {
    std::function<void()> f;
    ~Cleanup() { f(); }
  } cleanup{[&] {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
    }
    cancel = true;  // a worker inside a long document stops at its next slice
    cv.notify_all();
    for (std::thread& t : threads) t.join();
    std::error_code ec;
    std::filesystem::remove_all(spill_dir, ec);
  }};
  for (int t = 1; t < jobs; ++t) threads.emplace_back(worker);

  TextStreamEncoder mine(tok);
  std::vector<int32_t> buf(size_t{64} << 10);
  for (size_t i = 0; i < n_docs; ++i) {
    bool self = false;
    {
      std::unique_lock<std::mutex> lk(mu);
      if (next == i) {  // no worker took it: encode it here, streamed
        next = i + 1;
        slots[i].state = State::kClaimed;
        self = true;
      } else {
        cv.wait(lk, [&] { return slots[i].state == State::kDone; });
      }
    }
    if (!self && slots[i].error) std::rethrow_exception(slots[i].error);
    begin(i);
    if (self) {
      encode_document(mine, i, read, emit);
    } else {
      std::ifstream in(spill(i), std::ios::binary);
      BLU_CHECK(in.good(), "tokenize: cannot open the spill file '", spill(i), "': ", error_text(errno));
      while (in) {
        in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(buf.size() * sizeof(int32_t)));
        const auto n = static_cast<size_t>(in.gcount()) / sizeof(int32_t);
        if (n > 0) emit(std::span<const int32_t>(buf.data(), n));
      }
      BLU_CHECK(!in.bad(), "tokenize: error reading the spill file '", spill(i), "'");
      in.close();
      std::filesystem::remove(spill(i));
    }
    {
      std::lock_guard<std::mutex> lk(mu);
      consumed = i + 1;
    }
    cv.notify_all();
  }
}

}  // namespace blu::train
