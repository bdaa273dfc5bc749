// store_protocol_fuzz.cpp: libFuzzer target for the rendezvous store's request decoding
// (bludist/src/store_protocol.h: command bytes, length-prefixed keys and values, key counts) and
// its counter arithmetic, fed from memory instead of a socket. The input is a stream of requests
// from one client; set/add/erase are applied to a map the way the server applies them, so add()
// meets stored values of any shape. A lying length must cost no more memory than the bytes sent
// (Note [Lengths from the wire]).
#include <cstring>
#include <map>

#include "blutensor/error.h"
#include "store_protocol.h"

using namespace bludist::store_wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t pos = 0;
  Reader r{[&](void* dst, size_t n) {
    if (pos == size) return false;  // clean end of stream
    if (size - pos < n) BLU_THROW("bludist: connection closed in the middle of a message (peer gone)");
    std::memcpy(dst, data + pos, n);
    pos += n;
    return true;
  }};
  std::map<std::string, std::vector<char>> store;
  try {
    Request req;
    while (read_request(r, req)) {
      switch (req.cmd) {
        case kSet: store[req.key] = std::move(req.value); break;
        case kAdd: {
          auto it = store.find(req.key);
          const std::string s = std::to_string(add_to_counter(it == store.end() ? nullptr : &it->second, req.number, req.key));
          store[req.key] = std::vector<char>(s.begin(), s.end());
          break;
        }
        case kErase: store.erase(req.key); break;
        default: break;  // get / wait / check only read
      }
    }
  } catch (const blu::Error&) {
  }
  return 0;
}
