// gemm_problem.h (internal): the normalized GEMM every kernel path receives, and the entry points
// each path exports to the dispatcher (gemm.cpp). Normalization folds layout and transposes into
// one row-major form so kernels handle two operand majors instead of eight descriptor variants.
#pragma once

#include <cstddef>
#include <cstdint>

#include "blublas/device_info.h"
#include "blublas/gemm.h"

namespace blublas::gemm_detail {

// Row-major D (M x N, element (i,j) at d[i*ldd + j]) = epi(alpha * A' B' + beta * C).
//  A' (M x K): a_k_major  -> element (i,k) at a[i*lda + k]   (rows of A' contiguous in k)
//              !a_k_major -> element (i,k) at a[k*lda + i]   (columns contiguous in m)
//  B' (K x N): b_k_major  -> element (k,j) at b[j*ldb + k]   (columns of B' contiguous in k)
//              !b_k_major -> element (k,j) at b[k*ldb + j]
// A column-major desc becomes the row-major transpose problem (M and N, A and B swapped); the
// epilogue vectors follow: bias_per_col says whether bias is indexed by j (true) or i (false),
// bias_grad_of says which operand's reduction the caller asked for after the swap.
struct GemmProblem {
  int m = 0, n = 0, k = 0, batch = 1;
  Dtype ab_type = Dtype::kF32;  // A's dtype
  Dtype b_type = Dtype::kF32;   // B's dtype (resolved: equals ab_type except for FP8 pairs)
  Dtype cd_type = Dtype::kF32;
  ComputeMode compute = ComputeMode::kStrictF32;  // resolved: never kDefault for f32 inputs

  const void* a = nullptr;  int64_t lda = 0, stride_a = 0;  bool a_k_major = true;
  const void* b = nullptr;  int64_t ldb = 0, stride_b = 0;  bool b_k_major = true;
  const void* c = nullptr;  int64_t ldc = 0, stride_c = 0;
  void* d = nullptr;        int64_t ldd = 0, stride_d = 0;
  float alpha = 1.0f, beta = 0.0f;

  Epilogue epilogue = Epilogue::kNone;  // kBiasGradA/B refer to A'/B' of this problem
  const void* bias = nullptr;  bool bias_per_col = true;
  void* aux = nullptr;  int64_t ld_aux = 0, stride_aux = 0;  // row-major like D
  float* bias_grad = nullptr;
  const float* scale_a = nullptr;  // FP8 (GemmDesc::scale_a / scale_b: their product scales acc)
  const float* scale_b = nullptr;
  float* amax = nullptr;           // FP8: GemmDesc::amax_d
  int max_ctas = 0;                // GemmDesc::max_ctas (sm90: the persistent grid's cap)
};

// Fills *p from a validated desc. Returns kInvalidArgument naming the field for a bad desc.
Status normalize(const GemmDesc& desc, GemmProblem* p);

// Each path: can it take p on this device (alignment, arch, dtype, epilogue)? The message says why
// not. Workspace bytes it needs. Run (asynchronous, no allocation, no sync).
#define BLUBLAS_GEMM_PATH_ENTRY_POINTS(prefix)                                                  \
  Status prefix##_gemm_supports(const GemmProblem& p, const DeviceInfo& dev);                    \
  std::size_t prefix##_gemm_workspace_bytes(const GemmProblem& p, const DeviceInfo& dev);       \
  Status prefix##_gemm_run(const GemmProblem& p, const DeviceInfo& dev, void* workspace,         \
                           std::size_t workspace_bytes, cudaStream_t stream);

BLUBLAS_GEMM_PATH_ENTRY_POINTS(simt)   // src/gemm/simt_f32_gemm.cu (+ 16-bit SIMT fallback)
BLUBLAS_GEMM_PATH_ENTRY_POINTS(sm80)   // src/gemm/sm80_*_gemm.cu
BLUBLAS_GEMM_PATH_ENTRY_POINTS(sm90)   // src/gemm/sm90_*_gemm.cu

#undef BLUBLAS_GEMM_PATH_ENTRY_POINTS

}  // namespace blublas::gemm_detail
