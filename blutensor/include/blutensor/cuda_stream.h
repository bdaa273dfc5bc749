// blutensor/cuda_stream.h: devices and the per-thread "current stream" of each device.
//
// Every blutensor CUDA op runs asynchronously on blu::cuda::current_stream(device). The design
// choice that matters is what that stream is when nobody set one: see Note [Default stream].
// Nothing in this header needs a GPU to compile or link; device_count() answers 0 without one.
// In a CPU-only build (BLU_WITH_CUDA=0) it needs no CUDA toolkit either: src/core/no_cuda_runtime.cpp
// implements it there (device_count() is 0; anything that needs a device throws "built without CUDA").
#pragma once

#include "blutensor/cuda_fwd.h"

#include <cstdint>

namespace blu::cuda {

// Note [Default stream]
// Without a StreamGuard, current_stream(d) is the *legacy default stream* (the null stream, the
// one `kernel<<<g, b>>>` uses), as in PyTorch. Reasons:
//  - It is what users of a framework expect: work issued by blutensor is ordered with any plain
//    CUDA code, cuBLAS call or library the user mixes in on the null stream, and with work the
//    user issues on other *blocking* streams (the legacy stream synchronises with them).
//  - Tensors freed on the default stream can be reused at once by the next op (the caching
//    allocator is stream-ordered: Note [Stream-ordered reuse] in cuda_allocator.h).
// What it costs: no overlap between blutensor work and other blocking streams, and CUDA-graph
// capture is impossible on the legacy stream. Code that wants overlap (bludist's communication
// streams, data prefetch) or captures graphs creates a Stream (non-blocking) and installs it
// with a StreamGuard; cross-stream tensor use then needs CachingAllocator::record_stream.
// We do not use the per-thread default stream (cudaStreamPerThread): it would make the same
// program order its work differently depending on which thread runs it.

// Number of usable CUDA devices; 0 when there is no driver or no device (never throws).
int device_count() noexcept;
// device_count() > 0.
bool is_available() noexcept;

// The calling thread's current CUDA device (cudaGetDevice) and setting it.
int current_device();
void set_device(int device);

// The current stream of `device` for the calling thread (device < 0: the current device).
// Default: the legacy default stream, i.e. nullptr (Note [Default stream]).
cudaStream_t current_stream(int device = -1);
// The legacy default stream (nullptr), named for readability.
inline cudaStream_t default_stream() noexcept { return nullptr; }
// Sets the calling thread's current stream of `device` (prefer StreamGuard).
void set_current_stream(int device, cudaStream_t stream);

// RAII: makes `stream` the current stream of `device` for this thread, and `device` the current
// device; restores both on destruction. device < 0: the current device.
class StreamGuard {
 public:
  explicit StreamGuard(cudaStream_t stream, int device = -1);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

  cudaStream_t stream() const noexcept { return stream_; }
  int device() const noexcept { return device_; }

 private:
  cudaStream_t stream_;
  cudaStream_t previous_stream_;
  int device_;
  int previous_device_;
};

// A thread's launch budget (an int read by the launchers), set for a scope and restored after it.
template <int& (*Slot)()>
class ScopedLaunchBudget {
 public:
  explicit ScopedLaunchBudget(int value) : previous_(Slot()) { Slot() = value; }
  ~ScopedLaunchBudget() { Slot() = previous_; }
  ScopedLaunchBudget(const ScopedLaunchBudget&) = delete;
  ScopedLaunchBudget& operator=(const ScopedLaunchBudget&) = delete;

 private:
  int previous_;
};

// Note [GEMM CTA budget] (blublas/gemm.h): the most CTAs the GEMMs this thread launches may use
// (0: one per SM, the default), read by blutensor's CUDA gemm and blucomp's bound epilogues when
// they launch; set around a launch with GemmCtaBudget (the captured step's side-stream calls:
// BLU_CAPTURE_SIDE_GEMM_CTAS). The bits of D do not depend on it.
inline int& gemm_cta_budget_slot() {
  static thread_local int ctas = 0;
  return ctas;
}
inline int gemm_cta_budget() { return gemm_cta_budget_slot(); }
using GemmCtaBudget = ScopedLaunchBudget<gemm_cta_budget_slot>;

// Note [Side map budget] (src/capture/capture_side_stream.cpp): the most blocks per SM that the
// elementwise map kernels this thread launches may use (0: no cap, the default grid), set around
// a launch with MapBlockBudget (the captured step's side-stream calls: BLU_CAPTURE_SIDE_MAP_BLOCKS).
// Each element is computed alone, so the bits do not depend on it.
inline int& map_block_budget_slot() {
  static thread_local int blocks_per_sm = 0;
  return blocks_per_sm;
}
inline int map_block_budget() { return map_block_budget_slot(); }
using MapBlockBudget = ScopedLaunchBudget<map_block_budget_slot>;

// RAII: sets the current device, restores the previous one on destruction.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_device_;
};

// An owning CUDA stream (non-blocking by default: it does not synchronise with the legacy
// stream). Move-only; destroyed with cudaStreamDestroy.
class Stream {
 public:
  Stream() = default;
  // priority: 0 is the default; lower numbers are higher priority (cudaDeviceGetStreamPriorityRange).
  static Stream create(int device = -1, bool non_blocking = true, int priority = 0);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const noexcept { return stream_; }
  operator cudaStream_t() const noexcept { return stream_; }
  int device() const noexcept { return device_; }
  void synchronize() const;

