// sm90_f16_gemm_128x128_1c.cu: explicit instantiation of the sm_90a GEMM kernel for f16 inputs,
// CTA tile 128x128, 1 consumer warpgroup(s), 4 stages: the four operand-major variants.
// One (type, tile) per file bounds compile time (sm90_gemm_kernel.cuh holds the kernel).
#include "gemm/sm90_gemm_launch.cuh"

namespace blublas::gemm_detail::sm90 {

LaunchFn launcher_f16_128x128_1c(bool a_k_major, bool b_k_major) {
  return pick_launcher<InF16, 128, 128, 4, 1>(a_k_major, b_k_major);
}

}  // namespace blublas::gemm_detail::sm90
