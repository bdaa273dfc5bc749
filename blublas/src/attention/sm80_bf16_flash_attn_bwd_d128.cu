// sm80_bf16_flash_attn_bwd_d128.cu: the compiled tile configurations of the bf16 mma.sync backward
// at head dim 128 (kernel templates in sm80_flash_attn_bwd.cuh). Entry 0 is the default; the others
// are measured by bench/attention_bench.cu (Note [Attention tile tables]).
// Name: dkdv w<warps, 16 keys each> br<queries per block> [kv-regs] / dq w<warps> bc<keys per
// block> [q-regs]; min<CTAs per SM> when set. Comments: bwd TFLOP/s measured on an H200.
#include "attention/sm80_flash_attn_bwd.cuh"

namespace blublas::attn {
namespace {

template <int kW1, int kBr, bool kKVRegs, int kMin1, int kW2, int kBc, bool kQRegs, int kMin2>
Status run(const Params& p, const DeviceInfo& dev, cudaStream_t stream) {
  return sm80::launch_flash_attn_bwd<sm80::bf16, sm80::DkDvTiles<128, kW1, kBr, kKVRegs, kMin1>,
                                     sm80::DqTiles<128, kW2, kBc, kQRegs, kMin2>>(
      p, dev, stream, "sm80_bf16_flash_attn_bwd_d128");
}

const KernelConfig kTable[] = {
    {"dkdv w4 br32 / dq w4 bc64", run<4, 32, false, 1, 4, 64, false, 1>},  // H200: 142.0
    {"dkdv w8 br32 / dq w8 bc64", run<8, 32, false, 1, 8, 64, false, 1>},  // 131.2
};

}  // namespace

const KernelConfig* sm80_bf16_bwd_d128_table(int* count) {
  *count = static_cast<int>(sizeof(kTable) / sizeof(kTable[0]));
  return kTable;
}

}  // namespace blublas::attn
