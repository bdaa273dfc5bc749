// sm80_tf32_flash_attn_fwd.cu: the tf32 mma.sync flash-attention forward (fp32 storage, operands
// rounded to tf32 with cvt.rna, fp32 accumulation); fp32 tiles are twice the bytes of bf16 ones,
// so the tiles are smaller (kernel template in sm80_flash_attn_fwd.cuh).
//   d64:  4 warps x 16 rows (Br 64), key blocks of 64: 80 KiB smem.
//   d128: 4 warps x 16 rows (Br 64), key blocks of 32: 96 KiB smem.
#include "attention/sm80_flash_attn_fwd.cuh"

namespace blublas::attn {

Status sm80_tf32_flash_attn_fwd(const Params& p, int head_dim, const DeviceInfo& dev,
                                cudaStream_t stream) {
  if (head_dim == 64) {
    return sm80::launch_flash_attn_fwd<float, sm80::FwdTiles<64, 4, 1, 64, false, 1>>(
        p, dev, stream, "sm80_tf32_flash_attn_fwd_d64");
  }
  return sm80::launch_flash_attn_fwd<float, sm80::FwdTiles<128, 4, 1, 32, false, 1>>(
      p, dev, stream, "sm80_tf32_flash_attn_fwd_d128");
}

}  // namespace blublas::attn
