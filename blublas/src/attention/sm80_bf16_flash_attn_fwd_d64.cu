// sm80_bf16_flash_attn_fwd_d64.cu: the compiled tile configurations of the bf16 mma.sync forward at
// head dim 64 (kernel template in sm80_flash_attn_fwd.cuh). Entry 0 is the default; the others
// are measured by bench/attention_bench.cu (Note [Attention tile tables]).
// Name: w<warps> mt<16-row tiles per warp> bc<keys per block> [q-regs] [min<CTAs per SM>].
#include "attention/sm80_flash_attn_fwd.cuh"

namespace blublas::attn {
namespace {

template <int kWarps, int kMT, int kBc, bool kQRegs, int kMin>
Status run(const Params& p, const DeviceInfo& dev, cudaStream_t stream) {
  return sm80::launch_flash_attn_fwd<sm80::bf16,
                                     sm80::FwdTiles<64, kWarps, kMT, kBc, kQRegs, kMin>>(
      p, dev, stream, "sm80_bf16_flash_attn_fwd_d64");
}

const KernelConfig kTable[] = {
    {"w4 mt2 bc64 q-regs", run<4, 2, 64, true, 1>},       // H200: 203.5 TFLOP/s
    {"w4 mt2 bc64", run<4, 2, 64, false, 1>},             // 195.7
    {"w4 mt1 bc64 q-regs min2", run<4, 1, 64, true, 2>},  // 189.8
    {"w4 mt1 bc64 q-regs min3", run<4, 1, 64, true, 3>},
    {"w4 mt1 bc128 q-regs min2", run<4, 1, 128, true, 2>},
};

}  // namespace

const KernelConfig* sm80_bf16_fwd_d64_table(int* count) {
  *count = static_cast<int>(sizeof(kTable) / sizeof(kTable[0]));
  return kTable;
}

}  // namespace blublas::attn
