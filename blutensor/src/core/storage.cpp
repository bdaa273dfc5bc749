// Storage: 64-byte aligned host memory, or CUDA memory from the caching allocator on the
// device's current stream (Note [CUDA storage] in tensor.h).
#include <cstdlib>

#include "blutensor/cuda_allocator.h"
#include "blutensor/cuda_stream.h"
#include "blutensor/tensor.h"

namespace blu {

namespace {
constexpr std::size_t kCpuAlignmentBytes = 64;
}

Storage::Storage(std::size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (device.is_cpu()) {
    std::size_t rounded = (nbytes + kCpuAlignmentBytes - 1) / kCpuAlignmentBytes * kCpuAlignmentBytes;
    if (rounded == 0) rounded = kCpuAlignmentBytes;
    data_ = std::aligned_alloc(kCpuAlignmentBytes, rounded);
    BLU_CHECK(data_ != nullptr, "Storage: out of host memory allocating ", nbytes, " bytes");
    deleter_ = [](void* p) { std::free(p); };
    return;
  }
  BLU_CHECK(device.index >= 0 && device.index < cuda_device_count(), "Storage: device ",
            device.str(), " is not available (", cuda_device_count(), " CUDA devices)");
  if (nbytes == 0) return;
#ifdef BLU_TENSOR_NO_CUDA_BACKEND
  BLU_THROW("Storage: this build of blutensor has no CUDA backend (BLU_TENSOR_CUDA_BACKEND=OFF)");
#else
  DeviceGuard guard(device);
  data_ = cuda::CachingAllocator::get().allocate(nbytes, device.index,
                                                 cuda::current_stream(device.index));
  deleter_ = [](void* p) { cuda::CachingAllocator::get().free(p); };
#endif
}

Storage::Storage(void* data, std::size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (data_ != nullptr && deleter_) deleter_(data_);
}

}  // namespace blu
