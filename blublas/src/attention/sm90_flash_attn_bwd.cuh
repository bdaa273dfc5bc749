// sm90_flash_attn_bwd.cuh: the sm_90a (wgmma + TMA) flash-attention backward kernel templates,
// bf16 in and out, fp32 accumulation; instantiated by sm90_bf16_flash_attn_bwd.cu.
//
// Note [sm90 flash backward]
// The same deterministic two-pass split as the sm80 backward (Note [Deterministic flash backward:
// two passes, no atomics]): no float atomics, the same bits every run.
//   dkdv role: a CTA owns kBc = 128 keys (consumer warpgroup c: keys 64c..64c+63) and streams
//     query blocks of kBr = 64 rows (Q, dO by TMA; L*log2e and D by producer warp 1) through a
//     ring. Everything is computed key-major so no operand is ever transposed:
//       S^T  = K Q^T    (A = K tile, B = Q tile, both K-major over d)
//       dP^T = V dO^T   (A = V tile, B = dO tile)
//       P^T  = exp2(S^T * scale*log2e - L*log2e)      (per column: L and D are per query)
//       dV  += P^T dO   (A = P^T from registers, B = dO tile read MN-major)
//       dS^T = P^T (dP^T - D)
//       dK  += dS^T Q   (A = dS^T from registers, B = Q tile read MN-major)
//   dq role: a CTA owns kBr = 128 query rows (64 per consumer warpgroup) and streams key blocks
//     of kBc = 64 keys: S = Q K^T, dP = dO V^T, dS = P (dP - D), dQ += dS K (K tile MN-major).
// The two roles share one launch (heaviest CTAs of both roles first, across all heads) so the
// light tail of one overlaps the other; all four tensor maps
// use 64-row boxes so both roles read the same maps. The wgmma groups are ordered so the
// exponentials of P overlap the dP product and the dS math overlaps the dV product.
// Rows past T: queries get L*log2e = +inf (P = 0) and zero-filled Q/dO; keys past T get
// zero-filled K/V and are masked in the dq role (their P could overflow against a negative L);
// in the dkdv role they only touch their own never-stored rows of dK/dV.
//
// Note [sm90 flash backward: dQ accumulated in order]
// The two-pass split costs 7 block products per (key block, query block) pair: the dq role
// recomputes S and dP. With BwdCfg::kAccDq (causal, head_dim 64; AttnDqMode::kAccumulate,
// opt-in) the dkdv role alone runs (5 products) and adds dQ into an fp32 accumulator in global
// memory:
//   - each consumer warpgroup stores its dS^T (64 keys x 64 queries, bf16) into its own rows of
//     a 128B-swizzled shared tile, which reads back as the MN-major A operand of its dQ part
//     = dS K over its 64 keys (m64n64, K tile rows MN-major); issued before dK += dS^T Q so its
//     wait leaves dK running. No barrier between the warpgroups for that (version 1 split the
//     head dim between them over both warpgroups' dS^T, with a barrier every block: lock-step
//     warpgroups, 0.79x of the two-pass kernel, session 31).
//   - the warpgroups take turns adding (block t of the CTA: warpgroup t & 1): the other hands its
//     fp32 part over through shared tile t & 1 (named barriers 4/5: written, 6/7: read back,
//     the latter one block late), the adder sums the two into that tile.
//   - query block i receives key blocks 0..m (m = last key block touching it, = i/2) in that
//     order, so the sums are deterministic: key block 0 stores, the middle ones add, each as one
//     16 KB TMA bulk operation (cp.reduce.async.bulk .add.f32) issued by the adder's thread 0;
//     key block m loads the sum, adds its part, scales and writes bf16 dQ (no conversion pass).
//     A counter per (b, h, query block) counts the key blocks added; key block kb's thread 0
//     spins on an acquire load until it reads kb, and one block later waits for its bulk
//     operation and bumps the counter (fence.proxy.async.global + red.release.gpu).
//   - deadlock freedom: CTAs take a ticket (atomicAdd) when they start and map it to (key block,
//     head), key block major, heaviest first. A CTA waits only on lower key blocks of its head,
//     which hold lower tickets, so they have started and, by induction, finish.
//   - counters and the ticket are zeroed by attn_bwd_delta, which runs just before; the
//     accumulator needs no zeroing (key block 0 stores). Workspace: attention.cpp.
// Key blocks that start together run in lock-step behind their predecessor (key block kb starts
// at query block 2kb, which key block kb-1 reaches two blocks later, and the bump is deferred by
// one): a few blocks of waiting at the start of the first wave; later CTAs find their
// predecessors far ahead (tickets of one key block span B*H CTAs).
// ptxas serializes every wgmma (C7514) when an accumulator is read after a wait it cannot prove
// retired it (e.g. across the loop's back edge), and when a wgmma is conditional inside an
// unrolled loop: the dQ part is read after a wait<1> in the same iteration.
// Measured (H200, session 31, attention_bench in one process, backward TFLOP/s with the causal
// 2.5x-forward FLOP count, two passes vs version 2): GPT-2 124M B16 T1024 H12 229.2 vs 189.8
// (version 1: 181.7), d48 B16 H25 230.5 vs 189.0, B2 T16384 H12 321.6 vs 253.5 (version 1:
// 268.9). Version 2 had warpgroup 1 do every add, with per-thread red.global.add.v4.f32 and a
// per-thread load path; suspects (unprofiled): warpgroup 1 paced the CTA (the ring's empty
// barriers let warpgroup 0 run at most 3 blocks ahead) and 16 KB of per-thread fp32
// read-modify-write per (key block, query block) pair (6.5 GB a layer at T=16384). Version 3
// (alternating adders, TMA bulk adds; the code here) measured in session 32 (same benchmark):
// 196.0 / 194.4 / 292.1 against two passes' 229.3 / 229.5 / 323.9; ncu at T1024 (dK/dV launch
// 312 vs 270 us): barrier stalls 2.13 per issue (two passes 0.19) and long_scoreboard 2.29 (the
// chain spin), issue rate 0.28 vs 0.43 per scheduler: the hand-over barriers between the
// warpgroups cost more than the two saved products. Version 4 (producer warp 2 summing both
// warpgroups' parts from a 3-slot ring and doing the chain's global side) ran 141.6 / 139.1 /
// 249.8: one warp moving 48 KB of shared memory per block pair paced the CTA; removed after
// that measurement. The mode is opt-in (AttnDqMode::kAccumulate, BLUBLAS_ATTN_DQ=accumulate).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "attention/attention_params.h"
#include "attention/sm90_attn_primitives.cuh"
#include "attention/sm90_attn_tma.h"
#include "attention/sm90_flash_attn_fwd.cuh"  // ex2, Ring
#include "blublas/check.h"
#include "common/arch.cuh"
#include "gemm/sm90_primitives.cuh"
#include "gemm/sm90_wgmma_ops.cuh"

