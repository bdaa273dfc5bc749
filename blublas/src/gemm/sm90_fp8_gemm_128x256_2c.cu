// sm90_fp8_gemm_128x256_2c.cu: explicit instantiation of the sm_90a GEMM kernel for the four FP8 operand
// pairs (e4m3/e5m2 x e4m3/e5m2), CTA tile 128x256, 2 consumer warpgroups, 4 stages, both
// operands K-major (the only form FP8 wgmma takes; Note [FP8 GEMM] in gemm.cpp).
#include "gemm/sm90_gemm_launch.cuh"

namespace blublas::gemm_detail::sm90 {

LaunchFn launcher_fp8_128x256_2c(Dtype a, Dtype b, bool a_k_major, bool b_k_major) {
  const bool a4 = a == Dtype::kE4M3, b4 = b == Dtype::kE4M3;
  if (a4 && b4) return pick_launcher<InE4M3E4M3, 128, 256, 4, 2>(a_k_major, b_k_major);
  if (a4) return pick_launcher<InE4M3E5M2, 128, 256, 4, 2>(a_k_major, b_k_major);
  if (b4) return pick_launcher<InE5M2E4M3, 128, 256, 4, 2>(a_k_major, b_k_major);
  return pick_launcher<InE5M2E5M2, 128, 256, 4, 2>(a_k_major, b_k_major);
}

}  // namespace blublas::gemm_detail::sm90
