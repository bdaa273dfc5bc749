// optimizer_test.cpp: blu::train's AdamW and clip_grad_norm take the same steps with contiguous
// and with strided gradients on the CPU (both through blutensor's multi-tensor primitives, Note
// [Fused optimizer step]), to f32 rounding per element over several steps with and without
// clipping; the learning-rate schedule.
#include <gtest/gtest.h>

#include "optimizer_compare.h"

TEST(TrainOptimizer, ContiguousAndStridedGradientsTakeTheSameSteps) {
  blu::test::compare_optimizer_paths(blu::test::OptimizerCase{}, blu::kCPU, /*strided_grads=*/true);
}

TEST(TrainOptimizer, ClipAndUpdateIsClipThenStepBitwise) {
  blu::test::expect_clip_and_update_is_clip_then_step(blu::kCPU);
}

TEST(TrainOptimizer, DeferredUpdateIsClipAndUpdateWithTheSkipOnTheDevice) {
  blu::test::expect_deferred_update_is_clip_and_update(blu::kCPU);
}

TEST(TrainOptimizer, LearningRateScheduleWarmupThenCosine) {
  using blu::train::learning_rate;
  EXPECT_DOUBLE_EQ(learning_rate(0, 1.0, 0.1, 10, 100), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(9, 1.0, 0.1, 10, 100), 1.0);
  EXPECT_NEAR(learning_rate(55, 1.0, 0.1, 10, 100), 0.55, 1e-12);
  EXPECT_DOUBLE_EQ(learning_rate(100, 1.0, 0.1, 10, 100), 0.1);
}
