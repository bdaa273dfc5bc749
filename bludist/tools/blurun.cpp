// blurun: starts one process per GPU (or CPU rank) with the torchrun environment, prefixes their
// output with the rank, and ends the whole gang when one rank fails.
//
//   blurun --nproc-per-node N [--nnodes K --node-rank R --master-addr A --master-port P]
//          [--max-restarts M] [--kill-grace-s S] [--exit-grace-s S] [--no-prefix] -- prog args...
//
// Note [Gang semantics]
// Every child gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK/NODE_RANK,
// MASTER_ADDR, MASTER_PORT, BLURUN_RESTART_COUNT (= TORCHELASTIC_RESTART_COUNT) and the variables
// that keep NVLink multicast off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
// NVSHMEM_DISABLE_NVLS=1) whatever the caller's environment says. Defaults for the node flags come
// from the environment when set (MASTER_ADDR, MASTER_PORT, NNODES/SLURM_NNODES, NODE_RANK/GROUP_RANK/
// SLURM_NODEID), so a Slurm or torchrun-style allocation can call blurun once per node. Without a
// port on a single node, a free one is picked (a fresh one per restart).
// The first child that exits non-zero (or by a signal) fails the gang: blurun prints which rank,
// its pid and status, sends SIGTERM to every other child's process group, SIGKILL after the grace
// period (default 5 s), and then either restarts the whole gang (--max-restarts) or exits with
// that child's status (128 + signal for a signal). Children die with blurun (PR_SET_PDEATHSIG).
//
// Note [A rank that ends early]
// A rank that exits 0 while others still run is normal for a moment (ranks finish one after the
// other) and a hang when it lasts: the others wait on a peer that is gone (2026-11-26, 2x H200:
// the watchdog test's rank 1 left with status 0, blurun said nothing of it, and rank 0 sat
// silent until timeout(1) killed blurun). After 5 s blurun names the ranks still running; after
// --exit-grace-s (default: the collective timeout, $BLUDIST_TIMEOUT_S or 300 s, plus 30 s, so a
// rank's own watchdog speaks first; 0 waits for ever, like torchrun) it stops them as a failure
// of the first one still running (a restart, with --max-restarts). On SIGINT/SIGTERM/SIGHUP it
// says which ranks were still running; every rank that ends while the gang is stopping gets a
// line with its status. blurun writes its own lines to stderr, flushed at once.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "socket_util.h"

namespace {

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

struct Options {
  int nproc_per_node = 0;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
  int max_restarts = 0;
  double kill_grace_s = 5.0;
  double exit_grace_s = -1;  // unset: collective timeout + 30 s (Note [A rank that ends early])
  bool prefix = true;
  std::vector<std::string> cmd;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "blurun: %s\nusage: blurun --nproc-per-node N [--nnodes K --node-rank R --master-addr A "
               "--master-port P] [--max-restarts M] [--kill-grace-s S] [--exit-grace-s S] "
               "[--no-prefix] -- prog args...\n",
               why.c_str());
  std::exit(2);
}

