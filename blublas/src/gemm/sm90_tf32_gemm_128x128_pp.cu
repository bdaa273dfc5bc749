// sm90_tf32_gemm_128x128_pp.cu: explicit instantiation of the sm_90a GEMM kernel for tf32 inputs,
// ping-pong schedule (Note [sm90 ping-pong]): two consumer warpgroups, each owning whole 128x128
// tiles (two m64n128 wgmmas per k step), 5 stages: the operand-major variants.
#include "gemm/sm90_gemm_launch.cuh"

namespace blublas::gemm_detail::sm90 {

LaunchFn launcher_tf32_128x128_pp(bool a_k_major, bool b_k_major) {
  return pick_launcher<InTf32, 128, 128, 5, 2, 1, true>(a_k_major, b_k_major);
}

}  // namespace blublas::gemm_detail::sm90
