// store_protocol.cpp: encoding and decoding of store requests (store_protocol.h), independent of
// sockets so that the decoder can be fuzzed from memory.
#include "store_protocol.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "blutensor/error.h"

namespace bludist::store_wire {

void Writer::i64(int64_t v) {
  const char* p = reinterpret_cast<const char*>(&v);
  buf.insert(buf.end(), p, p + 8);
}

void Writer::bytes(const char* p, std::size_t n) {
  i64(static_cast<int64_t>(n));
  buf.insert(buf.end(), p, p + n);
}

uint8_t Reader::u8() {
  uint8_t v = 0;
  if (!read(&v, 1)) eof = true;
  return v;
}

int64_t Reader::i64() {
  int64_t v = 0;
  BLU_CHECK(read(&v, 8), "bludist store: connection closed");
  return v;
}

std::vector<char> Reader::bytes() {
  const int64_t n = i64();
  BLU_CHECK(n >= 0 && n < kMaxWireBytes, "bludist store: bad message length ", n);
  std::vector<char> v;
  std::size_t done = 0;
  const auto total = static_cast<std::size_t>(n);
  while (done < total) {  // Note [Lengths from the wire]: grow with what arrives
    const std::size_t chunk = std::min(total - done, kWireChunkBytes);
    v.resize(done + chunk);
    BLU_CHECK(read(v.data() + done, chunk), "bludist store: connection closed");
    done += chunk;
  }
  return v;
}

std::string Reader::str() {
  std::vector<char> v = bytes();
  return std::string(v.begin(), v.end());
}

bool read_request(Reader& r, Request& out) {
  const uint8_t cmd = r.u8();
  if (r.eof) return false;
  out = Request{};
  switch (cmd) {
    case kSet:
      out.key = r.str();
      out.value = r.bytes();
      break;
    case kGet:
    case kAdd:
      out.key = r.str();
      out.number = r.i64();
      break;
    case kWait:
    case kCheck: {
      const int64_t n = r.i64();
      BLU_CHECK(n >= 0, "bludist store: bad key count ", n);
      for (int64_t i = 0; i < n; ++i) out.keys.push_back(r.str());  // each key needs its own bytes
      if (cmd == kWait) out.number = r.i64();
      break;
    }
    case kErase:
      out.key = r.str();
      break;
    default:
      BLU_THROW("bludist store server: unknown command ", int(cmd));
  }
  out.cmd = static_cast<Command>(cmd);
  return true;
}

int64_t add_to_counter(const std::vector<char>* stored, int64_t delta, const std::string& key) {
  int64_t value = 0;
  if (stored != nullptr) {
    const std::string text(stored->begin(), stored->end());
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    BLU_CHECK(!text.empty() && errno == 0 && end == text.c_str() + text.size(), "bludist store: add(\"", key,
              "\"): the key holds ", text.size(), " bytes that are not a decimal int64 counter");
    value = v;
  }
  int64_t sum = 0;
  BLU_CHECK(!__builtin_add_overflow(value, delta, &sum), "bludist store: add(\"", key, "\", ", delta,
            ") overflows the int64 counter at ", value);
  return sum;
}

}  // namespace bludist::store_wire
