// The NCCL backend (CUDA buffers on one device per rank): communicator from a unique id
// exchanged through the store, a high-priority communication stream ordered against the caller's
// stream with events (Note [Collective ordering on CUDA]) and a watchdog thread (Note [Collective
// timeouts]) in bludist/process_group.h.
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "bludist/process_group.h"
#include "blutensor/cuda_allocator.h"
#include "blutensor/cuda_stream.h"
#include "blutensor/error.h"
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

// Polls completion events and the communicator's async error; fires (prints, aborts the
// communicator, ends the process) when a collective outlives the timeout or NCCL reports an error.
//
// Note [Watchdog threads]: two threads. The poller makes the CUDA/NCCL calls (cudaEventQuery,
// ncclCommGetAsyncError) outside the lock; the timer makes none: it only compares the oldest
// pending collective's (or host call's) age with the timeout. 2026-11-26 (2x H200): with one
// thread doing both, rank 0 blocked in a cudaStreamSynchronize behind an all-reduce whose peer
// had left never heard from its watchdog in 45 s (no message, no exit): a CUDA call made while
// another thread waits on the hung stream can itself block, and with it every later check. The
// timer cannot be held up that way, so the deadline holds whatever the driver does.
class Watchdog {
 public:
  Watchdog(ncclComm_t comm, int device, int rank, int size, Milliseconds timeout)
      : comm_(comm), device_(device), rank_(rank), size_(size), timeout_(timeout) {
    poller_ = std::thread([this] { poll_loop(); });
    timer_ = std::thread([this] { timer_loop(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    poller_.join();
    timer_.join();
  }
  void watch(std::shared_ptr<Work::State> w, std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back({std::move(w), std::move(what), std::chrono::steady_clock::now()});
  }

  // Note [Host-side deadline of an NCCL call]: an NCCL entry point can block on the host before
  // anything reaches a stream (lazy connection set-up with a peer, NCCL_RUNTIME_CONNECT, a
  // grouped call's ncclGroupEnd): no event to poll exists yet. A HostCall marks such a call; the
  // timer fires when one outlives the timeout, so a departed peer ends this rank there too.
  class HostCall {
   public:
    HostCall(Watchdog& w, const std::string& what) : w_(w) {
      std::lock_guard<std::mutex> lock(w_.mu_);
      w_.host_what_ = what;
      w_.host_since_ = std::chrono::steady_clock::now();
      w_.host_active_ = true;
    }
    ~HostCall() {
      std::lock_guard<std::mutex> lock(w_.mu_);
      w_.host_active_ = false;
    }
    HostCall(const HostCall&) = delete;
    HostCall& operator=(const HostCall&) = delete;

   private:
    Watchdog& w_;
  };

 private:
  struct Item {
    std::shared_ptr<Work::State> work;
    std::string what;
    std::chrono::steady_clock::time_point issued;
  };

  [[noreturn]] void fire(const std::string& why) {
    if (fired_.exchange(true)) {  // the other thread is already ending the process
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    std::fprintf(stderr, "[rank %d] bludist watchdog: %s on the nccl group (rank %d of %d, cuda:%d); aborting the "
                 "communicator and exiting with status %d\n", rank_, why.c_str(), rank_, size_, device_,
                 kWatchdogExitCode);
    std::fflush(stderr);
    // ncclCommAbort may itself wait on a stuck kernel: the process ends within 5 s regardless
    // (exiting tears down the CUDA context and its kernels).
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::seconds(5));
      std::_Exit(kWatchdogExitCode);
    }).detach();
    ncclCommAbort(comm_);
    std::_Exit(kWatchdogExitCode);
  }

  // BLUDIST_WATCHDOG_TRACE=1: both threads report what they are doing about once a second (the
  // 2-GPU watchdog test sets it: Note [Watchdog threads], the hang not yet explained).
  static bool trace_on() {
    static const bool on = [] {
      const char* v = std::getenv("BLUDIST_WATCHDOG_TRACE");
      return v != nullptr && v[0] == '1';
    }();
    return on;
  }

  // No CUDA or NCCL call here (Note [Watchdog threads]).
  void timer_loop() {
    std::unique_lock<std::mutex> lock(mu_);
    auto last_trace = std::chrono::steady_clock::now();
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      if (stop_) break;
      const auto now = std::chrono::steady_clock::now();
      if (trace_on() && now - last_trace > std::chrono::seconds(1)) {
        last_trace = now;
        const double age = items_.empty() ? 0.0 : std::chrono::duration<double>(now - items_.front().issued).count();
        std::fprintf(stderr, "[rank %d] bludist watchdog trace: %zu pending (oldest %s, %.1f s), host call %s, "
                     "poller %s\n", rank_, items_.size(), items_.empty() ? "-" : items_.front().what.c_str(), age,
                     host_active_ ? host_what_.c_str() : "none", poller_state_.load());
        std::fflush(stderr);
      }
      std::string why;
      if (host_active_ && now - host_since_ > timeout_) {
        why = host_what_ + " blocked in NCCL on the host for more than " + std::to_string(timeout_.count() / 1000.0) +
              " s (a peer rank died or hung)";
      } else if (!items_.empty() && now - items_.front().issued > timeout_) {
        why = items_.front().what + " did not complete within " + std::to_string(timeout_.count() / 1000.0) +
              " s (a peer rank died or hung)";
      }
      if (!why.empty()) {
        lock.unlock();
        fire(why);
      }
    }
  }

