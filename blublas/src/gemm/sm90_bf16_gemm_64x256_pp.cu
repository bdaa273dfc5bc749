// sm90_bf16_gemm_64x256_pp.cu: explicit instantiation of the sm_90a GEMM kernel for bf16 inputs,
// ping-pong schedule (Note [sm90 ping-pong]): two consumer warpgroups, each owning whole 64x256
// tiles (one m64n256 wgmma per k step), 4 stages: the operand-major variants.
#include "gemm/sm90_gemm_launch.cuh"

namespace blublas::gemm_detail::sm90 {

LaunchFn launcher_bf16_64x256_pp(bool a_k_major, bool b_k_major) {
  return pick_launcher<InBf16, 64, 256, 4, 2, 1, true>(a_k_major, b_k_major);
}

}  // namespace blublas::gemm_detail::sm90