namespace blublas::attn::sm90 {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kBoxRows = 64;  // every backward tensor map loads 64-row boxes

// Backward configuration: head dim, dkdv ring stages (query blocks of 64), dq ring stages (key
// blocks of 64).
// kConsumers = 2: 128 keys / 128 query rows per CTA, one CTA per SM; 1: 64 per CTA, two CTAs per
// SM (the other CTA's wgmmas hide a CTA's prologue, epilogue and exponentials).
// kKBlk: keys per block of the dq role (64; 128 halves its iterations, head dim 64 only).
// kDefer: the last product of an iteration (dK += dS^T Q, dQ += dS K) is not waited for; it runs
// while the next iteration waits for its tiles and issues its first two products, and its ring
// stage is released once that next iteration's first wait shows it complete.
// kAccDq: dQ accumulated by the dkdv role (Note [sm90 flash backward: dQ accumulated in order]).
// kDsFrags: the dkdv role packs dS^T into A fragments of their own (+kQBlk/4 registers), so dK +=
// dS^T Q is issued without waiting for dV += P^T dO to release the P^T fragments (Note [sm90
// flash backward: dS fragments]).
// kPipeDq: the dq role issues each block's dQ product behind the next block's S and dP (Note
// [sm90 flash backward: pipelined dq role]); kPipeKv: the dkdv role likewise with dV and dK
// (Note [sm90 flash backward: pipelined dkdv role]).
// kPingpong: the two consumer warpgroups take turns issuing their products (Note [sm90 flash
// backward: pingpong]).
// kRegA: the resident tiles (K, V of the dkdv role; Q, dO of the dq role) as register A
// fragments, so S / dP read only B from shared memory (Note [sm90 flash backward: resident
// operands in registers]).
template <int kD_, int kStagesKV_, int kStagesQ_, int kConsumers_ = 2, int kKBlk_ = 64,
          bool kDefer_ = true, bool kAccDq_ = false, bool kDsFrags_ = false, bool kPipeDq_ = false,
          bool kPipeKv_ = false, bool kPingpong_ = false, bool kRegA_ = false>
struct BwdCfg {
  static constexpr int kD = kD_;
  static constexpr bool kDefer = kDefer_;
  static constexpr bool kAccDq = kAccDq_;
  static constexpr bool kDsFrags = kDsFrags_;
  static constexpr bool kPipeDq = kPipeDq_;
  static constexpr bool kPipeKv = kPipeKv_;
  static constexpr bool kPingpong = kPingpong_;
  static constexpr bool kRegA = kRegA_;
  static constexpr int kConsumers = kConsumers_;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kMinBlocks = kConsumers == 1 ? 2 : 1;
  // dkdv role
  static constexpr int kKeys = 64 * kConsumers, kQBlk = 64, kStagesKV = kStagesKV_;
  // dq role
  static constexpr int kRows = 64 * kConsumers, kKBlk = kKBlk_, kStagesQ = kStagesQ_;
  static constexpr int kTile64 = 64 * kD * 2;  // bytes of a 64-row tile (kD/64 panels)
  static constexpr int kResident = kConsumers * kTile64;  // K (V) tile of dkdv, Q (dO) of dq
  // kAccDq: dS^T of the CTA's keys (bf16) and the two fp32 m64 x kD dQ part tiles handed between
  // the warpgroups
  static constexpr int kDsTile = 64 * kConsumers * kQBlk * 2;
  static constexpr int kPartBytes = kQBlk * kD * 4;
  static constexpr int kPartTiles = 2;
  static constexpr int kAccDqBytes = kAccDq ? kDsTile + kPartTiles * kPartBytes : 0;
  static constexpr int kDkdvBytes =
      2 * kResident + kAccDqBytes + kStagesKV * (2 * kTile64 + 2 * kQBlk * 4);
  static constexpr int kKBlkTile = kKBlk * kD * 2;  // a K (V) block of the dq role
  static constexpr int kDqBytes = 2 * kResident + kStagesQ * 2 * kKBlkTile;
  // + the CTA's ticket (kAccDq, last)
  static constexpr int kMaxStages = kStagesKV > kStagesQ ? kStagesKV : kStagesQ;
  static constexpr int kBarrierBytes =
      8 * (2 + 2 * kMaxStages) + (kAccDq ? 8 : 0);
  static constexpr int kSmemBytes =
      1024 + (kDkdvBytes > kDqBytes ? kDkdvBytes : kDqBytes) + kBarrierBytes;
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = kConsumers == 1 ? 232 : 240;
  static_assert(kConsumers == 1 || kConsumers == 2, "one or two consumer warpgroups");
  static_assert(!kAccDq || (kD == 64 && kConsumers == 2 && kDefer),
                "dQ accumulation: head_dim 64, two consumer warpgroups, deferred products");
  static_assert(!kDsFrags || (!kAccDq && kDefer && kD == 64),
                "dS fragments: two passes, deferred products, head_dim 64 (registers)");
  static_assert(!kPipeDq || (!kAccDq && kD == 64), "pipelined dq role: two passes, head_dim 64");
  static_assert(!kPipeKv || (!kAccDq && !kDsFrags && kD == 64),
                "pipelined dkdv role: two passes, head_dim 64 (it has its own dS fragments)");
  static_assert(!kPingpong || (kConsumers == 2 && !kAccDq && !kPipeDq && !kPipeKv),
                "pingpong: two consumer warpgroups, the two-pass loops that are not pipelined");
  static_assert(!kRegA || (kD == 64 && kKBlk_ == 64 && !kAccDq && !kPipeDq && !kPipeKv),
                "resident operands in registers: head_dim 64, 64-key blocks, the two-pass loops "
                "that are not pipelined");
  // kAccDq: the last key block whose keys reach query block i (causal): its chain's end.
  static constexpr __host__ __device__ int last_key_block(int i) {
    return (i * kQBlk + kQBlk - 1) / kKeys;
  }
  static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <=
                    kThreads * (65536 / kThreads / kMinBlocks / 8 * 8),
                "setmaxnreg redistributes the launch allocation only");
};

// Loads a tile of `rows` (a multiple of 64) sequence rows from row0 into panel-major smem (kD/64
// panels of [rows][64]) with 64-row boxes.
template <int kD, int kRowsTile>
__device__ __forceinline__ void tma_tile(uint8_t* dst, const CUtensorMap* map, uint64_t* bar,
                                         int h, int row0, int b) {
#pragma unroll
  for (int hf = 0; hf < kD / 64; ++hf)
#pragma unroll
    for (int rb = 0; rb < kRowsTile / kBoxRows; ++rb)
      tma_load_4d(dst + hf * kRowsTile * 128 + rb * kBoxRows * 128, map, bar, 64 * hf, h,
                  row0 + rb * kBoxRows, b);
}

// Stores rows (this thread's row0 and row0 + 8, valid below T) of an m64 x kD accumulator times
// `mul` as bf16.
template <int kD>
__device__ __forceinline__ void store_rows(const float (&acc)[kD / 2], __nv_bfloat16* base,
                                           int64_t row_stride, int row0, int T, int quad,
                                           float mul) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = row0 + 8 * hr;
    if (row >= T) continue;
    __nv_bfloat16* dst = base + static_cast<int64_t>(row) * row_stride + 2 * quad;
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) {
      *reinterpret_cast<uint32_t*>(dst + 8 * j) =
          pack_bf16(acc[4 * j + 2 * hr] * mul, acc[4 * j + 2 * hr + 1] * mul);
    }
  }
}

struct BwdMaps {
  CUtensorMap q, k, v, d_o;
};

// Note [sm90 flash backward: pingpong]
// Both consumer warpgroups wait for the same ring stage and run the same chain (two products,
// exponentials, two more), so left alone they drift into lock-step: both sets of exponentials
// (and both dS) run while the tensor pipe has nothing queued, then both warpgroups' products
// queue at once (ncu, T16384 backward: tensor pipe 55% busy, issue 0.56 a scheduler, stalls on
// wgmma waits). With kPingpong they take turns at two issue points an iteration, A = the S / dP
// pair and B = the rest (dV and dK; dQ in the dq role), so the tensor pipe runs A0 A1 B0 B1 A0
// ...: warpgroup 0's exponentials run under warpgroup 1's S / dP and the other way round, and at
// 128 clocks a m64n64k64 product and ~256 for a block's exponentials the pipe never drains
// (the forward's scheme, Note [sm90 forward pingpong], there with one issue point). Named barrier
// 8 + c means "consumer c may issue": take = bar.sync(8 + c, 256), give = bar.arrive(9 - c, 256).
// Consumer 1 arrives once on barrier 8 before its first turn so consumer 0 goes first; both
// warpgroups run the same iterations and take both turns in every one (empty turns on the blocks
// they skip), so consumer 0 ends with one bar.sync(8) for consumer 1's last arrive. No TMA or ring
// wait happens inside a turn (only the warpgroup's own wgmma waits), so the holder of a turn never
// waits on the other warpgroup. Measured (session 34 call 2): 3-6% SLOWER than the same loop
// without turns (kv-st4 q-st4 ds-frags: 219.8 / 223.0 / 349.5 vs 232.2 / 240.6 / 369.3 TFLOP/s at
// GPT-2 T1024 / d48 / T16384); the SASS later showed the HGMMAs paced by descriptor chains (Note
// [sm90 flash backward: instructions per block]); re-measured after that fix (session 35 call 1):
// still 3-7% slower (219.0 / 225.4 / 359.5 vs 236.6 / 243.3 / 383.7), its table entry dropped
// (the code stays, uninstantiated).
template <bool kOn>
struct Turns {
  int c;
  __device__ __forceinline__ void start() const {
    if constexpr (kOn) {
      if (c == 1) named_bar_arrive(8, 256);
    }
  }
  __device__ __forceinline__ void take() const {
    if constexpr (kOn) named_bar_sync(8 + c, 256);
  }
  __device__ __forceinline__ void give() const {
    if constexpr (kOn) named_bar_arrive(9 - c, 256);
  }
  __device__ __forceinline__ void skip() const {  // both turns of an iteration, nothing issued
    take();
    give();
    take();
    give();
  }
  __device__ __forceinline__ void finish() const {
    if constexpr (kOn) {
      if (c == 0) named_bar_sync(8, 256);
    }
  }
};

