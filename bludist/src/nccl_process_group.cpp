// The NCCL backend (CUDA buffers on one device per rank): communicator from a unique id
// exchanged through the store, a high-priority communication stream ordered against the caller's
// stream with events (Note [Collective ordering on CUDA]) and a watchdog thread (Note [Collective
// timeouts]) in bludist/process_group.h.
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "bludist/process_group.h"
#include "blutensor/cuda_allocator.h"
#include "blutensor/cuda_stream.h"
#include "blutensor/error.h"
#include "watchdog_timer.h"
#include "work_state.h"

#define BLU_NCCL_CHECK(expr, ...)                                                                  \
  do {                                                                                             \
    ncclResult_t blu_nccl_ = (expr);                                                               \
    if (blu_nccl_ != ncclSuccess) {                                                                \
      BLU_THROW("bludist nccl: ", #expr, ": ", ncclGetErrorString(blu_nccl_), " ", ##__VA_ARGS__); \
    }                                                                                              \
  } while (0)

namespace bludist {

bool nccl_available() noexcept { return true; }

namespace {

ncclDataType_t nccl_dtype(const char* op, DType d) {
  switch (d) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    default: BLU_THROW("bludist nccl ", op, ": dtype ", blu::dtype_name(d), " is not supported");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

// Polls completion events and the communicator's async error; the deadlines are a
// DeadlineTimer's, which fires (prints, aborts the communicator, ends the process) when a
// collective or a blocking NCCL call outlives the timeout.
//
// Note [Watchdog threads]: two threads. The poller makes the CUDA/NCCL calls (cudaEventQuery,
// ncclCommGetAsyncError); the DeadlineTimer's thread makes none and shares no lock with them
// (Note [Watchdog deadlines] in watchdog_timer.h: the cause of the silent 2-GPU test was a
// cudaEventDestroy under the lock the timer needed). The poller's own lock guards its queue
// only; it never destroys a Work::State: completed ones wait in finished_ until the issuing
// thread takes them (take_finished), so every cudaEventDestroy happens on a thread that makes
// CUDA calls anyway.
class Watchdog {
 public:
  using Timer = detail::DeadlineTimer;
  Watchdog(ncclComm_t comm, int device, int rank, int size, Milliseconds timeout)
      : comm_(comm), device_(device), timer_(timer_options(comm, device, rank, size, timeout)) {
    poller_ = std::thread([this] { poll_loop(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    poller_.join();
  }
  Timer& timer() { return timer_; }
  void watch(std::shared_ptr<Work::State> w, std::string what) {
    const uint64_t id = timer_.begin(what, Timer::Kind::kCompletion);
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back({std::move(w), id, std::move(what)});
  }
  // Completed work for the caller to release (outside any watchdog lock).
  std::vector<std::shared_ptr<Work::State>> take_finished() {
    std::vector<std::shared_ptr<Work::State>> out;
    std::lock_guard<std::mutex> lock(mu_);
    out.swap(finished_);
    return out;
  }

 private:
  struct Item {
    std::shared_ptr<Work::State> work;
    uint64_t id;
    std::string what;
  };

  static Timer::Options timer_options(ncclComm_t comm, int device, int rank, int size,
                                      Milliseconds timeout) {
    Timer::Options o;
    o.timeout = timeout;
    o.where = blu::detail::str_cat(" on the nccl group (rank ", rank, " of ", size,
                                   ", cuda:", device, ")");
    o.action = "aborting the communicator and ";
    o.abort = [comm] { ncclCommAbort(comm); };
    o.trace = detail::watchdog_trace_from_env();
    return o;
  }

  void poll_loop() {
    cudaSetDevice(device_);
    timer_.set_note("poller idle");
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; });
      while (!stop_ && !items_.empty()) {
        // Only this thread pops, so the front item (and its event) stays alive unlocked.
        const cudaEvent_t event = items_.front().work->event;
        const uint64_t id = items_.front().id;
        const std::string what = items_.front().what;
        lock.unlock();
        timer_.set_note("poller in cudaEventQuery");
        const cudaError_t e = cudaEventQuery(event);
        timer_.set_note("poller idle");
        if (e != cudaSuccess && e != cudaErrorNotReady) {
          timer_.fire(what + ": CUDA error " + cudaGetErrorString(e));
        }
        lock.lock();
        if (e == cudaErrorNotReady) break;
        finished_.push_back(std::move(items_.front().work));
        items_.pop_front();
        timer_.end(id);
      }
      lock.unlock();
      ncclResult_t async = ncclSuccess;
      timer_.set_note("poller in ncclCommGetAsyncError");
      const bool got = ncclCommGetAsyncError(comm_, &async) == ncclSuccess;
      timer_.set_note("poller idle");
      if (got && async != ncclSuccess && async != ncclInProgress) {
        timer_.fire(std::string("asynchronous NCCL error: ") + ncclGetErrorString(async) + " (" +
                    ncclGetLastError(comm_) + ")");
      }
      lock.lock();
    }
  }

  ncclComm_t comm_;
  int device_;
  Timer timer_;
  std::mutex mu_;  // items_, finished_, stop_; never held across a CUDA or NCCL call
  std::condition_variable cv_;
  std::deque<Item> items_;
  std::vector<std::shared_ptr<Work::State>> finished_;
  bool stop_ = false;
  std::thread poller_;
};

// Ends the process with a clear message when a blocking call (communicator creation or
// teardown) outlives the timeout: NCCL's init blocks while a peer never arrives.
class Deadline {
 public:
  Deadline(Milliseconds timeout, std::string what)
      : timer_(options(timeout)),
        scope_(timer_, std::move(what), detail::DeadlineTimer::Kind::kSetUp) {
    timer_.set_note("the calling thread in the call");
  }

 private:
  static detail::DeadlineTimer::Options options(Milliseconds timeout) {
    detail::DeadlineTimer::Options o;
    o.timeout = timeout;
    o.trace = detail::watchdog_trace_from_env();
    return o;
  }
  detail::DeadlineTimer timer_;
  detail::DeadlineTimer::Scope scope_;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size, int device,
                   ProcessGroupOptions options)
      : ProcessGroup(std::move(store), rank, size, std::move(options)), device_(device) {
    BLU_CHECK(device >= 0 && device < blu::cuda::device_count(), "bludist nccl: rank ", rank,
              " asks for cuda:", device, " but ", blu::cuda::device_count(),
              " CUDA device(s) are visible");
    blu::cuda::DeviceGuard g(device_);
    ncclUniqueId id;
    if (rank_ == 0) {
      BLU_NCCL_CHECK(ncclGetUniqueId(&id));
      store_->set("nccl_unique_id", std::vector<char>(reinterpret_cast<char*>(&id),
                                                       reinterpret_cast<char*>(&id) + sizeof(id)));
    } else {
      std::vector<char> v = store_->get("nccl_unique_id");
      BLU_CHECK(v.size() == sizeof(id), "bludist nccl: malformed unique id in the store");
      std::memcpy(&id, v.data(), sizeof(id));
    }
    {
      Deadline d(options_.timeout, blu::detail::str_cat("ncclCommInitRank (rank ", rank_, " of ", size_, ")"));
      BLU_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_), "(rank ", rank_, " of ", size_, ", cuda:", device_, ")");
    }
    int lo = 0, hi = 0;
    BLU_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    BLU_CUDA_CHECK(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, hi));
    BLU_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    BLU_CUDA_CHECK(cudaMalloc(&scratch_, 16));
    watchdog_ = std::make_unique<Watchdog>(comm_, device_, rank_, size_, options_.timeout);
  }

  ~NcclProcessGroup() override {
    blu::cuda::DeviceGuard g(device_);
    cudaStreamSynchronize(comm_stream_);
    watchdog_.reset();
    {
      // ncclCommDestroy synchronises with the peers in recent NCCL: a rank that ends while a peer
      // is stuck would wait forever; bounded like the init (the exit status tells it).
      Deadline d(options_.timeout, blu::detail::str_cat("ncclCommDestroy (rank ", rank_, " of ", size_, ")"));
      ncclCommDestroy(comm_);
    }
    cudaFree(scratch_);
    cudaEventDestroy(ready_);
    cudaStreamDestroy(comm_stream_);
  }

  blu::Device device() const override { return blu::Device::cuda(device_); }
  Backend backend() const override { return Backend::kNccl; }

  Work all_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op, const CommOptions& o) override {
    ncclDataType_t t = nccl_dtype("all_reduce", dtype);
    return issue("all_reduce", count, dtype, o, [&](cudaStream_t s) {
      return ncclAllReduce(buf, buf, count, t, nccl_op(op), comm_, s);
    });
  }
  Work reduce_scatter(void* out, const void* in, std::size_t out_count, DType dtype, ReduceOp op,
                      const CommOptions& o) override {
    ncclDataType_t t = nccl_dtype("reduce_scatter", dtype);
    return issue("reduce_scatter", out_count, dtype, o, [&](cudaStream_t s) {
      return ncclReduceScatter(in, out, out_count, t, nccl_op(op), comm_, s);
    });
  }
  Work all_gather(void* out, const void* in, std::size_t in_count, DType dtype, const CommOptions& o) override {
    ncclDataType_t t = nccl_dtype("all_gather", dtype);
    return issue("all_gather", in_count, dtype, o, [&](cudaStream_t s) {
      return ncclAllGather(in, out, in_count, t, comm_, s);
    });
  }
  Work broadcast(void* buf, std::size_t count, DType dtype, int root, const CommOptions& o) override {
    check_peer("broadcast", root);
    ncclDataType_t t = nccl_dtype("broadcast", dtype);
    return issue("broadcast", count, dtype, o, [&](cudaStream_t s) {
      return ncclBroadcast(buf, buf, count, t, root, comm_, s);
    });
  }
  Work send(const void* buf, std::size_t count, DType dtype, int dst, const CommOptions& o) override {
    check_peer("send", dst);
    ncclDataType_t t = nccl_dtype("send", dtype);
    return issue("send", count, dtype, o, [&](cudaStream_t s) { return ncclSend(buf, count, t, dst, comm_, s); });
  }
  Work recv(void* buf, std::size_t count, DType dtype, int src, const CommOptions& o) override {
    check_peer("recv", src);
    ncclDataType_t t = nccl_dtype("recv", dtype);
    return issue("recv", count, dtype, o, [&](cudaStream_t s) { return ncclRecv(buf, count, t, src, comm_, s); });
  }

  void barrier() override {
    BLU_CHECK(group_depth_ == 0, "bludist nccl barrier inside a group");
    CommOptions o;
    o.stream = comm_stream_;  // order against nothing but earlier communication
    Work w = all_reduce(scratch_, 1, DType::F32, ReduceOp::kSum, o);
    // The host waits, polling so that the watchdog (not this thread) decides about timeouts.
    while (!w.is_completed()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

  void group_start() override {
    if (group_depth_++ == 0) BLU_NCCL_CHECK(ncclGroupStart());
  }
  void group_end() override {
    BLU_CHECK(group_depth_ > 0, "bludist: group_end() without group_start() on the ", describe());
    if (--group_depth_ > 0) return;
    blu::cuda::DeviceGuard g(device_);
    {
      Watchdog::Timer::Scope h(watchdog_->timer(), "ncclGroupEnd of " + std::to_string(pending_.size()) +
                               " grouped operation(s)", Watchdog::Timer::Kind::kHostCall);
      BLU_NCCL_CHECK(ncclGroupEnd(), "(grouped operations on rank ", rank_, ")");
    }
    std::vector<Pending> pending = std::move(pending_);
    pending_.clear();
    for (Pending& p : pending) finish(p.work, p.compute, p.async, p.what);
  }

 protected:
  std::shared_ptr<ProcessGroup> make_subgroup(std::shared_ptr<Store> store, int rank, int size) override {
    return std::make_shared<NcclProcessGroup>(std::move(store), rank, size, device_, options_);
  }
  void record_async_use(const Tensor& t) override {
    try {
      blu::cuda::CachingAllocator::get().record_stream(t.storage()->data(), comm_stream_);
    } catch (const blu::Error&) {
      // Memory the allocator does not own (from_blob): its owner keeps it alive until wait().
    }
  }

 private:
  struct Pending {
    std::shared_ptr<Work::State> work;
    cudaStream_t compute;
    bool async;
    std::string what;
  };

  void check_peer(const char* op, int peer) const {
    BLU_CHECK(peer >= 0 && peer < size_, "bludist nccl ", op, ": peer rank ", peer, " is not in the ", describe());
  }

  template <typename F>
  Work issue(const char* op, std::size_t count, DType dtype, const CommOptions& o, F&& call) {
    blu::cuda::DeviceGuard g(device_);
    cudaStream_t compute = o.stream ? *o.stream : blu::cuda::current_stream(device_);
    if (compute != comm_stream_) {
      BLU_CUDA_CHECK(cudaEventRecord(ready_, compute));
      BLU_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_, 0));
    }
    std::string what = blu::detail::str_cat(op, " of ", count, " ", blu::dtype_name(dtype), " (#", seq_++, ")");
    watchdog_->take_finished();  // releases completed work here, on the issuing thread
    std::shared_ptr<TimedOp> timed = start_timing(compute);
    {
      Watchdog::Timer::Scope h(watchdog_->timer(), what, Watchdog::Timer::Kind::kHostCall);
      BLU_NCCL_CHECK(call(comm_stream_), "in ", what, " on rank ", rank_, " of ", size_);
    }
    auto w = std::make_shared<Work::State>();
    w->device = device_;
    w->timed = std::move(timed);
    BLU_CUDA_CHECK(cudaEventCreateWithFlags(&w->event, cudaEventDisableTiming));
    if (group_depth_ > 0) {
      pending_.push_back({w, compute, o.async_op, std::move(what)});
    } else {
      finish(w, compute, o.async_op, what);
    }
    return Work(w);
  }

  void finish(const std::shared_ptr<Work::State>& w, cudaStream_t compute, bool async, const std::string& what) {
    BLU_CUDA_CHECK(cudaEventRecord(w->event, comm_stream_));
    if (w->timed) w->timed->record(w->timed->end, comm_stream_);
    w->recorded = true;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    BLU_CUDA_CHECK(cudaStreamIsCapturing(compute, &capture));
    // Events recorded during graph capture are nodes, not queryable: no watchdog for them.
    if (capture == cudaStreamCaptureStatusNone) watchdog_->watch(w, what);
    if (!async && compute != comm_stream_) {
      if (w->timed) w->timed->mark_wait(compute);
      BLU_CUDA_CHECK(cudaStreamWaitEvent(compute, w->event, 0));
    }
  }

  // Note [Communication timing]: a timed collective's start event, recorded on the communication
  // stream once it waits for the compute stream (the window's reference event first, on `compute`);
  // null when timing is off, or the compute stream is being captured into a graph and graph timing
  // is off (Note [Communication timing in graphs]).
  std::shared_ptr<TimedOp> start_timing(cudaStream_t compute) {
    if (!options_.time_comm || compute == comm_stream_) return nullptr;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    unsigned long long capture_id = 0;
    BLU_CUDA_CHECK(cudaStreamGetCaptureInfo(compute, &capture, &capture_id));
    const bool in_graph = capture != cudaStreamCaptureStatusNone;
    if (in_graph && !time_graphs_) return nullptr;
    std::shared_ptr<TimingEvent>& ref = in_graph ? graph_ref_ : window_ref_;
    if (in_graph && capture_id != graph_capture_id_) {  // a new graph: the older one's ops are dropped
      graph_timed_.clear();
      ref.reset();
      graph_capture_id_ = capture_id;
    }
    auto t = std::make_shared<TimedOp>();
    t->in_graph = in_graph;
    if (!ref) {
      ref = std::make_shared<TimingEvent>();
      t->record(*ref, compute);
    }
    if (!in_graph && timed_.size() >= 4096) harvest();  // a program that never takes the timing stays bounded
    t->ref = ref;
    t->record(t->start, comm_stream_);
    (in_graph ? graph_timed_ : timed_).push_back(t);
    return t;
  }

 public:
  CommTiming take_comm_timing() override {
    harvest();
    CommTiming r = std::exchange(harvested_, CommTiming{});
    for (const auto& t : graph_timed_) add_if_timed(*t, &r, /*in_graph=*/true);
    window_ref_.reset();  // the next collective opens a new window
    r.device_timed = r.ops > 0;
    return r;
  }

 private:
  // Note [Communication timing in graphs]
  // With BLUDIST_COMM_TIMING_GRAPHS=1 (off by default: not yet run on a GPU, session 15) the
  // collectives a CUDA graph captures (the fused engine's bucket all-reduces) are timed too: the
  // reference, start, end and wait events are recorded as external event nodes
  // (cudaEventRecordExternal), which each replay records again, so after a replay they hold that
  // replay's times. They are kept for the group's life (the graph's nodes name them) and every take
  // reports them as of the last replay: take once per replay (the trainer takes at the end of each
  // step, after its graph ran; the take at the start of a step is discarded). A new capture on the
  // group drops the previous graph's events (one graph with collectives per group at a time); an
  // event no replay has recorded yet is skipped.
  static bool graphs_from_env() {
    const char* v = std::getenv("BLUDIST_COMM_TIMING_GRAPHS");
    return v && std::string(v) == "1";
  }

  // Adds t's time (and exposed time) to *r when its events hold times; false when not (yet).
  static bool add_if_timed(const TimedOp& t, CommTiming* r, bool in_graph) {
    auto elapsed = [&](const TimingEvent& a, const TimingEvent& b, float* ms) {
      const cudaError_t e = cudaEventElapsedTime(ms, a.e, b.e);
      if (e == cudaSuccess) return true;
      if (!in_graph) BLU_CUDA_CHECK(e);
      (void)cudaGetLastError();  // a graph event before its first replay: not recorded yet
      return false;
    };
    float run_ms = 0, at_wait = 0, at_end = 0;
    if (!elapsed(t.start, t.end, &run_ms)) return false;
    // Both against the reference, recorded before them: no difference is taken backwards in time.
    if (t.wait && (!elapsed(*t.ref, *t.wait, &at_wait) || !elapsed(*t.ref, t.end, &at_end))) return false;
    r->comm_ms += run_ms;
    if (t.wait) r->exposed_ms += std::max(0.0f, at_end - at_wait);
    ++r->ops;
    return true;
  }

  // Adds the finished timed collectives to harvested_ (never blocks): one not finished yet, in an
  // open group, or whose wait the compute stream has not reached stays for a later call.
  void harvest() {
    blu::cuda::DeviceGuard g(device_);
    auto done = [](const TimingEvent& e) {
      const cudaError_t q = cudaEventQuery(e.e);
      if (q == cudaErrorNotReady) return false;
      BLU_CUDA_CHECK(q);
      return true;
    };
    std::vector<std::shared_ptr<TimedOp>> pending;
    for (auto& t : timed_) {
      if (!done(t->end) || (t->wait && !done(*t->wait))) {
        pending.push_back(std::move(t));
        continue;
      }
      add_if_timed(*t, &harvested_, /*in_graph=*/false);
    }
    timed_ = std::move(pending);
  }

  int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  void* scratch_ = nullptr;
  std::unique_ptr<Watchdog> watchdog_;
  int group_depth_ = 0;
  std::vector<Pending> pending_;
  uint64_t seq_ = 0;
  std::shared_ptr<TimingEvent> window_ref_;        // Note [Communication timing]
  std::vector<std::shared_ptr<TimedOp>> timed_;    // issued, not yet harvested
  CommTiming harvested_;                           // finished, not yet taken
  const bool time_graphs_ = graphs_from_env();     // Note [Communication timing in graphs]
  std::shared_ptr<TimingEvent> graph_ref_;
  std::vector<std::shared_ptr<TimedOp>> graph_timed_;
  unsigned long long graph_capture_id_ = 0;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store> store, int rank, int size, int device,
                                              ProcessGroupOptions options) {
  return std::make_shared<NcclProcessGroup>(std::move(store), rank, size, device, std::move(options));
}

}  // namespace bludist
