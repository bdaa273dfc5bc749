// sm80_tf32_flash_attn_bwd.cu: the tf32 mma.sync flash-attention backward (fp32 storage, tf32
// operands, fp32 accumulation), with tiles sized for fp32 shared memory:
//   d64:  dkdv Bc 64 / query blocks of 32 (64 KiB);  dq Br 64 / key blocks of 32 (64 KiB)
//   d128: dkdv Bc 64 / query blocks of 16 (96 KiB);  dq Br 64 / key blocks of 16 (96 KiB)
// 3xTF32 d64 with a dQ-partials workspace (p.dq_part, Note [dQ partials]): the dkdv tiles plus an
// 8 KiB dS tile, then the ordered reduce; no dq pass. 3xTF32 d64 splits Q and dO once per CTA
// (+16 KiB: Note [Pre-split tiles]).
#include <type_traits>

#include "attention/sm80_flash_attn_bwd.cuh"

namespace blublas::attn {
namespace {

template <typename Elem, bool kRoll = false, bool kPre = false>
Status run(const Params& p, int head_dim, const DeviceInfo& dev, cudaStream_t stream,
           const char* n64, const char* n128, const char* n64_part = nullptr) {
  if constexpr (std::is_same_v<Elem, sm80::tf32x3>) {
    if (head_dim == 64 && p.dq_part != nullptr) {
      return sm80::launch_flash_attn_bwd_dq_partials<
          Elem, sm80::DkDvTiles<64, 4, 32, false, 1, kRoll, true, kPre>>(p, dev, stream, n64_part);
    }
  }
  if (head_dim == 64) {
    return sm80::launch_flash_attn_bwd<Elem, sm80::DkDvTiles<64, 4, 32, false, 1, kRoll, false, kPre>,
                                       sm80::DqTiles<64, 4, 32, false, 1, kRoll>>(p, dev, stream, n64);
  }
  // d128's rolled dK/dV pass spilled (255 registers + 16 bytes): only its dQ pass rolls.
  return sm80::launch_flash_attn_bwd<Elem, sm80::DkDvTiles<128, 4, 16, false, 1>,
                                     sm80::DqTiles<128, 4, 16, false, 1, kRoll>>(p, dev, stream, n128);
}

}  // namespace

Status sm80_tf32_flash_attn_bwd(const Params& p, int head_dim, bool split3, const DeviceInfo& dev,
                                cudaStream_t stream) {
  // Note [Pre-split tiles]: the d64 dK/dV pass splits Q and dO once per CTA (88.5 KiB with dQ
  // partials); d128 keeps splitting where it loads.
  if (split3 && head_dim == 64 && sm80::roll_k_requested() && sm80::presplit_requested()) {
    return run<sm80::tf32x3, true, true>(p, head_dim, dev, stream,
                                         "sm80_tf32x3_flash_attn_bwd_d64_rolled_presplit", "",
                                         "sm80_tf32x3_flash_attn_bwd_d64_rolled_presplit_dq_partials");
  }
  if (split3 && sm80::roll_k_requested()) {  // Note [Rolled k loop]
    return run<sm80::tf32x3, true>(p, head_dim, dev, stream,
                                   "sm80_tf32x3_flash_attn_bwd_d64_rolled",
                                   "sm80_tf32x3_flash_attn_bwd_d128_rolled",
                                   "sm80_tf32x3_flash_attn_bwd_d64_rolled_dq_partials");
  }
  if (split3) {
    return run<sm80::tf32x3>(p, head_dim, dev, stream, "sm80_tf32x3_flash_attn_bwd_d64",
                             "sm80_tf32x3_flash_attn_bwd_d128",
                             "sm80_tf32x3_flash_attn_bwd_d64_dq_partials");
  }
  return run<float>(p, head_dim, dev, stream, "sm80_tf32_flash_attn_bwd_d64",
                    "sm80_tf32_flash_attn_bwd_d128");
}

}  // namespace blublas::attn
