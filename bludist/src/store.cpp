// The TCP rendezvous store (Note [Store protocol] in bludist/store.h): a threaded server holding a
// map of byte strings, and a blocking client with timeouts. The wire format itself (encoding,
// decoding, counter arithmetic) is in store_protocol.cpp.
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
#include "store_protocol.h"

namespace bludist {

namespace {

using namespace store_wire;
using net::Clock;

void send(const Writer& w, int fd, Clock::time_point deadline) {
  net::write_exact(fd, w.buf.data(), w.buf.size(), deadline);
}

Reader socket_reader(int fd, Clock::time_point deadline) {
  return Reader{[fd, deadline](void* data, std::size_t n) { return net::read_exact(fd, data, n, deadline); }};
}

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
        // The whole request is read before the lock is taken (Note [Lengths from the wire]).
        Reader r = socket_reader(fd, Clock::time_point::max());
        Request req;
        if (!read_request(r, req)) break;
        Writer w;
        switch (req.cmd) {
          case kSet: {
            {
              std::lock_guard<std::mutex> lock(mu);
              data[req.key] = std::move(req.value);
            }
            cv.notify_all();
            w.u8(0);
            break;
          }
          case kGet: {
            std::unique_lock<std::mutex> lock(mu);
            if (wait_keys(lock, {req.key}, req.number)) {
              w.u8(0);
              w.bytes(data[req.key].data(), data[req.key].size());
            } else {
              w.u8(1);
            }
            break;
          }
          case kAdd: {
            int64_t value;
            {
              std::lock_guard<std::mutex> lock(mu);
              auto it = data.find(req.key);
              value = add_to_counter(it == data.end() ? nullptr : &it->second, req.number, req.key);
              std::string s = std::to_string(value);
              data[req.key] = std::vector<char>(s.begin(), s.end());
            }
            cv.notify_all();
            w.i64(value);
            break;
          }
          case kWait:
          case kCheck: {
            std::unique_lock<std::mutex> lock(mu);
            if (req.cmd == kWait) {
              w.u8(wait_keys(lock, req.keys, req.number) ? 0 : 1);
            } else {
              w.u8(has_all(req.keys) ? 1 : 0);
            }
            break;
          }
          case kErase: {
            std::lock_guard<std::mutex> lock(mu);
            w.u8(data.erase(req.key) ? 1 : 0);
            break;
          }
        }
        send(w, fd, Clock::now() + std::chrono::seconds(60));
      }
    } catch (const std::exception&) {
      // A client that vanished mid-request or sent a malformed one: drop its connection, keep
      // serving the others.
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
  send(w, fd_, reply_deadline(timeout_));
  Reader r = socket_reader(fd_, reply_deadline(timeout_));
  r.u8();
  BLU_CHECK(!r.eof, "bludist store: set(\"", key, "\"): the store at ", address(), " closed the connection (rank 0 gone?)");
}

std::vector<char> TcpStore::get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  Writer w;
  w.u8(kGet);
  w.str(key);
  w.i64(timeout_.count());
  send(w, fd_, reply_deadline(timeout_));
  Reader r = socket_reader(fd_, reply_deadline(timeout_));
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
  send(w, fd_, reply_deadline(timeout_));
  Reader r = socket_reader(fd_, reply_deadline(timeout_));
  return r.i64();
}

void TcpStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  Writer w;
  w.u8(kWait);
  w.i64(static_cast<int64_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  w.i64(timeout.count());
  send(w, fd_, reply_deadline(timeout));
  Reader r = socket_reader(fd_, reply_deadline(timeout));
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
  send(w, fd_, reply_deadline(timeout_));
  Reader r = socket_reader(fd_, reply_deadline(timeout_));
  return r.u8() == 1;
}

bool TcpStore::erase(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  Writer w;
  w.u8(kErase);
  w.str(key);
  send(w, fd_, reply_deadline(timeout_));
  Reader r = socket_reader(fd_, reply_deadline(timeout_));
  return r.u8() == 1;
}

}  // namespace bludist
