// Devices and per-thread current streams (blutensor/cuda_stream.h). The current stream of each
// device is a thread_local table entry, nullptr (the legacy default stream) until a StreamGuard
// sets it: Note [Default stream].
#include "blutensor/cuda_stream.h"

#include <array>
#include <vector>

#include "blutensor/error.h"

namespace blu::cuda {
namespace {

constexpr int kMaxDevices = 64;
thread_local std::array<cudaStream_t, kMaxDevices> t_current_streams{};

int resolve_device(int device) {
  if (device >= 0) {
    BLU_CHECK(device < kMaxDevices, "blu::cuda: device index ", device, " out of range");
    return device;
  }
  return current_device();
}

}  // namespace

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

bool is_available() noexcept { return device_count() > 0; }

int current_device() {
  int d = 0;
  BLU_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int device) { BLU_CUDA_CHECK(cudaSetDevice(device)); }

cudaStream_t current_stream(int device) { return t_current_streams[resolve_device(device)]; }

void set_current_stream(int device, cudaStream_t stream) {
  t_current_streams[resolve_device(device)] = stream;
}

StreamGuard::StreamGuard(cudaStream_t stream, int device)
    : stream_(stream), previous_stream_(nullptr), device_(0), previous_device_(current_device()) {
  device_ = device >= 0 ? device : previous_device_;
  previous_stream_ = current_stream(device_);
  if (device_ != previous_device_) set_device(device_);
  set_current_stream(device_, stream_);
}

StreamGuard::~StreamGuard() {
  t_current_streams[device_] = previous_stream_;
  if (device_ != previous_device_) (void)cudaSetDevice(previous_device_);
}

DeviceGuard::DeviceGuard(int device) : previous_device_(current_device()) {
  if (device != previous_device_) set_device(device);
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_device_) {
    (void)cudaSetDevice(previous_device_);
  }
}

Stream Stream::create(int device, bool non_blocking, int priority) {
  int d = resolve_device(device);
  DeviceGuard guard(d);
  cudaStream_t s = nullptr;
  BLU_CUDA_CHECK(cudaStreamCreateWithPriority(
      &s, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault, priority));
  return Stream(s, d);
}

Stream::~Stream() {
  if (stream_ != nullptr) {
    DeviceGuard guard(device_);
    (void)cudaStreamDestroy(stream_);
  }
}

Stream::Stream(Stream&& other) noexcept : stream_(other.stream_), device_(other.device_) {
  other.stream_ = nullptr;
  other.device_ = -1;
}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    stream_ = other.stream_;
    device_ = other.device_;
    other.stream_ = nullptr;
    other.device_ = -1;
  }
  return *this;
}

void Stream::synchronize() const { BLU_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void GraphExec::begin_capture(cudaStream_t stream) {
  BLU_CHECK(stream != nullptr, "GraphExec::begin_capture: the legacy default stream cannot be captured");
  BLU_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
}

GraphExec GraphExec::end_capture(cudaStream_t stream, bool node_priority, int* prioritized) {
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (end != cudaSuccess) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    BLU_THROW("cudaStreamEndCapture failed: ", cudaGetErrorName(end), " (", cudaGetErrorString(end), ")");
  }
  if (prioritized != nullptr) {
    *prioritized = 0;
    size_t n = 0;
    if (cudaGraphGetNodes(graph, nullptr, &n) == cudaSuccess && n > 0) {
      std::vector<cudaGraphNode_t> nodes(n);
      if (cudaGraphGetNodes(graph, nodes.data(), &n) == cudaSuccess) {
        for (cudaGraphNode_t node : nodes) {
          cudaGraphNodeType type{};
          cudaLaunchAttributeValue v{};
          if (cudaGraphNodeGetType(node, &type) == cudaSuccess && type == cudaGraphNodeTypeKernel &&
              cudaGraphKernelNodeGetAttribute(node, cudaLaunchAttributePriority, &v) == cudaSuccess && v.priority != 0)
            ++*prioritized;
        }
      }
    }
    (void)cudaGetLastError();
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst =
      cudaGraphInstantiate(&exec, graph, node_priority ? cudaGraphInstantiateFlagUseNodePriority : 0);
  (void)cudaGraphDestroy(graph);
  if (inst != cudaSuccess) {
    (void)cudaGetLastError();
    BLU_THROW("cudaGraphInstantiate failed: ", cudaGetErrorName(inst), " (", cudaGetErrorString(inst), ")");
  }
  return GraphExec(exec);
}

int GraphExec::highest_stream_priority(int device) {
  DeviceGuard guard(resolve_device(device));
  int least = 0, greatest = 0;
  BLU_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  return greatest;
}

void GraphExec::abandon_capture(cudaStream_t stream) noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t graph = nullptr;
    (void)cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
  }
  (void)cudaGetLastError();
}

GraphExec::~GraphExec() {
  if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
}

GraphExec::GraphExec(GraphExec&& other) noexcept : exec_(other.exec_) { other.exec_ = nullptr; }

GraphExec& GraphExec::operator=(GraphExec&& other) noexcept {
  if (this != &other) {
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    exec_ = other.exec_;
    other.exec_ = nullptr;
  }
  return *this;
}

void GraphExec::launch(cudaStream_t stream) const {
  BLU_CHECK(exec_ != nullptr, "GraphExec::launch: no graph");
  BLU_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

void synchronize_current_stream(int device) {
  int d = resolve_device(device);
  DeviceGuard guard(d);
  BLU_CUDA_CHECK(cudaStreamSynchronize(current_stream(d)));
}

void synchronize_device(int device) {
  DeviceGuard guard(resolve_device(device));
  BLU_CUDA_CHECK(cudaDeviceSynchronize());
}

Event Event::create(int device) {
  const int d = resolve_device(device);
  DeviceGuard guard(d);
  cudaEvent_t e = nullptr;
  BLU_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return Event(e, d);
}

Event::~Event() {
  if (event_ != nullptr) {
    DeviceGuard guard(device_);
    (void)cudaEventDestroy(event_);
  }
}

Event::Event(Event&& other) noexcept : event_(other.event_), device_(other.device_) {
  other.event_ = nullptr;
  other.device_ = -1;
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
    event_ = other.event_;
    device_ = other.device_;
    other.event_ = nullptr;
    other.device_ = -1;
  }
  return *this;
}

void Event::record(cudaStream_t stream) {
  BLU_CHECK(event_ != nullptr, "blu::cuda::Event::record: an empty event");
  BLU_CUDA_CHECK(cudaEventRecord(event_, stream));
}

void Event::wait(cudaStream_t waiter) const {
  BLU_CHECK(event_ != nullptr, "blu::cuda::Event::wait: an empty event");
  BLU_CUDA_CHECK(cudaStreamWaitEvent(waiter, event_, 0));
}

void stream_wait_stream(cudaStream_t waiter, cudaStream_t waitee) {
  if (waiter == waitee) return;
  cudaEvent_t e = nullptr;
  BLU_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaError_t err = cudaEventRecord(e, waitee);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(waiter, e, 0);
  (void)cudaEventDestroy(e);
  BLU_CUDA_CHECK(err);
}

}  // namespace blu::cuda

// set_matmul_precision / matmul_precision live in src/core/matmul_precision.cpp (CPU-only builds
// have them too).
