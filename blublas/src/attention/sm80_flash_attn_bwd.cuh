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
// Note [Ordered dQ accumulation]
// The fused-dQ variant (DkDvTiles::kFusedDq, bf16) avoids the recomputation and stays
// deterministic: the dkdv CTA of key block kb also forms dQ_i += dS_i,kb K_kb for every query
// block i it visits (dS^T goes through shared memory and comes back query-major with
// ldmatrix.trans), and adds it into an fp32 accumulator in a fixed order. The order is by
// descending key block: under causal masking CTA kb visits query blocks kb, kb+1, ..., so at its
// s-th step it adds to block kb+s right after CTA kb+1 did at its (s-1)-th step, and all CTAs of
// one (b, h) advance in lockstep instead of queueing behind key block 0. The CTA waits until the
// turn counter of (b, h, i) equals its turn (acquire), adds (the first one stores), and passes
// the turn on (release); key block 0, the last, writes dQ (scaled, bf16) instead. CTAs are
// launched in descending key-block order, so the CTA one waits for was launched before it; the
// wait is bounded (a broken invariant yields wrong numbers, which the tests catch, never a hang).
// Counters are zeroed by a memset before each launch.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "attention/attention_params.h"
#include "attention/sm80_mma_tiles.cuh"
#include "blublas/check.h"

namespace blublas::attn::sm80 {

constexpr float kLog2e = 1.4426950408889634f;

// dK/dV pass tiles: head dim, warps (16 keys each), queries per block, K/V A-fragments held in
// registers for the whole CTA, minimum CTAs per SM for __launch_bounds__.
template <int kD_, int kWarps_, int kBr_, bool kKVRegs_, int kMinBlocks_, bool kFusedDq_ = false>
struct DkDvTiles {
  static constexpr int kD = kD_, kWarps = kWarps_, kBr = kBr_;
  static constexpr bool kKVRegs = kKVRegs_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr bool kFusedDq = kFusedDq_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBc = 16 * kWarps;  // keys per CTA, 16 per warp
  static_assert(!kFusedDq || (kBr % 64 == 0 && kBr <= 128 && kBr == 16 * kWarps),
                "fused dQ: one 16-row query tile per warp, rows of whole swizzle groups");
  template <typename Elem>
  static constexpr size_t smem_bytes() {
    return static_cast<size_t>(2 * kBc + 4 * kBr) * kD * sizeof(Elem) + 4 * kBr * sizeof(float) +
           (kFusedDq ? static_cast<size_t>(kBc) * kBr * sizeof(Elem) : 0);
  }
};

// One query block of Note [Ordered dQ accumulation]: dS^T (this warp's 16 keys x kBr queries,
// accumulator layout) -> shared memory -> dQ partial (warp w: queries 16w..16w+15, all kD) ->
// ordered add into the fp32 accumulator (or the final bf16 dQ write by the last key block).
template <typename Elem, typename Cfg>
__device__ __forceinline__ void fused_dq_step(const Params& p,
                                              const float (&ds)[1][Cfg::kBr / 8][4], Elem* sdS,
                                              const Elem* sK, int i, int kb, int64_t bh, int b,
                                              int h, int warp, int lane) {
  constexpr int kD = Cfg::kD, kBr = Cfg::kBr, kBc = Cfg::kBc, kDT = kD / 8;
  using TS = Tile<Elem, kBr>;
  const int g = lane >> 2, t = lane & 3, tid = threadIdx.x;
  const int T = p.seq_len;
#pragma unroll
  for (int nt = 0; nt < kBr / 8; ++nt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = warp * 16 + g + 8 * hr, q = 8 * nt + 2 * t;
      *reinterpret_cast<uint32_t*>(sdS + TS::offset(row, q >> 3) + (q & 7)) =
          pack_bf16(ds[0][nt][2 * hr], ds[0][nt][2 * hr + 1]);
    }
  __syncthreads();
  float acc[1][kDT][4];
  zero_acc(acc);
#pragma unroll
  for (int kk = 0; kk < kBc / 16; ++kk) {
    uint32_t a[1][4];
    load_a_trans_bf16<kBr>(a[0], sdS, kk * 16, warp * 16, lane);
#pragma unroll
    for (int np = 0; np < kD / 16; ++np) {
      uint32_t bf[4];
      Mma<Elem>::template load_bt_pair<kD>(bf, sK, kk * 16, 16 * np, lane);
      Mma<Elem>::mma(acc[0][2 * np], a[0], bf[0], bf[1]);
      Mma<Elem>::mma(acc[0][2 * np + 1], a[0], bf[2], bf[3]);
    }
  }
  // This key block's turn for query block i (descending key-block order).
  const int nkb = (T + kBc - 1) / kBc;
  const int kb_last = p.causal ? min(nkb - 1, (i * kBr + kBr - 1) / kBc) : nkb - 1;
  const int turn = kb_last - kb;
  int* sem = p.dq_sem + bh * dq_sem_count(T) + i;
  if (tid == 0 && turn > 0) {
    for (int spin = 0; ld_acquire_gpu(sem) != turn && spin < (1 << 20); ++spin) __nanosleep(40);
  }
  __syncthreads();
  float* accum = p.dq_accum + (bh * dq_accum_rows(T) + static_cast<int64_t>(i) * kBr) * kD;
  Elem* gdQ = static_cast<Elem*>(p.dq) + b * p.sdq.b + h * p.sdq.h;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = warp * 16 + g + 8 * hr;
    const int q = i * kBr + r;
#pragma unroll
    for (int dn = 0; dn < kDT; ++dn) {
      float2* cell = reinterpret_cast<float2*>(accum + static_cast<int64_t>(r) * kD + 8 * dn + 2 * t);
      float2 v = make_float2(acc[0][dn][2 * hr], acc[0][dn][2 * hr + 1]);
      if (turn > 0) {
        const float2 old = __ldcg(cell);
        v.x += old.x;
        v.y += old.y;
      }
      if (kb == 0) {
        if (q < T) {
          *reinterpret_cast<__nv_bfloat162*>(gdQ + static_cast<int64_t>(q) * p.sdq.t + 8 * dn +
                                             2 * t) =
              __floats2bfloat162_rn(v.x * p.scale, v.y * p.scale);
        }
      } else {
        __stcg(cell, v);
      }
    }
  }
  __syncthreads();
  if (tid == 0 && kb != 0) st_release_gpu(sem, turn + 1);
}

