// sm80_bf16_flash_attn_bwd_d64.cu: the compiled tile configurations of the bf16 mma.sync backward
// at head dim 64 (kernel templates in sm80_flash_attn_bwd.cuh). Entry 0 is the default; the others
// are measured by bench/attention_bench.cu (Note [Attention tile tables]).
// Name: dkdv w<warps, 16 keys each> br<queries per block> [kv-regs] / dq w<warps> bc<keys per
// block> [q-regs]; min<CTAs per SM> when set; merged: both passes in one launch. Comments: bwd
// TFLOP/s (2.5x forward FLOPs, D precompute included) measured on an H200.
#include "attention/sm80_flash_attn_bwd.cuh"

namespace blublas::attn {
namespace {

template <int kW1, int kBr, bool kKVRegs, int kMin1, int kW2, int kBc, bool kQRegs, int kMin2,
          bool kMerged = false>
Status run(const Params& p, const DeviceInfo& dev, cudaStream_t stream) {
  return sm80::launch_flash_attn_bwd<sm80::bf16, sm80::DkDvTiles<64, kW1, kBr, kKVRegs, kMin1>,
                                     sm80::DqTiles<64, kW2, kBc, kQRegs, kMin2>, kMerged>(
      p, dev, stream, "sm80_bf16_flash_attn_bwd_d64");
}

const KernelConfig kTable[] = {
    // H200 run 9 (22:39): bwd TFLOP/s incl. the D precompute (run 4, before the refactor, in ()).
    {"merged: dkdv w4 br64 + dq w4 bc64", run<4, 64, false, 1, 4, 64, false, 1, true>},  // 128.6
    {"dkdv w4 br64 / dq w4 bc64", run<4, 64, false, 1, 4, 64, false, 1>},  // 121.6 (138.2)
    {"dkdv w4 br64 kv-regs / dq w4 bc64 q-regs", run<4, 64, true, 1, 4, 64, true, 1>},     // 125.8
    {"dkdv w4 br64 min2 / dq w4 bc64 q-regs min2", run<4, 64, false, 2, 4, 64, true, 2>},  // 122.5
    {"dkdv w8 br64 kv-regs / dq w8 bc64 q-regs", run<8, 64, true, 1, 8, 64, true, 1>},     // 111.3
};

}  // namespace

const KernelConfig* sm80_bf16_bwd_d64_table(int* count) {
  *count = static_cast<int>(sizeof(kTable) / sizeof(kTable[0]));
  return kTable;
}

}  // namespace blublas::attn
