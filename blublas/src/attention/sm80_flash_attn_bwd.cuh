// sm80_flash_attn_bwd.cuh: the mma.sync flash-attention backward kernel templates (bf16 or tf32),
// instantiated by sm80_bf16_flash_attn_bwd.cu and sm80_tf32_flash_attn_bwd.cu.
//
// Note [Deterministic flash backward: two passes, no atomics]
// With P = exp(scale*S - L) and D = rowsum(dO * O) (precomputed, attn_bwd_delta):
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - D),  dK = scale * dS^T Q,  dQ = scale * dS K.
// dK/dV need a sum over queries, dQ a sum over keys. Summing dQ across key-block CTAs with float
// atomics (the usual flash-attention choice) makes the bits depend on scheduling, so this file
// uses two kernels instead:
//   dkdv: one CTA per key block; each warp owns 16 keys and walks the query blocks in order,
//         computing S^T = K Q^T and dP^T = V dO^T directly in key-major form (no transposes);
//   dq:   one CTA per query block (the forward's shape) walking the key blocks in order.
// The price is recomputing S and dP in the dq pass (7 block products instead of 5); the gain is
// bitwise-reproducible gradients, no fp32 dQ accumulator and no zero-fill of one. Query/key
// blocks are double-buffered with cp.async as in the forward.
//
// Measured and dropped (H200, B16 T1024 H12 d64): a fused variant that added dQ inside the dkdv
// kernel in a fixed key-block order (per-query-block turn counters, acquire/release, fp32
// accumulator) ran the backward in 0.83-0.85 ms against 0.47 ms for the two passes: the ordered
// hand-offs serialize the CTAs of one head.
//
// Note [dQ partials]
// A third deterministic mode, for 3xTF32 at d64 (where the dq pass costs 1.11 ms of a 2.65 ms
// backward per GPT-2 layer, H200): the dkdv kernel, having dS^T of a query block in registers,
// also computes that key block's share of dQ, dQpart = dS K (kBr queries x kD), and writes it to
// a workspace; no CTA waits for another (unlike the dropped ordered variant above). Then a small
// kernel sums, per query row q, the partials of key blocks kb = 0 .. last(q) (causal: q / kBc)
// in that fixed order and scales by `scale`: bitwise reproducible, no atomics.
//   - In the dkdv loop each warp stashes its dS^T (16 keys x kBr queries) into a [kBr][kBc]
//     swizzled shared tile sdS (conflict-free stores: the chunk index XOR row spreads the quad),
//     a __syncthreads, then warp w computes output columns [16w, 16w + 16) for all kBr rows
//     (kMT 2 x one n-tile pair: 16 fp32 accumulators), A = dS by ldmatrix from sdS, B = K from
//     the resident sK (scalar transposed reads). Each 32 keys go into a fresh accumulator added
//     with round-to-nearest, the dq pass's grain (Note [3xTF32 accumulation bias]): one fresh
//     accumulator per 64 keys measured dQ bias -1.33e-6 against -1.15e-6 (F32ErrorProfileGpt2Shape,
//     H200), the 32-key grain -1.15e-6 (RMS 1.65e-6, as two passes) for ~1% of the time. Warps
//     whose keys all follow the query block (causal) stash zeros instead of skipping. Partials are
//     stored unscaled; the reduce multiplies by scale once. dK and dV are bitwise those of the
//     two-pass mode (same code); dQ differs in rounding only (rel RMS 6e-8 at the GPT-2 shape).
//   - Workspace (after D): [B*H][nkb = ceil(T/64)][T][64] fp32 = B*H*nkb*T*256 bytes; at B16 H12
//     T1024: 768 MiB (805,306,368 bytes) + 0.75 MiB of D. Causal key block kb writes only rows
//     q >= 64 kb (the reduce never reads the others, which stay uninitialised).
//   - Cost: the dq pass (S, dP, dQ: 3 block products) is gone and the dkdv pass gains one (5 ->
//     6 of the old 7); causal B16 H12 T1024 writes ~428 MB of partials and the reduce reads them
//     back (~0.2-0.25 ms at H200 bandwidth): predicted 2.65 -> ~2.1 ms per layer. Measured (H200,
//     2026-11-26, one scratch A/B binary, cudaEvent median of 7 x 10 backwards, D precompute
//     included, causal B16 H12 d64): T1024 rolled 2.703 -> 2.152 ms, unrolled (ROLL_K=0) 3.116 ->
//     2.850 ms; T1664 6.68 -> 5.30 ms; T1665 falls back (7.02 / 6.97 ms). The default since then
//     (kAuto with BLUBLAS_ATTN_DQ unset); the trainer's step A/B is in bench/NOTES.md.
//   - Selection: attn::dq_partials_mode (attention.cpp) decides for both the workspace size and
//     the launch: AttentionDesc::dq_mode, or BLUBLAS_ATTN_DQ=partials|twopass under kAuto (read
//     once, default partials); only 3xTF32 d64 and only while the partials fit
//     2 GiB (B16 H12: up to T = 1664; longer contexts fall back to two passes); bf16, plain tf32
//     and d128 always run two passes.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "attention/attention_params.h"
#include "attention/sm80_mma_tiles.cuh"
#include "blublas/check.h"

