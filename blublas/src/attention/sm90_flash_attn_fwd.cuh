// sm90_flash_attn_fwd.cuh: the sm_90a (wgmma + TMA) flash-attention forward kernel template, bf16
// in and out, fp32 accumulation and softmax; instantiated by sm90_bf16_flash_attn_fwd.cu.
//
// Note [sm90 flash forward: warp-specialized, P in registers]
// A CTA owns kBr = 64 * kConsumers query rows of one (batch, head) (128 by default) and runs
// 1 + kConsumers warpgroups: warpgroup 0 is the producer (one thread issues the TMA loads: the Q
// tile once, then K and V blocks of kBc keys into a kStages ring; it keeps 24 registers), the
// others are consumers owning 64 query rows each (240 registers with two consumers). Per key
// block a consumer computes S = Q K^T with wgmma from shared memory (both operands K-major in
// 128-byte-swizzled tiles), runs the online softmax in base 2 on the fp32 accumulator (scale
// folded into one FFMA before ex2), repacks P to bf16 A fragments in registers (Note [wgmma
// accumulator == register A fragment]) and accumulates O += P V with the register-A wgmma, V
// read MN-major straight from its TMA tile (no transpose anywhere).
// Barriers: full_k / full_v per stage (TMA transaction bytes), empty per stage (lane 0 of each
// consumer warp arrives once its P V wgmma completed).
//
// kOverlap (the FlashAttention-3 intra-warpgroup pipeline): iteration j issues S_j = Q K_j^T and
// O += P_{j-1} V_{j-1} back to back, waits only for S_j (wait_group 1), runs the softmax of
// block j while the P V wgmma is still in the tensor cores, then waits for it and rescales O.
// The softmax (ex2 on the MUFU pipe, FFMA, shuffles) then hides behind tensor-core work of the
// same warpgroup, not only behind the other warpgroup's.
//
// Causal: key blocks past the last query row are never loaded; only blocks that cross the
// diagonal (for this warpgroup's rows) or the sequence end are masked. Query blocks run heaviest
// first. Rows past T read zero-filled Q (finite scores) and are never stored.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "attention/attention_params.h"
#include "attention/sm90_attn_primitives.cuh"
#include "attention/sm90_attn_tma.h"
#include "blublas/check.h"
#include "common/arch.cuh"
#include "gemm/sm90_primitives.cuh"
#include "gemm/sm90_wgmma_ops.cuh"

