// sm80_bf16_flash_attn_fwd_d128.cu: the compiled tile configurations of the bf16 mma.sync forward
// at head dim 128 (kernel template in sm80_flash_attn_fwd.cuh). Entry 0 is the default; the others
// are measured by bench/attention_bench.cu (Note [Attention tile tables]).
// Name: w<warps> mt<16-row tiles per warp> bc<keys per block> [q-regs] [min<CTAs per SM>].
#include "attention/sm80_flash_attn_fwd.cuh"

namespace blublas::attn {
namespace {

template <int kWarps, int kMT, int kBc, bool kQRegs, int kMin>
Status run(const Params& p, const DeviceInfo& dev, cudaStream_t stream) {
  return sm80::launch_flash_attn_fwd<sm80::bf16,
                                     sm80::FwdTiles<128, kWarps, kMT, kBc, kQRegs, kMin>>(
      p, dev, stream, "sm80_bf16_flash_attn_fwd_d128");
}

const KernelConfig kTable[] = {
    {"w4 mt1 bc64 q-regs min2", run<4, 1, 64, true, 2>},  // H200: 195.7 TFLOP/s
    {"w8 mt1 bc64 q-regs", run<8, 1, 64, true, 1>},       // 184.6
    {"w8 mt1 bc64", run<8, 1, 64, false, 1>},             // 172.1
    {"w4 mt1 bc32 q-regs min2", run<4, 1, 32, true, 2>},
};

}  // namespace

const KernelConfig* sm80_bf16_fwd_d128_table(int* count) {
  *count = static_cast<int>(sizeof(kTable) / sizeof(kTable[0]));
  return kTable;
}

}  // namespace blublas::attn
