// The TCP rendezvous store (Note [Store protocol] in bludist/store.h): a threaded server holding a
// map of byte strings, and a blocking client with timeouts.
#include "bludist/store.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <thread>

#include "blutensor/error.h"
#include "socket_util.h"

namespace bludist {

namespace {

enum Command : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kWait = 4, kCheck = 5, kErase = 6 };

using net::Clock;

struct Writer {
  std::vector<char> buf;
  void u8(uint8_t v) { buf.push_back(static_cast<char>(v)); }
  void i64(int64_t v) {
    const char* p = reinterpret_cast<const char*>(&v);
    buf.insert(buf.end(), p, p + 8);
  }
  void bytes(const char* p, std::size_t n) {
    i64(static_cast<int64_t>(n));
    buf.insert(buf.end(), p, p + n);
  }
  void str(const std::string& s) { bytes(s.data(), s.size()); }
  void send(int fd, Clock::time_point deadline) { net::write_exact(fd, buf.data(), buf.size(), deadline); }
};

struct Reader {
  int fd;
  Clock::time_point deadline;
  bool eof = false;
  uint8_t u8() {
    uint8_t v = 0;
    if (!net::read_exact(fd, &v, 1, deadline)) eof = true;
    return v;
  }
  int64_t i64() {
    int64_t v = 0;
    BLU_CHECK(net::read_exact(fd, &v, 8, deadline), "bludist store: connection closed");
    return v;
  }
  std::vector<char> bytes() {
    int64_t n = i64();
    BLU_CHECK(n >= 0 && n < (int64_t(1) << 32), "bludist store: bad message length ", n);
    std::vector<char> v(static_cast<std::size_t>(n));
    if (n > 0) BLU_CHECK(net::read_exact(fd, v.data(), v.size(), deadline), "bludist store: connection closed");
    return v;
  }
  std::string str() {
    std::vector<char> v = bytes();
    return std::string(v.begin(), v.end());
  }
};

}  // namespace

// ---------------------------------------------------------------- server
struct TcpStoreServer::Impl {
  int listen_fd = -1;
  int port = 0;
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::vector<char>> data;
  std::thread acceptor;
  std::mutex conn_mu;
  std::list<std::pair<int, std::thread>> conns;

  bool has_all(const std::vector<std::string>& keys) {
    for (const auto& k : keys)
      if (!data.count(k)) return false;
    return true;
  }
  // Waits (lock held) until the keys exist, the timeout passes (false) or the server stops.
  bool wait_keys(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys, int64_t timeout_ms) {
    auto deadline = net::deadline_after(std::chrono::milliseconds(timeout_ms));
    // Short waits: a stopping server (whose notify may race with this wait) answers promptly.
    while (!has_all(keys)) {
      if (stop || Clock::now() >= deadline) return false;
      cv.wait_for(lock, std::chrono::milliseconds(100));
    }
    return true;
  }

  void serve(int fd) {
    try {
      while (!stop) {
        Reader r{fd, Clock::time_point::max()};
        uint8_t cmd = r.u8();
        if (r.eof) break;
        Writer w;
        switch (cmd) {
          case kSet: {
            std::string key = r.str();
            std::vector<char> value = r.bytes();
            {
              std::lock_guard<std::mutex> lock(mu);
              data[key] = std::move(value);
            }
            cv.notify_all();
            w.u8(0);
            break;
          }
          case kGet: {
            std::string key = r.str();
            int64_t timeout_ms = r.i64();
            std::unique_lock<std::mutex> lock(mu);
            if (wait_keys(lock, {key}, timeout_ms)) {
              w.u8(0);
              w.bytes(data[key].data(), data[key].size());
            } else {
              w.u8(1);
            }
            break;
          }
          case kAdd: {
            std::string key = r.str();
            int64_t delta = r.i64();
            int64_t value;
            {
              std::lock_guard<std::mutex> lock(mu);
              auto it = data.find(key);
              value = it == data.end() ? 0 : std::stoll(std::string(it->second.begin(), it->second.end()));
              value += delta;
              std::string s = std::to_string(value);
              data[key] = std::vector<char>(s.begin(), s.end());
            }
            cv.notify_all();
            w.i64(value);
            break;
          }
          case kWait:
          case kCheck: {
            int64_t n = r.i64();
            std::vector<std::string> keys;
            for (int64_t i = 0; i < n; ++i) keys.push_back(r.str());
            std::unique_lock<std::mutex> lock(mu);
            if (cmd == kWait) {
              int64_t timeout_ms = r.i64();
              w.u8(wait_keys(lock, keys, timeout_ms) ? 0 : 1);
            } else {
              w.u8(has_all(keys) ? 1 : 0);
            }
            break;
          }
          case kErase: {
            std::string key = r.str();
            std::lock_guard<std::mutex> lock(mu);
            w.u8(data.erase(key) ? 1 : 0);
            break;
          }
          default:
            BLU_THROW("bludist store server: unknown command ", int(cmd));
        }
        w.send(fd, Clock::now() + std::chrono::seconds(60));
      }
    } catch (const std::exception&) {
      // A client that vanished mid-request: drop its connection, keep serving the others.
    }
    ::shutdown(fd, SHUT_RDWR);
  }