// ---- dQ accumulation (kAccDq) -------------------------------------------------------------------
__device__ __forceinline__ void ld_relaxed_v4(const float* addr, float* v) {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("ld.relaxed.gpu.global.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
               : "l"(addr)
               : "memory");
#else
  (void)addr; (void)v;
#endif
}
// One thread: the shared tile [src, src + bytes) stored to / added (f32) into global dst by the
// TMA unit (a bulk async group: bulk_commit, then bulk_wait_read / bulk_wait).
__device__ __forceinline__ void bulk_store_s2g(float* dst, const void* src, uint32_t bytes) {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst),
               "r"(g90::smem_u32(src)), "r"(bytes)
               : "memory");
#else
  (void)dst; (void)src; (void)bytes;
#endif
}
__device__ __forceinline__ void bulk_add_s2g(float* dst, const void* src, uint32_t bytes) {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
               ::"l"(dst), "r"(g90::smem_u32(src)), "r"(bytes)
               : "memory");
#else
  (void)dst; (void)src; (void)bytes;
#endif
}
// Orders this thread's async-proxy (bulk) global accesses with its generic-proxy ones.
__device__ __forceinline__ void fence_proxy_async_global() {
#if BLUBLAS_SM90A_ENABLED
  asm volatile("fence.proxy.async.global;" ::: "memory");
#endif
}

// Where key block kb stands in query block i's chain of dQ contributions (key blocks 0..last).
struct DqChain {
  float* acc;     // the block's fp32 accumulator: element (v, tid) of the m64n64 fragment
                  // (registers 4v..4v+3 of the adding warpgroup's thread tid): acc + 512v + 4tid
  uint32_t* sem;  // key blocks added so far
  bool first, last;
};

// Writes this thread's m64 x kD fp32 dQ fragment into a part tile: registers 4v..4v+3 of
// thread tid as float4 128 v + tid (the global accumulator's layout too).
template <int kD>
__device__ __forceinline__ void store_part(float* tile, const float (&dq)[kD / 2], int tid) {
  float* mine = tile + 4 * tid;
#pragma unroll
  for (int v = 0; v < kD / 8; ++v)
    *reinterpret_cast<float4*>(mine + 512 * v) =
        make_float4(dq[4 * v], dq[4 * v + 1], dq[4 * v + 2], dq[4 * v + 3]);
}

// Thread 0 of the adding warpgroup: waits until the chain counter reads `target`, then orders
// its acquire before the bulk (async-proxy) operation it issues next.
__device__ __forceinline__ void dq_chain_wait(const uint32_t* sem, uint32_t target) {
  while (g90::ld_acquire_gpu(sem) < target) __nanosleep(64);
  fence_proxy_async_global();
}

// Adds a CTA's dQ part of a query block (both warpgroups' parts, summed in registers by the adding
// warpgroup) in chain order (Note [sm90 flash backward: dQ accumulated in order]). The first key
// block stores and the middle ones add, as one 16 KB TMA bulk operation issued by thread 0 from
// the shared tile `part` (the sum is written there first); the last key block loads the sum, adds,
// scales and writes bf16 dQ. Returns whether a bulk operation was issued (then the chain counter
// needs its bump, dq_bump, and `part` must not be reused before that bump's wait).
template <int kD>
__device__ __forceinline__ bool dq_accumulate(const float (&dq)[kD / 2], const DqChain& ch,
                                              float* part, int kb, int tid, int bar_id,
                                              __nv_bfloat16* out, int64_t row_stride, int row0,
                                              int T, int quad, float scale) {
  constexpr int kVec = kD / 8;  // float4 groups per thread
  if (ch.first && ch.last) {
    store_rows<kD>(dq, out, row_stride, row0, T, quad, scale);
    return false;
  }
  if (!ch.last) {
    store_part<kD>(part, dq, tid);
    g90::fence_proxy_async_smem();  // generic-proxy stores -> the bulk operation's reads
    named_bar_sync(bar_id, 128);
    if (tid == 0) {
      if (ch.first) {
        bulk_store_s2g(ch.acc, part, kD * 64 * 4);
      } else {
        dq_chain_wait(ch.sem, static_cast<uint32_t>(kb));
        bulk_add_s2g(ch.acc, part, kD * 64 * 4);
      }
      g90::bulk_commit();
    }
    return true;
  }
  if (tid == 0) dq_chain_wait(ch.sem, static_cast<uint32_t>(kb));
  named_bar_sync(bar_id, 128);
  const float* a = ch.acc + 4 * tid;
  float sum[kD / 2];
#pragma unroll
  for (int v = 0; v < kVec; ++v) ld_relaxed_v4(a + 512 * v, &sum[4 * v]);
#pragma unroll
  for (int e = 0; e < kD / 2; ++e) sum[e] += dq[e];
  store_rows<kD>(sum, out, row_stride, row0, T, quad, scale);
  return false;
}

// Thread 0 of the adding warpgroup, a block after its bulk add: once the add completed, the
// chain counter's release bump.
__device__ __forceinline__ void dq_bump(uint32_t* sem) {
  g90::bulk_wait<0>();
  fence_proxy_async_global();
#if BLUBLAS_SM90A_ENABLED
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(sem) : "memory");
#else
  (void)sem;
#endif
}

// Stores dS^T (A fragments of this warpgroup's 64 keys x 64 queries) at rows 64c.. of a
// 128B-swizzled [keys][64 queries] bf16 tile: fragment (kk, r) holds key row g + 8 (r & 1) of
// the warp's 16, queries 16 kk + 8 (r >> 1) + 2 quad + {0, 1}.
__device__ __forceinline__ void store_ds_t(const uint32_t (&fa)[4][4], uint8_t* tile, int c,
                                           int warp, int lane) {
  const int g = lane / 4, quad = lane % 4;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = 64 * c + 16 * warp + g + 8 * (r & 1);
      const int chunk = 2 * kk + (r >> 1);
      *reinterpret_cast<uint32_t*>(tile + row * 128 + ((chunk ^ (row & 7)) << 4) + 4 * quad) =
          fa[kk][r];
    }
}

// Issues acc = A B^T over the head dim as one commit group: both operands K-major, A the rows
// a_row0.. (this warpgroup's 64) of a kRowsA-row tile, B a block of kN rows. The caller fences.
template <int kD, int kRowsA, int kN>
__device__ __forceinline__ void issue_product(float (&acc)[kN / 2], uint32_t a, uint32_t b,
                                              int a_row0) {
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
    g90::Wgmma<g90::InBf16, kN>::template mma<0, 0>(acc, desc_kmajor<kRowsA>(a, a_row0, ks),
                                                      desc_kmajor<kN>(b, 0, ks), ks > 0 ? 1 : 0);
  }
  g90::wgmma_commit();
}
// acc1 = A1 B1^T, then acc2 = A2 B2^T (S^T / dP^T of the dkdv role, S / dP of the dq role).
template <int kD, int kRowsA, int kN>
__device__ __forceinline__ void issue_two_products(float (&acc1)[kN / 2], uint32_t a1, uint32_t b1,
                                                   float (&acc2)[kN / 2], uint32_t a2, uint32_t b2,
                                                   int a_row0) {
  issue_product<kD, kRowsA, kN>(acc1, a1, b1, a_row0);
  issue_product<kD, kRowsA, kN>(acc2, a2, b2, a_row0);
}

// Note [sm90 flash backward: resident operands in registers]
// S^T = K Q^T and dP^T = V dO^T (dkdv role), S = Q K^T and dP = dO V^T (dq role) read both
// operands from shared memory: a m64n64k16 wgmma with A and B there reads 4 KB in the 32 clocks
// it takes at the tensor cores' rate, the 128 B a clock shared memory gives an SM, while the
// register-A products (dV, dK, dQ) read 2 KB. The A operands of the first two are the CTA's
// resident tiles (its K and V, or its Q and dO), the same every iteration, so kRegA loads them
// once into A fragments (+kD/4 registers each: 32 for both at head_dim 64) and issues S / dP as
// register-A wgmmas: shared-memory reads per block and warpgroup 48 -> 32 KB (dkdv), 40 -> 24 KB
// (dq). The fragments are read from the swizzled tiles after their TMA completes (rows past T are
// zero there, as before), and kept alive with refresh_frags (ptxas otherwise reuses their
// registers inside the loop). Measured (session 34 call 6, before the descriptor fix): kv-st3
// q-st3 rega 230.5 / 225.0 / 354.8 TFLOP/s vs 229.3 / 216.8 / 354.2 without (GPT-2 T1024 / d48 /
// T16384): shared memory was not the limit (Note [sm90 flash backward: instructions per block]).

