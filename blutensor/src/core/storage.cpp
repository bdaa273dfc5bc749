// Storage: 64-byte aligned host memory, or CUDA memory from the caching allocator on the
// device's current stream (Note [CUDA storage] in tensor.h).
#include <cstdlib>
#include <map>
#include <mutex>

#include "blutensor/cuda_stream.h"
#include "capture/capture_fresh.h"
#include "blutensor/tensor.h"
#ifndef BLU_TENSOR_NO_CUDA_BACKEND
#include "blutensor/cuda_allocator.h"
#endif

namespace blu {

namespace {
constexpr std::size_t kCpuAlignmentBytes = 64;

// Note [CPU block cache]
// Training allocates the same large buffers every step (logits, their gradient, activations).
// Fresh multi-megabyte mallocs are mmaps whose pages fault in on first touch, which cost more than
// the ops that use them; so freed CPU blocks of >= 1 MiB are kept, keyed by exact size, up to
// 2 GiB in total, and handed back to an allocation of the same size. Never destroyed (tensors in
// static storage may outlive it otherwise).
class CpuBlockCache {
 public:
  static constexpr std::size_t kMinBytes = std::size_t{1} << 20;
  static constexpr std::size_t kMaxCachedBytes = std::size_t{2} << 30;

  static CpuBlockCache& get() {
    static CpuBlockCache* cache = new CpuBlockCache();
    return *cache;
  }
  void* allocate(std::size_t rounded) {
    if (rounded >= kMinBytes) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(rounded);
      if (it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        cached_bytes_ -= rounded;
        return p;
      }
    }
    return std::aligned_alloc(kCpuAlignmentBytes, rounded);
  }
  void release(void* p, std::size_t rounded) {
    if (rounded >= kMinBytes) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_bytes_ + rounded <= kMaxCachedBytes) {
        free_.emplace(rounded, p);
        cached_bytes_ += rounded;
        return;
      }
    }
    std::free(p);
  }

 private:
  std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;
  std::size_t cached_bytes_ = 0;
};
}

Storage::Storage(std::size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  capture::detail::note_storage_allocated(this);  // Note [Fresh buffers]
  if (device.is_cpu()) {
    std::size_t rounded = (nbytes + kCpuAlignmentBytes - 1) / kCpuAlignmentBytes * kCpuAlignmentBytes;
    if (rounded == 0) rounded = kCpuAlignmentBytes;
    data_ = CpuBlockCache::get().allocate(rounded);
    BLU_CHECK(data_ != nullptr, "Storage: out of host memory allocating ", nbytes, " bytes");
    deleter_ = [rounded](void* p) { CpuBlockCache::get().release(p, rounded); };
    return;
  }
#if !BLU_WITH_CUDA
  BLU_THROW("Storage: ", device.str(), " requested but this build of BluTrain was built without CUDA "
            "(BLU_WITH_CUDA=OFF); use the CPU or rebuild with the CUDA toolkit");
#endif
  static const int device_count = cuda_device_count();  // fixed for the process's lifetime
  BLU_CHECK(device.index >= 0 && device.index < device_count, "Storage: device ", device.str(),
            " is not available (", device_count, " CUDA devices)");
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
