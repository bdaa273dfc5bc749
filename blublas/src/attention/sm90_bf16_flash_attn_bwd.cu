// sm90_bf16_flash_attn_bwd.cu: the compiled configurations of the sm_90a bf16 backward (kernel
// template in sm90_flash_attn_bwd.cuh; Note [sm90 flash backward]) and its launcher, which runs
// entry 0 of the per-head-dim table (Note [Attention tile tables]). The D = rowsum(dO * O)
// precompute (attn_bwd_delta) runs before, in attention_backward.
// Name: kv-st<dkdv ring stages> q-st<dq ring stages>; 1wg: one consumer warpgroup (64 keys or
// query rows) per CTA, two CTAs per SM; dq-bc<keys per block of the dq role> when not 64;
// no-defer: each iteration waits for its last product (BwdCfg::kDefer off); ds-frags: dS^T in
// fragments of its own (BwdCfg::kDsFrags, Note [sm90 flash backward: dS fragments]); dq-pipe:
// the dq role software-pipelined (BwdCfg::kPipeDq, Note [sm90 flash backward: pipelined dq role]);
// kv-pipe: the dkdv role too (BwdCfg::kPipeKv, Note [sm90 flash backward: pipelined dkdv role]).
// With the dQ accumulator in the workspace (causal, head_dim 64; AttnDqMode::kAccumulate) the
// launcher runs the dkdv role alone with dQ accumulated in order (Note [sm90 flash backward: dQ
// accumulated in order]) instead of the table's entry 0.

#include "attention/sm90_flash_attn_bwd.cuh"

