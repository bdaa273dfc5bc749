// sm80_gemm.cu: the mma.sync path's entry points for the dispatcher (gemm_problem.h). It takes
// bf16/f16 operands, or f32 operands with compute=tf32, on sm_80 and newer (the sm_90a build of
// the same kernels is the forceable kSm80Mma path on Hopper), with 16-byte aligned operand
// pointers, leading dimensions and batch strides (cp.async granularity). C, D, aux and bias have
// no alignment requirement. Split-K (Note [sm80 split-K] in heuristics.cpp) keeps fp32 partials in
// the workspace and reduces them with splitk_reduce; the bias-gradient epilogues run as a
// fixed-order pass (bias_grad_reduce.cu) after the GEMM, with their partials after the split-K ones.
#include <cstdint>

#include "blublas/check.h"
#include "gemm/epilogue.cuh"
#include "gemm/heuristics.h"
#include "gemm/sm80_gemm_launch.h"
#include "gemm/splitk_reduce.h"

namespace blublas::gemm_detail {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// The split-K partials first, then the bias-gradient partials at a 256-byte boundary.
std::size_t partial_region(const GemmProblem& p, const Sm80Plan& plan) {
  return (sm80_partial_bytes(p, plan) + 255) / 256 * 256;
}

}  // namespace

Status sm80_gemm_supports(const GemmProblem& p, const DeviceInfo& dev) {
  BLUBLAS_CHECK(dev.sm_version() >= 80, StatusCode::kUnsupportedArch,
                "sm80_mma path needs sm_80 or newer (device is sm_", dev.sm_version(), ")");
  if (dtype_is_fp8(p.ab_type)) {  // Note [sm89 FP8 mma.sync]
    BLUBLAS_CHECK(dev.sm_version() >= 89, StatusCode::kUnsupportedArch,
                  "sm80_mma path: FP8 mma.sync needs sm_89 or newer (device is sm_", dev.sm_version(), ")");
    BLUBLAS_CHECK(p.a_k_major && p.b_k_major, StatusCode::kNotSupported,
                  "sm80_mma path: FP8 needs both operands K-major");
  }
  const bool tf32 = p.ab_type == Dtype::kF32 && p.compute == ComputeMode::kTF32;
  BLUBLAS_CHECK(p.ab_type != Dtype::kF32 || tf32, StatusCode::kNotSupported,
                "sm80_mma path: f32 inputs need compute=tf32 (strict fp32 runs on the simt path)");
  BLUBLAS_CHECK(!(p.ab_type == Dtype::kF32 && p.cd_type != Dtype::kF32), StatusCode::kNotSupported,
                "sm80_mma path: f32 inputs need f32 output");
  const int64_t elem = static_cast<int64_t>(dtype_size(p.ab_type));
  const int64_t per16 = 16 / elem;
  BLUBLAS_CHECK(aligned16(p.a) && aligned16(p.b), StatusCode::kMisaligned,
                "sm80_mma path needs 16-byte aligned A and B pointers");
  BLUBLAS_CHECK(p.lda % per16 == 0 && p.ldb % per16 == 0, StatusCode::kMisaligned,
                "sm80_mma path needs leading dimensions of A and B that are multiples of ", per16,
                " ", dtype_name(p.ab_type), " elements (16 bytes); got ", p.lda, " and ", p.ldb,
                " (normalized operands)");
  BLUBLAS_CHECK(p.stride_a % per16 == 0 && p.stride_b % per16 == 0, StatusCode::kMisaligned,
                "sm80_mma path needs batch strides of A and B that are multiples of ", per16,
                " elements; got ", p.stride_a, " and ", p.stride_b);
  BLUBLAS_CHECK(p.batch <= 65535, StatusCode::kNotSupported,
                "sm80_mma path takes batch <= 65535 (batch=", p.batch, ")");
  BLUBLAS_CHECK(dev.max_smem_per_block_optin >= kSm80MaxSmemBytes, StatusCode::kUnsupportedArch,
                "sm80_mma path needs ", kSm80MaxSmemBytes, " bytes of shared memory per block (device: ",
                dev.max_smem_per_block_optin, ")");
  return Status::success();
}

std::size_t sm80_gemm_workspace_bytes(const GemmProblem& p, const DeviceInfo& dev) {
  return partial_region(p, choose_sm80_plan(p, dev)) + bias_grad_workspace_bytes(p, dev);
}

Status sm80_gemm_run(const GemmProblem& p, const DeviceInfo& dev, void* workspace,
                     std::size_t workspace_bytes, cudaStream_t stream) {
  const Sm80Plan plan = choose_sm80_plan(p, dev);
  const std::size_t region = partial_region(p, plan);
  BLUBLAS_CHECK(workspace_bytes >= region && (region == 0 || workspace != nullptr), StatusCode::kInvalidArgument,
                "sm80_mma path: split-K into ", plan.splits, " needs ", region, " bytes of workspace, got ",
                workspace_bytes);
  float* partial = static_cast<float*>(workspace);
  switch (p.ab_type) {
    case Dtype::kBF16: BLUBLAS_RETURN_IF_ERROR(sm80_bf16_launch(p, plan, partial, stream)); break;
    case Dtype::kF16: BLUBLAS_RETURN_IF_ERROR(sm80_f16_launch(p, plan, partial, stream)); break;
    case Dtype::kF32: BLUBLAS_RETURN_IF_ERROR(sm80_tf32_launch(p, plan, partial, stream)); break;
    case Dtype::kE4M3:
    case Dtype::kE5M2: BLUBLAS_RETURN_IF_ERROR(sm80_fp8_launch(p, plan, partial, stream)); break;
  }
  if (plan.splits > 1) {
    BLUBLAS_RETURN_IF_ERROR(splitk_reduce(p, partial, sm80_partial_ld(p), plan.splits, stream));
  }
  return bias_grad_run(p, dev, region == 0 ? workspace : static_cast<char*>(workspace) + region,
                       workspace_bytes - region, stream);
}

}  // namespace blublas::gemm_detail
