// bludist/store.h: the rendezvous key-value store (TCP): one process hosts it (a TcpStoreServer,
// normally in rank 0), every rank talks to it through a TcpStore client. Process groups exchange
// their transport addresses (Gloo) and the NCCL unique id through it; tests and the DDP code use
// add() as a counter.
//
// Note [Store protocol]
// One TCP connection per client, one request at a time (a mutex serialises callers), little-endian
// framing: a command byte, then length-prefixed strings and 64-bit integers. Blocking reads
// (get/wait) are served by the server: it holds the request until the keys exist or the timeout
// passes, so clients never poll. Every client call has a timeout and throws blu::Error naming the
// key, the store address and the time waited when it passes, or when the server is gone (a dead
// rank 0 therefore ends its peers' rendezvous with a clear error instead of a hang).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace bludist {

using Milliseconds = std::chrono::milliseconds;
inline constexpr Milliseconds kDefaultStoreTimeout{std::chrono::seconds(300)};

// The store interface (the TCP client below, and PrefixStore over any store).
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  // Blocks until the key exists (or throws after the timeout).
  virtual std::vector<char> get(const std::string& key) = 0;
  // Atomic add to an integer key (created at 0); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Blocks until every key exists (or throws after `timeout`).
  virtual void wait(const std::vector<std::string>& keys, Milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }
  // True when every key exists (does not block).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Removes a key; true when it existed.
  virtual bool erase(const std::string& key) = 0;
  virtual Milliseconds timeout() const = 0;
  virtual void set_timeout(Milliseconds timeout) = 0;

  void set(const std::string& key, const std::string& value) {
    set(key, std::vector<char>(value.begin(), value.end()));
  }
  std::string get_string(const std::string& key) {
    std::vector<char> v = get(key);
    return std::string(v.begin(), v.end());
  }
};

// Serves the store on a TCP port (0: any free port; port() says which) from background threads
// until destroyed. Binds all interfaces (other nodes connect to MASTER_ADDR:MASTER_PORT).
class TcpStoreServer {
 public:
  explicit TcpStoreServer(int port = 0);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A client connection to a TcpStoreServer. Connecting retries until `timeout` (the server may
// start after the client, as rank 0 may be slower to start than its peers).
class TcpStore final : public Store {
 public:
  TcpStore(std::string host, int port, Milliseconds timeout = kDefaultStoreTimeout);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value) override;
  using Store::set;
  std::vector<char> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override;
  bool erase(const std::string& key) override;
  Milliseconds timeout() const override { return timeout_; }
  void set_timeout(Milliseconds timeout) override { timeout_ = timeout; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }

 private:
  std::string host_;
  int port_;
  Milliseconds timeout_;
  int fd_ = -1;
  std::mutex mu_;
};

// Every key gets "<prefix>/" in front (sub-groups and restarts use their own key space).
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> store)
      : prefix_(std::move(prefix) + "/"), store_(std::move(store)) {}
  void set(const std::string& key, const std::vector<char>& value) override { store_->set(prefix_ + key, value); }
  using Store::set;
  std::vector<char> get(const std::string& key) override { return store_->get(prefix_ + key); }
  int64_t add(const std::string& key, int64_t delta) override { return store_->add(prefix_ + key, delta); }
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override {
    std::vector<std::string> k;
    for (const auto& s : keys) k.push_back(prefix_ + s);
    store_->wait(k, timeout);
  }
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override {
    std::vector<std::string> k;
    for (const auto& s : keys) k.push_back(prefix_ + s);
    return store_->check(k);
  }
  bool erase(const std::string& key) override { return store_->erase(prefix_ + key); }
  Milliseconds timeout() const override { return store_->timeout(); }
  void set_timeout(Milliseconds timeout) override { store_->set_timeout(timeout); }
  const std::shared_ptr<Store>& base() const { return store_; }

 private:
  std::string prefix_;
  std::shared_ptr<Store> store_;
};

}  // namespace bludist
