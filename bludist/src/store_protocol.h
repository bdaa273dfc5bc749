// store_protocol.h (internal): the rendezvous store's wire format (Note [Store protocol] in
// bludist/store.h) apart from sockets: the request encoder, a decoder over any byte source, and
// the counter arithmetic of add(). The server and the client use these; the fuzz target
// (tests/fuzz/store_protocol_fuzz.cpp) feeds the decoder bytes from memory.
//
// Note [Lengths from the wire]
//   A length field is a claim, not a fact: a client that sends "2^31 bytes follow" and then
//   stops must not make the server allocate 2 GiB. read_bytes() therefore grows its buffer only
//   as the bytes arrive (in steps of at most kWireChunkBytes), so memory follows what the peer
//   actually sent; lengths are also capped (kMaxWireBytes). A request is read completely before
//   the server takes its lock, so a client that stalls mid-request blocks only itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace bludist::store_wire {

enum Command : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kWait = 4, kCheck = 5, kErase = 6 };

inline constexpr int64_t kMaxWireBytes = int64_t(1) << 32;   // one key or value, exclusive
inline constexpr std::size_t kWireChunkBytes = std::size_t(64) << 10;

// Reads exactly n bytes into data. Returns false on a clean end of stream before the first byte;
// throws blu::Error when the stream ends inside the n bytes or fails.
using ReadExact = std::function<bool(void* data, std::size_t n)>;

struct Writer {
  std::vector<char> buf;
  void u8(uint8_t v) { buf.push_back(static_cast<char>(v)); }
  void i64(int64_t v);
  void bytes(const char* p, std::size_t n);
  void str(const std::string& s) { bytes(s.data(), s.size()); }
};

struct Reader {
  ReadExact read;
  bool eof = false;  // set by u8() at a clean end of stream
  uint8_t u8();
  int64_t i64();
  std::vector<char> bytes();  // Note [Lengths from the wire]
  std::string str();
};

// One decoded request. `number` is the timeout (get, wait) or the delta (add).
struct Request {
  Command cmd = kSet;
  std::string key;
  std::vector<char> value;
  int64_t number = 0;
  std::vector<std::string> keys;  // wait, check
};

// Reads one whole request. Returns false at a clean end of stream before the command byte;
// throws blu::Error on an unknown command, a bad length or a stream that ends mid-request.
bool read_request(Reader& r, Request& out);

// The new value of counter `key` after add(delta): `stored` is its current bytes (nullptr: the
// key does not exist, counted as 0). Throws blu::Error naming the key when the stored value is
// not a decimal int64 or the sum overflows.
int64_t add_to_counter(const std::vector<char>* stored, int64_t delta, const std::string& key);

}  // namespace bludist::store_wire