namespace blublas::attn::sm80 {

constexpr float kLog2e = 1.4426950408889634f;

// dK/dV pass tiles: head dim, warps (16 keys each), queries per block, K/V A-fragments held in
// registers for the whole CTA, minimum CTAs per SM for __launch_bounds__, rolled k loops, dQ
// partials (Note [dQ partials]), Q and dO split once per CTA (3xTF32: Note [Pre-split tiles]).
template <int kD_, int kWarps_, int kBr_, bool kKVRegs_, int kMinBlocks_, bool kRollK_ = false,
          bool kDqPart_ = false, bool kPreSplit_ = false>
struct DkDvTiles {
  static constexpr int kD = kD_, kWarps = kWarps_, kBr = kBr_;
  static constexpr bool kKVRegs = kKVRegs_;
  static constexpr bool kRollK = kRollK_;  // Note [Rolled k loop]
  static constexpr bool kDqPart = kDqPart_;
  static constexpr bool kPreSplit = kPreSplit_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBc = 16 * kWarps;  // keys per CTA, 16 per warp
  // Pre-split: Q and dO land single-buffered in raw tiles, then [Q big][dO big][Q small][dO small].
  static constexpr int kBLo = kPreSplit ? 2 * kBr * kD : 0;
  template <typename Elem>
  static constexpr size_t smem_bytes() {
    return static_cast<size_t>(2 * kBc + (kPreSplit ? 6 : 4) * kBr) * kD * sizeof(Store<Elem>) +
           4 * kBr * sizeof(float) + (kDqPart ? kBr * kBc * sizeof(float) : 0);
  }
};

// Note [dQ partials]: this warp's dS^T (keys wk0 + 0..15 x kBr queries, accumulator layout) into
// the [kBr query][kBc key] swizzled tile sdS.
template <int kBc, int kQT>
__device__ __forceinline__ void stash_ds(float* sdS, const float (&s)[1][kQT][4], int wk0,
                                         int lane) {
  using Tl = Tile<float, kBc>;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < kQT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int q = 8 * nt + 2 * t + (e & 1);
      const int key = wk0 + g + ((e >> 1) << 3);
      sdS[Tl::offset(q, key >> 2) + (key & 3)] = s[0][nt][e];
    }
}

constexpr int kDqPartKeys = 32;  // keys per fresh dQ-partial accumulator (Note [dQ partials])

