// The TCP rendezvous store: set/get/add/wait/check/erase, blocking get served when the key
// arrives, timeouts with a clear message, many concurrent clients, a dead server, and requests
// no client should send (lying lengths, stalls mid-request, counter overflow).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <limits>
#include <thread>

#include "bludist/store.h"
#include "blutensor/error.h"

using namespace bludist;
using namespace std::chrono_literals;

TEST(Store, SetGetAddCheckErase) {
  TcpStoreServer server(0);
  ASSERT_GT(server.port(), 0);
  TcpStore a("127.0.0.1", server.port(), 5s);
  TcpStore b("localhost", server.port(), 5s);
  a.set("k", std::string("hello"));
  EXPECT_EQ(b.get_string("k"), "hello");
  std::vector<char> bin = {0, 1, '\xff', 0, 7};
  b.set("bin", bin);
  EXPECT_EQ(a.get("bin"), bin);
  EXPECT_EQ(a.add("n", 5), 5);
  EXPECT_EQ(b.add("n", -2), 3);
  EXPECT_EQ(a.get_string("n"), "3");
  EXPECT_TRUE(a.check({"k", "n"}));
  EXPECT_FALSE(a.check({"k", "missing"}));
  EXPECT_TRUE(b.erase("k"));
  EXPECT_FALSE(b.erase("k"));
  EXPECT_FALSE(a.check({"k"}));
  // Empty values and long keys.
  std::string long_key(5000, 'x');
  a.set(long_key, std::vector<char>{});
  EXPECT_TRUE(b.get(long_key).empty());
}

TEST(Store, GetBlocksUntilTheKeyArrives) {
  TcpStoreServer server(0);
  TcpStore a("127.0.0.1", server.port(), 10s);
  std::thread t([&] {
    std::this_thread::sleep_for(200ms);
    TcpStore b("127.0.0.1", server.port(), 10s);
    b.set("late", std::string("v"));
  });
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(a.get_string("late"), "v");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 150ms);
  a.wait({"late"}, 1s);
  t.join();
}

TEST(Store, TimeoutsThrowNamingTheKey) {
  TcpStoreServer server(0);
  TcpStore a("127.0.0.1", server.port(), 300ms);
  auto t0 = std::chrono::steady_clock::now();
  try {
    a.get("never");
    FAIL() << "get of a missing key returned";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"never\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_THROW(a.wait({"x", "y"}, 200ms), blu::Error);
  // The connection stays usable after a timeout.
  a.set("x", std::string("1"));
  EXPECT_EQ(a.get_string("x"), "1");
}

TEST(Store, ConcurrentCountersAreAtomic) {
  TcpStoreServer server(0);
  constexpr int kThreads = 8, kAdds = 200;
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i) {
    ts.emplace_back([&] {
      TcpStore c("127.0.0.1", server.port(), 10s);
      for (int j = 0; j < kAdds; ++j) c.add("counter", 1);
    });
  }
  for (auto& t : ts) t.join();
  TcpStore c("127.0.0.1", server.port(), 10s);
  EXPECT_EQ(c.add("counter", 0), kThreads * kAdds);
}

TEST(Store, PrefixStoresAreSeparateKeySpaces) {
  TcpStoreServer server(0);
  auto base = std::make_shared<TcpStore>("127.0.0.1", server.port(), 2s);
  PrefixStore p("a", base), q("b", base);
  p.set("k", std::string("in a"));
  q.set("k", std::string("in b"));
  EXPECT_EQ(p.get_string("k"), "in a");
  EXPECT_EQ(q.get_string("k"), "in b");
  EXPECT_EQ(base->get_string("a/k"), "in a");
}

TEST(Store, ConnectingToNoServerFailsWithinTheTimeout) {
  auto t0 = std::chrono::steady_clock::now();
  int port;
  { TcpStoreServer s(0); port = s.port(); }  // a port nobody listens on now
  try {
    TcpStore a("127.0.0.1", port, 500ms);
    FAIL() << "connected to nothing";
  } catch (const blu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot connect"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(Store, ServerGoneMakesBlockedClientsFail) {
  auto server = std::make_unique<TcpStoreServer>(0);
  TcpStore a("127.0.0.1", server->port(), 30s);
  std::thread killer([&] {
    std::this_thread::sleep_for(200ms);
    server.reset();
  });
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(a.get("never"), blu::Error);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  killer.join();
}

namespace {
// A raw TCP connection to the server, for requests no TcpStore would send.
int raw_connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}
void raw_send(int fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
}
std::string i64_bytes(int64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
}  // namespace

// Note [Lengths from the wire] (bludist/src/store_protocol.h), found by
// tests/fuzz/store_protocol_fuzz.cpp: a request claiming a 2 GiB value used to make the server
// allocate 2 GiB before reading a byte; now memory follows the bytes that arrive.
TEST(Store, LyingLengthDoesNotAllocateWhatItClaims) {
  TcpStoreServer server(0);
  const int fd = raw_connect(server.port());
  raw_send(fd, std::string(1, '\x01') + i64_bytes(1) + "k" + i64_bytes(int64_t(1) << 31) + "xy");
  std::this_thread::sleep_for(300ms);  // the server is now inside the value's read
  const struct mallinfo2 mi = ::mallinfo2();
  EXPECT_LT(mi.hblkhd + mi.uordblks, size_t(1) << 30) << "the server allocated what the length claimed";
  TcpStore a("127.0.0.1", server.port(), 5s);  // other clients are served meanwhile
  a.set("other", std::string("ok"));
  EXPECT_EQ(a.get_string("other"), "ok");
  ::close(fd);
}

// A client that stalls in the middle of a wait() request (keys sent, timeout not) used to hold
// the server's lock while the rest was read, so every other client hung: requests are now read
// whole before the lock is taken.
TEST(Store, ClientStalledMidRequestBlocksOnlyItself) {
  TcpStoreServer server(0);
  const int fd = raw_connect(server.port());
  raw_send(fd, std::string(1, '\x04') + i64_bytes(1) + i64_bytes(1) + "k");  // no timeout yet
  std::this_thread::sleep_for(200ms);
  auto done = std::async(std::launch::async, [&] {
    TcpStore a("127.0.0.1", server.port(), 5s);
    a.set("k", std::string("v"));
    return a.get_string("k");
  });
  ASSERT_EQ(done.wait_for(10s), std::future_status::ready) << "a stalled client blocked the store";
  EXPECT_EQ(done.get(), "v");
  ::close(fd);
}

// add() on a counter whose sum overflows int64 was signed overflow in the server; it is now
// refused (the connection of that client is dropped, as for a key that holds no integer), and the
// store keeps serving everyone else with the counter unchanged.
TEST(Store, CounterOverflowIsRefusedNotWrapped) {
  TcpStoreServer server(0);
  {
    TcpStore a("127.0.0.1", server.port(), 5s);
    EXPECT_EQ(a.add("n", std::numeric_limits<int64_t>::max()), std::numeric_limits<int64_t>::max());
    EXPECT_THROW(a.add("n", 1), blu::Error);
  }
  {
    TcpStore b("127.0.0.1", server.port(), 5s);
    b.set("text", std::string("12abc"));
    EXPECT_THROW(b.add("text", 1), blu::Error);  // not a decimal counter (was read as 12)
  }
  TcpStore c("127.0.0.1", server.port(), 5s);
  EXPECT_EQ(c.get_string("n"), std::to_string(std::numeric_limits<int64_t>::max()));
  EXPECT_EQ(c.add("m", -5), -5);
}