namespace blublas::attn::sm90 {

namespace g90 = blublas::gemm_detail::sm90;

// Forward tile configuration: head dim, keys per block, K/V ring stages, intra-warpgroup overlap,
// persistent CTAs (one per SM walking the tiles) or one CTA per tile.
// kConsumers = 2: one CTA per SM (3 warpgroups, 240 registers per consumer thread); 1: two CTAs
// per SM (2 warpgroups each, 232 registers), so one CTA's prologue and epilogue hide under the
// other's wgmmas; 3: one CTA per SM with 192 query rows (4 warpgroups, 160 registers per consumer
// thread: Note [sm90 forward: three consumer warpgroups]).
// kPingpong (two consumers, overlap): the consumers take turns issuing their wgmmas (named
// barriers 1 and 2), so one warpgroup's softmax runs while the other's products occupy the tensor
// cores (Note [sm90 forward pingpong]).
// kFmaExpEvery = n > 0: one column pair in n of P takes its exponentials on the FMA pipe
// (Note [sm90 forward: exponentials on two pipes]); 0: every one on the MUFU.
// kRegQ (overlap): the warpgroup's Q rows as register A fragments, S = Q K^T reads only K from
// shared memory and the Q tile is released as soon as they are loaded (Note [sm90 flash
// backward: resident operands in registers]).
template <int kD_, int kBc_, int kStages_, bool kOverlap_, bool kPersistent_, int kConsumers_ = 2,
          bool kPingpong_ = false, int kFmaExpEvery_ = 0, bool kRegQ_ = false>
struct FwdCfg {
  static constexpr int kD = kD_, kBc = kBc_, kStages = kStages_;
  static constexpr bool kOverlap = kOverlap_, kPersistent = kPersistent_;
  static constexpr bool kPingpong = kPingpong_;
  static constexpr int kFmaExpEvery = kFmaExpEvery_;
  static constexpr bool kRegQ = kRegQ_;
  static constexpr int kConsumers = kConsumers_;
  static constexpr int kBr = 64 * kConsumers;  // 64 query rows per consumer warpgroup
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kMinBlocks = kConsumers == 1 ? 2 : 1;
  static constexpr int kQBytes = kBr * kD * 2;
  static constexpr int kKVBytes = kBc * kD * 2;
  static constexpr int kBarrierBytes = 8 * (2 + 3 * kStages);
  static constexpr int kSmemBytes = 1024 + kQBytes + 2 * kStages * kKVBytes + kBarrierBytes;
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = kConsumers == 1 ? 232 : kConsumers == 2 ? 240 : 160;
  static_assert(kD == 64 || kD == 128, "head dim 64 or 128");
  static_assert(kBc == 64 || kBc == 128, "keys per block 64 or 128");
  static_assert(kConsumers >= 1 && kConsumers <= 3, "one to three consumer warpgroups");
  static_assert(kConsumers < 3 || (kD == 64 && kOverlap),
                "three consumers: head dim 64 (160 registers), the overlapped loop");
  static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <=
                    kThreads * (65536 / kThreads / kMinBlocks / 8 * 8),
                "setmaxnreg redistributes the launch allocation only");
  static_assert(!kPingpong || (kConsumers == 2 && kOverlap), "pingpong: two overlapped consumers");
  static_assert(!kRegQ || kOverlap, "Q in registers: the overlapped loop");
  static_assert(kFmaExpEvery >= 0 && kFmaExpEvery <= kBc / 8, "FMA exponentials: 0 or 1 in n <= kBc/8");
};

// Descriptors of panel-major tiles (kD/64 panels of [kRowsTile][64], 128-byte swizzle), shared
// with the backward. K-major: rows [r0, r0+64) x k-slice ks.
template <int kRowsTile>
__device__ __forceinline__ uint64_t desc_kmajor(uint32_t tile, int r0, int ks) {
  return g90::make_desc_sw128(tile, (ks / 4) * kRowsTile * 128 + r0 * 128 + 32 * (ks % 4), 16,
                              1024);
}
// MN-major descriptor of the k16 slice kk (rows 16kk..16kk+15 of the tile as the K dimension,
// the head dim as N across the kD/64 panels).
template <int kRowsTile>
__device__ __forceinline__ uint64_t desc_mnmajor(uint32_t tile, int kk) {
  return g90::make_desc_sw128(tile, 2048 * kk, kRowsTile * 128, 1024);
}

// Note [sm90 forward: three consumer warpgroups]
// ncu of the two-consumer forward at B2 T16384 (session 35 call 2): tensor pipe 43.6% busy, MUFU
// 42%: the two warpgroups' exponentials and products hardly overlap. With three consumers (192
// query rows, FlashAttention-3's tile for head dim 64) two warpgroups can be in their softmax
// while the third's products run. Registers: 512 threads get 128 each at launch; the producer
// drops to 24 and the consumers rise to 160 (128 x 24 + 384 x 160 = 64512 <= 65536), enough for
// the overlapped loop's S (64), P fragments (32) and O (32). With 192-row tiles and 128-key
// blocks, causal tiles end in key blocks that lie wholly past some warpgroups' rows; each
// warpgroup stops computing after its own last block (n_kv_wg) and only releases the stages of
// the rest, after their data arrived (so that it never arrives on a stage's empty barrier for a
// use whose previous phase the other warpgroups have not completed). Skipping a wholly masked
// block changes no bit for finite V (P = +0, corr = 1; an Inf / NaN in V there no longer reaches
// O). A warpgroup whose rows all lie past T (the last tile at T = 1024 holds 1152 rows) computes
// block 0 only. The early stop applies to every overlapped configuration without pingpong: with
// 128-row tiles of 64-key blocks (head dim 128's bc64 entries) warpgroup 0 skips its last block.

