// sm80_gemm_launch.h (internal): per-dtype launchers of the mma.sync kernels, each defined in its
// explicit-instantiation file (sm80_bf16_gemm.cu, sm80_f16_gemm.cu, sm80_tf32_gemm.cu), and the
// tile configurations they instantiate (chosen by heuristics.cpp). `partial`: the split-K partials
// (sm80_partial_bytes(p, plan) of workspace) when plan.splits > 1, else unused.
#pragma once

#include <cuda_runtime.h>

#include "gemm/gemm_problem.h"
#include "gemm/heuristics.h"

namespace blublas::gemm_detail {

Status sm80_bf16_launch(const GemmProblem& p, const Sm80Plan& plan, float* partial, cudaStream_t stream);
Status sm80_f16_launch(const GemmProblem& p, const Sm80Plan& plan, float* partial, cudaStream_t stream);
Status sm80_tf32_launch(const GemmProblem& p, const Sm80Plan& plan, float* partial, cudaStream_t stream);
// FP8 (A's and B's formats from p.ab_type / p.b_type; K-major operands; sm_89 and newer).
Status sm80_fp8_launch(const GemmProblem& p, const Sm80Plan& plan, float* partial, cudaStream_t stream);

// Dynamic shared memory of the largest configuration (bytes): 4 stages of 128 x 64-byte A and B
// slices plus padding, whatever the dtype.
constexpr int kSm80MaxSmemBytes = 4 * 2 * 128 * 80;

}  // namespace blublas::gemm_detail
