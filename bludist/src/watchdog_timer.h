// Internal: the deadline half of a collective watchdog, and the one way a watchdog ends the
// process. No CUDA, no NCCL (Note [Watchdog deadlines]), so the CPU tests cover it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "bludist/process_group.h"

namespace bludist::detail {

// Note [Watchdog deadlines]
// The silent 2-GPU watchdog test (2026-11-25/26, 2x H100 and 2x H200: rank 0 stuck behind an
// all-reduce whose peer had left printed nothing for 45 s, not even the once-a-second
// BLUDIST_WATCHDOG_TRACE=1 report). Cause, found by reading the code (the device run that
// confirms it is still to come): the NCCL poller dropped the last reference to a completed
// collective's Work::State while holding the mutex the deadline timer needs, so cudaEventDestroy
// ran under that mutex. A CUDA call made while the main thread waits on a hung stream can block
// on the driver's locks (PyTorch's ProcessGroupNCCL watchdog hung the same way in
// cudaEventDestroy, pytorch/pytorch#110449): the poller never let go, and the timer, which makes
// no CUDA call itself, blocked on the mutex before it compared a deadline or printed a trace.
// It hit on every run: the barrier just before the all-reduce completes, the main thread drops
// its Work and blocks in a copy within microseconds, and the poller only looks every 100 ms, so
// the poller holds the barrier's last reference when it gets there.
// The fix is structural:
// - DeadlineTimer holds all the deadline logic, behind its own lock that guards a map of
//   (id, what, since) and nothing else: no CUDA object is created, queried or destroyed under
//   it. The poller tells it begin/end by id, under a lock of its own that is never held across
//   a CUDA or NCCL call, and never destroys a Work::State: completed ones go back to the issuing
//   thread (NcclProcessGroup::issue), which makes CUDA calls anyway.
// - The timer takes its lock with a bounded try (a backstop: locked out past the timeout, it
//   fires anyway, saying so), prints with write(2) (no stdio lock, no buffer), and ends the
//   process through end_process: the message, stdio flushed only where its lock is free, then
//   the abort (ncclCommAbort, which may block on the same driver locks) raced by a thread that
//   _exit()s with kWatchdogAbortHungExitCode after a grace period (5 s). The process ends within
//   timeout + grace whatever the main thread and the driver do.
// BLUDIST_WATCHDOG_TRACE=1 prints the timer's state once a second (with write(2) as well).

// Writes all of msg to file descriptor 2 with write(2): no stdio lock, nothing buffered.
void write_stderr(const std::string& msg) noexcept;

// BLUDIST_WATCHDOG_TRACE=1 (read once).
bool watchdog_trace_from_env();

// Prints message (write(2)), flushes stdout/stderr where their locks are free, runs abort (may
// be empty; may block) and _exit()s with kWatchdogExitCode; if abort has not returned after
// grace, a second thread says so and _exit()s with kWatchdogAbortHungExitCode. The first caller
// in the process wins; any later caller blocks until the process ends.
[[noreturn]] void end_process(const std::string& message, const std::function<void()>& abort,
                              Milliseconds grace);

class DeadlineTimer {
 public:
  enum class Kind {
    kCompletion,  // queued device work: "did not complete within"
    kHostCall,    // a library call blocked on the host: "blocked in NCCL on the host for more than"
    kSetUp,       // communicator creation/teardown: "did not complete within" (peer never started)
  };
  struct Options {
    Milliseconds timeout{300000};
    Milliseconds abort_grace{5000};
    std::string where;   // " on the nccl group (rank 0 of 2, cuda:0)"
    std::string action;  // "aborting the communicator and " (before "exiting with status N")
    std::function<void()> abort;
    bool trace = false;
    std::chrono::milliseconds tick{100};  // how often deadlines are compared
  };

  explicit DeadlineTimer(Options o);
  ~DeadlineTimer();
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  uint64_t begin(std::string what, Kind kind);
  void end(uint64_t id);
  // What the poller is doing, for the trace: a string literal.
  void set_note(const char* note) { note_.store(note, std::memory_order_relaxed); }
  // Ends the process now (an asynchronous error found by the poller).
  [[noreturn]] void fire(const std::string& why) const;

  // Marks a blocking call for its scope.
  class Scope {
   public:
    Scope(DeadlineTimer& t, std::string what, Kind kind)
        : t_(t), id_(t.begin(std::move(what), kind)) {}
    ~Scope() { t_.end(id_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    DeadlineTimer& t_;
    uint64_t id_;
  };

 private:
  struct Entry {
    std::string what;
    Kind kind;
    std::chrono::steady_clock::time_point since;
  };
  void loop();
  std::string describe(const Entry& e) const;

  Options o_;
  std::timed_mutex mu_;  // guards pending_ and next_id_ only
  std::map<uint64_t, Entry> pending_;
  uint64_t next_id_ = 0;
  std::atomic<const char*> note_{"no poller"};
  std::mutex stop_mu_;  // for stop_ and the timer's sleep only
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace bludist::detail