// Note [dQ partials]: rows [0, rows_valid) of dQpart = dS (kBr x kBc, sdS) . K (kBc x kD, sK)
// to gpart ([kBr][kD], unscaled); warp w computes output columns [w, w + 1) * kD / kWarps.
template <typename Elem, typename Cfg>
__device__ __forceinline__ void dq_partial(const Store<Elem>* sdS, const Store<Elem>* sK,
                                           float* gpart, int rows_valid, int warp, int lane) {
  static_assert(sizeof(Store<Elem>) == 4, "dQ partials take fp32 tiles");
  constexpr int kMT = Cfg::kBr / 16, kNP = Cfg::kD / 16 / Cfg::kWarps;
  static_assert(kMT * 16 == Cfg::kBr && kNP * 16 * Cfg::kWarps == Cfg::kD, "whole tiles per warp");
  // A fresh accumulator per kDqPartKeys keys, added with round-to-nearest (the dq pass's grain).
  constexpr int kSteps = kDqPartKeys / Mma<Elem>::kK;
  float acc[kMT][2 * kNP][4];
#pragma unroll
  for (int c = 0; c < Cfg::kBc / kDqPartKeys; ++c) {
    float part[kMT][2 * kNP][4];
    zero_acc(part);
    warp_gemm_tB_cols<Elem, Cfg::kBc, Cfg::kD, kMT, kNP, kSteps, Cfg::kRollK>(
        part, sdS, 0, sK, warp * kNP, c * kSteps, lane);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < 2 * kNP; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          acc[mt][nt][e] = c == 0 ? part[mt][nt][e] : __fadd_rn(acc[mt][nt][e], part[mt][nt][e]);
  }
  store_acc<float, kMT, 2 * kNP>(acc, gpart + 16 * kNP * warp, Cfg::kD, 0, rows_valid, 1.0f, lane);
}

