// simt_gemm.cu: the SIMT path's entry points for the dispatcher (gemm_problem.h): what it accepts
// (every dtype, layout, alignment and epilogue, on sm_80 and newer), its workspace (only the
// bias-gradient partials) and the choice between the tiled strict-fp32 kernel and the generic
// kernel (heuristics.cpp).
#include <cstdint>

#include "blublas/check.h"
#include "gemm/epilogue.cuh"
#include "gemm/heuristics.h"
#include "gemm/simt_gemm_launch.h"

namespace blublas::gemm_detail {

Status simt_gemm_supports(const GemmProblem& p, const DeviceInfo& dev) {
  BLUBLAS_CHECK(dev.sm_version() >= 80, StatusCode::kUnsupportedArch,
                "simt path needs sm_80 or newer (device is sm_", dev.sm_version(), ")");
  BLUBLAS_CHECK(p.batch <= 65535, StatusCode::kNotSupported, "simt path takes batch <= 65535 (batch=",
                p.batch, ")");
  BLUBLAS_CHECK((static_cast<int64_t>(p.m) + 63) / 64 <= 65535, StatusCode::kNotSupported,
                "simt path takes M <= ", 65535 * 64, " rows of the normalized problem");
  BLUBLAS_CHECK(!(p.ab_type == Dtype::kF32 && p.cd_type != Dtype::kF32), StatusCode::kNotSupported,
                "simt path: f32 inputs need f32 output");
  return Status::success();
}

// Workspace: [split-K partials][bias-gradient partials], each 256-byte aligned.
namespace {
std::size_t align256(std::size_t v) { return (v + 255) / 256 * 256; }
}  // namespace

std::size_t simt_gemm_workspace_bytes(const GemmProblem& p, const DeviceInfo& dev) {
  const std::size_t split = align256(simt_split_bytes(p, choose_simt_plan(p, dev)));
  const std::size_t grad = bias_grad_workspace_bytes(p, dev);
  return split + grad + (split + grad > 0 ? 256 : 0);  // + alignment slack for the caller's pointer
}

Status simt_gemm_run(const GemmProblem& p, const DeviceInfo& dev, void* workspace,
                     std::size_t workspace_bytes, cudaStream_t stream) {
  const SimtPlan plan = choose_simt_plan(p, dev);
  const std::size_t need = simt_gemm_workspace_bytes(p, dev);
  BLUBLAS_CHECK(workspace_bytes >= need && (need == 0 || workspace != nullptr),
                StatusCode::kWorkspaceTooSmall, "simt path needs ", need, " workspace bytes, got ",
                workspace_bytes);
  char* base = static_cast<char*>(workspace);
  if (need > 0) base += (256 - reinterpret_cast<std::uintptr_t>(workspace) % 256) % 256;
  const std::size_t split = align256(simt_split_bytes(p, plan));
  if (plan.kernel == SimtKernel::kGeneric) {
    BLUBLAS_RETURN_IF_ERROR(simt_generic_launch(p, stream));
  } else {
    BLUBLAS_RETURN_IF_ERROR(
        simt_f32_tiled_launch(p, plan, reinterpret_cast<float*>(split ? base : nullptr), stream));
  }
  const std::size_t grad = bias_grad_workspace_bytes(p, dev);
  return bias_grad_run(p, dev, grad ? base + split : nullptr, grad, stream);
}

}  // namespace blublas::gemm_detail
