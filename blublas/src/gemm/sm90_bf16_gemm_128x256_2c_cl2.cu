// sm90_bf16_gemm_128x256_2c_cl2.cu: explicit instantiation of the sm_90a GEMM kernel for bf16
// inputs, CTA tile 128x256, 2 consumer warpgroups, 4 stages, clusters of 2 CTAs along M sharing
// the B tile by TMA multicast: the four operand-major variants.
#include "gemm/sm90_gemm_launch.cuh"

namespace blublas::gemm_detail::sm90 {

LaunchFn launcher_bf16_128x256_2c_cl2(bool a_k_major, bool b_k_major) {
  return pick_launcher<InBf16, 128, 256, 4, 2, 2>(a_k_major, b_k_major);
}

}  // namespace blublas::gemm_detail::sm90