// kRegA: a warpgroup's two resident tiles (rows r0.. of each) as A fragments, kept alive from one
// block to the next by refresh() at the bottom of each (refresh_frags). Without kRegA: empty.
template <class Cfg>
struct ResidentFrags {
  static constexpr int kN = Cfg::kRegA ? Cfg::kD / 16 : 1;
  uint32_t a[kN][4], b[kN][4];
  uint32_t zero = 0;
  template <int kRowsTile>
  __device__ __forceinline__ void load(const uint8_t* tile_a, const uint8_t* tile_b, int r0,
                                       int warp, int lane, int T) {
    if constexpr (Cfg::kRegA) {
      load_a_frags_sw128<Cfg::kD, kRowsTile>(a, tile_a, r0, warp, lane);
      load_a_frags_sw128<Cfg::kD, kRowsTile>(b, tile_b, r0, warp, lane);
      zero = static_cast<uint32_t>(T) >> 31;  // 0, opaque to ptxas
    }
  }
  __device__ __forceinline__ void refresh() {
    if constexpr (Cfg::kRegA) {
      refresh_frags(a, zero);
      refresh_frags(b, zero);
    }
  }
};

// issue_product with A from registers (a: ResidentFrags).
template <int kD, int kN>
__device__ __forceinline__ void issue_product_ra(float (&acc)[kN / 2],
                                                 const uint32_t (&a)[kD / 16][4], uint32_t b) {
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
    WgmmaRegA<kN>::template mma<0>(acc, a[ks], desc_kmajor<kN>(b, 0, ks), ks > 0 ? 1 : 0);
  }
  g90::wgmma_commit();
}

// Note [sm90 flash backward: instructions per block]
// The backward issues about as many instructions as its schedulers can: session 34's SASS of the
// default entry has 487 instructions per block in the dkdv loop and 421 in the dq loop for each
// consumer warp, two consumer warps per scheduler, so ~900 issue slots a block pair against
// ~1000 clocks of tensor work at the peak rate and the ~1800 a block pair measured (issue 0.56 a
// scheduler, ncu). Most of them were not math: ~130 uniform-datapath instructions rebuilding the
// wgmma descriptors (make_desc_sw128 now takes the tile and the offset apart and writes the
// tile's word once), ~70 (dkdv) / ~130 (dq)
// computing the causal / T mask of every element in every block (select-converted; the masked
// and unmasked loops are separate instantiations now, and only the diagonal blocks mask), and
// 32 scalar shared loads of L and D (float2 now: 16). The math per element is an FFMA, an ex2, a
// FADD, an FMUL and half of two F2FP packs.

// dkdv role, in place: P^T = exp2(S^T * scale*log2e - L*log2e) (cL: the block's L*log2e per query
// column), 0 where the key (this thread's key0, key0 + 8) is after the query under kMask.
template <int kQBlk, bool kMask>
__device__ __forceinline__ void dkdv_probs_of(float (&st)[kQBlk / 2], const float* cL, float sl2,
                                              int key0, int qs, int quad) {
#pragma unroll
  for (int j = 0; j < kQBlk / 8; ++j) {
    const float2 l2 = *reinterpret_cast<const float2*>(cL + 8 * j + 2 * quad);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int qi = 8 * j + 2 * quad + (e & 1);
      float pv = ex2(fmaf(st[4 * j + e], sl2, -((e & 1) ? l2.y : l2.x)));
      if (kMask && key0 + 8 * (e >> 1) > qs + qi) pv = 0.0f;
      st[4 * j + e] = pv;
    }
  }
}
template <int kQBlk>
__device__ __forceinline__ void dkdv_probs(float (&st)[kQBlk / 2], const float* cL, float sl2,
                                           bool need_mask, int key0, int qs, int quad) {
  if (need_mask) {
    dkdv_probs_of<kQBlk, true>(st, cL, sl2, key0, qs, quad);
  } else {
    dkdv_probs_of<kQBlk, false>(st, cL, sl2, key0, qs, quad);
  }
}

// dkdv role: dS^T = P^T (dP^T - D) into out (which may be pt or dpt; cD: D per query column).
template <int kQBlk>
__device__ __forceinline__ void dkdv_ds(const float (&pt)[kQBlk / 2], const float (&dpt)[kQBlk / 2],
                                        float (&out)[kQBlk / 2], const float* cD, int quad) {
#pragma unroll
  for (int j = 0; j < kQBlk / 8; ++j) {
    const float2 d2 = *reinterpret_cast<const float2*>(cD + 8 * j + 2 * quad);
#pragma unroll
    for (int e = 0; e < 4; ++e)
      out[4 * j + e] = pt[4 * j + e] * (dpt[4 * j + e] - ((e & 1) ? d2.y : d2.x));
  }
}

// dq role, in place: P = exp2(S * scale*log2e - L*log2e) (neg_l2: -L*log2e of this thread's two
// rows), 0 for keys past T or, causal, after the row, under kMask.
template <int kKBlk, bool kMask>
__device__ __forceinline__ void dq_probs_of(float (&s)[kKBlk / 2], const float (&neg_l2)[2],
                                            float sl2, bool causal, int row0, int k0, int T,
                                            int quad) {
#pragma unroll
  for (int jj = 0; jj < kKBlk / 8; ++jj)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float pv = ex2(fmaf(s[4 * jj + e], sl2, neg_l2[e >> 1]));
      if constexpr (kMask) {
        const int row = row0 + 8 * (e >> 1);
        const int col = k0 + 8 * jj + 2 * quad + (e & 1);
        if (col >= T || (causal && col > row)) pv = 0.0f;
      }
      s[4 * jj + e] = pv;
    }
}
template <int kKBlk>
__device__ __forceinline__ void dq_probs(float (&s)[kKBlk / 2], const float (&neg_l2)[2], float sl2,
                                         bool need_mask, bool causal, int row0, int k0, int T,
                                         int quad) {
  if (need_mask) {
    dq_probs_of<kKBlk, true>(s, neg_l2, sl2, causal, row0, k0, T, quad);
  } else {
    dq_probs_of<kKBlk, false>(s, neg_l2, sl2, causal, row0, k0, T, quad);
  }
}

// dq role, in place: dS = P (dP - D) (dl: D of this thread's two rows).
template <int kKBlk>
__device__ __forceinline__ void dq_ds(float (&s)[kKBlk / 2], const float (&dp)[kKBlk / 2],
                                      const float (&dl)[2]) {
#pragma unroll
  for (int jj = 0; jj < kKBlk / 8; ++jj)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[4 * jj + e] = s[4 * jj + e] * (dp[4 * jj + e] - dl[e >> 1]);
}

