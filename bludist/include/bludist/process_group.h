// bludist/process_group.h: the ProcessGroup interface (collectives and point-to-point on raw
// buffers and on blutensor Tensors), its completion handle Work, and the backends' factories:
// Gloo for CPU tensors (CI runs every mode on CPU ranks) and NCCL for CUDA tensors.
//
// Note [Collective ordering on CUDA]
// An NCCL collective never runs on the caller's (compute) stream and never makes the host wait.
// It records an event on the compute stream, makes the group's communication stream wait for it
// (so the collective sees every write issued before the call), runs NCCL on the communication
// stream, and records a completion event there. Without async_op the compute stream then waits
// for that event at once (work issued after the call sees the result: the simple, safe default).
// With async_op the caller gets a Work and calls wait() when it needs the result: work issued
// in between overlaps the communication (DDP's buckets). Tensors used by an async collective
// are recorded on the communication stream (CachingAllocator::record_stream) so that freeing
// them early cannot hand their memory to another op while NCCL still reads or writes it.
// The Gloo backend is synchronous: every call returns when the data is in place, and Work is
// already complete.
//
// Note [Collective timeouts]
// Every group has a timeout (ProcessGroupOptions::timeout, default $BLUDIST_TIMEOUT_S or 300 s).
// Gloo enforces it inside each operation and a dead peer's closed socket fails at once: the call
// throws blu::Error naming the op, the sizes, the rank and the group. NCCL kernels cannot throw:
// a watchdog thread per NCCL group polls the completion events and ncclCommGetAsyncError; a
// collective older than the timeout (a dead or hung peer) or an asynchronous NCCL error prints a
// clear message, aborts the communicator and ends the process with kWatchdogExitCode, which the
// launcher (blurun) turns into the end of the whole gang.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bludist/store.h"
#include "blutensor/cuda_fwd.h"  // cudaStream_t; opaque in a CPU-only build (Note [CPU-only build])
#include "blutensor/dtype.h"
#include "blutensor/tensor.h"

namespace bludist {

using blu::DType;
using blu::Tensor;

enum class ReduceOp { kSum, kAvg, kMax, kMin };
const char* reduce_op_name(ReduceOp op) noexcept;

enum class Backend { kGloo, kNccl };
const char* backend_name(Backend b) noexcept;

// Exit status of a process whose NCCL watchdog fired (Note [Collective timeouts]), and of one
// whose communicator abort then did not return within the grace period (Note [Watchdog
// deadlines] in src/watchdog_timer.h).
inline constexpr int kWatchdogExitCode = 124;
inline constexpr int kWatchdogAbortHungExitCode = 125;

// Per-call options. stream: the compute stream to order against (CUDA only; unset: the calling
// thread's current stream of the group's device). async_op: see Note [Collective ordering on CUDA].
struct CommOptions {
  std::optional<cudaStream_t> stream;
  bool async_op = false;
};

// Completion of one collective. Default-constructed and CPU (Gloo) works are complete.
class Work {
 public:
  struct State;
  Work() = default;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  // CUDA: `stream` (unset: the current stream of the group's device) waits on the device for the
  // collective; the host does not wait. CPU: nothing to do.
  void wait(std::optional<cudaStream_t> stream = std::nullopt) const;
  // True when the collective has finished (non-blocking query).
  bool is_completed() const;
  // The host waits for the collective (tests, barriers).
  void synchronize() const;

 private:
  std::shared_ptr<State> state_;
};

// Note [Communication timing]
// What a group's collectives cost since the last take_comm_timing(), for the trainer's progress
// line and metrics (comm_ms, comm_exposed_ms, comm_hidden). NCCL, from CUDA events (Work::State's
// TimedOp, nccl_process_group.cpp): `comm_ms` is the time the collectives ran on the
// communication stream (start event after the stream waited for the compute stream's writes, end
// event after the collective: one stream, so the sum is its busy time); `exposed_ms` the part of it
// the compute stream spent waiting: for each collective the compute stream waited on (Work::wait,
// or at once without async_op), max(0, end - the moment the compute stream reached the wait), all
// on one reference event recorded on the compute stream before the window's first collective, so
// no difference of events is ever taken backwards in time. 1 - exposed/comm is the overlap the
// step achieved (a synchronous collective is all exposed; DDP's buckets or async TP's chunks hide
// what runs beside compute). Only collectives whose end event has completed are harvested (the
// take never blocks; the rest count in a later window); collectives issued while the stream is
// captured into a CUDA graph are not timed unless BLUDIST_COMM_TIMING_GRAPHS=1 (then as of their
// graph's last replay: Note [Communication timing in graphs] in nccl_process_group.cpp), nor does a
// host wait (Work::synchronize, barrier) count as exposed. Gloo (CPU): the calls block, so each
// one's host time is both comm and exposed. Off with BLUDIST_COMM_TIMING=0.
struct CommTiming {
  int64_t ops = 0;            // collectives timed
  double comm_ms = 0;         // time they ran
  double exposed_ms = 0;      // time the compute stream (or the host, for Gloo) waited for them
  bool device_timed = false;  // from CUDA events (NCCL); false: host time (Gloo) or nothing timed
  double hidden_fraction() const { return comm_ms > 0 ? 1.0 - exposed_ms / comm_ms : 0.0; }
  CommTiming& operator+=(const CommTiming& o) {
    ops += o.ops;
    comm_ms += o.comm_ms;
    exposed_ms += o.exposed_ms;
    device_timed = device_timed || o.device_timed;
    return *this;
  }
};

struct ProcessGroupOptions {
  Milliseconds timeout = default_timeout();
  bool time_comm = default_time_comm();  // Note [Communication timing]
  // Gloo: the address this rank's transport binds (empty: 127.0.0.1 when the store host is a
  // loopback address, else this host's name; $BLUDIST_GLOO_HOSTNAME overrides).
  std::string gloo_hostname;
  static Milliseconds default_timeout();  // $BLUDIST_TIMEOUT_S, else 300 s
  static bool default_time_comm();        // $BLUDIST_COMM_TIMING (0 = off), else on
};

class ProcessGroup : public std::enable_shared_from_this<ProcessGroup> {
 public:
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Where the group's buffers live: the CPU (Gloo) or the group's CUDA device (NCCL).
  virtual blu::Device device() const = 0;
  virtual Backend backend() const = 0;
  // "gloo world (rank 1 of 4)" for messages.
  std::string describe() const;
  Milliseconds timeout() const { return options_.timeout; }

