// The MLP of mlp_train_test trained on CUDA with the same code: reaches low loss and follows the
// CPU run's loss curve (same data, weights and dropout masks: Philox on both devices).
#include <gtest/gtest.h>

#include <cmath>

#include "common/gpu_test.h"
#include "support/mlp_problem.h"

TEST(MlpTrainGpu, ReachesLowLossOnCudaAndTracksCpu) {
  BLU_REQUIRE_GPU();
  const int steps = 300;
  blu::test::MlpRun gpu = blu::test::train_mlp(blu::Device::cuda(0), steps);
  blu::test::MlpRun cpu = blu::test::train_mlp(blu::kCPU, steps);
  std::printf("mlp cuda: loss %.4f -> %.4f, accuracy %.3f (cpu %.4f -> %.4f)\n", gpu.losses.front(),
              gpu.losses.back(), gpu.final_accuracy, cpu.losses.front(), cpu.losses.back());
  ASSERT_EQ(gpu.losses.size(), static_cast<std::size_t>(steps));
  EXPECT_LT(gpu.losses.back(), 0.15);
  EXPECT_GT(gpu.final_accuracy, 0.95);
  // Same start; the curves stay close early on (float32 rounding differs between devices).
  EXPECT_NEAR(gpu.losses[0], cpu.losses[0], 1e-4);
  for (int i = 1; i < 30; ++i) {
    EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 2e-3 * (1 + std::fabs(cpu.losses[i]))) << "step " << i;
  }
}
