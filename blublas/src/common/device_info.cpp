// Run-time device queries, cached per device. Never hard-codes SM counts or cache sizes.
#include "blublas/device_info.h"

#include <array>
#include <mutex>

#include "blublas/check.h"

namespace blublas {
namespace {
constexpr int kMaxDevices = 64;
std::mutex g_mutex;
std::array<DeviceInfo, kMaxDevices> g_cache;
std::array<bool, kMaxDevices> g_cached{};
}  // namespace

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

Status current_device_info(DeviceInfo* info) noexcept {
  BLUBLAS_CHECK_ARG(info != nullptr, "current_device_info: info is null");
  int dev = 0;
  BLUBLAS_CUDA_CHECK(cudaGetDevice(&dev));
  BLUBLAS_CHECK_ARG(dev >= 0 && dev < kMaxDevices, "current_device_info: device ", dev,
                    " out of range");
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_cached[dev]) {
    DeviceInfo d;
    d.device = dev;
    BLUBLAS_CUDA_CHECK(cudaDeviceGetAttribute(&d.sm_major, cudaDevAttrComputeCapabilityMajor, dev));
    BLUBLAS_CUDA_CHECK(cudaDeviceGetAttribute(&d.sm_minor, cudaDevAttrComputeCapabilityMinor, dev));
    BLUBLAS_CUDA_CHECK(cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, dev));
    BLUBLAS_CUDA_CHECK(cudaDeviceGetAttribute(&d.max_smem_per_block_optin,
                                              cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    BLUBLAS_CUDA_CHECK(cudaDeviceGetAttribute(&d.max_smem_per_sm,
                                              cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    BLUBLAS_CUDA_CHECK(cudaDeviceGetAttribute(&d.l2_bytes, cudaDevAttrL2CacheSize, dev));
    BLUBLAS_CUDA_CHECK(cudaDeviceGetAttribute(&d.max_threads_per_sm,
                                              cudaDevAttrMaxThreadsPerMultiProcessor, dev));
    g_cache[dev] = d;
    g_cached[dev] = true;
  }
  *info = g_cache[dev];
  return Status::success();
}

}  // namespace blublas
