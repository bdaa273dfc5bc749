// splitk_reduce.h (internal): the split-K reduction shared by the tensor-core GEMM paths
// (splitk_reduce.cu; plain CUDA, any arch).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gemm/gemm_problem.h"

namespace blublas::gemm_detail {

// D = epilogue(sum over splits of partial[s]) in split order (deterministic). partial[s] holds
// p.batch x p.m rows of partial_ld floats (partial_ld even, >= p.n), split s at s * partial_ld * m
// * batch; FP8 scales must already be applied to the partials.
Status splitk_reduce(const GemmProblem& p, const float* partial, int64_t partial_ld, int splits,
                     cudaStream_t stream);

}  // namespace blublas::gemm_detail
