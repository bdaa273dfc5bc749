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
template <int kD_, int kStagesKV_, int kStagesQ_, int kConsumers_ = 2, int kKBlk_ = 64,
          bool kDefer_ = true>
struct BwdCfg {
  static constexpr int kD = kD_;
  static constexpr bool kDefer = kDefer_;
  static constexpr int kConsumers = kConsumers_;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kMinBlocks = kConsumers == 1 ? 2 : 1;
  // dkdv role
  static constexpr int kKeys = 64 * kConsumers, kQBlk = 64, kStagesKV = kStagesKV_;
  // dq role
  static constexpr int kRows = 64 * kConsumers, kKBlk = kKBlk_, kStagesQ = kStagesQ_;
  static constexpr int kTile64 = 64 * kD * 2;  // bytes of a 64-row tile (kD/64 panels)
  static constexpr int kResident = kConsumers * kTile64;  // K (V) tile of dkdv, Q (dO) of dq
  static constexpr int kDkdvBytes = 2 * kResident + kStagesKV * (2 * kTile64 + 2 * kQBlk * 4);
  static constexpr int kKBlkTile = kKBlk * kD * 2;  // a K (V) block of the dq role
  static constexpr int kDqBytes = 2 * kResident + kStagesQ * 2 * kKBlkTile;
  static constexpr int kBarrierBytes = 8 * (2 + 2 * (kStagesKV > kStagesQ ? kStagesKV : kStagesQ));
  static constexpr int kSmemBytes =
      1024 + (kDkdvBytes > kDqBytes ? kDkdvBytes : kDqBytes) + kBarrierBytes;
  static constexpr int kProducerRegs = 24, kConsumerRegs = kConsumers == 1 ? 232 : 240;
  static_assert(kConsumers == 1 || kConsumers == 2, "one or two consumer warpgroups");
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

// K-major wgmma descriptor of rows [r0, r0+64) x k-slice ks of a panel-major tile of kRowsTile rows.
template <int kRowsTile>
__device__ __forceinline__ uint64_t desc_kmajor(uint32_t tile, int r0, int ks) {
  return g90::make_desc_sw128(tile + (ks / 4) * kRowsTile * 128 + r0 * 128 + 32 * (ks % 4), 16,
                              1024);
}
// MN-major descriptor of the k16 slice kk (rows 16kk..16kk+15 of the tile as the K dimension,
// the head dim as N across the kD/64 panels).
template <int kRowsTile>
__device__ __forceinline__ uint64_t desc_mnmajor(uint32_t tile, int kk) {
  return g90::make_desc_sw128(tile + 2048 * kk, kRowsTile * 128, 1024);
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

// ---- dkdv role ----------------------------------------------------------------------------------
template <class Cfg>
__device__ __forceinline__ void dkdv_role(const BwdMaps& maps, const Params& p, uint8_t* smem,
                                          int kb, int h, int b, int wg, int tid) {
  constexpr int kD = Cfg::kD, kKeys = Cfg::kKeys, kQBlk = Cfg::kQBlk, kStages = Cfg::kStagesKV;
  constexpr int kTile = Cfg::kTile64;
  uint8_t* sK = smem;                     // [kKeys] tile
  uint8_t* sV = sK + Cfg::kResident;      // [kKeys]
  uint8_t* sQ = sV + Cfg::kResident;      // [kStages] x [64 queries]
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

  g90::mbar_wait(full_kv, 0);
  Ring r;
  int pending = -1;  // ring stage whose dK product may still run (kDefer)
  for (int i = i0; i < nqb; ++i) {
    const int qs = i * kQBlk;
    g90::mbar_wait(&full[r.stage], r.phase);
    // Every key of this warpgroup after every query of the block: nothing to add.
    if (!(causal && wg_key_min > qs + kQBlk - 1)) {
      const uint32_t q_tile = q_tiles + r.stage * kTile, o_tile = o_tiles + r.stage * kTile;
      const float* cL = sL + r.stage * kQBlk;
      const float* cD = sD + r.stage * kQBlk;
      g90::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kD / 16; ++ks) {
        g90::Wgmma<g90::InBf16, kQBlk>::template mma<0, 0>(
            st, desc_kmajor<kKeys>(k_tile, 64 * c, ks), desc_kmajor<kQBlk>(q_tile, 0, ks),
            ks > 0 ? 1 : 0);
      }
      g90::wgmma_commit();
#pragma unroll
      for (int ks = 0; ks < kD / 16; ++ks) {
        g90::Wgmma<g90::InBf16, kQBlk>::template mma<0, 0>(
            dpt, desc_kmajor<kKeys>(v_tile, 64 * c, ks), desc_kmajor<kQBlk>(o_tile, 0, ks),
            ks > 0 ? 1 : 0);
      }
      g90::wgmma_commit();
      g90::wgmma_wait<1>();  // S^T (and a deferred dK) ready; dP^T may still run
      g90::fence_accumulators(st);
      if (pending >= 0) {
        g90::mbar_arrive_warp(&empty[pending], lane);
        pending = -1;
      }
      const bool need_mask = causal && wg_key_min + 63 > qs;
#pragma unroll
      for (int j = 0; j < kQBlk / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qi = 8 * j + 2 * quad + (e & 1);
          float pv = ex2(fmaf(st[4 * j + e], sl2, -cL[qi]));
          if (need_mask && key0 + 8 * (e >> 1) > qs + qi) pv = 0.0f;
          st[4 * j + e] = pv;
        }
      acc_to_a_frags<kQBlk>(st, fa);
      g90::wgmma_fence();
      // dV += P^T dO
#pragma unroll
      for (int kk = 0; kk < kQBlk / 16; ++kk) {
        WgmmaRegA<kD>::template mma<1>(dv, fa[kk], desc_mnmajor<kQBlk>(o_tile, kk), 1);
      }
      g90::wgmma_commit();
      g90::wgmma_wait<1>();  // dP^T ready; dV may still run
      g90::fence_accumulators(dpt);
#pragma unroll
      for (int j = 0; j < kQBlk / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qi = 8 * j + 2 * quad + (e & 1);
          st[4 * j + e] = st[4 * j + e] * (dpt[4 * j + e] - cD[qi]);  // dS^T
        }
      g90::wgmma_wait<0>();  // dV done: its A fragments may be overwritten
      g90::fence_accumulators(dv);
      acc_to_a_frags<kQBlk>(st, fa);
      g90::wgmma_fence();
      // dK += dS^T Q
#pragma unroll
      for (int kk = 0; kk < kQBlk / 16; ++kk) {
        WgmmaRegA<kD>::template mma<1>(dk, fa[kk], desc_mnmajor<kQBlk>(q_tile, kk), 1);
      }
      g90::wgmma_commit();
      if constexpr (Cfg::kDefer) {
        pending = r.stage;
      } else {
        g90::wgmma_wait<0>();
        g90::fence_accumulators(dk);
      }
    } else if (pending >= 0) {  // a skipped block: retire the deferred product first
      g90::wgmma_wait<0>();
      g90::fence_accumulators(dk);
      g90::mbar_arrive_warp(&empty[pending], lane);
      pending = -1;
    }
    if (pending != r.stage) g90::mbar_arrive_warp(&empty[r.stage], lane);
    r.advance<kStages>();
  }
  g90::wgmma_wait<0>();
  g90::fence_accumulators(dk);
  if (pending >= 0) g90::mbar_arrive_warp(&empty[pending], lane);
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
  Ring r;
  int pending = -1;  // ring stage whose dQ product may still run (kDefer)
  for (int j = 0; j < n_kv; ++j) {
    const int k0 = j * kKBlk;
    g90::mbar_wait(&full[r.stage], r.phase);
    // Every key of the block after every row of this warpgroup: nothing to add.
    if (!(causal && k0 > wg_row_min + 63)) {
      const uint32_t k_tile = k_tiles + r.stage * kTile, v_tile = v_tiles + r.stage * kTile;
      g90::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kD / 16; ++ks) {
        g90::Wgmma<g90::InBf16, kKBlk>::template mma<0, 0>(
            s, desc_kmajor<kRows>(q_tile, 64 * c, ks), desc_kmajor<kKBlk>(k_tile, 0, ks),
            ks > 0 ? 1 : 0);
      }
      g90::wgmma_commit();
#pragma unroll
      for (int ks = 0; ks < kD / 16; ++ks) {
        g90::Wgmma<g90::InBf16, kKBlk>::template mma<0, 0>(
            dp, desc_kmajor<kRows>(o_tile, 64 * c, ks), desc_kmajor<kKBlk>(v_tile, 0, ks),
            ks > 0 ? 1 : 0);
      }
      g90::wgmma_commit();
      g90::wgmma_wait<1>();  // S (and a deferred dQ) ready; dP may still run
      g90::fence_accumulators(s);
      if (pending >= 0) {
        g90::mbar_arrive_warp(&empty[pending], lane);
        pending = -1;
      }
      const bool need_mask = k0 + kKBlk > T || (causal && k0 + kKBlk - 1 > wg_row_min);
#pragma unroll
      for (int jj = 0; jj < kKBlk / 8; ++jj)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float pv = ex2(fmaf(s[4 * jj + e], sl2, neg_l2[e >> 1]));
          if (need_mask) {
            const int row = row0 + 8 * (e >> 1);
            const int col = k0 + 8 * jj + 2 * quad + (e & 1);
            if (col >= T || (causal && col > row)) pv = 0.0f;
          }
          s[4 * jj + e] = pv;
        }
      g90::wgmma_wait<0>();
      g90::fence_accumulators(dp);
#pragma unroll
      for (int jj = 0; jj < kKBlk / 8; ++jj)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[4 * jj + e] = s[4 * jj + e] * (dp[4 * jj + e] - dl[e >> 1]);
      acc_to_a_frags<kKBlk>(s, fa);
      g90::wgmma_fence();
      // dQ += dS K
#pragma unroll
      for (int kk = 0; kk < kKBlk / 16; ++kk) {
        WgmmaRegA<kD>::template mma<1>(dq, fa[kk], desc_mnmajor<kKBlk>(k_tile, kk), 1);
      }
      g90::wgmma_commit();
      if constexpr (Cfg::kDefer) {
        pending = r.stage;
      } else {
        g90::wgmma_wait<0>();
        g90::fence_accumulators(dq);
      }
    } else if (pending >= 0) {  // a skipped block: retire the deferred product first
      g90::wgmma_wait<0>();
      g90::fence_accumulators(dq);
      g90::mbar_arrive_warp(&empty[pending], lane);
      pending = -1;
    }
    if (pending != r.stage) g90::mbar_arrive_warp(&empty[r.stage], lane);
    r.advance<kStages>();
  }
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
  const int rank = static_cast<int>(blockIdx.x) / bh_count;
  const int bh = static_cast<int>(blockIdx.x) % bh_count;
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
  const int64_t ctas = 2LL * n_blocks * B * H;
  BLUBLAS_CHECK(ctas <= 0x7fffffffLL, StatusCode::kInvalidArgument, name, ": ", ctas,
                " CTAs exceed the grid limit");
  kernel<<<static_cast<unsigned>(ctas), Cfg::kThreads, smem, stream>>>(maps, p, n_blocks);
  BLUBLAS_KERNEL_LAUNCH_CHECK(name);
  return Status::success();
}

}  // namespace blublas::attn::sm90