  void poll_loop() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      while (!stop_ && !items_.empty()) {
        std::shared_ptr<Work::State> work = items_.front().work;
        std::string what = items_.front().what;
        lock.unlock();
        poller_state_ = "in cudaEventQuery";
        const cudaError_t e = cudaEventQuery(work->event);
        poller_state_ = "idle";
        lock.lock();
        if (e == cudaSuccess) {
          if (!items_.empty() && items_.front().work == work) items_.pop_front();
          continue;
        }
        if (e != cudaErrorNotReady) {
          lock.unlock();
          fire(what + ": CUDA error " + cudaGetErrorString(e));
        }
        break;
      }
      lock.unlock();
      ncclResult_t async = ncclSuccess;
      poller_state_ = "in ncclCommGetAsyncError";
      const bool got = ncclCommGetAsyncError(comm_, &async) == ncclSuccess;
      poller_state_ = "idle";
      if (got && async != ncclSuccess && async != ncclInProgress) {
        fire(std::string("asynchronous NCCL error: ") + ncclGetErrorString(async) + " (" +
             ncclGetLastError(comm_) + ")");
      }
      lock.lock();
    }
  }

  ncclComm_t comm_;
  int device_, rank_, size_;
  Milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  bool host_active_ = false;
  std::string host_what_;
  std::chrono::steady_clock::time_point host_since_;
  bool stop_ = false;
  std::atomic<bool> fired_{false};
  std::atomic<const char*> poller_state_{"starting"};
  std::thread poller_, timer_;
};

// Ends the process with a clear message when a blocking call (communicator creation) outlives
// the timeout: NCCL's init blocks while a peer never arrives.
class Deadline {
 public:
  Deadline(Milliseconds timeout, std::string what) : what_(std::move(what)) {
    thread_ = std::thread([this, timeout] {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, timeout, [this] { return done_; })) {
        std::fprintf(stderr, "bludist watchdog: %s did not complete within %.1f s (a peer rank died or never "
                     "started); exiting with status %d\n", what_.c_str(), timeout.count() / 1000.0, kWatchdogExitCode);
        std::fflush(stderr);
        std::_Exit(kWatchdogExitCode);
      }
    });
  }
  ~Deadline() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size, int device, ProcessGroupOptions options)
      : ProcessGroup(std::move(store), rank, size, std::move(options)), device_(device) {
    BLU_CHECK(device >= 0 && device < blu::cuda::device_count(), "bludist nccl: rank ", rank, " asks for cuda:",
              device, " but ", blu::cuda::device_count(), " CUDA device(s) are visible");
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
      Watchdog::HostCall h(*watchdog_, "ncclGroupEnd of " + std::to_string(pending_.size()) + " grouped operation(s)");
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
    {
      Watchdog::HostCall h(*watchdog_, what);
      BLU_NCCL_CHECK(call(comm_stream_), "in ", what, " on rank ", rank_, " of ", size_);
    }
    auto w = std::make_shared<Work::State>();
    w->device = device_;
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
    w->recorded = true;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    BLU_CUDA_CHECK(cudaStreamIsCapturing(compute, &capture));
    // Events recorded during graph capture are nodes, not queryable: no watchdog for them.
    if (capture == cudaStreamCaptureStatusNone) watchdog_->watch(w, what);
    if (!async && compute != comm_stream_) BLU_CUDA_CHECK(cudaStreamWaitEvent(compute, w->event, 0));
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
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store> store, int rank, int size, int device,
                                              ProcessGroupOptions options) {
  return std::make_shared<NcclProcessGroup>(std::move(store), rank, size, device, std::move(options));
}

}  // namespace bludist