int parse_int(const std::string& flag, const char* v, int lo, int hi) {
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (!end || *end || x < lo || x > hi) usage("bad value '" + std::string(v) + "' for " + flag);
  return static_cast<int>(x);
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

Options parse(int argc, char** argv) {
  Options o;
  if (const char* v = env("MASTER_ADDR")) o.master_addr = v;
  if (const char* v = env("MASTER_PORT")) o.master_port = parse_int("MASTER_PORT", v, 1, 65535);
  if (const char* v = env("NNODES") ? env("NNODES") : env("SLURM_NNODES")) o.nnodes = parse_int("NNODES", v, 1, 1 << 20);
  if (const char* v = env("NODE_RANK") ? env("NODE_RANK") : env("GROUP_RANK") ? env("GROUP_RANK") : env("SLURM_NODEID"))
    o.node_rank = parse_int("NODE_RANK", v, 0, 1 << 20);
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") { ++i; break; }
    auto value = [&](const std::string& flag) -> const char* {
      std::string prefix = flag + "=";
      if (a.rfind(prefix, 0) == 0) return argv[i] + prefix.size();
      if (i + 1 >= argc) usage(flag + " needs a value");
      return argv[++i];
    };
    auto is = [&](const std::string& flag) { return a == flag || a.rfind(flag + "=", 0) == 0; };
    if (is("--nproc-per-node") || is("--nproc_per_node")) o.nproc_per_node = parse_int(a, value("--nproc-per-node"), 1, 4096);
    else if (is("--nnodes")) o.nnodes = parse_int(a, value("--nnodes"), 1, 1 << 20);
    else if (is("--node-rank") || is("--node_rank")) o.node_rank = parse_int(a, value("--node-rank"), 0, 1 << 20);
    else if (is("--master-addr") || is("--master_addr")) o.master_addr = value("--master-addr");
    else if (is("--master-port") || is("--master_port")) o.master_port = parse_int(a, value("--master-port"), 1, 65535);
    else if (is("--max-restarts") || is("--max_restarts")) o.max_restarts = parse_int(a, value("--max-restarts"), 0, 1000000);
    else if (is("--kill-grace-s")) o.kill_grace_s = std::atof(value("--kill-grace-s"));
    else if (is("--exit-grace-s")) o.exit_grace_s = std::atof(value("--exit-grace-s"));
    else if (a == "--no-prefix") o.prefix = false;
    else if (a == "-h" || a == "--help") usage("help");
    else if (a.rfind("-", 0) == 0) usage("unknown flag " + a);
    else break;  // the program (no "--")
  }
  for (; i < argc; ++i) o.cmd.push_back(argv[i]);
  if (o.cmd.empty()) usage("no program given");
  if (o.nproc_per_node <= 0) {
    if (const char* v = env("LOCAL_WORLD_SIZE")) o.nproc_per_node = parse_int("LOCAL_WORLD_SIZE", v, 1, 4096);
    else usage("--nproc-per-node is required");
  }
  if (o.node_rank >= o.nnodes) usage("--node-rank must be below --nnodes");
  if (o.master_addr.empty()) {
    if (o.nnodes > 1) usage("--master-addr (or MASTER_ADDR) is required with --nnodes > 1");
    o.master_addr = "127.0.0.1";
  }
  if (o.master_port == 0 && o.nnodes > 1) usage("--master-port (or MASTER_PORT) is required with --nnodes > 1");
  if (o.exit_grace_s < 0) {
    // As bludist::ProcessGroupOptions::default_timeout() reads it.
    const char* v = env("BLUDIST_TIMEOUT_S");
    const double t = v ? std::atof(v) : 0.0;
    o.exit_grace_s = (t > 0 ? t : 300.0) + 30.0;
  }
  return o;
}

struct Child {
  int rank = 0, local_rank = 0;
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;
  std::string out_buf, err_buf;
  bool running = false;
  int status = 0;
};

void emit(FILE* f, const std::string& prefix, const std::string& line) {
  std::fwrite(prefix.data(), 1, prefix.size(), f);
  std::fwrite(line.data(), 1, line.size(), f);
  if (line.empty() || line.back() != '\n') std::fputc('\n', f);
  std::fflush(f);
}

// Forwards complete lines from fd (closed and -1 at EOF), with the rank prefix.
void pump(int& fd, std::string& buf, FILE* f, const std::string& prefix, bool flush_all) {
  if (fd >= 0) {
    char tmp[65536];
    while (true) {
      ssize_t n = ::read(fd, tmp, sizeof(tmp));
      if (n > 0) { buf.append(tmp, static_cast<std::size_t>(n)); continue; }
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) { ::close(fd); fd = -1; flush_all = true; }
      break;
    }
  }
  std::size_t start = 0, nl;
  while ((nl = buf.find('\n', start)) != std::string::npos) {
    emit(f, prefix, buf.substr(start, nl - start + 1));
    start = nl + 1;
  }
  buf.erase(0, start);
  if (flush_all && !buf.empty()) {
    emit(f, prefix, buf);
    buf.clear();
  }
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status) ? WEXITSTATUS(status) : 1;
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

