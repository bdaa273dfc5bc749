// blutensor/op_registry.h: every differentiable op with a recipe for random inputs, so that one
// loop can check them all: finite differences in float64 on the CPU (tests/blutensor/
// gradcheck_test.cpp) and CPU vs CUDA agreement on the device (ops_cpu_vs_cuda_gpu_test.cpp).
//
// Inputs are drawn on the CPU in float64 from a Generator seeded by `seed`, then converted to the
// requested dtype and moved to the device, so CPU and CUDA runs of one case see the same values.
// Sizes are odd (not multiples of any tile); size_scale > 1 makes them larger (still odd).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "blutensor/tensor.h"

namespace blu {

struct OpInputSpec {
  Device device = kCPU;
  DType dtype = kFloat64;
  uint64_t seed = 1;
  int size_scale = 1;
};

struct OpCase {
  std::string name;
  // Leaves: the differentiable ones have requires_grad set.
  std::function<std::vector<Tensor>(const OpInputSpec&)> make_inputs;
  std::function<Tensor(const std::vector<Tensor>&)> forward;
  std::vector<bool> differentiable;  // per input
  bool gradcheck = true;             // false where finite differences are meaningless (casts)
  double tolerance_scale = 1.0;      // widens the CPU-vs-CUDA tolerance for long reductions
};

const std::vector<OpCase>& op_registry();

}  // namespace blu