// Note [sm90 forward pingpong]
// Named barrier 1 + c means "consumer c may issue". Every issue point of consumer c is
// bar.sync(1 + c, 256), issue + commit, bar.arrive(1 + (1 - c), 256). Consumer 1 arrives once on
// barrier 1 before its first tile so consumer 0 goes first; both consumers have the same number
// of issue points (n_kv + 1 per tile, the same tiles), so consumer 0 ends with one bar.sync(1) to
// consume consumer 1's last arrive. Waits on TMA data come before bar.sync, so a warpgroup holding
// the turn never waits on something only the other one can provide.

// Masks S (an m64 x kN accumulator, this thread's rows row0 and row0 + 8, columns from k0) to
// -inf where the key is past T or, causal, after the query.
template <int kN>
__device__ __forceinline__ void mask_scores(float (&s)[kN / 2], int row0, int k0, int T,
                                            bool causal, int quad) {
#pragma unroll
  for (int j = 0; j < kN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = row0 + 8 * (e >> 1);
      const int col = k0 + 8 * j + 2 * quad + (e & 1);
      if (col >= T || (causal && col > row)) s[4 * j + e] = -INFINITY;
    }
}

// Online softmax of one block: updates the running max m and partial row sums l (this thread's
// columns only; the quad sum is taken at the end), overwrites s with P = exp2(s*sl2 - m*sl2) and
// returns the rescale factors of the old O rows in corr. kFmaExpEvery: Note [sm90 forward:
// exponentials on two pipes].
template <int kN, int kFmaExpEvery = 0>
__device__ __forceinline__ void online_softmax(float (&s)[kN / 2], float (&m)[2], float (&l)[2],
                                               float (&corr)[2], float sl2) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float mx = m[hr];
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * hr], s[4 * j + 2 * hr + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mx_safe = mx == -INFINITY ? 0.0f : mx;
    corr[hr] = ex2((m[hr] - mx_safe) * sl2);
    m[hr] = mx;
    const float neg = -mx_safe * sl2;
    float rs = 0.0f;
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) {
      const float x0 = fmaf(s[4 * j + 2 * hr], sl2, neg);
      const float x1 = fmaf(s[4 * j + 2 * hr + 1], sl2, neg);
      constexpr int kEvery = kFmaExpEvery > 0 ? kFmaExpEvery : 1;
      const bool on_fma = kFmaExpEvery > 0 && j % kEvery == kEvery - 1;
      const float p0 = on_fma ? ex2_fma(x0) : ex2(x0);
      const float p1 = on_fma ? ex2_fma(x1) : ex2(x1);
      s[4 * j + 2 * hr] = p0;
      s[4 * j + 2 * hr + 1] = p1;
      rs += p0 + p1;
    }
    l[hr] = l[hr] * corr[hr] + rs;
  }
}

template <int kD>
__device__ __forceinline__ void rescale_rows(float (&o)[kD / 2], const float (&corr)[2]) {
  // No row of the warp's 16 changed its max (corr = ex2(0) = 1 exactly): the kD/2 multiplies
  // would change no bit, so the warp skips them. Past the first blocks of a long row that is most
  // blocks (Note [sm90 flash backward: instructions per block] for why instructions count).
  if (__all_sync(0xffffffffu, corr[0] == 1.0f && corr[1] == 1.0f)) return;
#pragma unroll
  for (int j = 0; j < kD / 8; ++j) {
    o[4 * j + 0] *= corr[0];
    o[4 * j + 1] *= corr[0];
    o[4 * j + 2] *= corr[1];
    o[4 * j + 3] *= corr[1];
  }
}