pid_t spawn(const Options& o, Child& c, int port, int restart) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    std::perror("blurun: pipe");
    std::exit(1);
  }
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("blurun: fork");
    std::exit(1);
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // its own process group: SIGTERM/SIGKILL reach its children too
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    auto set = [](const char* k, const std::string& v) { ::setenv(k, v.c_str(), 1); };
    int world = o.nnodes * o.nproc_per_node;
    set("RANK", std::to_string(c.rank));
    set("WORLD_SIZE", std::to_string(world));
    set("LOCAL_RANK", std::to_string(c.local_rank));
    set("LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node));
    set("GROUP_RANK", std::to_string(o.node_rank));
    set("NODE_RANK", std::to_string(o.node_rank));
    set("MASTER_ADDR", o.master_addr);
    set("MASTER_PORT", std::to_string(port));
    set("BLURUN_RESTART_COUNT", std::to_string(restart));
    set("TORCHELASTIC_RESTART_COUNT", std::to_string(restart));
    set("BLURUN_MAX_RESTARTS", std::to_string(o.max_restarts));
    // NVLink multicast stays off everywhere (the device's shared GPUs: see Note [Gang semantics]).
    set("NCCL_NVLS_ENABLE", "0");
    set("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1");
    set("NVSHMEM_DISABLE_NVLS", "1");
    std::vector<char*> args;
    for (const auto& a : o.cmd) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "blurun: cannot execute %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(out[1]);
  ::close(err[1]);
  c.pid = pid;
  c.out_fd = out[0];
  c.err_fd = err[0];
  ::fcntl(c.out_fd, F_SETFL, O_NONBLOCK);
  ::fcntl(c.err_fd, F_SETFL, O_NONBLOCK);
  c.running = true;
  return pid;
}