// The dK/dV pass for key block `block` (launched heaviest first: key block 0 has the most query
// blocks under causal masking).
template <typename Elem, typename Cfg>
__device__ __forceinline__ void dkdv_block(const Params& p, int block) {
  constexpr int kD = Cfg::kD, kBr = Cfg::kBr;
  constexpr int kBc = Cfg::kBc;
  constexpr int kQT = kBr / 8;  // n-tiles of S^T (queries)
  constexpr int kDT = kD / 8;
  constexpr bool kPre = Cfg::kPreSplit;
  static_assert(!kPre || (std::is_same_v<Elem, tf32x3> && !Cfg::kKVRegs),
                "pre-split tiles: 3xTF32 with K/V fragments from shared memory only");
  constexpr int kQBufs = kPre ? 1 : 2;  // raw Q / dO buffers
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Store<Elem>* sK = reinterpret_cast<Store<Elem>*>(smem_raw);
  Store<Elem>* sV = sK + kBc * kD;
  Store<Elem>* sQ = sV + kBc * kD;                  // [kQBufs][kBr][kD]
  Store<Elem>* sdO = sQ + kQBufs * kBr * kD;        // [kQBufs][kBr][kD]
  Store<Elem>* sQs = sdO + kQBufs * kBr * kD;       // pre-split: Q big, dO big, then the small
  Store<Elem>* sdOs = sQs + (kPre ? kBr * kD : 0);  // halves (+ kBLo)
  float* sL = reinterpret_cast<float*>(sQs + (kPre ? 4 * kBr * kD : 0));  // [2][kBr], L * log2(e)
  float* sDl = sL + 2 * kBr;                                 // [2][kBr], D
  [[maybe_unused]] Store<Elem>* sdS = reinterpret_cast<Store<Elem>*>(sDl + 2 * kBr);  // kDqPart

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int T = p.seq_len;
  const int kb = block;
  const int h = blockIdx.y, b = blockIdx.z;
  const int k0 = kb * kBc;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;

  const Store<Elem>* gK =
      static_cast<const Store<Elem>*>(p.k) + b * p.sk.b + h * p.sk.h + k0 * p.sk.t;
  const Store<Elem>* gV =
      static_cast<const Store<Elem>*>(p.v) + b * p.sv.b + h * p.sv.h + k0 * p.sv.t;
  const Store<Elem>* gQ = static_cast<const Store<Elem>*>(p.q) + b * p.sq.b + h * p.sq.h;
  const Store<Elem>* gdO = static_cast<const Store<Elem>*>(p.d_o) + b * p.sdo.b + h * p.sdo.h;
  const float* gL = p.lse + bh * T;
  const float* gD = p.delta + bh * T;

  const int nqb = (T + kBr - 1) / kBr;
  const int i0 = p.causal ? k0 / kBr : 0;

  auto load_q_block = [&](int i, int buf) {
    const int qs = i * kBr;
    const int tb = kPre ? 0 : buf;  // tile buffer (L and D stay double-buffered)
    load_tile_async<Elem, kD, kBr, Cfg::kThreads>(sQ + tb * kBr * kD, gQ + qs * p.sq.t, p.sq.t,
                                                  T - qs, tid);
    load_tile_async<Elem, kD, kBr, Cfg::kThreads>(sdO + tb * kBr * kD, gdO + qs * p.sdo.t, p.sdo.t,
                                                  T - qs, tid);
    for (int r = tid; r < kBr; r += Cfg::kThreads) {
      const int q = qs + r;
      sL[buf * kBr + r] = q < T ? gL[q] * kLog2e : 0.0f;
      sDl[buf * kBr + r] = q < T ? gD[q] : 0.0f;
    }
  };

  load_tile_async<Elem, kD, kBc, Cfg::kThreads>(sK, gK, p.sk.t, T - k0, tid);
  load_tile_async<Elem, kD, kBc, Cfg::kThreads>(sV, gV, p.sv.t, T - k0, tid);
  if (i0 < nqb) load_q_block(i0, 0);
  cp_async_commit();

  float dk[1][kDT][4], dv[1][kDT][4];
  // Note [3xTF32 accumulation bias] (sm80_mma_tiles.cuh): fresh per-block accumulators up to d64.
  constexpr bool kFreshDkDv = kFreshBlockAcc<Elem> && kD <= 64;
  zero_acc(dk);
  zero_acc(dv);
  const int wk0 = warp * 16;  // first key of this warp inside the block
  const int g = lane >> 2, t = lane & 3;
  const float sl2 = p.scale_log2;
  constexpr int kKS = kD / Mma<Elem>::kK;
  [[maybe_unused]] uint32_t kf[1][Cfg::kKVRegs ? kKS : 1][Mma<Elem>::kAW];
  [[maybe_unused]] uint32_t vf[1][Cfg::kKVRegs ? kKS : 1][Mma<Elem>::kAW];
  if constexpr (Cfg::kKVRegs) {
    cp_async_wait<0>();
    __syncthreads();
    load_a_frags<Elem, kD, 1>(kf, sK, wk0, lane);
    load_a_frags<Elem, kD, 1>(vf, sV, wk0, lane);
  }

  for (int i = i0; i < nqb; ++i) {
    cp_async_wait<0>();
    __syncthreads();
    if constexpr (kPre) {  // Note [Pre-split tiles]
      split_tile_tf32x3<kBr * kD, Cfg::kThreads>(sQ, sQs, sQs + Cfg::kBLo, tid);
      split_tile_tf32x3<kBr * kD, Cfg::kThreads>(sdO, sdOs, sdOs + Cfg::kBLo, tid);
      __syncthreads();
    }
    if (i + 1 < nqb) {
      load_q_block(i + 1, (i + 1 - i0) & 1);
      cp_async_commit();
    }
    const int qs = i * kBr;
    // Every key of this warp after every query: nothing to add (dQ partials still need the warp).
    const bool warp_live = !(p.causal && k0 + wk0 > qs + kBr - 1);
    if constexpr (!Cfg::kDqPart) {
      if (!warp_live) continue;
    }
    const int buf = (i - i0) & 1;
    const Store<Elem>* cQ = kPre ? sQs : sQ + buf * kBr * kD;
    const Store<Elem>* cdO = kPre ? sdOs : sdO + buf * kBr * kD;
    constexpr int kBLo = Cfg::kBLo;
    const float* cL = sL + buf * kBr;
    const float* cD = sDl + buf * kBr;

    if (warp_live) {
      // P^T = exp2(S^T * scale*log2e - L*log2e), masked.
      float s[1][kQT][4];
      zero_acc(s);
      if constexpr (Cfg::kKVRegs) {
        warp_gemm_nt_ra<Elem, kD, 1, kQT>(s, kf, cQ, 0, lane);
      } else {
        warp_gemm_nt<Elem, kD, 1, kQT, Cfg::kRollK, kBLo>(s, sK, wk0, cQ, 0, lane);
      }
      const bool need_mask = (qs + kBr > T) || (k0 + kBc > T) || (p.causal && k0 + wk0 + 15 > qs);
#pragma unroll
      for (int nt = 0; nt < kQT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qi = 8 * nt + 2 * t + (e & 1);
          float pv = fast_exp2(fmaf(s[0][nt][e], sl2, -cL[qi]));
          if (need_mask) {
            const int key = k0 + wk0 + g + ((e >> 1) << 3);
            const int q = qs + qi;
            if (q >= T || key >= T || (p.causal && key > q)) pv = 0.0f;
          }
          s[0][nt][e] = pv;
        }
      warp_gemm_cA_tB_add<Elem, kD, 1, kQT, kFreshDkDv, kBLo>(dv, s, cdO, 0, lane);  // dV += P^T dO

      float dp[1][kQT][4];
      zero_acc(dp);
      if constexpr (Cfg::kKVRegs) {  // dP^T = V dO^T
        warp_gemm_nt_ra<Elem, kD, 1, kQT>(dp, vf, cdO, 0, lane);
      } else {
        warp_gemm_nt<Elem, kD, 1, kQT, Cfg::kRollK, kBLo>(dp, sV, wk0, cdO, 0, lane);
      }
#pragma unroll
      for (int nt = 0; nt < kQT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qi = 8 * nt + 2 * t + (e & 1);
          s[0][nt][e] = s[0][nt][e] * (dp[0][nt][e] - cD[qi]);  // dS^T
        }
      if constexpr (Cfg::kDqPart) stash_ds<kBc, kQT>(sdS, s, wk0, lane);
      warp_gemm_cA_tB_add<Elem, kD, 1, kQT, kFreshDkDv, kBLo>(dk, s, cQ, 0, lane);  // dK += dS^T Q
    } else if constexpr (Cfg::kDqPart) {
      float zero[1][kQT][4];
      zero_acc(zero);
      stash_ds<kBc, kQT>(sdS, zero, wk0, lane);
    }
    if constexpr (Cfg::kDqPart) {  // Note [dQ partials]: this key block's share of dQ rows qs..
      __syncthreads();
      const int nkb = (T + kBc - 1) / kBc;
      float* gpart = p.dq_part + ((bh * nkb + kb) * T + qs) * kD;
      dq_partial<Elem, Cfg>(sdS, sK, gpart, T - qs, warp, lane);
    }
  }

  Store<Elem>* gdK = static_cast<Store<Elem>*>(p.dk) + b * p.sdk.b + h * p.sdk.h + k0 * p.sdk.t;
  Store<Elem>* gdV = static_cast<Store<Elem>*>(p.dv) + b * p.sdv.b + h * p.sdv.h + k0 * p.sdv.t;
  store_acc<Elem, 1, kDT>(dk, gdK, p.sdk.t, wk0, T - k0, p.scale, lane);
  store_acc<Elem, 1, kDT>(dv, gdV, p.sdv.t, wk0, T - k0, 1.0f, lane);
}