// A ring position: stage index and the parity of its current phase.
struct Ring {
  int stage = 0;
  uint32_t phase = 0;
  template <int kStages>
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

// Work tile t of nqb * B * H: query block nqb - 1 - t / (B*H) (heaviest first under causal
// masking), head-major inside a query-block row.
struct FwdTile {
  int q0, h, b, n_kv;
};
template <int kBr, int kBc>
__device__ __forceinline__ FwdTile decode_fwd_tile(const Params& p, int t) {
  const int bh = p.batch * p.heads;
  const int nqb = (p.seq_len + kBr - 1) / kBr;
  FwdTile w;
  const int qb = nqb - 1 - t / bh;
  const int r = t % bh;
  w.h = r % p.heads;
  w.b = r / p.heads;
  w.q0 = qb * kBr;
  const int q_end = min(p.seq_len, w.q0 + kBr);
  w.n_kv = p.causal ? (q_end + kBc - 1) / kBc : (p.seq_len + kBc - 1) / kBc;
  return w;
}

// One CTA per tile (grid = tiles) or persistent (grid = SM count, tiles strided): the loop is the
// same. Persistent, the producer loads the next tile's Q and K/V while the consumers finish the
// last P V and the epilogue of the current one (Q is released after its last S = Q K^T).
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    flash_attn_fwd_sm90_kernel(const __grid_constant__ CUtensorMap map_q,
                               const __grid_constant__ CUtensorMap map_k,
                               const __grid_constant__ CUtensorMap map_v, const Params p,
                               int n_tiles) {
#if BLUBLAS_SM90A_ENABLED
  constexpr int kD = Cfg::kD, kBc = Cfg::kBc, kBr = Cfg::kBr, kStages = Cfg::kStages;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_addr = g90::smem_u32(smem_raw);
  uint8_t* smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
  uint8_t* sQ = smem;                           // kD/64 panels of [kBr][64]
  uint8_t* sK = sQ + Cfg::kQBytes;              // [kStages] x kD/64 panels of [kBc][64]
  uint8_t* sV = sK + kStages * Cfg::kKVBytes;   // same
  uint64_t* full_q = reinterpret_cast<uint64_t*>(sV + kStages * Cfg::kKVBytes);
  uint64_t* empty_q = full_q + 1;
  uint64_t* full_k = empty_q + 1;
  uint64_t* full_v = full_k + kStages;
  uint64_t* empty = full_v + kStages;

  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  const int tid = static_cast<int>(threadIdx.x % 128);
  const int T = p.seq_len;

  if (threadIdx.x == 0) {
    g90::mbar_init(full_q, 1);
    g90::mbar_init(empty_q, 4 * Cfg::kConsumers);
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      g90::mbar_init(&full_k[s], 1);
      g90::mbar_init(&full_v[s], 1);
      g90::mbar_init(&empty[s], 4 * Cfg::kConsumers);
    }
    g90::mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    // ---- producer ----
    g90::setmaxnreg_dec<Cfg::kProducerRegs>();
    if (tid == 0) {
      g90::tma_prefetch_map(&map_q);
      g90::tma_prefetch_map(&map_k);
      g90::tma_prefetch_map(&map_v);
      Ring r;
      uint32_t it = 0;
      for (int t = blockIdx.x; t < n_tiles; t += gridDim.x, ++it) {
        const FwdTile w = decode_fwd_tile<kBr, kBc>(p, t);
        g90::mbar_wait(empty_q, (it & 1) ^ 1);
        g90::mbar_arrive_expect_tx(full_q, Cfg::kQBytes);
#pragma unroll
        for (int hf = 0; hf < kD / 64; ++hf) {
          tma_load_4d(sQ + hf * kBr * 128, &map_q, full_q, 64 * hf, w.h, w.q0, w.b);
        }
        for (int j = 0; j < w.n_kv; ++j) {
          g90::mbar_wait(&empty[r.stage], r.phase ^ 1);
          uint8_t* k_dst = sK + r.stage * Cfg::kKVBytes;
          uint8_t* v_dst = sV + r.stage * Cfg::kKVBytes;
          g90::mbar_arrive_expect_tx(&full_k[r.stage], Cfg::kKVBytes);
#pragma unroll
          for (int hf = 0; hf < kD / 64; ++hf) {
            tma_load_4d(k_dst + hf * kBc * 128, &map_k, &full_k[r.stage], 64 * hf, w.h, j * kBc,
                        w.b);
          }
          g90::mbar_arrive_expect_tx(&full_v[r.stage], Cfg::kKVBytes);
#pragma unroll
          for (int hf = 0; hf < kD / 64; ++hf) {
            tma_load_4d(v_dst + hf * kBc * 128, &map_v, &full_v[r.stage], 64 * hf, w.h, j * kBc,
                        w.b);
          }
          r.advance<kStages>();
        }
      }
    }
    return;
  }

