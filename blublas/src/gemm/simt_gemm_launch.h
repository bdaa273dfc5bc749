// simt_gemm_launch.h (internal): the SIMT GEMM kernels' launchers, called by the SIMT path entry
// points (simt_gemm.cu). Arguments are already validated and normalized.
#pragma once

#include <cuda_runtime.h>

#include "gemm/gemm_problem.h"
#include "gemm/heuristics.h"

namespace blublas::gemm_detail {

// Strict fp32 (FFMA only), register-blocked and shared-memory tiled; any alignment (float4 global
// loads where ld, stride and pointer allow). simt_f32_gemm.cu.
Status simt_f32_tiled_launch(const GemmProblem& p, SimtKernel tile, cudaStream_t stream);

// Any input dtype, any alignment: element loads converted to fp32 in shared memory, fp32 FMA.
// The kAuto fallback for 16-bit inputs no tensor-core path accepts. simt_generic_gemm.cu.
Status simt_generic_launch(const GemmProblem& p, cudaStream_t stream);

}  // namespace blublas::gemm_detail