// dQ pass tiles: head dim, warps (16 query rows each), keys per block, Q/dO A-fragments held in
// registers, minimum CTAs per SM for __launch_bounds__.
template <int kD_, int kWarps_, int kBc_, bool kQRegs_, int kMinBlocks_, bool kRollK_ = false>
struct DqTiles {
  static constexpr int kD = kD_, kWarps = kWarps_, kBc = kBc_;
  static constexpr bool kQRegs = kQRegs_;
  static constexpr bool kRollK = kRollK_;  // Note [Rolled k loop]
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBr = 16 * kWarps;
  template <typename Elem>
  static constexpr size_t smem_bytes() {
    return static_cast<size_t>(2 * kBr + 4 * kBc) * kD * sizeof(Store<Elem>);
  }
};

// The dQ pass for the `block`-th heaviest query block.
template <typename Elem, typename Cfg>
__device__ __forceinline__ void dq_block(const Params& p, int block) {
  constexpr int kD = Cfg::kD, kBc = Cfg::kBc;
  constexpr int kBr = Cfg::kBr;
  constexpr int kNT = kBc / 8;
  constexpr int kDT = kD / 8;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Store<Elem>* sQ = reinterpret_cast<Store<Elem>*>(smem_raw);
  Store<Elem>* sdO = sQ + kBr * kD;
  Store<Elem>* sK = sdO + kBr * kD;     // [2][kBc][kD]
  Store<Elem>* sV = sK + 2 * kBc * kD;  // [2][kBc][kD]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int T = p.seq_len;
  const int nqb = (T + kBr - 1) / kBr;
  const int qb = nqb - 1 - block;
  const int h = blockIdx.y, b = blockIdx.z;
  const int q0 = qb * kBr;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;

  const Store<Elem>* gQ =
      static_cast<const Store<Elem>*>(p.q) + b * p.sq.b + h * p.sq.h + q0 * p.sq.t;
  const Store<Elem>* gdO =
      static_cast<const Store<Elem>*>(p.d_o) + b * p.sdo.b + h * p.sdo.h + q0 * p.sdo.t;
  const Store<Elem>* gK = static_cast<const Store<Elem>*>(p.k) + b * p.sk.b + h * p.sk.h;
  const Store<Elem>* gV = static_cast<const Store<Elem>*>(p.v) + b * p.sv.b + h * p.sv.h;

  const int q_end = min(T, q0 + kBr);
  const int n_kv = p.causal ? (q_end + kBc - 1) / kBc : (T + kBc - 1) / kBc;

  load_tile_async<Elem, kD, kBr, Cfg::kThreads>(sQ, gQ, p.sq.t, T - q0, tid);
  load_tile_async<Elem, kD, kBr, Cfg::kThreads>(sdO, gdO, p.sdo.t, T - q0, tid);
  load_tile_async<Elem, kD, kBc, Cfg::kThreads>(sK, gK, p.sk.t, T, tid);
  load_tile_async<Elem, kD, kBc, Cfg::kThreads>(sV, gV, p.sv.t, T, tid);
  cp_async_commit();

  const int wr0 = warp * 16;
  const int g = lane >> 2, t = lane & 3;
  const float sl2 = p.scale_log2;
  float neg_l2[2], dl[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = q0 + wr0 + g + 8 * hr;
    neg_l2[hr] = row < T ? -p.lse[bh * T + row] * kLog2e : 0.0f;
    dl[hr] = row < T ? p.delta[bh * T + row] : 0.0f;
  }

  constexpr int kKS = kD / Mma<Elem>::kK;
  [[maybe_unused]] uint32_t qf[1][Cfg::kQRegs ? kKS : 1][Mma<Elem>::kAW];
  [[maybe_unused]] uint32_t of[1][Cfg::kQRegs ? kKS : 1][Mma<Elem>::kAW];
  if constexpr (Cfg::kQRegs) {
    cp_async_wait<0>();
    __syncthreads();
    load_a_frags<Elem, kD, 1>(qf, sQ, wr0, lane);
    load_a_frags<Elem, kD, 1>(of, sdO, wr0, lane);
  }
  float dq[1][kDT][4];
  zero_acc(dq);
  for (int j = 0; j < n_kv; ++j) {
    cp_async_wait<0>();
    __syncthreads();
    if (j + 1 < n_kv) {
      const int kn = (j + 1) * kBc;
      const int buf = (j + 1) & 1;
      load_tile_async<Elem, kD, kBc, Cfg::kThreads>(sK + buf * kBc * kD, gK + kn * p.sk.t, p.sk.t,
                                                    T - kn, tid);
      load_tile_async<Elem, kD, kBc, Cfg::kThreads>(sV + buf * kBc * kD, gV + kn * p.sv.t, p.sv.t,
                                                    T - kn, tid);
      cp_async_commit();
    }
    const int k0 = j * kBc;
    if (p.causal && k0 > q0 + wr0 + 15) continue;
    const Store<Elem>* cK = sK + (j & 1) * kBc * kD;
    const Store<Elem>* cV = sV + (j & 1) * kBc * kD;

    float s[1][kNT][4];
    zero_acc(s);
    if constexpr (Cfg::kQRegs) {  // S = Q K^T
      warp_gemm_nt_ra<Elem, kD, 1, kNT>(s, qf, cK, 0, lane);
    } else {
      warp_gemm_nt<Elem, kD, 1, kNT, Cfg::kRollK>(s, sQ, wr0, cK, 0, lane);
    }
    const bool need_mask = (k0 + kBc > T) || (p.causal && k0 + kBc - 1 > q0 + wr0);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float pv = fast_exp2(fmaf(s[0][nt][e], sl2, neg_l2[e >> 1]));
        if (need_mask) {
          const int row = q0 + wr0 + g + ((e >> 1) << 3);
          const int col = k0 + 8 * nt + 2 * t + (e & 1);
          if (col >= T || (p.causal && col > row)) pv = 0.0f;
        }
        s[0][nt][e] = pv;
      }
    float dp[1][kNT][4];
    zero_acc(dp);
    if constexpr (Cfg::kQRegs) {  // dP = dO V^T
      warp_gemm_nt_ra<Elem, kD, 1, kNT>(dp, of, cV, 0, lane);
    } else {
      warp_gemm_nt<Elem, kD, 1, kNT, Cfg::kRollK>(dp, sdO, wr0, cV, 0, lane);
    }
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[0][nt][e] = s[0][nt][e] * (dp[0][nt][e] - dl[e >> 1]);
    warp_gemm_cA_tB_add<Elem, kD, 1, kNT>(dq, s, cK, 0, lane);  // dQ += dS K
  }

  Store<Elem>* gdQ = static_cast<Store<Elem>*>(p.dq) + b * p.sdq.b + h * p.sdq.h + q0 * p.sdq.t;
  store_acc<Elem, 1, kDT>(dq, gdQ, p.sdq.t, wr0, T - q0, p.scale, lane);
}

