// simt_gemm.cu: the SIMT path's entry points for the dispatcher (gemm_problem.h): what it accepts
// (every dtype, layout, alignment and epilogue, on sm_80 and newer), its workspace (an N-major
// copy of B for NT problems, split-K and bias-gradient partials) and the choice between the tiled
// strict-fp32 kernel and the generic kernel (heuristics.cpp).
#include <cstdint>

#include "blublas/check.h"
#include "gemm/epilogue.cuh"
#include "gemm/heuristics.h"
#include "gemm/operand_repack.h"
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
  BLUBLAS_CHECK(!dtype_is_fp8(p.ab_type), StatusCode::kNotSupported,
                "simt path: no FP8 kernels (FP8 runs on sm90_wgmma, or sm80_mma on sm_89)");
  return Status::success();
}

// Workspace: [N-major copy of B][split-K partials][bias-gradient partials], each 256-byte aligned,
// plus 256 bytes of slack for the caller's pointer; the plan and the layout are worked out once a
// call.
namespace {
std::size_t align256(std::size_t v) { return (v + 255) / 256 * 256; }

int64_t transposed_ldb(const GemmProblem& p) { return (static_cast<int64_t>(p.n) + 3) / 4 * 4; }

struct SimtWorkspace {
  SimtPlan plan;
  std::size_t bt = 0, split = 0, grad = 0;  // bytes of each part (bt, split already aligned)
  std::size_t total() const {
    const std::size_t all = bt + split + grad;
    return all + (all > 0 ? 256 : 0);
  }
};

SimtWorkspace simt_workspace(const GemmProblem& p, const DeviceInfo& dev) {
  SimtWorkspace w;
  w.plan = choose_simt_plan(p, dev);
  if (w.plan.transpose_b) {
    w.bt = align256(static_cast<std::size_t>(p.k) * static_cast<std::size_t>(transposed_ldb(p)) *
                    sizeof(float));
  }
  w.split = align256(simt_split_bytes(p, w.plan));
  w.grad = bias_grad_workspace_bytes(p, dev);
  return w;
}
}  // namespace

std::size_t simt_gemm_workspace_bytes(const GemmProblem& p, const DeviceInfo& dev) {
  return simt_workspace(p, dev).total();
}

Status simt_gemm_run(const GemmProblem& p, const DeviceInfo& dev, void* workspace,
                     std::size_t workspace_bytes, cudaStream_t stream) {
  const SimtWorkspace w = simt_workspace(p, dev);
  const std::size_t need = w.total();
  BLUBLAS_CHECK(workspace_bytes >= need && (need == 0 || workspace != nullptr),
                StatusCode::kWorkspaceTooSmall, "simt path needs ", need, " workspace bytes, got ",
                workspace_bytes);
  char* base = static_cast<char*>(workspace);
  if (need > 0) base += (256 - reinterpret_cast<std::uintptr_t>(workspace) % 256) % 256;
  if (w.plan.kernel == SimtKernel::kGeneric) {
    BLUBLAS_RETURN_IF_ERROR(simt_generic_launch(p, stream));
  } else {
    GemmProblem q = p;
    if (w.plan.transpose_b) {  // Note [SIMT NT via a transposed B]: B' (K x N) N-major in base
      float* b_t = reinterpret_cast<float*>(base);
      BLUBLAS_RETURN_IF_ERROR(transpose_f32(b_t, transposed_ldb(p), 0,
                                            static_cast<const float*>(p.b), p.ldb, 0, p.k, p.n,
                                            1, stream));
      q.b = b_t;
      q.ldb = transposed_ldb(p);
      q.stride_b = 0;
      q.b_k_major = false;
    }
    BLUBLAS_RETURN_IF_ERROR(simt_f32_tiled_launch(
        q, w.plan, reinterpret_cast<float*>(w.split ? base + w.bt : nullptr), stream));
  }
  // The bias gradient reads the caller's operands (p, not the transposed copy).
  return bias_grad_run(p, dev, w.grad ? base + w.bt + w.split : nullptr, w.grad, stream);
}

}  // namespace blublas::gemm_detail
