// random_leaf: a seeded normal(0, scale^2) f32 leaf tensor that requires grad, the parameters of the
// small models the blutensor tests build (capture_test, capture_arena_test).
#pragma once

#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "blutensor/random.h"

namespace blu::test {

inline Tensor random_leaf(Shape s, double scale, Generator& g) {
  Tensor t;
  {
    NoGradGuard ng;
    t = mul(randn(s, TensorOptions(kFloat32), &g), scale);
  }
  t.requires_grad_(true);
  return t;
}

}  // namespace blu::test
