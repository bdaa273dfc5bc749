// sm80_bf16_flash_attn_bwd.cu: the bf16 mma.sync flash-attention backward launcher (dK/dV pass then
// dQ pass, Note [Deterministic flash backward: two passes, no atomics]): picks entry 0 of the
// per-head-dim tile table (sm80_bf16_flash_attn_bwd_d64.cu / _d128.cu).
#include "attention/attention_params.h"

namespace blublas::attn {

const KernelConfig* sm80_bf16_bwd_table(int head_dim, int* count) {
  return head_dim == 64 ? sm80_bf16_bwd_d64_table(count) : sm80_bf16_bwd_d128_table(count);
}

Status sm80_bf16_flash_attn_bwd(const Params& p, int head_dim, const DeviceInfo& dev,
                                cudaStream_t stream) {
  int n = 0;
  return sm80_bf16_bwd_table(head_dim, &n)[0].launch(p, dev, stream);
}

}  // namespace blublas::attn
