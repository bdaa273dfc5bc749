// run_gloo_ranks: ranks as threads (support/thread_ranks.h).
#include "support/thread_ranks.h"

#include <cmath>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace bludist::test {

void run_gloo_ranks(int n, const std::function<void(ProcessGroup&)>& fn, Milliseconds timeout, bool final_barrier) {
  TcpStoreServer server(0);
  std::vector<std::thread> threads;
  std::exception_ptr first;
  std::mutex mu;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto store = std::make_shared<TcpStore>("127.0.0.1", server.port(), timeout);
        ProcessGroupOptions o;
        o.timeout = timeout;
        o.gloo_hostname = "127.0.0.1";
        auto pg = make_gloo_group(std::make_shared<PrefixStore>("t", store), r, n, o);
        fn(*pg);
        // No rank tears its group down while a peer may still be connecting to it: a rank whose fn
        // needs no collective (an argument check that throws at once) used to close its sockets
        // under a peer's connect ("Connection closed by peer", session 13's CI run).
        if (final_barrier) pg->barrier();
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

double test_value(int rank, std::size_t i, int salt) {
  return std::sin(0.37 * static_cast<double>(i) + 1.3 * rank + 0.11 * salt) * 3.0 + 0.25 * (rank + 1);
}

}  // namespace bludist::test
