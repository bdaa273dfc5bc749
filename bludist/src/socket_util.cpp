// TCP helpers (socket_util.h): poll()-based deadlines, so no socket is left blocking forever.
#include "socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "blutensor/error.h"

namespace bludist::net {

namespace {
int ms_left(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return 1000;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<long long>(left, 1000));
}
}  // namespace

int listen_tcp(int port, int* bound_port) {
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool v6 = fd >= 0;
  if (!v6) fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  BLU_CHECK(fd >= 0, "bludist: socket(): ", std::strerror(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int rc;
  if (v6) {
    int zero = 0;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  if (rc != 0 || ::listen(fd, 256) != 0) {
    int e = errno;
    ::close(fd);
    BLU_THROW("bludist: cannot listen on TCP port ", port, ": ", std::strerror(e),
              " (is another job using MASTER_PORT=", port, "?)");
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  *bound_port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

int connect_tcp(const std::string& host, int port, Clock::time_point deadline) {
  std::string last_error = "timed out";
  auto backoff = std::chrono::milliseconds(10);
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (gai != 0) {
      last_error = std::string("getaddrinfo: ") + gai_strerror(gai);
    } else {
      for (addrinfo* ai = res; ai; ai = ai->ai_next) {
        int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
          ::freeaddrinfo(res);
          int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          return fd;
        }
        last_error = std::strerror(errno);
        ::close(fd);
      }
      ::freeaddrinfo(res);
    }
    if (Clock::now() + backoff >= deadline) break;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  BLU_THROW("bludist: cannot connect to the store at ", host, ":", port, ": ", last_error,
            " (is rank 0 running and MASTER_ADDR/MASTER_PORT right?)");
}

void write_exact(int fd, const void* data, std::size_t n, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    pollfd pfd{fd, POLLOUT, 0};
    int pr = ::poll(&pfd, 1, ms_left(deadline));
    if (pr < 0 && errno == EINTR) continue;
    BLU_CHECK(pr >= 0, "bludist: poll: ", std::strerror(errno));
    if (pr == 0) {
      BLU_CHECK(Clock::now() < deadline, "bludist: socket write timed out");
      continue;
    }
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    BLU_CHECK(w > 0, "bludist: socket write failed: ", std::strerror(errno), " (peer gone?)");
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

bool read_exact(int fd, void* data, std::size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  std::size_t got = 0;
  while (got < n) {
    pollfd pfd{fd, POLLIN, 0};
    int pr = ::poll(&pfd, 1, ms_left(deadline));
    if (pr < 0 && errno == EINTR) continue;
    BLU_CHECK(pr >= 0, "bludist: poll: ", std::strerror(errno));
    if (pr == 0) {
      BLU_CHECK(Clock::now() < deadline, "bludist: socket read timed out");
      continue;
    }
    ssize_t r = ::recv(fd, p + got, n - got, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r == 0) {
      if (got == 0) return false;
      BLU_THROW("bludist: connection closed in the middle of a message (peer gone)");
    }
    BLU_CHECK(r > 0, "bludist: socket read failed: ", std::strerror(errno), " (peer gone?)");
    got += static_cast<std::size_t>(r);
  }
  return true;
}

int find_free_port() {
  int port = 0;
  int fd = listen_tcp(0, &port);
  ::close(fd);
  return port;
}

}  // namespace bludist::net
