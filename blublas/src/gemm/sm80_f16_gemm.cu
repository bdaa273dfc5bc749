// sm80_f16_gemm.cu: explicit instantiations of the mma.sync GEMM kernel (sm80_gemm_kernel.cuh)
// for f16 (mma.sync m16n8k16, ldmatrix): three CTA tiles x four operand majors, one file per dtype to bound compile time.
#include "gemm/sm80_gemm_kernel.cuh"
#include "gemm/sm80_gemm_launch.h"

namespace blublas::gemm_detail {

Status sm80_f16_launch(const GemmProblem& p, const Sm80Plan& plan, float* partial, cudaStream_t stream) {
  return sm80::launch_tile<__half>(p, plan, partial, stream);
}

}  // namespace blublas::gemm_detail