template <typename Elem, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    flash_attn_bwd_dkdv_kernel(const Params p) {
  dkdv_block<Elem, Cfg>(p, static_cast<int>(blockIdx.x));
}

template <typename Elem, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    flash_attn_bwd_dq_kernel(const Params p) {
  dq_block<Elem, Cfg>(p, static_cast<int>(blockIdx.x));
}

// Both passes in one grid: the first n_dkdv blocks are key blocks, the rest query blocks, each
// range heaviest first, so the light tail of one pass overlaps the other instead of a kernel
// boundary (no data dependence between the passes: both read only q, k, v, dO, L and D).
template <typename Elem, typename C1, typename C2>
__global__ void __launch_bounds__(C1::kThreads, C1::kMinBlocks)
    flash_attn_bwd_merged_kernel(const Params p, int n_dkdv) {
  const int x = static_cast<int>(blockIdx.x);
  if (x < n_dkdv) {
    dkdv_block<Elem, C1>(p, x);
  } else {
    dq_block<Elem, C2>(p, x - n_dkdv);
  }
}

// Note [dQ partials]: dQ[q][:] = scale * (sum over key blocks kb = 0 .. last(q), in that order,
// of part[bh][kb][q][:]), one thread per 4 columns of a row (float4 loads and stores).
template <int kD, int kBc>
__global__ void __launch_bounds__(256) dq_partials_reduce_kernel(const Params p) {
  constexpr int kV = kD / 4;
  const int T = p.seq_len;
  const int i = static_cast<int>(blockIdx.x) * 256 + static_cast<int>(threadIdx.x);
  if (i >= T * kV) return;
  const int q = i / kV, c = 4 * (i % kV);
  const int h = blockIdx.y, b = blockIdx.z;
  const int nkb = (T + kBc - 1) / kBc;
  const int last = p.causal ? q / kBc : nkb - 1;
  const int64_t kb_stride = static_cast<int64_t>(T) * kD;
  const float* src = p.dq_part + (static_cast<int64_t>(b) * p.heads + h) * nkb * kb_stride +
                     static_cast<int64_t>(q) * kD + c;
  float4 acc = __ldcs(reinterpret_cast<const float4*>(src));
#pragma unroll 4
  for (int kb = 1; kb <= last; ++kb) {
    const float4 x = __ldcs(reinterpret_cast<const float4*>(src + kb * kb_stride));
    acc.x = __fadd_rn(acc.x, x.x);
    acc.y = __fadd_rn(acc.y, x.y);
    acc.z = __fadd_rn(acc.z, x.z);
    acc.w = __fadd_rn(acc.w, x.w);
  }
  float* dst = static_cast<float*>(p.dq) + b * p.sdq.b + h * p.sdq.h + q * p.sdq.t + c;
  *reinterpret_cast<float4*>(dst) =
      make_float4(acc.x * p.scale, acc.y * p.scale, acc.z * p.scale, acc.w * p.scale);
}

