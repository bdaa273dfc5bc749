// The CUDA runtime backend of the caching allocator: cudaMalloc/cudaFree, events without timing,
// capture queries. Each call switches to the block's device for its duration (DeviceGuard), so
// the allocator serves any device from any thread.
#include "blutensor/cuda_allocator.h"
#include "blutensor/cuda_stream.h"
#include "blutensor/error.h"

namespace blu::cuda {
namespace {

class CudaBackend final : public AllocatorBackend {
 public:
  // Note [cudaMalloc during capture]
  // A private pool may need a new segment while a graph is being captured. cudaMalloc is a
  // "potentially unsafe" call that global capture mode forbids (cudaErrorStreamCaptureUnsupported),
  // but it is harmless here: it is not stream-ordered, is not recorded into the graph, and the
  // segment is never cudaFree'd while the graph lives (Note [Private pools]). So this thread's
  // capture interaction mode is switched to relaxed around the call, then restored.
  void* raw_alloc(std::size_t bytes, int device) override {
    DeviceGuard guard(device);
    void* p = nullptr;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    BLU_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    cudaError_t err = cudaMalloc(&p, bytes);
    cudaStreamCaptureMode restore = mode;
    BLU_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&restore));
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear the sticky-free error so later calls do not see it
      return nullptr;
    }
    BLU_CUDA_CHECK(err);
    return p;
  }

  void raw_free(void* ptr, int device) override {
    DeviceGuard guard(device);
    BLU_CUDA_CHECK(cudaFree(ptr));
  }

  bool mem_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) override {
    DeviceGuard guard(device);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // may run during a capture
    if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) return false;
    const cudaError_t err = cudaMemGetInfo(free_bytes, total_bytes);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return true;
  }

  Event event_create(int device) override {
    DeviceGuard guard(device);
    cudaEvent_t e = nullptr;
    BLU_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  void event_destroy(Event event, int device) override {
    DeviceGuard guard(device);
    BLU_CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
  }

  void event_record(Event event, cudaStream_t stream, int device) override {
    DeviceGuard guard(device);
    BLU_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), stream));
  }

  bool event_query(Event event, int device) override {
    DeviceGuard guard(device);
    cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    BLU_CUDA_CHECK(err);
    return true;
  }

  void event_synchronize(Event event, int device) override {
    DeviceGuard guard(device);
    BLU_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  }

  std::uint64_t capture_id(cudaStream_t stream, int device) override {
    DeviceGuard guard(device);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    cudaError_t err = cudaStreamGetCaptureInfo(stream, &status, &id);
    if (err != cudaSuccess) {
      // The legacy stream while another stream captures (cudaErrorStreamCaptureImplicit): it is
      // not itself capturing.
      (void)cudaGetLastError();
      return 0;
    }
    return status == cudaStreamCaptureStatusActive ? static_cast<std::uint64_t>(id) : 0;
  }
};

}  // namespace

AllocatorBackend& cuda_backend() {
  static CudaBackend* backend = new CudaBackend();
  return *backend;
}

}  // namespace blu::cuda
