// Test support: runs N ranks of a Gloo group as threads of this process (a store server on a
// free port, one client and group per thread), and float64 reference helpers.
#pragma once

#include <functional>
#include <memory>

#include "bludist/process_group.h"
#include "bludist/store.h"

namespace bludist::test {

// Calls fn(group) on `n` threads, one rank each; rethrows the first exception of any rank. Each
// rank whose fn returned then waits at a barrier before its group goes (no rank closes its sockets
// under a peer still connecting); final_barrier = false for tests where a rank leaves on purpose.
void run_gloo_ranks(int n, const std::function<void(ProcessGroup&)>& fn,
                    Milliseconds timeout = std::chrono::seconds(60), bool final_barrier = true);

// A deterministic, rank-dependent, non-zero test value (odd-looking, not integers).
double test_value(int rank, std::size_t i, int salt = 0);

}  // namespace bludist::test
