// DeadlineTimer and end_process (Note [Watchdog deadlines] in watchdog_timer.h).
#include "watchdog_timer.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace bludist::detail {

namespace {

std::string seconds(Milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

// fflush without waiting: a thread stuck while holding the stream's lock must not stop us.
void flush_if_free(FILE* f) noexcept {
  if (::ftrylockfile(f) == 0) {
    ::fflush_unlocked(f);
    ::funlockfile(f);
  }
}

}  // namespace

void write_stderr(const std::string& msg) noexcept {
  const char* p = msg.data();
  std::size_t left = msg.size();
  while (left > 0) {
    ssize_t n = ::write(2, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

bool watchdog_trace_from_env() {
  static const bool on = [] {
    const char* v = std::getenv("BLUDIST_WATCHDOG_TRACE");
    return v != nullptr && v[0] == '1';
  }();
  return on;
}

void end_process(const std::string& message, const std::function<void()>& abort,
                 Milliseconds grace) {
  static std::atomic<bool> ending{false};
  if (ending.exchange(true)) {  // another watchdog is already ending the process
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  write_stderr(message);
  flush_if_free(stdout);
  flush_if_free(stderr);
  if (abort) {
    try {
      std::thread([grace] {
        std::this_thread::sleep_for(grace);
        write_stderr("bludist watchdog: the abort did not return within " + seconds(grace) +
                     " s; exiting with status " + std::to_string(kWatchdogAbortHungExitCode) +
                     "\n");
        ::_exit(kWatchdogAbortHungExitCode);
      }).detach();
      abort();
    } catch (...) {
      // No thread to bound the abort with, or the abort threw: end without it.
    }
  }
  ::_exit(kWatchdogExitCode);
}

DeadlineTimer::DeadlineTimer(Options o) : o_(std::move(o)) {
  thread_ = std::thread([this] { loop(); });
}

DeadlineTimer::~DeadlineTimer() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

uint64_t DeadlineTimer::begin(std::string what, Kind kind) {
  std::lock_guard<std::timed_mutex> lock(mu_);
  const uint64_t id = next_id_++;
  pending_.emplace(id, Entry{std::move(what), kind, std::chrono::steady_clock::now()});
  return id;
}

void DeadlineTimer::end(uint64_t id) {
  std::lock_guard<std::timed_mutex> lock(mu_);
  pending_.erase(id);
}

std::string DeadlineTimer::describe(const Entry& e) const {
  switch (e.kind) {
    case Kind::kCompletion:
      return e.what + " did not complete within " + seconds(o_.timeout) +
             " s (a peer rank died or hung)";
    case Kind::kHostCall:
      return e.what + " blocked in NCCL on the host for more than " + seconds(o_.timeout) +
             " s (a peer rank died or hung)";
    case Kind::kSetUp:
      return e.what + " did not complete within " + seconds(o_.timeout) +
             " s (a peer rank died or never started)";
  }
  return e.what;
}

void DeadlineTimer::fire(const std::string& why) const {
  // The note says where the poller was (a query stuck behind the hang shows here).
  end_process("bludist watchdog: " + why + o_.where + "; " + o_.action + "exiting with status " +
                  std::to_string(kWatchdogExitCode) + " (" + note_.load() + ")\n",
              o_.abort, o_.abort_grace);
}

// Nothing here but the timed lock, the clock, strings and write(2).
void DeadlineTimer::loop() {
  using Clock = std::chrono::steady_clock;
  auto last_trace = Clock::now();
  bool locked_out = false;  // since locked_out_since
  Clock::time_point locked_out_since = last_trace;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(stop_mu_);
      if (stop_cv_.wait_for(lock, o_.tick, [this] { return stop_; })) return;
    }
    std::string why, trace;
    const auto now = Clock::now();
    std::unique_lock<std::timed_mutex> lock(mu_, std::defer_lock);
    if (!lock.try_lock_for(o_.tick)) {
      if (!locked_out) locked_out_since = now;
      locked_out = true;
      if (now - locked_out_since > o_.timeout)
        fire("the watchdog's state stayed locked for more than " + seconds(o_.timeout) + " s");
      continue;
    }
    locked_out = false;
    const Entry* oldest = pending_.empty() ? nullptr : &pending_.begin()->second;
    if (o_.trace && now - last_trace >= std::chrono::seconds(1)) {
      last_trace = now;
      char age[32] = "-";
      if (oldest)
        std::snprintf(age, sizeof(age), "%.1f s",
                      std::chrono::duration<double>(now - oldest->since).count());
      trace = "bludist watchdog trace: " + std::to_string(pending_.size()) + " pending (oldest " +
              (oldest ? oldest->what : std::string("-")) + ", " + age + "), " + note_.load() +
              o_.where + "\n";
    }
    if (oldest && now - oldest->since > o_.timeout) why = describe(*oldest);
    lock.unlock();
    if (!trace.empty()) write_stderr(trace);
    if (!why.empty()) fire(why);
  }
}

}  // namespace bludist::detail