namespace blublas::attn {
namespace {

template <int kD, int kStagesKV, int kStagesQ, int kConsumers = 2, int kKBlk = 64,
          bool kDefer = true, bool kAccDq = false, bool kDsFrags = false, bool kPipeDq = false,
          bool kPipeKv = false, bool kPingpong = false, bool kRegA = false>
Status run(const Params& p, const DeviceInfo& dev, cudaStream_t stream) {
  return sm90::launch_flash_attn_bwd_sm90<sm90::BwdCfg<kD, kStagesKV, kStagesQ, kConsumers, kKBlk,
                                                       kDefer, kAccDq, kDsFrags, kPipeDq, kPipeKv,
                                                       kPingpong, kRegA>>(
      p, dev, stream,
      kAccDq ? "sm90_bf16_flash_attn_bwd_d64_dqacc"
             : (kD == 64 ? "sm90_bf16_flash_attn_bwd_d64" : "sm90_bf16_flash_attn_bwd_d128"));
}

// Comments: bwd TFLOP/s (2.5x forward FLOPs, D precompute included) at B16 T1024 causal on the
// H200, run 3 (00:45, quick). Deferring the last product holds its ring stage one iteration
// longer: with 2 stages the producer then starves (defer st2 186 vs no-defer st2 212 at d64).
// Entry 0 is the default, entry kLongSeqEntryD64 the default at T >= kLongSeqD64. At B2 T16384 the
// attention sweep (one process) has entries 0, 3 and 4 within 1%, but the long-context race
// differs: the backward's kernel time a step (forward entry 0, blutrain alone, profiled step) was
// 67.2-68.3 ms with entry 0 (three runs, session 35 call 2), 64.8-65.1 with entry 3 (two runs),
// 65.4-66.9 with entry 4 (three runs), 65.1 with entry 6 and 61.7 with entry 5 (kv-pipe dq-bc128,
// call 3: 241.2K tok/s against torch.compile's 237.0K in the same call). At T1024 entry 0 stays
// (its race is 1.18x; unmeasured there).
constexpr int kLongSeqEntryD64 = 5;
constexpr int kLongSeqD64 = 8192;
const KernelConfig kTableD64[] = {
    // TFLOP/s at GPT-2 B16 T1024 H12 / d48 B16 T1024 H25 / B2 T16384 H12 on the H200, head-grouped
    // CTA order: session 34 calls 1, 2 and 6 (before the descriptor and mask changes of Note [sm90
    // flash backward: instructions per block]), then session 35 call 1 (after them):
    {"kv-st4 q-st4 ds-frags",
     run<64, 4, 4, 2, 64, true, false, true>},  // 232.8 / 234.1 / 352.7; 232.2 / 240.6 / 369.3; 232.1 / 218.8 / 359.1; 236.6 / 243.3 / 383.7
    {"kv-st3 q-st3", run<64, 3, 3>},  // 231.2 / 225.4 / 350.6; 230.1 / 229.2 / 362.5; 229.3 / 216.8 / 354.2; 233.7 / 241.5 / 380.7
    {"kv-st3 q-st3 rega",
     run<64, 3, 3, 2, 64, true, false, false, false, false, false, true>},  // 230.5 / 225.0 / 354.8 (call 6); 240.1 / 245.9 / 380.5
    // 3-5% slower before the instruction cuts (session 34: 220.2 / 224.1 / 334.3), not after them:
    {"kv-st4 q-st4 kv-pipe dq-pipe",
     run<64, 4, 4, 2, 64, true, false, false, true, true>},  // 241.7 / 248.5 / 381.6
    // The dq role's 128-key blocks (m64n128 S / dP, half the blocks and their fixed per-block
    // instructions); session 33: 214.4 / 220.4 / 326.6 vs 217.9 / 219.6 / 325.8 with 64:
    {"kv-st4 q-st3 ds-frags dq-bc128", run<64, 4, 3, 2, 128, true, false, true>},  // 236.4 / 244.6 / 384.3
    // The two roles' changes together (session 35 call 3; race kernel time a step above):
    {"kv-st4 q-st3 kv-pipe dq-bc128", run<64, 4, 3, 2, 128, true, false, false, false, true>},
    {"kv-st4 q-st3 kv-pipe dq-pipe dq-bc128",
     run<64, 4, 3, 2, 128, true, false, false, true, true>},
    // Entry 5 with more ring stages on either side (the pipelined dkdv loop holds a block's stage
    // into the next iteration; the dq role's 128-key stages are 32 KB); session 35, unmeasured:
    {"kv-st5 q-st3 kv-pipe dq-bc128", run<64, 5, 3, 2, 128, true, false, false, false, true>},
    {"kv-st4 q-st4 kv-pipe dq-bc128", run<64, 4, 4, 2, 128, true, false, false, false, true>},
};
static_assert(kLongSeqEntryD64 < static_cast<int>(sizeof(kTableD64) / sizeof(kTableD64[0])),
              "the long-sequence entry is in the table");
// Dropped after run 3: kv-st2 q-st2 (defer) 186.1, its dq-bc128 205.8, 1wg st2 (2 CTAs/SM) 191.4.
// Dropped in session 33 (compile time; TFLOP/s at the three shapes, all-heads CTA order): kv-st3
// q-st3 dq-bc128 214.4 / 220.4 / 326.6, kv-st2 q-st2 no-defer 201.9 / 203.0 / 307.3, 1wg kv-st3
// q-st3 (2 CTAs/SM) 218.8 / 211.4 / 288.3 (the kConsumers = 1 and kKBlk = 128 paths of BwdCfg
// stay, uninstantiated). Dropped in session 34 (same shapes, head-grouped order): kv-st3 q-st3
// no-defer 222.7 / 218.2 / 335.8, kv-st4 q-st4 231.4 / 228.3 / 348.9, kv-st3 q-st3 ds-frags
// 231.9 / 230.6 / 345.8, and the software-pipelined loops (Notes [sm90 flash backward: pipelined
// dq role] and [... pipelined dkdv role], 3-5% slower everywhere): ds-frags dq-pipe 221.7 / 223.3
// / 337.5, kv-pipe dq-pipe 220.9 / 223.9 / 336.0, kv-st4 q-st4 kv-pipe dq-pipe 220.2 / 224.1 /
// 334.3. Dropped in session 34 call 2 (Note [sm90 flash backward: pingpong], 3-6% slower than
// the same loops without turns): kv-st4 q-st4 ds-frags pingpong 219.8 / 223.0 / 349.5, kv-st3
// q-st3 ds-frags pingpong 219.6 / 223.5 / 333.2, kv-st3 q-st3 pingpong 220.8 / 227.0 / 337.2
// (entry 0 in that call: 232.2 / 240.6 / 369.3); the first, re-measured after the instruction cuts
// (session 35 call 1): 219.0 / 225.4 / 359.5 vs 236.6 / 243.3 / 383.7, dropped. Dropped after
// call 6 (Note [sm90 flash backward: resident operands in registers]): kv-st4 q-st4 ds-frags rega
// 225.9 / 219.8 / 337.3, kv-st3 q-st3 ds-frags rega 225.2 / 224.0 / 343.4.
const KernelConfig kTableD128[] = {
    {"kv-st2 q-st2 no-defer", run<128, 2, 2, 2, 64, false>},      // 270.2
    {"kv-st3 q-st3 no-defer", run<128, 3, 3, 2, 64, false>},
};
// Dropped after run 3: kv-st2 q-st2 (defer) 221.4, 1wg (2 CTAs/SM) 224.2. Dropped in session 33:
// kv-st3 q-st3 (defer), whose wgmmas ptxas serializes for lack of registers (C7512).

}  // namespace

const KernelConfig* sm90_bf16_bwd_table(int head_dim, int* count) {
  if (head_dim == 64) {
    *count = static_cast<int>(sizeof(kTableD64) / sizeof(kTableD64[0]));
    return kTableD64;
  }
  *count = static_cast<int>(sizeof(kTableD128) / sizeof(kTableD128[0]));
  return kTableD128;
}

// Entry 0 of the head dim's table (entry kLongSeqEntryD64 at head_dim 64 and T >= kLongSeqD64), or
// the one BLUBLAS_ATTN_BWD_CFG names (table_entry).
Status sm90_bf16_flash_attn_bwd(const Params& p, int head_dim, const DeviceInfo& dev,
                                cudaStream_t stream) {
  if (p.dq_acc != nullptr && head_dim == 64 && p.causal != 0) {
    return run<64, 3, 3, 2, 64, true, true>(p, dev, stream);
  }
  int n = 0;
  const KernelConfig* table = sm90_bf16_bwd_table(head_dim, &n);
  const int fallback = head_dim == 64 && p.seq_len >= kLongSeqD64 ? kLongSeqEntryD64 : 0;
  return table_entry(table, n, "BLUBLAS_ATTN_BWD_CFG", fallback).launch(p, dev, stream);
}

}  // namespace blublas::attn
