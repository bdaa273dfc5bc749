// sm90_bf16_gemm_192x192_3c.cu: explicit instantiation of the sm_90a GEMM kernel for bf16 inputs,
// CTA tile 192x192, 3 consumer warpgroups (m64n192 each), 4 stages (Note [sm90 192x192 tile]).
// One (type, tile) per file bounds compile time (sm90_gemm_kernel.cuh holds the kernel).
#include "gemm/sm90_gemm_launch.cuh"

namespace blublas::gemm_detail::sm90 {

LaunchFn launcher_bf16_192x192_3c(bool a_k_major, bool b_k_major) {
  return pick_launcher<InBf16, 192, 192, 4, 3>(a_k_major, b_k_major);
}

}  // namespace blublas::gemm_detail::sm90
