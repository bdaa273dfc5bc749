// gemm_reference.h: the float64 GEMM reference of the blublas GEMM tests. It reads A and B exactly
// as a GemmDesc describes them (layout, ops, leading dimensions, batch strides, dtype) and, for a
// list of sampled output elements (all of them for small problems), returns in float64
//   acc(b, i, j) = sum_k op(A)(i, k) op(B)(k, j)   and   abs(b, i, j) = sum_k |op(A)(i, k)| |op(B)(k, j)|
// computed on the GPU (one thread per sample), so 4099-sized problems check in milliseconds.
// The bias-gradient reference (sum over k of an operand) is computed the same way.
#pragma once

#include <blublas/gemm.h>

#include <cstdint>
#include <string>
#include <vector>

namespace blu::test {

struct GemmSample {
  int batch = 0, i = 0, j = 0;
};

struct GemmRefValue {
  double acc = 0.0;  // sum_k op(A)(i,k) op(B)(k,j)
  double abs = 0.0;  // sum_k |op(A)(i,k)| |op(B)(k,j)|
};

// Samples every element when batch*m*n <= max_full, else `count` random ones (seeded) plus the
// corners and the last row and column of every batch (where edge-tile bugs live).
std::vector<GemmSample> gemm_samples(int batch, int m, int n, int64_t max_full, int count,
                                     uint64_t seed);

// Float64 reference on the device for the given samples (d's a, b, sizes, ops, layout, ld,
// strides and ab_type are used; c, d and the epilogue are not). Returns "" or an error message.
std::string gemm_reference(const blublas::GemmDesc& d, const std::vector<GemmSample>& samples,
                           std::vector<GemmRefValue>* out);

// Float64 sums over k: rows of op(A) (which_a: length M) or columns of op(B) (length N), batch 0.
std::string gemm_operand_sums(const blublas::GemmDesc& d, bool which_a, std::vector<double>* out);

}  // namespace blu::test
