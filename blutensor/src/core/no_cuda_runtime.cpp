// blutensor/cuda_stream.h in a CPU-only build (BLU_WITH_CUDA=0, Note [CPU-only build] in the
// top-level CMakeLists.txt): no device exists. device_count() is 0 and is_available() false, as
// on a CUDA build without a GPU; everything that needs a device throws a blu::Error saying the
// build has no CUDA, so `--device cuda` fails with that reason rather than "0 devices".
// Compiled only when BLU_WITH_CUDA is OFF (blutensor/CMakeLists.txt); src/cuda/cuda_stream.cpp
// is the real implementation.
#include "blutensor/cuda_stream.h"
#include "blutensor/error.h"

#if BLU_WITH_CUDA
#error "no_cuda_runtime.cpp is for CPU-only builds (BLU_WITH_CUDA=0)"
#endif

namespace blu::cuda {
namespace {
[[noreturn]] void no_cuda(const char* what) {
  BLU_THROW(what,
            ": this build of BluTrain was built without CUDA (BLU_WITH_CUDA=OFF); "
            "use the CPU (--device cpu) or rebuild with the CUDA toolkit");
}
}  // namespace

int device_count() noexcept {
  return 0;
}
bool is_available() noexcept {
  return false;
}
int current_device() {
  no_cuda("blu::cuda::current_device");
}
void set_device(int) {
  no_cuda("blu::cuda::set_device");
}
cudaStream_t current_stream(int) {
  no_cuda("blu::cuda::current_stream");
}
void set_current_stream(int, cudaStream_t) {
  no_cuda("blu::cuda::set_current_stream");
}

StreamGuard::StreamGuard(cudaStream_t, int) {
  no_cuda("blu::cuda::StreamGuard");
}
StreamGuard::~StreamGuard() = default;
DeviceGuard::DeviceGuard(int) {
  no_cuda("blu::cuda::DeviceGuard");
}
DeviceGuard::~DeviceGuard() = default;

Stream Stream::create(int, bool, int) {
  no_cuda("blu::cuda::Stream::create");
}
Stream::~Stream() = default;
Stream::Stream(Stream&& other) noexcept : stream_(other.stream_), device_(other.device_) {}
Stream& Stream::operator=(Stream&& other) noexcept {
  stream_ = other.stream_;
  device_ = other.device_;
  return *this;
}
void Stream::synchronize() const {
  no_cuda("blu::cuda::Stream::synchronize");
}

void synchronize_current_stream(int) {
  no_cuda("blu::cuda::synchronize_current_stream");
}
void synchronize_device(int) {
  no_cuda("blu::cuda::synchronize_device");
}
Event Event::create(int) {
  no_cuda("blu::cuda::Event::create");
}
Event::~Event() = default;
Event::Event(Event&& other) noexcept : event_(other.event_), device_(other.device_) {}
Event& Event::operator=(Event&& other) noexcept {
  event_ = other.event_;
  device_ = other.device_;
  return *this;
}
void Event::record(cudaStream_t) {
  no_cuda("blu::cuda::Event::record");
}
void Event::wait(cudaStream_t) const {
  no_cuda("blu::cuda::Event::wait");
}

void GraphExec::begin_capture(cudaStream_t) {
  no_cuda("blu::cuda::GraphExec::begin_capture");
}
GraphExec GraphExec::end_capture(cudaStream_t, bool, int*) {
  no_cuda("blu::cuda::GraphExec::end_capture");
}
int GraphExec::highest_stream_priority(int) {
  no_cuda("blu::cuda::GraphExec::highest_stream_priority");
}
void GraphExec::abandon_capture(cudaStream_t) noexcept {}
GraphExec::~GraphExec() = default;
GraphExec::GraphExec(GraphExec&& other) noexcept : exec_(other.exec_) { other.exec_ = nullptr; }
GraphExec& GraphExec::operator=(GraphExec&& other) noexcept {
  exec_ = other.exec_;
  other.exec_ = nullptr;
  return *this;
}
void GraphExec::launch(cudaStream_t) const {
  no_cuda("blu::cuda::GraphExec::launch");
}

void stream_wait_stream(cudaStream_t, cudaStream_t) {
  no_cuda("blu::cuda::stream_wait_stream");
}

}  // namespace blu::cuda
