// A two-layer MLP trains to low loss on the CPU (support/mlp_problem.h).
#include <gtest/gtest.h>

#include "support/mlp_problem.h"

TEST(MlpTrain, ReachesLowLossOnCpu) {
  blu::test::MlpRun run = blu::test::train_mlp(blu::kCPU, 300);
  ASSERT_EQ(run.losses.size(), 300u);
  std::printf("mlp cpu: loss %.4f -> %.4f, accuracy %.3f\n", run.losses.front(), run.losses.back(),
              run.final_accuracy);
  EXPECT_GT(run.losses.front(), 1.0);
  EXPECT_LT(run.losses.back(), 0.15);
  EXPECT_GT(run.final_accuracy, 0.95);
}

TEST(MlpTrain, Float64RunAgreesWithFloat32) {
  blu::test::MlpRun a = blu::test::train_mlp(blu::kCPU, 20, blu::kFloat32);
  blu::test::MlpRun b = blu::test::train_mlp(blu::kCPU, 20, blu::kFloat64);
  for (int i = 0; i < 20; ++i) EXPECT_NEAR(a.losses[i], b.losses[i], 1e-3 * (1 + i)) << "step " << i;
}
