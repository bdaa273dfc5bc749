// sm90_fp8_gemm_64x256_pp.cu: explicit instantiation of the sm_90a GEMM kernel for the four FP8 operand
// pairs (e4m3/e5m2 x e4m3/e5m2), CTA tile 64x256, 2 consumer warpgroups, 4 stages, both
// operands K-major (the only form FP8 wgmma takes; Note [FP8 GEMM] in gemm.cpp).
#include "gemm/sm90_gemm_launch.cuh"

namespace blublas::gemm_detail::sm90 {

LaunchFn launcher_fp8_64x256_pp(Dtype a, Dtype b, bool a_k_major, bool b_k_major) {
  const bool a4 = a == Dtype::kE4M3, b4 = b == Dtype::kE4M3;
  if (a4 && b4) return pick_launcher<InE4M3E4M3, 64, 256, 4, 2, 1, true>(a_k_major, b_k_major);
  if (a4) return pick_launcher<InE4M3E5M2, 64, 256, 4, 2, 1, true>(a_k_major, b_k_major);
  if (b4) return pick_launcher<InE5M2E4M3, 64, 256, 4, 2, 1, true>(a_k_major, b_k_major);
  return pick_launcher<InE5M2E5M2, 64, 256, 4, 2, 1, true>(a_k_major, b_k_major);
}

}  // namespace blublas::gemm_detail::sm90