  // ---- consumers ----
  g90::setmaxnreg_inc<Cfg::kConsumerRegs>();
  const int c = wg - 1;
  const int warp = tid / 32, lane = tid % 32, quad = lane % 4;
  const float sl2 = p.scale_log2;
  const bool causal = p.causal != 0;
  const uint32_t q_addr = g90::smem_u32(sQ);
  const uint32_t k_addr = g90::smem_u32(sK);
  const uint32_t v_addr = g90::smem_u32(sV);

  constexpr int kQFr = Cfg::kRegQ ? kD / 16 : 1;
  uint32_t qf[kQFr][4];  // kRegQ: this warpgroup's Q rows as A fragments
  auto issue_s = [&](float(&s)[kBc / 2], int stage) {
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint64_t db = desc_kmajor<kBc>(k_addr + stage * Cfg::kKVBytes, 0, ks);
      if constexpr (Cfg::kRegQ) {
        WgmmaRegA<kBc>::template mma<0>(s, qf[ks], db, ks > 0 ? 1 : 0);
      } else {
        g90::Wgmma<g90::InBf16, kBc>::template mma<0, 0>(s, desc_kmajor<kBr>(q_addr, 64 * c, ks),
                                                          db, ks > 0 ? 1 : 0);
      }
    }
  };
  auto issue_pv = [&](float(&o)[kD / 2], const uint32_t(&pa)[kBc / 16][4], int stage) {
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk) {
      const uint64_t db = desc_mnmajor<kBc>(v_addr + stage * Cfg::kKVBytes, kk);
      WgmmaRegA<kD>::template mma<1>(o, pa[kk], db, 1);
    }
  };

  auto turn_wait = [&]() {
    if constexpr (Cfg::kPingpong) named_bar_sync(1 + c, 256);
  };
  auto turn_pass = [&]() {
    if constexpr (Cfg::kPingpong) named_bar_arrive(2 - c, 256);
  };
  if constexpr (Cfg::kPingpong) {
    if (c == 1) named_bar_arrive(1, 256);
  }

  Ring r;
  uint32_t it = 0;
  for (int t = blockIdx.x; t < n_tiles; t += gridDim.x, ++it) {
    const FwdTile w = decode_fwd_tile<kBr, kBc>(p, t);
    const int row0 = w.q0 + 64 * c + 16 * warp + lane / 4;  // this thread's rows: row0, row0 + 8
    const int wg_row_min = w.q0 + 64 * c;
    // Key blocks this warpgroup computes (Note [sm90 forward: three consumer warpgroups]): a
    // warpgroup wholly past T block 0 only; causal, none past its last row. Pingpong keeps every
    // block (its turns count on both consumers having the same issue points).
    [[maybe_unused]] const int n_kv_wg =
        Cfg::kPingpong         ? w.n_kv
        : wg_row_min >= T      ? 1
        : !causal              ? w.n_kv
                               : min(w.n_kv, (min(T, wg_row_min + 64) + kBc - 1) / kBc);
    auto needs_mask = [&](int k0) {
      return k0 + kBc > T || (causal && k0 + kBc - 1 > wg_row_min);
    };
    float o[kD / 2];
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, corr[2];
    float s[kBc / 2];
    uint32_t pa[kBc / 16][4];

    g90::mbar_wait(full_q, it & 1);
    if constexpr (!Cfg::kOverlap) {
      for (int j = 0; j < w.n_kv; ++j) {
        g90::mbar_wait(&full_k[r.stage], r.phase);
        g90::wgmma_fence();
        issue_s(s, r.stage);
        g90::wgmma_commit();
        g90::wgmma_wait<0>();
        g90::fence_accumulators(s);
        if (j == w.n_kv - 1 && lane == 0) g90::mbar_arrive(empty_q);  // last read of Q
        if (needs_mask(j * kBc)) mask_scores<kBc>(s, row0, j * kBc, T, causal, quad);
        online_softmax<kBc, Cfg::kFmaExpEvery>(s, m, l, corr, sl2);
        rescale_rows<kD>(o, corr);
        acc_to_a_frags<kBc>(s, pa);
        g90::mbar_wait(&full_v[r.stage], r.phase);
        g90::wgmma_fence();
        issue_pv(o, pa, r.stage);
        g90::wgmma_commit();
        g90::wgmma_wait<0>();
        g90::fence_accumulators(o);
        if (lane == 0) g90::mbar_arrive(&empty[r.stage]);
        r.advance<kStages>();
      }
    } else {
      [[maybe_unused]] const uint32_t q_zero = static_cast<uint32_t>(T) >> 31;  // 0, opaque to ptxas
      if constexpr (Cfg::kRegQ) {
        load_a_frags_sw128<kD, kBr>(qf, sQ, 64 * c, warp, lane);
        __syncwarp();
        if (lane == 0) g90::mbar_arrive(empty_q);  // the warp's last read of Q
      }
      // Block 0: S, softmax, P.
      g90::mbar_wait(&full_k[r.stage], r.phase);
      turn_wait();
      g90::wgmma_fence();
      issue_s(s, r.stage);
      g90::wgmma_commit();
      turn_pass();
      g90::wgmma_wait<0>();
      g90::fence_accumulators(s);
      if (needs_mask(0)) mask_scores<kBc>(s, row0, 0, T, causal, quad);
      online_softmax<kBc, Cfg::kFmaExpEvery>(s, m, l, corr, sl2);
      acc_to_a_frags<kBc>(s, pa);
      Ring prev = r;
      r.advance<kStages>();
      for (int j = 1; j < n_kv_wg; ++j) {
        g90::mbar_wait(&full_k[r.stage], r.phase);
        g90::mbar_wait(&full_v[prev.stage], prev.phase);  // no branch between the two issues
        turn_wait();
        g90::wgmma_fence();
        issue_s(s, r.stage);
        g90::wgmma_commit();
        issue_pv(o, pa, prev.stage);
        g90::wgmma_commit();
        turn_pass();
        g90::wgmma_wait<1>();  // S_j is ready; P_{j-1} V_{j-1} may still run
        g90::fence_accumulators(s);
        if (needs_mask(j * kBc)) mask_scores<kBc>(s, row0, j * kBc, T, causal, quad);
        online_softmax<kBc, Cfg::kFmaExpEvery>(s, m, l, corr, sl2);
        g90::wgmma_wait<0>();
        g90::fence_accumulators(o);
        if (lane == 0) g90::mbar_arrive(&empty[prev.stage]);
        rescale_rows<kD>(o, corr);
        acc_to_a_frags<kBc>(s, pa);
        if constexpr (Cfg::kRegQ) refresh_frags(qf, q_zero);  // alive for the next S (refresh_frags)
        prev = r;
        r.advance<kStages>();
      }
      if (!Cfg::kRegQ && lane == 0) g90::mbar_arrive(empty_q);  // every S of this tile has completed
      g90::mbar_wait(&full_v[prev.stage], prev.phase);
      turn_wait();
      g90::wgmma_fence();
      issue_pv(o, pa, prev.stage);
      g90::wgmma_commit();
      turn_pass();
      g90::wgmma_wait<0>();
      g90::fence_accumulators(o);
      if (lane == 0) g90::mbar_arrive(&empty[prev.stage]);
      // Blocks wholly past this warpgroup's rows: released once loaded, never read.
      for (int j = n_kv_wg; j < w.n_kv; ++j) {
        g90::mbar_wait(&full_k[r.stage], r.phase);
        g90::mbar_wait(&full_v[r.stage], r.phase);
        if (lane == 0) g90::mbar_arrive(&empty[r.stage]);
        r.advance<kStages>();
      }
    }

    // Epilogue: O /= l (quad-reduced), L = scale * m + ln(l), straight from registers.
    __nv_bfloat16* gO = static_cast<__nv_bfloat16*>(p.o) + w.b * p.so.b + w.h * p.so.h;
    float* gL = p.lse + (static_cast<int64_t>(w.b) * p.heads + w.h) * T;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float sum = l[hr];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      const int row = row0 + 8 * hr;
      if (row < T) {
        if (quad == 0) gL[row] = m[hr] * p.scale + logf(sum);
        __nv_bfloat16* dst = gO + static_cast<int64_t>(row) * p.so.t + 2 * quad;
#pragma unroll
        for (int j = 0; j < kD / 8; ++j) {
          *reinterpret_cast<uint32_t*>(dst + 8 * j) =
              pack_bf16(o[4 * j + 2 * hr] * inv, o[4 * j + 2 * hr + 1] * inv);
        }
      }
    }
  }
  if constexpr (Cfg::kPingpong) {
    if (c == 0) named_bar_sync(1, 256);  // consumer 1's last arrive
  }
