// sm80_fp8_gemm.cu: explicit instantiations of the mma.sync GEMM kernel (sm80_gemm_kernel.cuh) for
// the four FP8 pairs (mma.sync m16n8k32, sm_89 and newer; Note [sm89 FP8 mma.sync]): three CTA
// tiles, K-major operands only. CMake compiles this file for sm_89 as well as the library's
// architectures, so an Ada GPU gets FP8 machine code.
#include "gemm/sm80_gemm_kernel.cuh"
#include "gemm/sm80_gemm_launch.h"

namespace blublas::gemm_detail {
namespace {

// The FP8 mma exists in sm_89+ machine code or compute_89+ PTX only; from sm_80 code (or its PTX
// JIT-compiled) the kernel would trap (Note [sm89 FP8 mma.sync]). Asked once per process: the
// code a kernel runs with does not change.
Status check_binary() {
  static const Status status = [] {
    using Cfg = sm80::KernelConfig<sm80::E4M3E4M3, 64, 64, 2, 2, 4>;
    cudaFuncAttributes attr{};
    BLUBLAS_CUDA_CHECK(cudaFuncGetAttributes(&attr, sm80::sm80_gemm_kernel<Cfg, sm80::E4M3E4M3, true, true>));
    BLUBLAS_CHECK(attr.binaryVersion >= 89 || attr.ptxVersion >= 89, StatusCode::kUnsupportedArch,
                  "sm80_mma FP8: this build has no sm_89 code or compute_89 PTX for the FP8 mma.sync kernels "
                  "(their code for this GPU is version ", attr.binaryVersion, ", PTX ", attr.ptxVersion,
                  "); build with BLU_CUDA_ARCHS including 80 (which adds sm_89) or 89");
    return Status::success();
  }();
  return status;
}

}  // namespace

Status sm80_fp8_launch(const GemmProblem& p, const Sm80Plan& plan, float* partial, cudaStream_t stream) {
  BLUBLAS_RETURN_IF_ERROR(check_binary());
  const bool a4 = p.ab_type == Dtype::kE4M3, b4 = p.b_type == Dtype::kE4M3;
  if (a4 && b4) return sm80::launch_tile<sm80::E4M3E4M3>(p, plan, partial, stream);
  if (a4) return sm80::launch_tile<sm80::E4M3E5M2>(p, plan, partial, stream);
  if (b4) return sm80::launch_tile<sm80::E5M2E4M3>(p, plan, partial, stream);
  return sm80::launch_tile<sm80::E5M2E5M2>(p, plan, partial, stream);
}

}  // namespace blublas::gemm_detail
