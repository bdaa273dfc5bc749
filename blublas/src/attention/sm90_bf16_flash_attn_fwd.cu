// sm90_bf16_flash_attn_fwd.cu: the compiled tile configurations of the sm_90a bf16 forward (kernel
// template in sm90_flash_attn_fwd.cuh) and its launcher, which runs entry 0 of the per-head-dim
// table (Note [Attention tile tables]). Name: bc<keys per block> st<K/V stages> [overlap]
// [persistent] [pingpong] [fma<n>: one column pair in n exponentiated on the FMA pipe, Note
// [sm90 forward: exponentials on two pipes]]; 1wg: one consumer warpgroup of 64 rows per CTA, two
// CTAs per SM; 3wg: three consumer warpgroups, 192 rows per CTA (Note [sm90 forward: three
// consumer warpgroups]).
#include <mutex>
#include <sstream>
#include <string>

#include "attention/sm90_flash_attn_fwd.cuh"

namespace blublas::attn {
namespace {

// Compiled like every kernel of the path; its attributes tell whether this binary holds sm_90a
// machine code (a build without 90a would JIT compute_80 PTX, whose guarded bodies are empty).
__global__ void sm90_attn_probe_kernel() {}

template <int kD, int kBc, int kStages, bool kOverlap, bool kPersistent, int kConsumers = 2,
          bool kPingpong = false, int kFmaExpEvery = 0, bool kRegQ = false>
Status run(const Params& p, const DeviceInfo& dev, cudaStream_t stream) {
  return sm90::launch_flash_attn_fwd_sm90<
      sm90::FwdCfg<kD, kBc, kStages, kOverlap, kPersistent, kConsumers, kPingpong, kFmaExpEvery,
                   kRegQ>>(
      p, dev, stream, kD == 64 ? "sm90_bf16_flash_attn_fwd_d64" : "sm90_bf16_flash_attn_fwd_d128");
}

// Entry 0 is the default, entry kLongSeqEntryD64 the default at T >= kLongSeqD64 (ranked in the
// long-context race, not the sweep: the two disagree at this spread). Session 34 had entry 1 at
// T >= 8192 (422.2 vs 400.6 in one sweep); session 35 measured the opposite: sweep 411.9 (entry
// 0) vs 372.8 (entry 1) at B2 T16384, race forward 24.35-24.78 ms a step (entry 0) vs 25.13-25.15
// (entry 1). Session 36 call 1 (9672d90, the race at B2 T16384, blutrain alone per entry):
// entry 0 242.0K tok/s (torch.compile 238.8K in the same call), entry 4 245.3K, entry 5 245.9K.
// At T1024 the three-consumer tile wastes rows (1152 of the last tile's rows for 1024): entry 0.
constexpr int kLongSeqEntryD64 = 5;
constexpr int kLongSeqD64 = 8192;
const KernelConfig kTableD64[] = {
    // TFLOP/s at GPT-2 B16 T1024 H12 / d48 B16 T1024 H25 / B2 T16384 H12 on the H200; session 33,
    // then session 34 calls 1, 2 and 6 (before the descriptor fix):
    {"bc128 st3 overlap persistent fma8",
     run<64, 128, 3, true, true, 2, false, 8>},  // 253.6 / 269.9 / 404.7; 270.8 / 274.9 / 415.6; 269.3 / 274.0 / 407.6; 269.4 / 273.4 / 400.6
    // Two CTAs a SM with Q in registers: the best at T16384 in session 34 call 6 (422.2 vs 400.6),
    // slower at T1024 (253.3 vs 269.4, 226.7 vs 273.4 at H25); slower everywhere in session 35.
    {"1wg bc128 st3 overlap persistent fma8 regq (2 CTAs/SM)",
     run<64, 128, 3, true, true, 1, false, 8, true>},  // 253.3 / 226.7 / 422.2 (call 6)
    {"1wg bc128 st3 overlap persistent fma8 (2 CTAs/SM)",
     run<64, 128, 3, true, true, 1, false, 8>},  // 244.3 / 225.5 / 419.2; 242.2 / 222.8 / 399.9; 247.6 / 227.2 / 418.3
    {"bc128 st3 overlap persistent pingpong fma8",
     run<64, 128, 3, true, true, 2, true, 8>},  // 274.8 / 277.7 / 388.0 (call 2); 273.6 / 275.5 / 369.5 (call 6)
    // Three consumer warpgroups, 192 query rows (Note [sm90 forward: three consumer
    // warpgroups]); session 36 long-context race (tok/s, see above): 245.3K / 245.9K vs entry 0's
    // 242.0K; entry 5 is the default at T >= kLongSeqD64.
    {"3wg bc128 st3 overlap persistent fma8", run<64, 128, 3, true, true, 3, false, 8>},
    {"3wg bc128 st3 overlap persistent", run<64, 128, 3, true, true, 3>},
};
static_assert(kLongSeqEntryD64 < static_cast<int>(sizeof(kTableD64) / sizeof(kTableD64[0])),
              "the long-sequence default is a table entry");
// Dropped after run 3: bc128 st2 overlap 199.4 (persistent 220.1), 1wg bc128 overlap one CTA
// per tile 220.5. Dropped in session 33 (compile time; TFLOP/s as above): bc128 st2 (228.9 in
// session 31's sweep), bc128 st2 overlap persistent pingpong (228.9), bc64 st3 overlap persistent
// pingpong 223.5 / 231.9 / 340.3, bc64 st4 overlap persistent 236.0 / 253.9 / 370.2, 1wg bc64 st3
// overlap persistent 236.4 / 228.6 / 377.9, and more exponentials on the FMA pipe, all slower
// than the MUFU alone: bc64 st3 fma4 214.5 / 224.5 / 323.6, bc128 st3 fma4 226.7 / 244.9 / 350.3,
// fma3 224.9 / 244.6 / 358.1 (the forward is not MUFU-bound: Note [sm90 forward: exponentials on
// two pipes]). Dropped in session 34 (calls 1 / 2 / 6): bc128 st4 overlap persistent fma8 254.4 /
// 274.0 / 369.3; bc128 st3 overlap persistent (no fma8) 270.0 / 273.8 / 386.8, 271.2 / 271.5 /
// 379.8, 270.1 / 272.8 / 377.9; bc64 st3 overlap persistent 241.9 / 242.5 / 357.5, 242.7 / 241.7 /
// 371.7, 241.5 / 240.8 / 363.4; 1wg bc128 st2 overlap persistent 238.1 / 213.8 / 397.2, 238.3 /
// 212.8 / 412.4, 238.5 / 213.3 / 397.6; bc128 st3 overlap persistent fma8 regq (two consumers)
// 242.2 / 256.7 / 364.2.
// Comments: TFLOP/s at B16 T1024 H6 causal on the H200, run 3 (00:45, quick).
const KernelConfig kTableD128[] = {
    {"bc64 st3 overlap persistent", run<128, 64, 3, true, true>},                // 316.7
    {"bc64 st3 overlap persistent pingpong", run<128, 64, 3, true, true, 2, true>},
    {"bc64 st4 overlap persistent", run<128, 64, 4, true, true>},
    {"bc128 st3 overlap persistent", run<128, 128, 3, true, true>},
    {"bc128 st2", run<128, 128, 2, false, false>},                               // 304.0
    {"bc128 st2 overlap persistent pingpong", run<128, 128, 2, true, true, 2, true>},  // 301.2
};
// Dropped after run 3: bc128 st2 overlap 272.8 (persistent 294.1), 1wg bc64 st2 overlap 277.3
// (persistent 276.7).

}  // namespace

Status sm90_attn_available(const DeviceInfo& dev) {
  BLUBLAS_CHECK(dev.sm_version() == 90, StatusCode::kUnsupportedArch,
                "attention sm90 path: needs an sm_90 device (wgmma, TMA), device is sm_",
                dev.sm_version());
  static std::mutex mutex;
  static int state[64] = {};  // 0 unknown, 1 ok, 2 no sm_90a code
  static std::string reason[64];
  BLUBLAS_CHECK(dev.device >= 0 && dev.device < 64, StatusCode::kInvalidArgument,
                "attention sm90 path: device index ", dev.device, " out of range");
  std::lock_guard<std::mutex> lock(mutex);
  if (state[dev.device] == 0) {
    cudaFuncAttributes attr{};
    const cudaError_t err = cudaFuncGetAttributes(&attr, sm90_attn_probe_kernel);
    if (err != cudaSuccess || attr.ptxVersion < 90 || attr.binaryVersion < 90) {
      (void)cudaGetLastError();
      std::ostringstream os;
      os << "attention sm90 path: this build has no sm_90a machine code (" << cudaGetErrorName(err)
         << ", binaryVersion=" << attr.binaryVersion << ", ptxVersion=" << attr.ptxVersion
         << "): build with BLU_CUDA_ARCHS containing 90a-real";
      reason[dev.device] = os.str();
      state[dev.device] = 2;
    } else {
      state[dev.device] = 1;
    }
  }
  if (state[dev.device] == 2) return Status(StatusCode::kUnsupportedArch, reason[dev.device]);
  return Status::success();
}

const KernelConfig* sm90_bf16_fwd_table(int head_dim, int* count) {
  if (head_dim == 64) {
    *count = static_cast<int>(sizeof(kTableD64) / sizeof(kTableD64[0]));
    return kTableD64;
  }
  *count = static_cast<int>(sizeof(kTableD128) / sizeof(kTableD128[0]));
  return kTableD128;
}

// Entry 0 of the head dim's table (entry kLongSeqEntryD64 at head_dim 64 and T >= kLongSeqD64), or
// the one BLUBLAS_ATTN_FWD_CFG names (table_entry).
Status sm90_bf16_flash_attn_fwd(const Params& p, int head_dim, const DeviceInfo& dev,
                                cudaStream_t stream) {
  int n = 0;
  const KernelConfig* table = sm90_bf16_fwd_table(head_dim, &n);
  const int fallback = head_dim == 64 && p.seq_len >= kLongSeqD64 ? kLongSeqEntryD64 : 0;
  return table_entry(table, n, "BLUBLAS_ATTN_FWD_CFG", fallback).launch(p, dev, stream);
}

}  // namespace blublas::attn
