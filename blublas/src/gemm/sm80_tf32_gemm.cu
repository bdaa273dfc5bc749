// sm80_tf32_gemm.cu: explicit instantiations of the mma.sync GEMM kernel (sm80_gemm_kernel.cuh)
// for tf32 on fp32 storage (mma.sync m16n8k8, 32-bit fragment loads): three CTA tiles x four
// operand majors, one file per dtype to bound compile time.
#include "gemm/sm80_gemm_kernel.cuh"
#include "gemm/sm80_gemm_launch.h"

namespace blublas::gemm_detail {

Status sm80_tf32_launch(const GemmProblem& p, Sm80Tile tile, cudaStream_t stream) {
  using T = sm80::Tf32;
  switch (tile) {
    case Sm80Tile::k128x128:
      return sm80::launch_majors<sm80::KernelConfig<T, 128, 128, 2, 2, 4>, T>(p, stream);
    case Sm80Tile::k128x64:
      return sm80::launch_majors<sm80::KernelConfig<T, 128, 64, 2, 1, 4>, T>(p, stream);
    case Sm80Tile::k64x64:
      return sm80::launch_majors<sm80::KernelConfig<T, 64, 64, 2, 2, 4>, T>(p, stream);
  }
  return Status(StatusCode::kNotSupported, "sm80 tf32 gemm: unknown tile");
}

}  // namespace blublas::gemm_detail
