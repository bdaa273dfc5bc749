// Run-time device queries: sane values on a GPU; device_count() is 0 (not an error) without one.
#include <gtest/gtest.h>

#include "blublas/blublas.h"
#include "common/gpu_test.h"

TEST(DeviceInfo, CountNeverFails) { EXPECT_GE(blublas::device_count(), 0); }

TEST(DeviceInfo, QueriesTheCurrentDevice) {
  BLU_REQUIRE_GPU();
  blublas::DeviceInfo info;
  blublas::Status st = blublas::current_device_info(&info);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_GE(info.sm_version(), 70);
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GE(info.max_smem_per_block_optin, 48 * 1024);
  EXPECT_GT(info.l2_bytes, 0);
}

TEST(DeviceInfo, NullPointerIsAnArgumentError) {
  EXPECT_EQ(blublas::current_device_info(nullptr).code(), blublas::StatusCode::kInvalidArgument);
}