// ---- dkdv role ----------------------------------------------------------------------------------
template <class Cfg>
__device__ __forceinline__ void dkdv_role(const BwdMaps& maps, const Params& p, uint8_t* smem,
                                          int kb, int h, int b, int wg, int tid) {
  constexpr int kD = Cfg::kD, kKeys = Cfg::kKeys, kQBlk = Cfg::kQBlk, kStages = Cfg::kStagesKV;
  constexpr int kTile = Cfg::kTile64;
  uint8_t* sK = smem;                     // [kKeys] tile
  uint8_t* sV = sK + Cfg::kResident;      // [kKeys]
  uint8_t* sDs = sV + Cfg::kResident;     // kAccDq: [kKeys][64 queries] dS^T
  float* sPart = reinterpret_cast<float*>(sDs + Cfg::kDsTile);  // kAccDq: [64][kD] dQ part tiles
  uint8_t* sQ = sDs + Cfg::kAccDqBytes;   // [kStages] x [64 queries]
  uint8_t* sdO = sQ + kStages * kTile;    // [kStages] x [64 queries]
  float* sL = reinterpret_cast<float*>(sdO + kStages * kTile);  // [kStages][64], L*log2e
  float* sD = sL + kStages * kQBlk;                                // [kStages][64]
  uint64_t* full_kv = reinterpret_cast<uint64_t*>(smem + Cfg::kSmemBytes - 1024 - Cfg::kBarrierBytes);
  uint64_t* full = full_kv + 2;
  uint64_t* empty = full + kStages;

  const int T = p.seq_len;
  const int k0 = kb * kKeys;
  const int nqb = (T + kQBlk - 1) / kQBlk;
  const int i0 = p.causal ? k0 / kQBlk : 0;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;

  if (threadIdx.x == 0) {
    g90::mbar_init(full_kv, 1);
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      g90::mbar_init(&full[s], 1 + 32);  // TMA thread's expect-tx + the 32 L/D lanes
      g90::mbar_init(&empty[s], 4 * Cfg::kConsumers);
    }
    g90::mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    g90::setmaxnreg_dec<Cfg::kProducerRegs>();
    const int warp = tid / 32, lane = tid % 32;
    if (warp == 0 && lane == 0) {
      g90::mbar_arrive_expect_tx(full_kv, 2 * Cfg::kResident);
      tma_tile<kD, kKeys>(sK, &maps.k, full_kv, h, k0, b);
      tma_tile<kD, kKeys>(sV, &maps.v, full_kv, h, k0, b);
      Ring r;
      for (int i = i0; i < nqb; ++i) {
        g90::mbar_wait(&empty[r.stage], r.phase ^ 1);
        g90::mbar_arrive_expect_tx(&full[r.stage], 2 * kTile);
        tma_tile<kD, kQBlk>(sQ + r.stage * kTile, &maps.q, &full[r.stage], h, i * kQBlk, b);
        tma_tile<kD, kQBlk>(sdO + r.stage * kTile, &maps.d_o, &full[r.stage], h, i * kQBlk, b);
        r.advance<kStages>();
      }
    } else if (warp == 1) {
      const float* gL = p.lse + bh * T;
      const float* gD = p.delta + bh * T;
      Ring r;
      for (int i = i0; i < nqb; ++i) {
        g90::mbar_wait(&empty[r.stage], r.phase ^ 1);
#pragma unroll
        for (int rr = lane; rr < kQBlk; rr += 32) {
          const int q = i * kQBlk + rr;
          sL[r.stage * kQBlk + rr] = q < T ? gL[q] * kLog2e : INFINITY;
          sD[r.stage * kQBlk + rr] = q < T ? gD[q] : 0.0f;
        }
        g90::mbar_arrive(&full[r.stage]);
        r.advance<kStages>();
      }
    }
    return;
  }

  g90::setmaxnreg_inc<Cfg::kConsumerRegs>();
  const int c = wg - 1;
  const int warp = tid / 32, lane = tid % 32, quad = lane % 4;
  const int key0 = k0 + 64 * c + 16 * warp + lane / 4;  // this thread's keys: key0, key0 + 8
  const int wg_key_min = k0 + 64 * c;
  const float sl2 = p.scale_log2;
  const bool causal = p.causal != 0;
  const uint32_t k_tile = g90::smem_u32(sK), v_tile = g90::smem_u32(sV);
  const uint32_t q_tiles = g90::smem_u32(sQ), o_tiles = g90::smem_u32(sdO);

  float dk[kD / 2], dv[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) dk[i] = dv[i] = 0.0f;
  float st[kQBlk / 2], dpt[kQBlk / 2];
  uint32_t fa[kQBlk / 16][4];
  // Note [sm90 flash backward: dS fragments]
  // Without kDsFrags dS^T reuses P^T's fragments, so it can be packed only once dV += P^T dO has
  // read them (a wait<0> for dV in every iteration before dK can issue). With kDsFrags dS^T has
  // its own fragments and dK follows dV into the tensor pipe at once; both retire, in commit
  // order, before the next iteration's first wait<1> returns (which is also when that iteration
  // overwrites fa and fd and releases this iteration's ring stage, read by both products).
  constexpr int kFdRows = Cfg::kDsFrags || Cfg::kPipeKv ? kQBlk / 16 : 1;
  uint32_t fd[kFdRows][4];  // dS^T (kDsFrags; kPipeKv: block i-1's)

  // kAccDq state: this warpgroup's m64n64 dQ part of the current block; as the adder of the
  // previous block, what it still owes (Note [sm90 flash backward: dQ accumulated in order]).
  float dq[kD / 2];
  int bump_i = -1;    // block whose bulk add this warpgroup issued, to be published
  int read_buf = -1;  // shared part this warpgroup read, to be handed back
  const int n_iter = nqb - i0;
  float* const acc_head = p.dq_acc + bh * nqb * (kQBlk * kD);
  uint32_t* const sem_head = p.dq_sem + bh * nqb;
  __nv_bfloat16* const dq_out = static_cast<__nv_bfloat16*>(p.dq) + b * p.sdq.b + h * p.sdq.h;
  const int bar_wg = 2 + c;

  g90::mbar_wait(full_kv, 0);
  if constexpr (Cfg::kPipeKv) {
    // Note [sm90 flash backward: pipelined dkdv role]
    // The dq role's reordering (Note [sm90 flash backward: pipelined dq role]) for the dkdv
    // role: block i-1's dV += P^T dO and dK += dS^T Q are issued behind block i's S^T and dP^T,
    // so the exponentials of block i run beside dP^T_i, dV_{i-1} and dK_{i-1} (three products
    // instead of one). P^T and dS^T of block i-1 wait in fragments of their own (fa, fd) until
    // then; the wait<0> before block i packs them finds both products long done and releases
    // block i-1's ring stage (its Q and dO tiles). S^T and dP^T are issued and read in one
    // iteration: no accumulator is read across the loop's back edge (C7514). Both pipelined
    // loops hold block i-1's stage until the wait<0> late in iteration i (the deferred loop
    // releases it at its first wait): with 3 stages about one block of TMA lookahead is left,
    // hence the 4-stage table entry too. ptxas injects a warpgroup.arrive before the conditional
    // previous-block products (C7519; peel the first block if it costs).
    Ring r, prev;
    bool have_prev = false;
    auto issue_dvdk = [&]() {
      const uint32_t q_prev = q_tiles + prev.stage * kTile, o_prev = o_tiles + prev.stage * kTile;
#pragma unroll
      for (int kk = 0; kk < kQBlk / 16; ++kk) {
        WgmmaRegA<kD>::template mma<1>(dv, fa[kk], desc_mnmajor<kQBlk>(o_prev, kk), 1);
      }
#pragma unroll
      for (int kk = 0; kk < kQBlk / 16; ++kk) {
        WgmmaRegA<kD>::template mma<1>(dk, fd[kk], desc_mnmajor<kQBlk>(q_prev, kk), 1);
      }
    };
    auto retire_prev = [&]() {  // a skipped block or the end: block i-1's products now
      if (!have_prev) return;
      g90::wgmma_fence();
      issue_dvdk();
      g90::wgmma_commit();
      g90::wgmma_wait<0>();
      g90::mbar_arrive_warp(&empty[prev.stage], lane);
      have_prev = false;
    };
    for (int i = i0; i < nqb; ++i) {
      const int qs = i * kQBlk;
      g90::mbar_wait(&full[r.stage], r.phase);
      if (!(causal && wg_key_min > qs + kQBlk - 1)) {
        const uint32_t q_tile = q_tiles + r.stage * kTile, o_tile = o_tiles + r.stage * kTile;
        const float* cL = sL + r.stage * kQBlk;
        const float* cD = sD + r.stage * kQBlk;
        g90::wgmma_fence();
        issue_two_products<kD, kKeys, kQBlk>(st, k_tile, q_tile, dpt, v_tile, o_tile, 64 * c);
        if (have_prev) issue_dvdk();
        g90::wgmma_commit();  // dV_{i-1} and dK_{i-1} (empty without block i-1)
        g90::wgmma_wait<2>();  // S^T_i
        g90::fence_accumulators(st);
        const bool need_mask = causal && wg_key_min + 63 > qs;
        dkdv_probs<kQBlk>(st, cL, sl2, need_mask, key0, qs, quad);
        g90::wgmma_wait<1>();  // dP^T_i
        g90::fence_accumulators(dpt);
        dkdv_ds<kQBlk>(st, dpt, dpt, cD, quad);  // dS^T (P^T stays in st)
        g90::wgmma_wait<0>();  // dV_{i-1}, dK_{i-1}: fa, fd and block i-1's stage are free
        if (have_prev) g90::mbar_arrive_warp(&empty[prev.stage], lane);
        acc_to_a_frags<kQBlk>(st, fa);
        acc_to_a_frags<kQBlk>(dpt, fd);
        have_prev = true;
        prev = r;
      } else {
        retire_prev();
        g90::mbar_arrive_warp(&empty[r.stage], lane);
      }
      r.advance<kStages>();
    }
    retire_prev();
    g90::fence_accumulators(dk);
    g90::fence_accumulators(dv);
    store_rows<kD>(dk, static_cast<__nv_bfloat16*>(p.dk) + b * p.sdk.b + h * p.sdk.h, p.sdk.t,
                   key0, T, quad, p.scale);
    store_rows<kD>(dv, static_cast<__nv_bfloat16*>(p.dv) + b * p.sdv.b + h * p.sdv.h, p.sdv.t,
                   key0, T, quad, 1.0f);
    return;
  }
  Ring r;
  int pending = -1;  // ring stage whose dK product may still run (kDefer)
  const Turns<Cfg::kPingpong> turns{c};
  turns.start();
  ResidentFrags<Cfg> kv;  // kRegA: this warpgroup's K and V rows
  kv.template load<kKeys>(sK, sV, 64 * c, warp, lane, T);
  for (int i = i0; i < nqb; ++i) {
    const int qs = i * kQBlk;
    g90::mbar_wait(&full[r.stage], r.phase);
    // Every key of this warpgroup after every query of the block: nothing to add.
    const bool own = !(causal && wg_key_min > qs + kQBlk - 1);
    if (own) {
      const uint32_t q_tile = q_tiles + r.stage * kTile, o_tile = o_tiles + r.stage * kTile;
      const float* cL = sL + r.stage * kQBlk;
      const float* cD = sD + r.stage * kQBlk;
      turns.take();  // A
      g90::wgmma_fence();
      if constexpr (Cfg::kRegA) {
        issue_product_ra<kD, kQBlk>(st, kv.a, q_tile);
        issue_product_ra<kD, kQBlk>(dpt, kv.b, o_tile);
      } else {
        issue_two_products<kD, kKeys, kQBlk>(st, k_tile, q_tile, dpt, v_tile, o_tile, 64 * c);
      }
      turns.give();
      g90::wgmma_wait<1>();  // S^T (and a deferred dK, and with kDsFrags dV) ready; dP^T may run
      g90::fence_accumulators(st);
      if constexpr (Cfg::kDsFrags) g90::fence_accumulators(dv);
      if (pending >= 0) {
        g90::mbar_arrive_warp(&empty[pending], lane);
        pending = -1;
      }
      const bool need_mask = causal && wg_key_min + 63 > qs;
      dkdv_probs<kQBlk>(st, cL, sl2, need_mask, key0, qs, quad);
      acc_to_a_frags<kQBlk>(st, fa);
      turns.take();  // B: dV, dK
      g90::wgmma_fence();
      // dV += P^T dO
#pragma unroll
      for (int kk = 0; kk < kQBlk / 16; ++kk) {
        WgmmaRegA<kD>::template mma<1>(dv, fa[kk], desc_mnmajor<kQBlk>(o_tile, kk), 1);
      }
      g90::wgmma_commit();
      g90::wgmma_wait<1>();  // dP^T ready; dV may still run
      g90::fence_accumulators(dpt);
      dkdv_ds<kQBlk>(st, dpt, st, cD, quad);  // dS^T
      if constexpr (Cfg::kDsFrags) {
        acc_to_a_frags<kQBlk>(st, fd);  // dV may still run: it reads fa, not fd
      } else {
        g90::wgmma_wait<0>();  // dV done: its A fragments may be overwritten
        g90::fence_accumulators(dv);
        acc_to_a_frags<kQBlk>(st, fa);
      }
      if constexpr (Cfg::kAccDq) {
        // dQ part = dS K over this warpgroup's 64 keys: dS^T rows to shared memory (this
        // warpgroup's own rows: its previous dQ product, the only reader, has retired), then
        // the product first so that its wait below leaves dK += dS^T Q running.
        store_ds_t(fa, sDs, c, warp, lane);
        g90::fence_proxy_async_smem();  // generic-proxy stores -> the wgmma's async-proxy reads
        named_bar_sync(bar_wg, 128);
        const uint32_t ds_rows = g90::smem_u32(sDs) + 8192 * c, k_rows = k_tile + 8192 * c;
        g90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          g90::Wgmma<g90::InBf16, kD>::template mma<1, 1>(
              dq, desc_mnmajor<kKeys>(ds_rows, kk), desc_mnmajor<kKeys>(k_rows, kk),
              kk > 0 ? 1 : 0);
        }
        g90::wgmma_commit();
      } else {
        g90::wgmma_fence();
      }
      // dK += dS^T Q
#pragma unroll
      for (int kk = 0; kk < kQBlk / 16; ++kk) {
        if constexpr (Cfg::kDsFrags) {
          WgmmaRegA<kD>::template mma<1>(dk, fd[kk], desc_mnmajor<kQBlk>(q_tile, kk), 1);
        } else {
          WgmmaRegA<kD>::template mma<1>(dk, fa[kk], desc_mnmajor<kQBlk>(q_tile, kk), 1);
        }
      }
      g90::wgmma_commit();
      turns.give();
      if constexpr (Cfg::kAccDq) {
        // What this warpgroup owes as the previous block's adder, while dQ and dK run: the bulk
        // add published (thread 0 waits for it), its part tile handed back.
        if (bump_i >= 0) {
          if (tid == 0) dq_bump(sem_head + bump_i);
          bump_i = -1;
        }
        if (read_buf >= 0) {
          named_bar_arrive(6 + read_buf, 256);  // after dq_bump's wait: the bulk read is done
          read_buf = -1;
        }
      }
      if constexpr (Cfg::kAccDq) {
        g90::wgmma_wait<1>();  // the dQ part is ready; dK may still run
        g90::fence_accumulators(dq);
      }
      if constexpr (Cfg::kDefer) {
        pending = r.stage;
      } else {
        g90::wgmma_wait<0>();
        g90::fence_accumulators(dk);
      }
    } else {
      turns.skip();
      if (pending >= 0) {  // a skipped block: retire the deferred product first
        g90::wgmma_wait<0>();
        g90::fence_accumulators(dk);
        if constexpr (Cfg::kDsFrags) g90::fence_accumulators(dv);
        g90::mbar_arrive_warp(&empty[pending], lane);
        pending = -1;
      }
      if constexpr (Cfg::kAccDq) {  // warpgroup 1 on the diagonal block: a zero dQ part
#pragma unroll
        for (int e = 0; e < kD / 2; ++e) dq[e] = 0.0f;
      }
    }
    if constexpr (Cfg::kAccDq) {
      // The warpgroups take turns adding (warpgroup t & 1 adds block t of this CTA): the other
      // one hands its dQ part over through shared tile t & 1 (named barriers 4 + buf: written,
      // 6 + buf: read, the latter deferred to the adder's next block), the adder sums the two and
      // adds them into the chain (Note [sm90 flash backward: dQ accumulated in order]).
      const int t = i - i0, buf = t & 1;
      float* part = sPart + buf * (kQBlk * kD);
      // Block 0 is the diagonal one, where warpgroup 1 (the sender) has no keys: no part moves.
      if (c != buf) {  // sender
        if (t >= 2) named_bar_sync(6 + buf, 256);
        if (t > 0) store_part<kD>(part, dq, tid);
        named_bar_arrive(4 + buf, 256);
      } else {  // adder
        named_bar_sync(4 + buf, 256);
        const float* theirs = part + 4 * tid;
        if (t > 0) {
#pragma unroll
          for (int v = 0; v < kD / 8; ++v) {
            const float4 w = *reinterpret_cast<const float4*>(theirs + 512 * v);
            dq[4 * v] = w.x + dq[4 * v];
            dq[4 * v + 1] = w.y + dq[4 * v + 1];
            dq[4 * v + 2] = w.z + dq[4 * v + 2];
            dq[4 * v + 3] = w.w + dq[4 * v + 3];
          }
        }
        DqChain ch;
        ch.acc = acc_head + static_cast<int64_t>(i) * (kQBlk * kD);
        ch.sem = sem_head + i;
        ch.first = kb == 0;
        ch.last = kb == Cfg::last_key_block(i);
        const int row0 = qs + 16 * warp + lane / 4;
        if (dq_accumulate<kD>(dq, ch, part, kb, tid, bar_wg, dq_out, p.sdq.t, row0, T, quad,
                              p.scale)) {
          bump_i = i;
        }
        if (t + 2 < n_iter) read_buf = buf;  // handed back at the next block
      }
    }
    if (pending != r.stage) g90::mbar_arrive_warp(&empty[r.stage], lane);
    r.advance<kStages>();
    kv.refresh();
  }
  turns.finish();
  g90::wgmma_wait<0>();
  g90::fence_accumulators(dk);
  g90::fence_accumulators(dv);
  if (pending >= 0) g90::mbar_arrive_warp(&empty[pending], lane);
  if constexpr (Cfg::kAccDq) {
    if (bump_i >= 0 && tid == 0) dq_bump(sem_head + bump_i);
  }
  store_rows<kD>(dk, static_cast<__nv_bfloat16*>(p.dk) + b * p.sdk.b + h * p.sdk.h, p.sdk.t, key0,
                 T, quad, p.scale);
  store_rows<kD>(dv, static_cast<__nv_bfloat16*>(p.dv) + b * p.sdv.b + h * p.sdv.h, p.sdv.t, key0,
                 T, quad, 1.0f);
}

