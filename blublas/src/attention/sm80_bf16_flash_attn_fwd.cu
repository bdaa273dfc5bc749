// sm80_bf16_flash_attn_fwd.cu: the bf16 mma.sync flash-attention forward launcher: picks entry 0
// of the per-head-dim tile table (sm80_bf16_flash_attn_fwd_d64.cu / _d128.cu; Note [Attention tile
// tables] in attention_params.h).
#include "attention/attention_params.h"

namespace blublas::attn {

const KernelConfig* sm80_bf16_fwd_table(int head_dim, int* count) {
  return head_dim == 64 ? sm80_bf16_fwd_d64_table(count) : sm80_bf16_fwd_d128_table(count);
}

Status sm80_bf16_flash_attn_fwd(const Params& p, int head_dim, const DeviceInfo& dev,
                                cudaStream_t stream) {
  int n = 0;
  return sm80_bf16_fwd_table(head_dim, &n)[0].launch(p, dev, stream);
}

}  // namespace blublas::attn
