// sm80_tf32_flash_attn_fwd.cu: the tf32 mma.sync flash-attention forward (fp32 storage, operands
// rounded to tf32 as cvt.rna does: Note [tf32 rounding by integer add]; fp32 accumulation); fp32
// tiles are twice the bytes of bf16 ones, so the tiles are smaller (kernel template in
// sm80_flash_attn_fwd.cuh).
//   d64:  4 warps x 16 rows (Br 64), key blocks of 64: 80 KiB smem (3xTF32: 112 KiB with
//         K and V split once per CTA, Note [Pre-split tiles]).
//   d128: 4 warps x 16 rows (Br 64), key blocks of 32: 96 KiB smem.
// The same tiles also run the 3xTF32 split (Elem tag sm80::tf32x3, Note [3xTF32 split]).
#include "attention/sm80_flash_attn_fwd.cuh"

namespace blublas::attn {
namespace {

template <typename Elem, bool kRoll = false, bool kPre = false>
Status run(const Params& p, int head_dim, const DeviceInfo& dev, cudaStream_t stream,
           const char* n64, const char* n128) {
  if (head_dim == 64) {
    return sm80::launch_flash_attn_fwd<Elem, sm80::FwdTiles<64, 4, 1, 64, false, 1, kRoll, kPre>>(
        p, dev, stream, n64);
  }
  return sm80::launch_flash_attn_fwd<Elem, sm80::FwdTiles<128, 4, 1, 32, false, 1, kRoll>>(
      p, dev, stream, n128);
}

}  // namespace

Status sm80_tf32_flash_attn_fwd(const Params& p, int head_dim, bool split3, const DeviceInfo& dev,
                                cudaStream_t stream) {
  // Note [Pre-split tiles] (d64: 112 KiB; d128's 32-key blocks would take 128 KiB, one CTA per SM).
  if (split3 && head_dim == 64 && sm80::roll_k_requested() && sm80::presplit_requested()) {
    return run<sm80::tf32x3, true, true>(p, head_dim, dev, stream,
                                         "sm80_tf32x3_flash_attn_fwd_d64_rolled_presplit", "");
  }
  if (split3 && sm80::roll_k_requested()) {  // Note [Rolled k loop]
    return run<sm80::tf32x3, true>(p, head_dim, dev, stream, "sm80_tf32x3_flash_attn_fwd_d64_rolled",
                                   "sm80_tf32x3_flash_attn_fwd_d128_rolled");
  }
  if (split3) {
    return run<sm80::tf32x3>(p, head_dim, dev, stream, "sm80_tf32x3_flash_attn_fwd_d64",
                             "sm80_tf32x3_flash_attn_fwd_d128");
  }
  return run<float>(p, head_dim, dev, stream, "sm80_tf32_flash_attn_fwd_d64",
                    "sm80_tf32_flash_attn_fwd_d128");
}

}  // namespace blublas::attn