template <typename Elem, typename C1>
Status launch_dkdv(const Params& p, cudaStream_t stream, const char* name) {
  constexpr size_t smem1 = C1::template smem_bytes<Elem>();
  auto k1 = flash_attn_bwd_dkdv_kernel<Elem, C1>;
  BLUBLAS_CUDA_CHECK(cudaFuncSetAttribute(k1, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem1)));
  const dim3 grid1((p.seq_len + C1::kBc - 1) / C1::kBc, p.heads, p.batch);
  k1<<<grid1, C1::kThreads, smem1, stream>>>(p);
  BLUBLAS_KERNEL_LAUNCH_CHECK(name);
  return Status::success();
}

// Note [dQ partials]: the dK/dV pass with dQ partials (C1::kDqPart), then the ordered reduce.
template <typename Elem, typename C1>
Status launch_flash_attn_bwd_dq_partials(const Params& p, const DeviceInfo& dev,
                                         cudaStream_t stream, const char* name) {
  static_assert(C1::kDqPart && C1::kD == 64 && C1::kBc == kDqPartialsKeyBlock,
                "the partials workspace is sized for d64 and 64-key blocks (attention.cpp)");
  constexpr size_t smem1 = C1::template smem_bytes<Elem>();
  const size_t optin = static_cast<size_t>(dev.max_smem_per_block_optin);
  BLUBLAS_CHECK(smem1 <= optin, StatusCode::kNotSupported, name, ": needs ", smem1,
                " bytes of shared memory per block, device allows ", optin);
  BLUBLAS_CHECK(p.dq_part != nullptr, StatusCode::kInvalidArgument, name,
                ": dQ partials without their workspace");
  BLUBLAS_RETURN_IF_ERROR((launch_dkdv<Elem, C1>(p, stream, name)));
  const int rows_x4 = p.seq_len * (C1::kD / 4);
  const dim3 grid((rows_x4 + 255) / 256, p.heads, p.batch);
  dq_partials_reduce_kernel<C1::kD, C1::kBc><<<grid, 256, 0, stream>>>(p);
  BLUBLAS_KERNEL_LAUNCH_CHECK(name);
  return Status::success();
}

