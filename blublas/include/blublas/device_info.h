// blublas/device_info.h: what the launchers need to know about a device, queried at run time
// (SM count, shared-memory limits, L2 size, compute capability) and cached per device.
#pragma once

#include <cuda_runtime.h>

#include "blublas/status.h"

namespace blublas {

struct DeviceInfo {
  int device = -1;
  int sm_major = 0;
  int sm_minor = 0;
  int sm_count = 0;
  int max_smem_per_block_optin = 0;  // bytes, after cudaFuncSetAttribute
  int max_smem_per_sm = 0;           // bytes
  int l2_bytes = 0;
  int max_threads_per_sm = 0;
  int sm_version() const { return sm_major * 10 + sm_minor; }
};

// Number of CUDA devices visible; 0 (never an error) when there is no driver or no device.
int device_count() noexcept;

// Properties of the current device (cached after the first query of each device; thread-safe).
Status current_device_info(DeviceInfo* info) noexcept;

}  // namespace blublas
