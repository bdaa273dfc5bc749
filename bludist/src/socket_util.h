// Internal TCP helpers of bludist (store, launcher): connect with retry, exact reads/writes with
// a deadline, and a free-port probe. Errors throw blu::Error with errno's text.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace bludist::net {

using Clock = std::chrono::steady_clock;

// Listening socket on all interfaces (port 0: any); returns the fd, *bound_port the port.
int listen_tcp(int port, int* bound_port);
// Connects to host:port, retrying refused/unreachable until the deadline.
int connect_tcp(const std::string& host, int port, Clock::time_point deadline);
// Writes/reads exactly n bytes. read_exact returns false on a clean EOF before any byte (peer
// closed); both throw on errors and when the deadline passes.
void write_exact(int fd, const void* data, std::size_t n, Clock::time_point deadline);
bool read_exact(int fd, void* data, std::size_t n, Clock::time_point deadline);
// A port on which listen() currently succeeds (probe: bind port 0, read it, close).
int find_free_port();
// Clock::time_point::max() for "no deadline".
inline Clock::time_point deadline_after(std::chrono::milliseconds ms) {
  if (ms.count() <= 0 || ms > std::chrono::hours(24 * 365)) return Clock::time_point::max();
  return Clock::now() + ms;
}

}  // namespace bludist::net
