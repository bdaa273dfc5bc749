// sm90_tf32_gemm_128x256_2c.cu: explicit instantiation of the sm_90a GEMM kernel for tf32 inputs,
// CTA tile 128x256, 2 consumer warpgroup(s), 4 stages: the K-major/K-major variant (tf32 wgmma reads K-major operands only).
// One (type, tile) per file bounds compile time (sm90_gemm_kernel.cuh holds the kernel).
#include "gemm/sm90_gemm_launch.cuh"

namespace blublas::gemm_detail::sm90 {

LaunchFn launcher_tf32_128x256_2c(bool a_k_major, bool b_k_major) {
  return pick_launcher<InTf32, 128, 256, 4, 2>(a_k_major, b_k_major);
}

}  // namespace blublas::gemm_detail::sm90