void say(const std::string& line) {
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

std::string who(const Child& c) {
  return "rank " + std::to_string(c.rank) + " (local rank " + std::to_string(c.local_rank) +
         ", pid " + std::to_string(static_cast<int>(c.pid)) + ")";
}

// "rank 0 (pid 12), rank 2 (pid 14)": the ranks still running.
std::string running_list(const std::vector<Child>& kids) {
  std::string s;
  for (const auto& k : kids)
    if (k.running)
      s += (s.empty() ? "" : ", ") +
           ("rank " + std::to_string(k.rank) + " (pid " + std::to_string(k.pid) + ")");
  return s.empty() ? "none" : s;
}

// Runs one gang to completion. Returns 0 when every rank exited 0, else the exit code to report.
int run_gang(const Options& o, int port, int restart) {
  using Clock = std::chrono::steady_clock;
  std::vector<Child> kids(static_cast<std::size_t>(o.nproc_per_node));
  for (int l = 0; l < o.nproc_per_node; ++l) {
    kids[l].local_rank = l;
    kids[l].rank = o.node_rank * o.nproc_per_node + l;
    spawn(o, kids[l], port, restart);
  }
  auto prefix = [&](const Child& c) {
    return o.prefix ? "[rank " + std::to_string(c.rank) + "] " : std::string();
  };
  int failed = -1;  // index of the first failed child
  bool stopping = false;
  auto stop_deadline = Clock::time_point::max();
  bool killed = false;
  int early = -1;  // the first child that exited 0 while others ran (Note [A rank that ends early])
  Clock::time_point early_at;
  bool early_noticed = false;
  auto terminate_all = [&](int sig) {
    for (auto& c : kids)
      if (c.running) ::kill(-c.pid, sig);
  };
  while (true) {
    std::vector<pollfd> fds;
    for (auto& c : kids) {
      if (c.out_fd >= 0) fds.push_back({c.out_fd, POLLIN, 0});
      if (c.err_fd >= 0) fds.push_back({c.err_fd, POLLIN, 0});
    }
    if (!fds.empty())
      ::poll(fds.data(), fds.size(), 50);
    else
      ::usleep(20000);
    for (auto& c : kids) {
      pump(c.out_fd, c.out_buf, stdout, prefix(c), false);
      pump(c.err_fd, c.err_buf, stderr, prefix(c), false);
    }
    // Reap.
    for (auto& c : kids) {
      if (!c.running) continue;
      int status = 0;
      pid_t r = ::waitpid(c.pid, &status, WNOHANG);
      if (r != c.pid) continue;
      c.running = false;
      c.status = status;
      ::kill(-c.pid, SIGKILL);  // anything the rank left behind in its process group
      // Its last lines first: the pipes hold what it wrote before it ended.
      pump(c.out_fd, c.out_buf, stdout, prefix(c), false);
      pump(c.err_fd, c.err_buf, stderr, prefix(c), false);
      bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      int others = 0;
      for (auto& k : kids) others += k.running ? 1 : 0;
      if (stopping) {
        say("blurun: " + who(c) + " ended with " + describe_status(status) +
            " while the gang was stopping\n");
      } else if (!ok && failed < 0) {
        failed = static_cast<int>(&c - kids.data());
        say("blurun: " + who(c) + " failed with " + describe_status(status) +
            "; stopping the other " + std::to_string(others) + " local rank(s)\n");
      } else if (ok && others > 0 && early < 0) {
        early = static_cast<int>(&c - kids.data());
        early_at = Clock::now();
      }
    }
    const auto now = Clock::now();
    if (early >= 0 && failed < 0 && !stopping) {
      bool any = false;
      for (auto& c : kids) any = any || c.running;
      const auto since = std::chrono::duration<double>(now - early_at).count();
      const std::string left = "rank " + std::to_string(kids[early].rank) + " exited with status 0";
      if (any && !early_noticed &&
          since >= std::min(5.0, o.exit_grace_s > 0 ? o.exit_grace_s : 5.0)) {
        early_noticed = true;
        char grace[64] = "for ever (--exit-grace-s 0)";
        if (o.exit_grace_s > 0)
          std::snprintf(grace, sizeof(grace), "%.0f s (--exit-grace-s)", o.exit_grace_s);
        say("blurun: " + left + " " + std::to_string(static_cast<int>(since)) +
            " s ago; still running: " + running_list(kids) + "; waiting " + grace + " after it\n");
      }
      if (any && o.exit_grace_s > 0 && since >= o.exit_grace_s) {
        for (auto& c : kids) {
          if (!c.running) continue;
          if (failed < 0) failed = static_cast<int>(&c - kids.data());
          char line[160];
          std::snprintf(line, sizeof(line), " still running %.0f s after ", since);
          say("blurun: " + who(c) + line + left + "; stopping it\n");
        }
      }
    }
    if (g_signal && !stopping) {
      say("blurun: received signal " + std::to_string(static_cast<int>(g_signal)) +
          "; stopping all ranks (still running: " + running_list(kids) + ")\n");
    }
    if ((failed >= 0 || g_signal) && !stopping) {
      stopping = true;
      terminate_all(SIGTERM);
      stop_deadline = now + std::chrono::milliseconds(static_cast<int64_t>(o.kill_grace_s * 1000));
    }
    if (stopping && !killed && now >= stop_deadline) {
      terminate_all(SIGKILL);
      killed = true;
    }
    bool any_running = false;
    for (auto& c : kids) any_running = any_running || c.running;
    // Pipes stay open while a grandchild holds them: do not wait for them once all ranks ended.
    if (!any_running) {
      for (auto& c : kids) {
        pump(c.out_fd, c.out_buf, stdout, prefix(c), true);
        pump(c.err_fd, c.err_buf, stderr, prefix(c), true);
        if (c.out_fd >= 0) ::close(c.out_fd);
        if (c.err_fd >= 0) ::close(c.err_fd);
      }
      break;
    }
  }
  if (g_signal) return 128 + g_signal;
  if (failed < 0) return 0;
  const Child& f = kids[failed];
  std::fprintf(stderr,
               "blurun: rank %d (local rank %d, node %d) failed with %s; all ranks stopped\n",
               f.rank, f.local_rank, o.node_rank, describe_status(f.status).c_str());
  std::fflush(stderr);
  return exit_code_of(f.status);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGHUP, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  for (int attempt = 0;; ++attempt) {
    int port = o.master_port;
    if (port == 0) {
      try {
        port = bludist::net::find_free_port();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "blurun: %s\n", e.what());
        return 1;
      }
    }
    int rc = run_gang(o, port, attempt);
    if (rc == 0) return 0;
    if (g_signal || attempt >= o.max_restarts) {
      if (o.max_restarts > 0 && !g_signal)
        std::fprintf(stderr, "blurun: giving up after %d restart(s)\n", o.max_restarts);
      return rc;
    }
    std::fprintf(stderr, "blurun: restarting the gang (restart %d of %d)\n", attempt + 1, o.max_restarts);
    std::fflush(stderr);
  }
}
