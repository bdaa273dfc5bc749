// GPU test helpers: BLU_REQUIRE_GPU() skips a test cleanly where no CUDA device is usable, unless
// BLU_REQUIRE_GPU=1 is set (the device script sets it: a skipped GPU test is a failure there).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace blu::test {

// Empty when a device is usable, else the reason.
inline std::string gpu_unavailable_reason() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("no usable CUDA device (") + cudaGetErrorString(err) + ")";
  }
  if (n == 0) return "no CUDA device present";
  return "";
}

// The current device's compute capability major (0 when none is usable).
inline int gpu_sm_major() {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return major;
}

inline bool gpu_required() {
  const char* v = std::getenv("BLU_REQUIRE_GPU");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace blu::test

#define BLU_REQUIRE_GPU()                                                         \
  do {                                                                            \
    std::string blu_reason_ = ::blu::test::gpu_unavailable_reason();              \
    if (!blu_reason_.empty()) {                                                   \
      if (::blu::test::gpu_required()) {                                          \
        FAIL() << "BLU_REQUIRE_GPU=1 but " << blu_reason_;                        \
      } else {                                                                    \
        GTEST_SKIP() << "GPU test skipped: " << blu_reason_;                      \
      }                                                                           \
    }                                                                             \
  } while (0)

#define BLU_CUDA_TEST_CHECK(expr)                                                  \
  do {                                                                             \
    cudaError_t blu_e_ = (expr);                                                   \
    ASSERT_EQ(blu_e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(blu_e_); \
  } while (0)
