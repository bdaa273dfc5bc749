// Test support: two loss curves agree step by step within a relative tolerance (the distributed
// modes against the one-process run of the same global batch). Prints the largest difference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace blu::test {

// Returns the largest relative difference; a failed EXPECT names the first steps that differ.
inline double expect_same_loss_curve(const std::vector<double>& got, const std::vector<double>& ref,
                                     double rel, const std::string& label) {
  EXPECT_EQ(got.size(), ref.size()) << label;
  const std::size_t n = std::min(got.size(), ref.size());
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_LE(std::fabs(got[i] - ref[i]), rel * std::fabs(ref[i]))
        << label << " step " << i << ": " << got[i] << " vs one process " << ref[i];
    worst = std::max(worst, std::fabs(got[i] - ref[i]) / std::fabs(ref[i]));
  }
  if (n > 0)
    std::printf("%s: loss %.6f -> %.6f over %zu steps; max rel diff %.3g\n", label.c_str(),
                ref.front(), ref.back(), n, worst);
  return worst;
}

}  // namespace blu::test