#else
  (void)map_q;
  (void)map_k;
  (void)map_v;
  (void)p;
  (void)n_tiles;
#endif
}

template <class Cfg>
Status launch_flash_attn_fwd_sm90(const Params& p, const DeviceInfo& dev, cudaStream_t stream,
                                  const char* name) {
  constexpr int smem = Cfg::kSmemBytes;
  BLUBLAS_RETURN_IF_ERROR(check_sm90_launch(dev, smem, name));
  CUtensorMap mq, mk, mv;
  BLUBLAS_RETURN_IF_ERROR(make_bthd_tensor_map(&mq, p.q, p.sq, p.batch, p.seq_len, p.heads,
                                               Cfg::kD, Cfg::kBr, name, "q"));
  BLUBLAS_RETURN_IF_ERROR(make_bthd_tensor_map(&mk, p.k, p.sk, p.batch, p.seq_len, p.heads,
                                               Cfg::kD, Cfg::kBc, name, "k"));
  BLUBLAS_RETURN_IF_ERROR(make_bthd_tensor_map(&mv, p.v, p.sv, p.batch, p.seq_len, p.heads,
                                               Cfg::kD, Cfg::kBc, name, "v"));
  auto kernel = flash_attn_fwd_sm90_kernel<Cfg>;
  BLUBLAS_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int64_t tiles =
      static_cast<int64_t>((p.seq_len + Cfg::kBr - 1) / Cfg::kBr) * p.batch * p.heads;
  BLUBLAS_CHECK(tiles <= 0x7fffffffLL, StatusCode::kInvalidArgument, name, ": ", tiles,
                " query tiles exceed the grid limit");
  const int n_tiles = static_cast<int>(tiles);
  const int resident = dev.sm_count * Cfg::kMinBlocks;
  const int grid = Cfg::kPersistent ? (n_tiles < resident ? n_tiles : resident) : n_tiles;
  kernel<<<grid, Cfg::kThreads, smem, stream>>>(mq, mk, mv, p, n_tiles);
  BLUBLAS_KERNEL_LAUNCH_CHECK(name);
  return Status::success();
}

}  // namespace blublas::attn::sm90