  void accept_loop() {
    while (!stop) {
      pollfd pfd{listen_fd, POLLIN, 0};
      if (::poll(&pfd, 1, 100) <= 0) continue;
      int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::lock_guard<std::mutex> lock(conn_mu);
      conns.emplace_back(fd, std::thread([this, fd] { serve(fd); }));
    }
  }
};

TcpStoreServer::TcpStoreServer(int port) : impl_(std::make_unique<Impl>()) {
  impl_->listen_fd = net::listen_tcp(port, &impl_->port);
  impl_->acceptor = std::thread([this] { impl_->accept_loop(); });
}

TcpStoreServer::~TcpStoreServer() {
  impl_->stop = true;
  impl_->cv.notify_all();
  if (impl_->acceptor.joinable()) impl_->acceptor.join();
  ::close(impl_->listen_fd);
  std::lock_guard<std::mutex> lock(impl_->conn_mu);
  for (auto& [fd, t] : impl_->conns) ::shutdown(fd, SHUT_RDWR);
  impl_->cv.notify_all();
  for (auto& [fd, t] : impl_->conns) {
    if (t.joinable()) t.join();
    ::close(fd);
  }
}

int TcpStoreServer::port() const { return impl_->port; }

// ---------------------------------------------------------------- client
TcpStore::TcpStore(std::string host, int port, Milliseconds timeout)
    : host_(std::move(host)), port_(port), timeout_(timeout) {
  fd_ = net::connect_tcp(host_, port_, net::deadline_after(timeout_));
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {
// Server-side waits get the caller's timeout; the socket deadline leaves 30 s more for the reply.
Clock::time_point reply_deadline(Milliseconds timeout) {
  return net::deadline_after(timeout + std::chrono::seconds(30));
}
}  // namespace

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  std::lock_guard<std::mutex> lock(mu_);
  Writer w;
  w.u8(kSet);
  w.str(key);
  w.bytes(value.data(), value.size());
  w.send(fd_, reply_deadline(timeout_));
  Reader r{fd_, reply_deadline(timeout_)};
  r.u8();
  BLU_CHECK(!r.eof, "bludist store: set(\"", key, "\"): the store at ", address(), " closed the connection (rank 0 gone?)");
}

std::vector<char> TcpStore::get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  Writer w;
  w.u8(kGet);
  w.str(key);
  w.i64(timeout_.count());
  w.send(fd_, reply_deadline(timeout_));
  Reader r{fd_, reply_deadline(timeout_)};
  uint8_t status = r.u8();
  BLU_CHECK(!r.eof, "bludist store: get(\"", key, "\"): the store at ", address(), " closed the connection (rank 0 gone?)");
  BLU_CHECK(status == 0, "bludist store: get(\"", key, "\") timed out after ", timeout_.count(),
            " ms waiting for the key at ", address(), " (a rank did not arrive)");
  return r.bytes();
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  Writer w;
  w.u8(kAdd);
  w.str(key);
  w.i64(delta);
  w.send(fd_, reply_deadline(timeout_));
  Reader r{fd_, reply_deadline(timeout_)};
  return r.i64();
}

void TcpStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  Writer w;
  w.u8(kWait);
  w.i64(static_cast<int64_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  w.i64(timeout.count());
  w.send(fd_, reply_deadline(timeout));
  Reader r{fd_, reply_deadline(timeout)};
  uint8_t status = r.u8();
  BLU_CHECK(!r.eof, "bludist store: wait(): the store at ", address(), " closed the connection (rank 0 gone?)");
  if (status != 0) {
    std::string names;
    for (const auto& k : keys) names += (names.empty() ? "\"" : ", \"") + k + "\"";
    BLU_THROW("bludist store: wait(", names, ") timed out after ", timeout.count(), " ms at ", address(),
              " (a rank did not arrive)");
  }
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  Writer w;
  w.u8(kCheck);
  w.i64(static_cast<int64_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  w.send(fd_, reply_deadline(timeout_));
  Reader r{fd_, reply_deadline(timeout_)};
  return r.u8() == 1;
}

bool TcpStore::erase(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  Writer w;
  w.u8(kErase);
  w.str(key);
  w.send(fd_, reply_deadline(timeout_));
  Reader r{fd_, reply_deadline(timeout_)};
  return r.u8() == 1;
}

}  // namespace bludist