template <typename Elem, typename C1, typename C2, bool kMerged = false>
Status launch_flash_attn_bwd(const Params& p, const DeviceInfo& dev, cudaStream_t stream,
                             const char* name) {
  constexpr size_t smem1 = C1::template smem_bytes<Elem>();
  constexpr size_t smem2 = C2::template smem_bytes<Elem>();
  const size_t optin = static_cast<size_t>(dev.max_smem_per_block_optin);
  BLUBLAS_CHECK(smem1 <= optin && smem2 <= optin, StatusCode::kNotSupported, name, ": needs ",
                smem1 > smem2 ? smem1 : smem2, " bytes of shared memory per block, device allows ",
                optin);
  if constexpr (kMerged) {
    static_assert(C1::kThreads == C2::kThreads, "merged passes share the block size");
    const size_t smem = smem1 > smem2 ? smem1 : smem2;
    auto k = flash_attn_bwd_merged_kernel<Elem, C1, C2>;
    BLUBLAS_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)));
    const int n1 = (p.seq_len + C1::kBc - 1) / C1::kBc;
    const int n2 = (p.seq_len + C2::kBr - 1) / C2::kBr;
    const dim3 grid(n1 + n2, p.heads, p.batch);
    k<<<grid, C1::kThreads, smem, stream>>>(p, n1);
    BLUBLAS_KERNEL_LAUNCH_CHECK(name);
  } else {  // (an else, not code after a return: nvcc warns "loop is not reachable" on the macros)
    BLUBLAS_RETURN_IF_ERROR((launch_dkdv<Elem, C1>(p, stream, name)));
    auto k2 = flash_attn_bwd_dq_kernel<Elem, C2>;
    BLUBLAS_CUDA_CHECK(cudaFuncSetAttribute(k2, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem2)));
    const dim3 grid2((p.seq_len + C2::kBr - 1) / C2::kBr, p.heads, p.batch);
    k2<<<grid2, C2::kThreads, smem2, stream>>>(p);
    BLUBLAS_KERNEL_LAUNCH_CHECK(name);
  }
  return Status::success();
}

}  // namespace blublas::attn::sm80
