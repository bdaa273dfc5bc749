// The CPU-only build (BLU_WITH_CUDA=0, Note [CPU-only build] in the top-level CMakeLists.txt):
// no CUDA device is reported, and every way of reaching one fails with a blu::Error that says the
// build has no CUDA (never a crash, never "0 devices" alone). In a CUDA build these tests skip.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "blutensor/blutensor.h"
#include "blutensor/cuda_stream.h"
#include "support/error_of.h"

namespace {

using namespace blu;

using blu::test::error_of;

#define SKIP_IN_CUDA_BUILD() \
  if (BLU_WITH_CUDA)         \
  GTEST_SKIP() << "a CUDA build (BLU_WITH_CUDA=1): the CPU-only stubs are not linked"

TEST(CpuOnlyBuild, ReportsNoDevice) {
  SKIP_IN_CUDA_BUILD();
  EXPECT_EQ(cuda_device_count(), 0);
  EXPECT_FALSE(cuda_is_available());
  EXPECT_EQ(cuda::device_count(), 0);
  EXPECT_FALSE(cuda::is_available());
}

TEST(CpuOnlyBuild, CudaTensorsAndRuntimeCallsSayBuiltWithoutCuda) {
  SKIP_IN_CUDA_BUILD();
  const std::string alloc = error_of([] { (void)zeros({2, 3}, Device::cuda()); });
  EXPECT_NE(alloc.find("built without CUDA"), std::string::npos) << alloc;
  const std::string to = error_of([] { (void)ones({4}).cuda(); });
  EXPECT_NE(to.find("built without CUDA"), std::string::npos) << to;
  const std::string guard = error_of([] { DeviceGuard g(Device::cuda(0)); });
  EXPECT_NE(guard.find("built without CUDA"), std::string::npos) << guard;
  for (const auto& call : std::vector<std::function<void()>>{
           [] { cuda::set_device(0); }, [] { (void)cuda::current_stream(0); },
           [] { cuda::synchronize_device(0); }, [] { (void)cuda::Stream::create(); },
           [] { cuda::StreamGuard g(nullptr, 0); }}) {
    const std::string e = error_of(call);
    EXPECT_NE(e.find("built without CUDA"), std::string::npos) << e;
  }
  // The CPU is untouched: a DeviceGuard on the CPU is a no-op, matmul precision is settable.
  DeviceGuard cpu_guard(kCPU);
  set_matmul_precision(MatmulPrecision::kHigh);
  EXPECT_EQ(matmul_precision(), MatmulPrecision::kHigh);
  set_matmul_precision(MatmulPrecision::kHighest);
}

}  // namespace
