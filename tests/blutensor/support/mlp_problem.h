// A two-layer MLP on a synthetic, learnable classification problem (labels from a fixed random
// teacher), trained with AdamW. The same code runs on the CPU (mlp_train_test) and on CUDA
// (mlp_train_gpu_test); data and initial weights come from seeded Philox streams, so both devices
// start from identical values.
#pragma once

#include <vector>

#include "blutensor/blutensor.h"

namespace blu::test {

struct MlpRun {
  std::vector<double> losses;  // one per step
  double final_accuracy = 0;   // on the training set
};

MlpRun train_mlp(Device device, int steps, DType dtype = kFloat32);

}  // namespace blu::test