// ---- dq role ------------------------------------------------------------------------------------
template <class Cfg>
__device__ __forceinline__ void dq_role(const BwdMaps& maps, const Params& p, uint8_t* smem,
                                        int qb, int h, int b, int wg, int tid) {
  constexpr int kD = Cfg::kD, kRows = Cfg::kRows, kKBlk = Cfg::kKBlk, kStages = Cfg::kStagesQ;
  constexpr int kTile = Cfg::kKBlkTile;  // bytes of one K (V) block
  uint8_t* sQ = smem;                    // [kRows] tile
  uint8_t* sdO = sQ + Cfg::kResident;    // [kRows]
  uint8_t* sK = sdO + Cfg::kResident;    // [kStages] x [kKBlk keys]
  uint8_t* sV = sK + kStages * kTile;    // [kStages] x [kKBlk keys]
  uint64_t* full_qo = reinterpret_cast<uint64_t*>(smem + Cfg::kSmemBytes - 1024 - Cfg::kBarrierBytes);
  uint64_t* full = full_qo + 2;
  uint64_t* empty = full + kStages;

  const int T = p.seq_len;
  const int q0 = qb * kRows;
  const int q_end = min(T, q0 + kRows);
  const int n_kv = p.causal ? (q_end + kKBlk - 1) / kKBlk : (T + kKBlk - 1) / kKBlk;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;

  if (threadIdx.x == 0) {
    g90::mbar_init(full_qo, 1);
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      g90::mbar_init(&full[s], 1);
      g90::mbar_init(&empty[s], 4 * Cfg::kConsumers);
    }
    g90::mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    g90::setmaxnreg_dec<Cfg::kProducerRegs>();
    if (tid == 0) {
      g90::mbar_arrive_expect_tx(full_qo, 2 * Cfg::kResident);
      tma_tile<kD, kRows>(sQ, &maps.q, full_qo, h, q0, b);
      tma_tile<kD, kRows>(sdO, &maps.d_o, full_qo, h, q0, b);
      Ring r;
      for (int j = 0; j < n_kv; ++j) {
        g90::mbar_wait(&empty[r.stage], r.phase ^ 1);
        g90::mbar_arrive_expect_tx(&full[r.stage], 2 * kTile);
        tma_tile<kD, kKBlk>(sK + r.stage * kTile, &maps.k, &full[r.stage], h, j * kKBlk, b);
        tma_tile<kD, kKBlk>(sV + r.stage * kTile, &maps.v, &full[r.stage], h, j * kKBlk, b);
        r.advance<kStages>();
      }
    }
    return;
  }

  g90::setmaxnreg_inc<Cfg::kConsumerRegs>();
  const int c = wg - 1;
  const int warp = tid / 32, lane = tid % 32, quad = lane % 4;
  const int row0 = q0 + 64 * c + 16 * warp + lane / 4;  // this thread's rows: row0, row0 + 8
  const int wg_row_min = q0 + 64 * c;
  const float sl2 = p.scale_log2;
  const bool causal = p.causal != 0;
  float neg_l2[2], dl[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = row0 + 8 * hr;
    neg_l2[hr] = row < T ? -p.lse[bh * T + row] * kLog2e : -INFINITY;
    dl[hr] = row < T ? p.delta[bh * T + row] : 0.0f;
  }
  const uint32_t q_tile = g90::smem_u32(sQ), o_tile = g90::smem_u32(sdO);
  const uint32_t k_tiles = g90::smem_u32(sK), v_tiles = g90::smem_u32(sV);

  float dq[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) dq[i] = 0.0f;
  float s[kKBlk / 2], dp[kKBlk / 2];
  uint32_t fa[kKBlk / 16][4];

  g90::mbar_wait(full_qo, 0);
  if constexpr (Cfg::kPipeDq) {
    // Note [sm90 flash backward: pipelined dq role]
    // The loop below issues S_j and dP_j behind block j-1's dQ product, so waiting for S_j also
    // waits for that dQ: while the warpgroup computes its exponentials only dP_j is in the
    // tensor pipe, and the other warpgroup alone covers the rest (ncu, T16384: tensor pipe 55%
    // busy, issue 0.56 a scheduler). Here dQ_{j-1} is issued after S_j and dP_j
    // (FlashAttention-3's ordering for the forward's P V): wait<2> retires S_j only, the
    // exponentials run beside dP_j and dQ_{j-1}, wait<1> retires dP_j, and the wait<0> before
    // block j's dS is packed (the fragments dQ_{j-1} reads) finds dQ_{j-1} long done; block
    // j-1's ring stage is released there. S and dP are issued and read in one iteration, so
    // ptxas keeps every wgmma asynchronous (an earlier version that issued block j+1's S / dP
    // before finishing block j read accumulators across the loop's back edge: C7514, every
    // wgmma serialized). Measured (session 34 call 1, with the pipelined dkdv role or ds-frags):
    // 3-5% SLOWER than the plain loops at all three benchmark shapes; re-measured after the
    // descriptor fix (Note [sm90 flash backward: instructions per block]).
    Ring r, prev;
    bool have_prev = false;  // block j-1's dS fragments in fa, its dQ not yet issued
    auto issue_dq = [&]() {
      const uint32_t k_prev = k_tiles + prev.stage * kTile;
#pragma unroll
      for (int kk = 0; kk < kKBlk / 16; ++kk) {
        WgmmaRegA<kD>::template mma<1>(dq, fa[kk], desc_mnmajor<kKBlk>(k_prev, kk), 1);
      }
    };
    auto retire_prev = [&]() {  // a skipped block or the end: block j-1's dQ now
      if (!have_prev) return;
      g90::wgmma_fence();
      issue_dq();
      g90::wgmma_commit();
      g90::wgmma_wait<0>();
      g90::mbar_arrive_warp(&empty[prev.stage], lane);
      have_prev = false;
    };
    for (int j = 0; j < n_kv; ++j) {
      const int k0 = j * kKBlk;
      g90::mbar_wait(&full[r.stage], r.phase);
      if (!(causal && k0 > wg_row_min + 63)) {
        const uint32_t k_tile = k_tiles + r.stage * kTile, v_tile = v_tiles + r.stage * kTile;
        g90::wgmma_fence();
        issue_two_products<kD, kRows, kKBlk>(s, q_tile, k_tile, dp, o_tile, v_tile, 64 * c);
        if (have_prev) issue_dq();
        g90::wgmma_commit();  // dQ_{j-1} (empty without block j-1)
        g90::wgmma_wait<2>();  // S_j
        g90::fence_accumulators(s);
        const bool need_mask = k0 + kKBlk > T || (causal && k0 + kKBlk - 1 > wg_row_min);
        dq_probs<kKBlk>(s, neg_l2, sl2, need_mask, causal, row0, k0, T, quad);
        g90::wgmma_wait<1>();  // dP_j
        g90::fence_accumulators(dp);
        dq_ds<kKBlk>(s, dp, dl);
        g90::wgmma_wait<0>();  // dQ_{j-1}: fa and block j-1's stage are free
        if (have_prev) g90::mbar_arrive_warp(&empty[prev.stage], lane);
        acc_to_a_frags<kKBlk>(s, fa);
        have_prev = true;
        prev = r;
      } else {
        retire_prev();
        g90::mbar_arrive_warp(&empty[r.stage], lane);
      }
      r.advance<kStages>();
    }
    retire_prev();
    g90::fence_accumulators(dq);
    store_rows<kD>(dq, static_cast<__nv_bfloat16*>(p.dq) + b * p.sdq.b + h * p.sdq.h, p.sdq.t,
                   row0, T, quad, p.scale);
    return;
  }
  Ring r;
  int pending = -1;  // ring stage whose dQ product may still run (kDefer)
  const Turns<Cfg::kPingpong> turns{c};  // Note [sm90 flash backward: pingpong]
  turns.start();
  ResidentFrags<Cfg> qo;  // kRegA: this warpgroup's Q and dO rows
  qo.template load<kRows>(sQ, sdO, 64 * c, warp, lane, T);
  for (int j = 0; j < n_kv; ++j) {
    const int k0 = j * kKBlk;
    g90::mbar_wait(&full[r.stage], r.phase);
    // Every key of the block after every row of this warpgroup: nothing to add.
    if (!(causal && k0 > wg_row_min + 63)) {
      const uint32_t k_tile = k_tiles + r.stage * kTile, v_tile = v_tiles + r.stage * kTile;
      turns.take();  // A
      g90::wgmma_fence();
      if constexpr (Cfg::kRegA) {
        issue_product_ra<kD, kKBlk>(s, qo.a, k_tile);
        issue_product_ra<kD, kKBlk>(dp, qo.b, v_tile);
      } else {
        issue_two_products<kD, kRows, kKBlk>(s, q_tile, k_tile, dp, o_tile, v_tile, 64 * c);
      }
      turns.give();
      g90::wgmma_wait<1>();  // S (and a deferred dQ) ready; dP may still run
      g90::fence_accumulators(s);
      if (pending >= 0) {
        g90::mbar_arrive_warp(&empty[pending], lane);
        pending = -1;
      }
      const bool need_mask = k0 + kKBlk > T || (causal && k0 + kKBlk - 1 > wg_row_min);
      dq_probs<kKBlk>(s, neg_l2, sl2, need_mask, causal, row0, k0, T, quad);
      g90::wgmma_wait<0>();
      g90::fence_accumulators(dp);
      dq_ds<kKBlk>(s, dp, dl);
      acc_to_a_frags<kKBlk>(s, fa);
      turns.take();  // B
      g90::wgmma_fence();
      // dQ += dS K
#pragma unroll
      for (int kk = 0; kk < kKBlk / 16; ++kk) {
        WgmmaRegA<kD>::template mma<1>(dq, fa[kk], desc_mnmajor<kKBlk>(k_tile, kk), 1);
      }
      g90::wgmma_commit();
      turns.give();
      if constexpr (Cfg::kDefer) {
        pending = r.stage;
      } else {
        g90::wgmma_wait<0>();
        g90::fence_accumulators(dq);
      }
    } else {
      turns.skip();
      if (pending >= 0) {  // a skipped block: retire the deferred product first
        g90::wgmma_wait<0>();
        g90::fence_accumulators(dq);
        g90::mbar_arrive_warp(&empty[pending], lane);
        pending = -1;
      }
    }
    if (pending != r.stage) g90::mbar_arrive_warp(&empty[r.stage], lane);
    r.advance<kStages>();
    qo.refresh();
  }
  turns.finish();
  g90::wgmma_wait<0>();
  g90::fence_accumulators(dq);
  if (pending >= 0) g90::mbar_arrive_warp(&empty[pending], lane);
  store_rows<kD>(dq, static_cast<__nv_bfloat16*>(p.dq) + b * p.sdq.b + h * p.sdq.h, p.sdq.t, row0,
                 T, quad, p.scale);
}