  // ---- raw buffers (on device(); counts in elements)
  // In place: buf = op over ranks of buf.
  virtual Work all_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op,
                          const CommOptions& o = {}) = 0;
  // out[out_count] = op over ranks of in[rank * out_count .. (rank + 1) * out_count).
  virtual Work reduce_scatter(void* out, const void* in, std::size_t out_count, DType dtype, ReduceOp op,
                              const CommOptions& o = {}) = 0;
  // out[r * in_count ..] = in of rank r (in may alias out's own slot).
  virtual Work all_gather(void* out, const void* in, std::size_t in_count, DType dtype,
                          const CommOptions& o = {}) = 0;
  // buf = buf of `root` (a rank of this group).
  virtual Work broadcast(void* buf, std::size_t count, DType dtype, int root, const CommOptions& o = {}) = 0;
  virtual Work send(const void* buf, std::size_t count, DType dtype, int dst, const CommOptions& o = {}) = 0;
  virtual Work recv(void* buf, std::size_t count, DType dtype, int src, const CommOptions& o = {}) = 0;
  // Every rank reaches the barrier before any leaves it (the host waits).
  virtual void barrier() = 0;
  // Grouped calls: the operations between group_start and group_end are issued together (NCCL
  // fuses them; matching send/recv pairs in a group cannot deadlock). Nesting is allowed.
  virtual void group_start() = 0;
  virtual void group_end() = 0;

  // ---- Tensors (contiguous, on device(); checked, with a clear error naming op/shape/dtype)
  Work all_reduce(const Tensor& t, ReduceOp op = ReduceOp::kSum, const CommOptions& o = {});
  Work reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::kSum,
                      const CommOptions& o = {});
  Work all_gather(const Tensor& out, const Tensor& in, const CommOptions& o = {});
  Work broadcast(const Tensor& t, int root, const CommOptions& o = {});
  Work send(const Tensor& t, int dst, const CommOptions& o = {});
  Work recv(const Tensor& t, int src, const CommOptions& o = {});

  // ---- sub-groups. Collective over this group: every member calls it with the same `ranks`
  // (ranks of this group, ascending order not required: position = rank in the new group).
  // Members get the new group; the others get nullptr.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks);

  // The collectives' cost since the last call (Note [Communication timing]); resets the window.
  virtual CommTiming take_comm_timing() { return CommTiming{}; }

 protected:
  ProcessGroup(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options);
  // Builds this backend's group over `store` (a fresh key space) for a member with `rank` of `size`.
  virtual std::shared_ptr<ProcessGroup> make_subgroup(std::shared_ptr<Store> store, int rank, int size) = 0;
  // Tensor-form helper: checks device/contiguity, records async use on the comm stream.
  virtual void record_async_use(const Tensor& t) {}
  void check_tensor(const char* op, const Tensor& t) const;

  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  ProcessGroupOptions options_;
  int next_subgroup_ = 0;
};

// 2-D mesh (e.g. data x tensor parallel): world rank = row * cols + col. `row_group` links the
// ranks of this rank's row (size cols), `col_group` those of its column (size rows).
struct Mesh2D {
  int rows = 1, cols = 1, row = 0, col = 0;
  std::shared_ptr<ProcessGroup> row_group;
  std::shared_ptr<ProcessGroup> col_group;
};
// Collective over `world`: every rank calls it. world.size() must equal rows * cols.
Mesh2D make_mesh_2d(ProcessGroup& world, int rows, int cols);

// ---- backends (Gloo: CPU buffers; NCCL: CUDA buffers on `device`). Collective: every rank of
// the group calls the factory with the same store (a fresh key space per group).
bool gloo_available() noexcept;
bool nccl_available() noexcept;
std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<Store> store, int rank, int size,
                                              ProcessGroupOptions options = {});
std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store> store, int rank, int size, int device,
                                              ProcessGroupOptions options = {});

}  // namespace bludist