template <typename Elem, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    flash_attn_bwd_dkdv_kernel(const Params p) {
  constexpr int kD = Cfg::kD, kBr = Cfg::kBr;
  constexpr int kBc = Cfg::kBc;
  constexpr int kQT = kBr / 8;  // n-tiles of S^T (queries)
  constexpr int kDT = kD / 8;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Elem* sK = reinterpret_cast<Elem*>(smem_raw);
  Elem* sV = sK + kBc * kD;
  Elem* sQ = sV + kBc * kD;     // [2][kBr][kD]
  Elem* sdO = sQ + 2 * kBr * kD;  // [2][kBr][kD]
  float* sL = reinterpret_cast<float*>(sdO + 2 * kBr * kD);  // [2][kBr], L * log2(e)
  float* sDl = sL + 2 * kBr;                                  // [2][kBr], D
  Elem* sdS = reinterpret_cast<Elem*>(sDl + 2 * kBr);         // [kBc][kBr] dS^T (fused dQ)

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int T = p.seq_len;
  // Key block 0 has the most query blocks under causal: launched first, unless the fused-dQ
  // order needs descending key blocks (Note [Ordered dQ accumulation]).
  const int kb = Cfg::kFusedDq ? static_cast<int>(gridDim.x - 1 - blockIdx.x)
                               : static_cast<int>(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z;
  const int k0 = kb * kBc;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;

  const Elem* gK = static_cast<const Elem*>(p.k) + b * p.sk.b + h * p.sk.h + k0 * p.sk.t;
  const Elem* gV = static_cast<const Elem*>(p.v) + b * p.sv.b + h * p.sv.h + k0 * p.sv.t;
  const Elem* gQ = static_cast<const Elem*>(p.q) + b * p.sq.b + h * p.sq.h;
  const Elem* gdO = static_cast<const Elem*>(p.d_o) + b * p.sdo.b + h * p.sdo.h;
  const float* gL = p.lse + bh * T;
  const float* gD = p.delta + bh * T;

  const int nqb = (T + kBr - 1) / kBr;
  const int i0 = p.causal ? k0 / kBr : 0;

  auto load_q_block = [&](int i, int buf) {
    const int qs = i * kBr;
    load_tile_async<Elem, kD, kBr, Cfg::kThreads>(sQ + buf * kBr * kD, gQ + qs * p.sq.t, p.sq.t,
                                                  T - qs, tid);
    load_tile_async<Elem, kD, kBr, Cfg::kThreads>(sdO + buf * kBr * kD, gdO + qs * p.sdo.t,
                                                  p.sdo.t, T - qs, tid);
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
  zero_acc(dk);
  zero_acc(dv);
  const int wk0 = warp * 16;  // first key of this warp inside the block
  const int g = lane >> 2, t = lane & 3;
  const float sl2 = p.scale_log2;
  constexpr int kKS = kD / Mma<Elem>::kK;
  [[maybe_unused]] uint32_t kf[1][Cfg::kKVRegs ? kKS : 1][4];
  [[maybe_unused]] uint32_t vf[1][Cfg::kKVRegs ? kKS : 1][4];
  if constexpr (Cfg::kKVRegs) {
    cp_async_wait<0>();
    __syncthreads();
    load_a_frags<Elem, kD, 1>(kf, sK, wk0, lane);
    load_a_frags<Elem, kD, 1>(vf, sV, wk0, lane);
  }

  for (int i = i0; i < nqb; ++i) {
    cp_async_wait<0>();
    __syncthreads();
    if (i + 1 < nqb) {
      load_q_block(i + 1, (i + 1 - i0) & 1);
      cp_async_commit();
    }
    const int qs = i * kBr;
    // Every key of this warp after every query: nothing to add (the fused-dQ variant still takes
    // part in the block-wide dQ step, with zeros).
    if (!Cfg::kFusedDq && p.causal && k0 + wk0 > qs + kBr - 1) continue;
    const int buf = (i - i0) & 1;
    const Elem* cQ = sQ + buf * kBr * kD;
    const Elem* cdO = sdO + buf * kBr * kD;
    const float* cL = sL + buf * kBr;
    const float* cD = sDl + buf * kBr;

    // P^T = exp2(S^T * scale*log2e - L*log2e), masked.
    float s[1][kQT][4];
    zero_acc(s);
    if constexpr (Cfg::kKVRegs) {
      warp_gemm_nt_ra<Elem, kD, 1, kQT>(s, kf, cQ, 0, lane);
    } else {
      warp_gemm_nt<Elem, kD, 1, kQT>(s, sK, wk0, cQ, 0, lane);
    }
    const bool need_mask =
        (qs + kBr > T) || (k0 + kBc > T) || (p.causal && k0 + wk0 + 15 > qs);
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
    warp_gemm_cA_tB<Elem, kD, 1, kQT>(dv, s, cdO, 0, lane);  // dV += P^T dO

    float dp[1][kQT][4];
    zero_acc(dp);
    if constexpr (Cfg::kKVRegs) {  // dP^T = V dO^T
      warp_gemm_nt_ra<Elem, kD, 1, kQT>(dp, vf, cdO, 0, lane);
    } else {
      warp_gemm_nt<Elem, kD, 1, kQT>(dp, sV, wk0, cdO, 0, lane);
    }
#pragma unroll
    for (int nt = 0; nt < kQT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = 8 * nt + 2 * t + (e & 1);
        s[0][nt][e] = s[0][nt][e] * (dp[0][nt][e] - cD[qi]);  // dS^T
      }
    warp_gemm_cA_tB<Elem, kD, 1, kQT>(dk, s, cQ, 0, lane);  // dK += dS^T Q
    if constexpr (Cfg::kFusedDq) fused_dq_step<Elem, Cfg>(p, s, sdS, sK, i, kb, bh, b, h, warp, lane);
  }

  Elem* gdK = static_cast<Elem*>(p.dk) + b * p.sdk.b + h * p.sdk.h + k0 * p.sdk.t;
  Elem* gdV = static_cast<Elem*>(p.dv) + b * p.sdv.b + h * p.sdv.h + k0 * p.sdv.t;
  store_acc<Elem, 1, kDT>(dk, gdK, p.sdk.t, wk0, T - k0, p.scale, lane);
  store_acc<Elem, 1, kDT>(dv, gdV, p.sdv.t, wk0, T - k0, 1.0f, lane);
}

// dQ pass tiles: head dim, warps (16 query rows each), keys per block, Q/dO A-fragments held in
// registers, minimum CTAs per SM for __launch_bounds__.
template <int kD_, int kWarps_, int kBc_, bool kQRegs_, int kMinBlocks_>
struct DqTiles {
  static constexpr int kD = kD_, kWarps = kWarps_, kBc = kBc_;
  static constexpr bool kQRegs = kQRegs_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBr = 16 * kWarps;
  template <typename Elem>
  static constexpr size_t smem_bytes() {
    return static_cast<size_t>(2 * kBr + 4 * kBc) * kD * sizeof(Elem);
  }
};

template <typename Elem, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    flash_attn_bwd_dq_kernel(const Params p) {
  constexpr int kD = Cfg::kD, kBc = Cfg::kBc;
  constexpr int kBr = Cfg::kBr;
  constexpr int kNT = kBc / 8;
  constexpr int kDT = kD / 8;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Elem* sQ = reinterpret_cast<Elem*>(smem_raw);
  Elem* sdO = sQ + kBr * kD;
  Elem* sK = sdO + kBr * kD;     // [2][kBc][kD]
  Elem* sV = sK + 2 * kBc * kD;  // [2][kBc][kD]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int T = p.seq_len;
  const int nqb = (T + kBr - 1) / kBr;
  const int qb = nqb - 1 - static_cast<int>(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z;
  const int q0 = qb * kBr;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;

  const Elem* gQ = static_cast<const Elem*>(p.q) + b * p.sq.b + h * p.sq.h + q0 * p.sq.t;
  const Elem* gdO = static_cast<const Elem*>(p.d_o) + b * p.sdo.b + h * p.sdo.h + q0 * p.sdo.t;
  const Elem* gK = static_cast<const Elem*>(p.k) + b * p.sk.b + h * p.sk.h;
  const Elem* gV = static_cast<const Elem*>(p.v) + b * p.sv.b + h * p.sv.h;

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
  [[maybe_unused]] uint32_t qf[1][Cfg::kQRegs ? kKS : 1][4];
  [[maybe_unused]] uint32_t of[1][Cfg::kQRegs ? kKS : 1][4];
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
      load_tile_async<Elem, kD, kBc, Cfg::kThreads>(sK + buf * kBc * kD, gK + kn * p.sk.t,
                                                    p.sk.t, T - kn, tid);
      load_tile_async<Elem, kD, kBc, Cfg::kThreads>(sV + buf * kBc * kD, gV + kn * p.sv.t,
                                                    p.sv.t, T - kn, tid);
      cp_async_commit();
    }
    const int k0 = j * kBc;
    if (p.causal && k0 > q0 + wr0 + 15) continue;
    const Elem* cK = sK + (j & 1) * kBc * kD;
    const Elem* cV = sV + (j & 1) * kBc * kD;

    float s[1][kNT][4];
    zero_acc(s);
    if constexpr (Cfg::kQRegs) {  // S = Q K^T
      warp_gemm_nt_ra<Elem, kD, 1, kNT>(s, qf, cK, 0, lane);
    } else {
      warp_gemm_nt<Elem, kD, 1, kNT>(s, sQ, wr0, cK, 0, lane);
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
      warp_gemm_nt<Elem, kD, 1, kNT>(dp, sdO, wr0, cV, 0, lane);
    }
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[0][nt][e] = s[0][nt][e] * (dp[0][nt][e] - dl[e >> 1]);
    warp_gemm_cA_tB<Elem, kD, 1, kNT>(dq, s, cK, 0, lane);  // dQ += dS K
  }

  Elem* gdQ = static_cast<Elem*>(p.dq) + b * p.sdq.b + h * p.sdq.h + q0 * p.sdq.t;
  store_acc<Elem, 1, kDT>(dq, gdQ, p.sdq.t, wr0, T - q0, p.scale, lane);
}

template <typename Elem, typename C1, typename C2>
Status launch_flash_attn_bwd(const Params& p, const DeviceInfo& dev, cudaStream_t stream,
                             const char* name) {
  constexpr size_t smem1 = C1::template smem_bytes<Elem>();
  constexpr size_t smem2 = C2::template smem_bytes<Elem>();
  const size_t optin = static_cast<size_t>(dev.max_smem_per_block_optin);
  BLUBLAS_CHECK(smem1 <= optin && smem2 <= optin, StatusCode::kNotSupported, name, ": needs ",
                smem1 > smem2 ? smem1 : smem2,
                " bytes of shared memory per block, device allows ", optin);
  auto k1 = flash_attn_bwd_dkdv_kernel<Elem, C1>;
  BLUBLAS_CUDA_CHECK(cudaFuncSetAttribute(k1, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem1)));
  const dim3 grid1((p.seq_len + C1::kBc - 1) / C1::kBc, p.heads, p.batch);
  if constexpr (C1::kFusedDq) {
    BLUBLAS_CHECK(p.dq_sem != nullptr && p.dq_accum != nullptr, StatusCode::kInvalidArgument, name,
                  ": fused dQ needs the dQ accumulator workspace");
    const size_t sem_bytes =
        static_cast<size_t>(p.batch) * p.heads * dq_sem_count(p.seq_len) * sizeof(int);
    BLUBLAS_CUDA_CHECK(cudaMemsetAsync(p.dq_sem, 0, sem_bytes, stream));
    k1<<<grid1, C1::kThreads, smem1, stream>>>(p);
    BLUBLAS_KERNEL_LAUNCH_CHECK(name);
    return Status::success();
  }
  k1<<<grid1, C1::kThreads, smem1, stream>>>(p);
  BLUBLAS_KERNEL_LAUNCH_CHECK(name);
  auto k2 = flash_attn_bwd_dq_kernel<Elem, C2>;
  BLUBLAS_CUDA_CHECK(cudaFuncSetAttribute(k2, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem2)));
  const dim3 grid2((p.seq_len + C2::kBr - 1) / C2::kBr, p.heads, p.batch);
  k2<<<grid2, C2::kThreads, smem2, stream>>>(p);
  BLUBLAS_KERNEL_LAUNCH_CHECK(name);
  return Status::success();
}

}  // namespace blublas::attn::sm80