// Both roles in one 1-D grid of 2 * n_blocks * B * H CTAs (n_blocks key blocks = n_blocks query
// blocks of 64 * kConsumers rows), in decreasing work under causal masking across all heads:
// rank r = blockIdx.x / (B*H) alternates dkdv key block r/2 (key block 0 sees every query block)
// and dq query block n_blocks - 1 - r/2 (the last sees every key block), so the light CTAs of
// every head run last instead of heavy CTAs of the last heads.
//
// Note [sm90 flash backward: CTA order]
// That order runs all B*H heads at once: each wave of 132 CTAs touches a different head per CTA
// and each head's Q / K / V / dO (512 KB at T = 1024, d = 64; 8 MB at T = 16384) is read again by
// each of its 2 * n_blocks CTAs long after L2 evicted it (ncu, session 32, GPT-2 T1024: 578 MB of
// DRAM traffic a launch for ~150 MB of compulsory bytes, 44% of peak, L2 hit 38%). With
// p.bwd_group_heads = G (BLUBLAS_ATTN_BWD_GROUP) the grid runs groups of G heads one after the
// other, each group in the decreasing-work order above (the last group may be smaller): a
// group's CTAs share its heads' tensors in L2, at the price of a tail of the last group's
// heavy CTAs. Same bits in any order (no CTA reads another's output).
// Measured (session 33, H200, attention_bench --dq_only --bwd_groups, backward TFLOP/s, all heads
// / G = 1 / 2 / 4 / 8): GPT-2 B16 T1024 H12 226.9 / 229.6 / 227.6 / 230.9 / 232.0; d48 B16 T1024
// H25 224.6 / 237.2 / 238.0 / 239.6 / 242.7; B2 T16384 H12 331.7 / 359.7 / 348.1 / 359.9 / 341.8.
// The best G makes a group about one wave of CTAs: G = SMs / (2 * n_blocks) (8 at T = 1024 with
// 132 SMs, 1 at T = 16384), at least 1: bwd_group_heads = -1 (the default) picks that in the
// launcher; BLUBLAS_ATTN_BWD_GROUP=0 restores the all-heads order.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    flash_attn_bwd_sm90_kernel(const __grid_constant__ BwdMaps maps, const Params p, int n_blocks) {
#if BLUBLAS_SM90A_ENABLED
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_addr = g90::smem_u32(smem_raw);
  uint8_t* smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  const int tid = static_cast<int>(threadIdx.x % 128);
  const int bh_count = p.batch * p.heads;
  if constexpr (Cfg::kAccDq) {
    // The dkdv role alone, (key block, head) from a ticket taken at the CTA's start, key block
    // major (Note [sm90 flash backward: dQ accumulated in order]: deadlock freedom).
    int* s_ticket = reinterpret_cast<int*>(smem + Cfg::kSmemBytes - 1024 - 8);
    if (threadIdx.x == 0) {
      const int nqb = (p.seq_len + Cfg::kQBlk - 1) / Cfg::kQBlk;
      *s_ticket = static_cast<int>(atomicAdd(p.dq_sem + static_cast<int64_t>(bh_count) * nqb, 1u));
    }
    __syncthreads();
    const int ticket = *s_ticket;
    const int bh = ticket % bh_count;
    dkdv_role<Cfg>(maps, p, smem, ticket / bh_count, bh % p.heads, bh / p.heads, wg, tid);
    return;
  }
  // Note [sm90 flash backward: CTA order]: groups of G heads, each in decreasing work.
  const int group = p.bwd_group_heads > 0 && p.bwd_group_heads < bh_count ? p.bwd_group_heads : bh_count;
  const int per_group = 2 * n_blocks * group;
  const int g = static_cast<int>(blockIdx.x) / per_group;
  const int g_heads = min(group, bh_count - g * group);
  const int j = static_cast<int>(blockIdx.x) - g * per_group;
  const int rank = j / g_heads;
  const int bh = g * group + j % g_heads;
  const int h = bh % p.heads, b = bh / p.heads;
  if ((rank & 1) == 0) {
    dkdv_role<Cfg>(maps, p, smem, rank / 2, h, b, wg, tid);
  } else {
    dq_role<Cfg>(maps, p, smem, n_blocks - 1 - rank / 2, h, b, wg, tid);
  }
