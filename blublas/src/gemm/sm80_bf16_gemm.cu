// sm80_bf16_gemm.cu: explicit instantiations of the mma.sync GEMM kernel (sm80_gemm_kernel.cuh)
// for bf16 (mma.sync m16n8k16, ldmatrix): three CTA tiles x four operand majors, one file per dtype to bound compile time.
#include "gemm/sm80_gemm_kernel.cuh"
#include "gemm/sm80_gemm_launch.h"

namespace blublas::gemm_detail {

Status sm80_bf16_launch(const GemmProblem& p, Sm80Tile tile, cudaStream_t stream) {
  using T = __nv_bfloat16;
  switch (tile) {
    case Sm80Tile::k128x128:
      return sm80::launch_majors<sm80::KernelConfig<T, 128, 128, 2, 2, 4>, T>(p, stream);
    case Sm80Tile::k128x64:
      return sm80::launch_majors<sm80::KernelConfig<T, 128, 64, 2, 1, 4>, T>(p, stream);
    case Sm80Tile::k64x64:
      return sm80::launch_majors<sm80::KernelConfig<T, 64, 64, 2, 2, 4>, T>(p, stream);
  }
  return Status(StatusCode::kNotSupported, "sm80 bf16 gemm: unknown tile");
}

}  // namespace blublas::gemm_detail
