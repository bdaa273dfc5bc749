// sm90_bf16_gemm_192x192_3c_cl2.cu: explicit instantiation of the sm_90a GEMM kernel for bf16
// inputs, CTA tile 192x192, 3 consumer warpgroups, 4 stages, clusters of 2 CTAs along M sharing the
// B tile by TMA multicast (Note [sm90 192x192 tile], Note [sm90 cluster multicast]).
#include "gemm/sm90_gemm_launch.cuh"

namespace blublas::gemm_detail::sm90 {

LaunchFn launcher_bf16_192x192_3c_cl2(bool a_k_major, bool b_k_major) {
  return pick_launcher<InBf16, 192, 192, 4, 3, 2>(a_k_major, b_k_major);
}

}  // namespace blublas::gemm_detail::sm90