 private:
  Stream(cudaStream_t s, int device) : stream_(s), device_(device) {}
  cudaStream_t stream_ = nullptr;
  int device_ = -1;
};

// An owning CUDA event without timing (cudaEventDisableTiming), for ordering streams: record() on
// one, wait() makes another wait for what the first had issued before the record. Move-only.
// Inside a CUDA-graph capture a record / wait pair becomes a dependency edge of the graph.
class Event {
 public:
  Event() = default;
  static Event create(int device = -1);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(cudaStream_t stream);
  void wait(cudaStream_t waiter) const;  // no host sync
  cudaEvent_t get() const noexcept { return event_; }

 private:
  Event(cudaEvent_t e, int device) : event_(e), device_(device) {}
  cudaEvent_t event_ = nullptr;
  int device_ = -1;
};

// Note [Stream capture]
// An instantiated CUDA graph taken from a stream: begin_capture(s) (relaxed mode, so that the
// caching allocator may cudaMalloc a private pool's segment meanwhile), the work issued on s (and
// on streams that join s's capture through events), then end_capture(s). `s` must be a
// non-blocking stream (the legacy stream cannot be captured). Nothing issued during the capture
// runs; launch() runs it, on any stream of the device. A capture that fails (an op that
// synchronises, an unjoined stream) throws from end_capture naming the CUDA error, or is dropped
// by abandon_capture after an exception; either way the stream is no longer capturing and the
// error is cleared. Move-only; destroyed with cudaGraphExecDestroy (a launch in flight completes).
class GraphExec {
 public:
  GraphExec() = default;
  static void begin_capture(cudaStream_t stream);
  // node_priority: instantiate with cudaGraphInstantiateFlagUseNodePriority, so each kernel node
  // runs at the priority of the stream it was captured from (Note [Stream priorities]) instead of
  // the launch stream's; *prioritized (optional) gets how many kernel nodes have a nonzero one.
  static GraphExec end_capture(cudaStream_t stream, bool node_priority = false, int* prioritized = nullptr);
  // The device's highest stream priority (the most negative number; 0 where priorities do not exist).
  static int highest_stream_priority(int device = -1);
  static void abandon_capture(cudaStream_t stream) noexcept;
  ~GraphExec();
  GraphExec(GraphExec&& other) noexcept;
  GraphExec& operator=(GraphExec&& other) noexcept;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;

  void launch(cudaStream_t stream) const;
  bool valid() const noexcept { return exec_ != nullptr; }

 private:
  explicit GraphExec(cudaGraphExec_t e) : exec_(e) {}
  cudaGraphExec_t exec_ = nullptr;
};

// Blocks the host until all work on the current stream of `device` is done (device < 0: current).
void synchronize_current_stream(int device = -1);
// Blocks the host until all work on `device` is done.
void synchronize_device(int device = -1);
// Makes `waiter` wait (on the device, no host sync) for all work issued so far on `waitee`.
void stream_wait_stream(cudaStream_t waiter, cudaStream_t waitee);

}  // namespace blu::cuda

namespace blu {

// Note [Matmul precision]
// How float32 matmuls run on CUDA (like torch.set_float32_matmul_precision); a process-wide
// setting read at each matmul, default kHighest so that CPU and CUDA agree to float32 rounding.
//   kHighest: strict fp32 (SIMT FMA, no TF32 rounding)      -> blublas ComputeMode::kStrictF32
//   kHigh:    TF32 tensor cores, fp32 accumulation           -> blublas ComputeMode::kTF32
//   kMedium:  as kHigh for now (a bf16-operand mode is not implemented)
// bf16 and f16 matmuls always use tensor cores with fp32 accumulation; f64 runs blutensor's own
// double-precision kernel. The trainer's "--precision tf32" sets kHigh.
enum class MatmulPrecision : int { kHighest = 0, kHigh = 1, kMedium = 2 };
void set_matmul_precision(MatmulPrecision precision) noexcept;
MatmulPrecision matmul_precision() noexcept;

// Note [Strict-fp32 attention]
// What scaled_dot_product_attention runs on CUDA for float32 under kHighest (process-wide, read
// at each call; under kHigh / kMedium it is the tf32 flash kernel, for bf16 the bf16 one):
//   kComposite (default): matmul, scale, causal fill, softmax, matmul: strict fp32, [B,H,T,T]
//              intermediates (the SIMT flash kernel exists, kStrictFlash, but runs slower);
//   kStrictFlash: blublas's SIMT fp32 flash attention (no [B,H,T,T] tensor; slow);
//   kSplit3TF32: blublas's 3xTF32 flash attention (tensor cores on split-tf32 operands: fp32-level
//              error; PyTorch's fp32 SDPA contract, what the trainer's fused engine runs in fp32).
// The trainer sets it from --attention for its autograd and captured engines, so that they run
// the same attention as the fused engine they are compared with (issue 13's compiled step).
// Like the matmul precision it is read at each call, the backward's included: change it between
// steps, not between a forward and its backward.
enum class Fp32Attention : int { kComposite = 0, kStrictFlash = 1, kSplit3TF32 = 2 };
void set_fp32_attention(Fp32Attention mode) noexcept;
Fp32Attention fp32_attention() noexcept;

}  // namespace blu
