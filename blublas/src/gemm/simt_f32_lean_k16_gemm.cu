// simt_f32_lean_k16_gemm.cu: the lean strict fp32 GEMM tiles with 16-deep slabs (Note [Deep
// slabs] in simt_f32_lean_gemm.cu), called by simt_f32_lean_launch for the k16 variants.
// BLUBLAS_SIMT_VARIANT=l88k16|l88n64k16 forces one. (l816k16, l168k16, l816wk16 and l168wk16 lost
// 0.51-0.80 of cuBLAS in the session 7 sweep and were removed: 16 kernels of CI compile time.)
#include "gemm/simt_f32_lean_kernel.cuh"

namespace blublas::gemm_detail {
namespace {

// Note [Deep slabs]: the same tiles with 16-deep slabs (one barrier per 16 k), staged through
// registers 8 k at a time.
//                          BM   BN TM  TN LM LN blk BK KC
using Lean88k16 = LeanTile<128, 128, 8, 8, 4, 8, 2, 16, 8>;
using Lean88n64k16 = LeanTile<128, 64, 8, 8, 8, 4, 4, 16, 8>;

}  // namespace

Status simt_f32_lean_k16_launch(const GemmProblem& p, SimtLeanVariant v, const SplitArgs& split,
                                int splits, cudaStream_t stream) {
  switch (v) {
    case SimtLeanVariant::k88k16: return launch_lean_majors<Lean88k16>(p, split, splits, stream);
    case SimtLeanVariant::k88n64k16:
      return launch_lean_majors<Lean88n64k16>(p, split, splits, stream);
    default: break;
  }
  return Status(StatusCode::kInvalidArgument, "simt f32 lean kernel: not a 16-deep variant");
}

}  // namespace blublas::gemm_detail
