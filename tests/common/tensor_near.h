// Test helper: two tensors of the same shape, elementwise within an absolute tolerance (the first
// element outside it is reported with `what`).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "blutensor/tensor.h"

namespace blu::test {

inline void expect_tensor_near(const Tensor& got, const Tensor& want, double tolerance, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const std::vector<double> a = got.contiguous().to_double_vector(), b = want.contiguous().to_double_vector();
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tolerance) << what << " element " << i;
}

}  // namespace blu::test