#else
  (void)maps;
  (void)p;
  (void)n_blocks;
#endif
}

template <class Cfg>
Status launch_flash_attn_bwd_sm90(const Params& p, const DeviceInfo& dev, cudaStream_t stream,
                                  const char* name) {
  constexpr int smem = Cfg::kSmemBytes;
  BLUBLAS_RETURN_IF_ERROR(check_sm90_launch(dev, smem, name));
  BwdMaps maps;
  const int B = p.batch, T = p.seq_len, H = p.heads;
  BLUBLAS_RETURN_IF_ERROR(
      make_bthd_tensor_map(&maps.q, p.q, p.sq, B, T, H, Cfg::kD, kBoxRows, name, "q"));
  BLUBLAS_RETURN_IF_ERROR(
      make_bthd_tensor_map(&maps.k, p.k, p.sk, B, T, H, Cfg::kD, kBoxRows, name, "k"));
  BLUBLAS_RETURN_IF_ERROR(
      make_bthd_tensor_map(&maps.v, p.v, p.sv, B, T, H, Cfg::kD, kBoxRows, name, "v"));
  BLUBLAS_RETURN_IF_ERROR(
      make_bthd_tensor_map(&maps.d_o, p.d_o, p.sdo, B, T, H, Cfg::kD, kBoxRows, name, "d_o"));
  auto kernel = flash_attn_bwd_sm90_kernel<Cfg>;
  BLUBLAS_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  static_assert(Cfg::kKeys == Cfg::kRows, "one block count for both roles");
  const int n_blocks = (T + Cfg::kKeys - 1) / Cfg::kKeys;
  if constexpr (Cfg::kAccDq) {
    BLUBLAS_CHECK(p.causal != 0 && p.dq_acc != nullptr && p.dq_sem != nullptr,
                  StatusCode::kInvalidArgument, name,
                  ": dQ accumulation needs a causal problem and its workspace");
  }
  const int64_t ctas = (Cfg::kAccDq ? 1LL : 2LL) * n_blocks * B * H;
  BLUBLAS_CHECK(ctas <= 0x7fffffffLL, StatusCode::kInvalidArgument, name, ": ", ctas,
                " CTAs exceed the grid limit");
  Params q = p;
  if (q.bwd_group_heads < 0) {  // Note [sm90 flash backward: CTA order]: about a wave a group
    const int per_head = 2 * n_blocks;
    q.bwd_group_heads = dev.sm_count * Cfg::kMinBlocks / per_head > 1
                            ? dev.sm_count * Cfg::kMinBlocks / per_head
                            : 1;
  }
  kernel<<<static_cast<unsigned>(ctas), Cfg::kThreads, smem, stream>>>(maps, q, n_blocks);
  BLUBLAS_KERNEL_LAUNCH_CHECK(name);
  return Status::success();
}

}  // namespace blublas::attn::sm90
