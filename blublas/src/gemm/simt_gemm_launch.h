// simt_gemm_launch.h (internal): the SIMT GEMM kernels' launchers, called by the SIMT path entry
// points (simt_gemm.cu). Arguments are already validated and normalized.
#pragma once

#include <cuda_runtime.h>

#include "gemm/gemm_problem.h"
#include "gemm/heuristics.h"

namespace blublas::gemm_detail {

// Strict fp32 (FFMA only), register-blocked and shared-memory tiled; any alignment (float4 global
// loads where ld, stride and pointer allow). simt_f32_gemm.cu.
// Split-K (Note [SIMT split-K] in heuristics.cpp): blockIdx.z = split * batches + batch; split s
// covers k in [s * k_split, min(k, (s + 1) * k_split)) and, when partial != null, stores its raw
// tile to partial[((s * batches + batch) * m + i) * n + j] instead of running the epilogue.
struct SplitArgs {
  int batches = 1;
  int k_split = 0;  // 0: one split over all of k
  float* partial = nullptr;
};

// Runs f.template operator()<A_KMAJ, B_KMAJ>() with p's operand majors as template arguments: the
// four-way dispatch of every SIMT launcher (a kernel is instantiated per pair of majors).
template <class F>
Status with_majors(const GemmProblem& p, F&& f) {
  if (p.a_k_major) {
    return p.b_k_major ? f.template operator()<true, true>() : f.template operator()<true, false>();
  }
  return p.b_k_major ? f.template operator()<false, true>() : f.template operator()<false, false>();
}

// With plan.splits > 1, `partial` holds splits * batch * M * N floats (simt_split_bytes).
Status simt_f32_tiled_launch(const GemmProblem& p, const SimtPlan& plan, float* partial,
                             cudaStream_t stream);
std::size_t simt_split_bytes(const GemmProblem& p, const SimtPlan& plan);

// Warp-tiled strict fp32 kernel (Note [SIMT fp32 warp tiling], simt_f32_warp_gemm.cu): 128 x 128
// CTA tiles, 128 threads, k816 = 8 x 16 accumulators per lane, k168 = 16 x 8. Same SplitArgs
// contract as simt_f32_tiled_launch. Needs `vec` (A and B allow float4 loads: vec4_ok).
enum class SimtWarpVariant : int { k816 = 0, k168 };
Status simt_f32_warp_launch(const GemmProblem& p, SimtWarpVariant v, const SplitArgs& split,
                            int splits, bool vec, cudaStream_t stream);

// Lean strict fp32 kernels (Note [SIMT fp32 lean kernel], simt_f32_lean_gemm.cu): bounds settled
// before the main loop (clamped rows, one guarded tail slab). k88: 128 x 128, 256 threads, 8 x 8
// per lane; k816 (k168): 128 x 128, 128 threads, 8 x 16 (16 x 8); k88n64: 128 x 64, 128 threads,
// 8 x 8. Same SplitArgs contract. Accepts a problem when simt_f32_lean_ok(p, vec): vec, and M (N) a multiple
// of 4 when A (B) is m- (n-) contiguous.
// The k16 variants: the same tiles with 16-deep slabs (Note [Deep slabs]; the other deep tiles lost
// 0.51-0.80 in the session 7 sweep and were removed).
enum class SimtLeanVariant : int {
  k88 = 0, k816, k168, k88n64, k816w, k168w, k88k16, k88n64k16,
};
bool simt_f32_lean_ok(const GemmProblem& p, bool vec);
Status simt_f32_lean_launch(const GemmProblem& p, SimtLeanVariant v, const SplitArgs& split,
                            int splits, bool vec, cudaStream_t stream);
// The k16 variants (simt_f32_lean_k16_gemm.cu), called by simt_f32_lean_launch once it accepted p.
Status simt_f32_lean_k16_launch(const GemmProblem& p, SimtLeanVariant v, const SplitArgs& split,
                                int splits, cudaStream_t stream);

// Any input dtype, any alignment: element loads converted to fp32 in shared memory, fp32 FMA.
// The kAuto fallback for 16-bit inputs no tensor-core path accepts. simt_generic_gemm.cu.
Status simt_generic_launch(const GemmProblem& p, cudaStream_t stream);

}  // namespace blublas::gemm_detail
