// sm80_flash_attn_fwd.cuh: the mma.sync flash-attention forward kernel template (bf16 or tf32),
// instantiated by sm80_bf16_flash_attn_fwd.cu and sm80_tf32_flash_attn_fwd.cu.
//
// Note [Flash forward, one CTA per query block]
// A CTA owns kBr = 16*kMT*kWarps query rows of one (batch, head); each warp owns 16*kMT rows, so
// the K/V fragments read from shared memory are reused over kMT m-tiles. K and V blocks of kBc
// keys are double-buffered with cp.async (block j+1 loads while block j computes; one barrier per
// block). S = Q K^T stays in registers; the online softmax (running max m, running sum l, base-2
// exponent with the scale folded into one FFMA) rescales the O accumulator, and P is re-packed
// from the S accumulator straight into A fragments for O += P V. Causal: key blocks above the
// diagonal are never loaded, warps whose rows are all above a block skip it, and only the blocks
// that cross the diagonal or the sequence end are masked element by element. Query blocks are
// scheduled heaviest first (reverse order) to even out the causal tail.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "attention/attention_params.h"
#include "attention/sm80_mma_tiles.cuh"
#include "blublas/check.h"

namespace blublas::attn::sm80 {

// Tile configuration of the forward: head dim, warps, m-tiles (16 rows) per warp, keys per block,
// Q fragments held in registers for the whole CTA (else re-read from shared memory per key block),
// the minimum CTAs per SM handed to __launch_bounds__ (caps registers at 64K / (threads*min)),
// rolled k loops, and K / V split once per CTA (3xTF32 only: Note [Pre-split tiles]).
template <int kD_, int kWarps_, int kMT_, int kBc_, bool kQRegs_, int kMinBlocks_,
          bool kRollK_ = false, bool kPreSplit_ = false>
struct FwdTiles {
  static constexpr int kD = kD_, kWarps = kWarps_, kMT = kMT_, kBc = kBc_;
  static constexpr bool kQRegs = kQRegs_;
  static constexpr bool kRollK = kRollK_;  // Note [Rolled k loop]
  static constexpr bool kPreSplit = kPreSplit_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBr = 16 * kMT * kWarps;
  static constexpr int kWarpRows = 16 * kMT;
  // Pre-split: K and V land single-buffered in raw tiles, then [K big][V big][K small][V small].
  static constexpr int kBLo = kPreSplit ? 2 * kBc * kD : 0;
  template <typename Elem>
  static constexpr size_t smem_bytes() {
    return static_cast<size_t>(kBr + (kPreSplit ? 6 : 4) * kBc) * kD * sizeof(Store<Elem>);
  }
};

template <typename Elem, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    flash_attn_fwd_kernel(const Params p) {
  constexpr int kD = Cfg::kD, kMT = Cfg::kMT, kBc = Cfg::kBc;
  constexpr int kBr = Cfg::kBr;
  constexpr int kNT = kBc / 8;  // S n-tiles
  constexpr int kDT = kD / 8;   // O n-tiles
  constexpr bool kPre = Cfg::kPreSplit;
  static_assert(!kPre || std::is_same_v<Elem, tf32x3>, "pre-split tiles are 3xTF32 only");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Store<Elem>* sQ = reinterpret_cast<Store<Elem>*>(smem_raw);
  // Double-buffered [2][kBc][kD] K then V; pre-split: raw K, raw V, then the split tiles.
  Store<Elem>* sK = sQ + kBr * kD;
  Store<Elem>* sV = sK + (kPre ? 1 : 2) * kBc * kD;
  [[maybe_unused]] Store<Elem>* sKs = sV + kBc * kD;  // pre-split: K big (small at + kBLo)
  [[maybe_unused]] Store<Elem>* sVs = sKs + kBc * kD;  // V big, fragment-major (kFragB)

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int T = p.seq_len;
  const int nqb = (T + kBr - 1) / kBr;
  const int qb = nqb - 1 - static_cast<int>(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z;
  const int q0 = qb * kBr;

  const Store<Elem>* gQ =
      static_cast<const Store<Elem>*>(p.q) + b * p.sq.b + h * p.sq.h + q0 * p.sq.t;
  const Store<Elem>* gK = static_cast<const Store<Elem>*>(p.k) + b * p.sk.b + h * p.sk.h;
  const Store<Elem>* gV = static_cast<const Store<Elem>*>(p.v) + b * p.sv.b + h * p.sv.h;

  const int q_end = min(T, q0 + kBr);
  const int n_kv = p.causal ? (q_end + kBc - 1) / kBc : (T + kBc - 1) / kBc;

  load_tile_async<Elem, kD, kBr, Cfg::kThreads>(sQ, gQ, p.sq.t, T - q0, tid);
  load_tile_async<Elem, kD, kBc, Cfg::kThreads>(sK, gK, p.sk.t, T, tid);
  load_tile_async<Elem, kD, kBc, Cfg::kThreads>(sV, gV, p.sv.t, T, tid);
  cp_async_commit();

  float o[kMT][kDT][4];
  zero_acc(o);
  float m[kMT][2], l[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }
  const int wr0 = warp * Cfg::kWarpRows;  // first row of this warp inside the block
  const int g = lane >> 2, t = lane & 3;
  const float sl2 = p.scale_log2;
  constexpr int kKS = kD / Mma<Elem>::kK;
  [[maybe_unused]] uint32_t qf[Cfg::kQRegs ? kMT : 1][Cfg::kQRegs ? kKS : 1][Mma<Elem>::kAW];
  if constexpr (Cfg::kQRegs) {
    cp_async_wait<0>();
    __syncthreads();
    load_a_frags<Elem, kD, kMT>(qf, sQ, wr0, lane);
  }

  for (int j = 0; j < n_kv; ++j) {
    cp_async_wait<0>();
    __syncthreads();
    if constexpr (kPre) {  // Note [Pre-split tiles]
      split_tile_tf32x3<kBc * kD, Cfg::kThreads>(sK, sKs, sKs + Cfg::kBLo, tid);
      split_tile_tf32x3_bt_frags<kBc, kD, Cfg::kThreads>(sV, sVs, sVs + Cfg::kBLo, tid);
      __syncthreads();
    }
    if (j + 1 < n_kv) {
      const int kn = (j + 1) * kBc;
      const int buf = kPre ? 0 : (j + 1) & 1;
      load_tile_async<Elem, kD, kBc, Cfg::kThreads>(sK + buf * kBc * kD, gK + kn * p.sk.t, p.sk.t,
                                                    T - kn, tid);
      load_tile_async<Elem, kD, kBc, Cfg::kThreads>(sV + buf * kBc * kD, gV + kn * p.sv.t, p.sv.t,
                                                    T - kn, tid);
      cp_async_commit();
    }
    const int k0 = j * kBc;
    if (p.causal && k0 > q0 + wr0 + Cfg::kWarpRows - 1) continue;  // all masked for this warp
    const Store<Elem>* cK = kPre ? sKs : sK + (j & 1) * kBc * kD;
    const Store<Elem>* cV = kPre ? sVs : sV + (j & 1) * kBc * kD;

    float s[kMT][kNT][4];
    zero_acc(s);
    if constexpr (Cfg::kQRegs) {
      static_assert(!kPre, "pre-split B with Q in registers: not instantiated");
      warp_gemm_nt_ra<Elem, kD, kMT, kNT>(s, qf, cK, 0, lane);
    } else {
      warp_gemm_nt<Elem, kD, kMT, kNT, Cfg::kRollK, Cfg::kBLo>(s, sQ, wr0, cK, 0, lane);
    }

    const bool need_mask = (k0 + kBc > T) || (p.causal && k0 + kBc - 1 > q0 + wr0);
    if (need_mask) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = q0 + wr0 + 16 * mt + g + ((e >> 1) << 3);
            const int col = k0 + 8 * nt + 2 * t + (e & 1);
            if (col >= T || (p.causal && col > row)) s[mt][nt][e] = -INFINITY;
          }
    }

    // Online softmax: rows g and g+8 of each m-tile; a row lives in one quad of lanes.
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        float mx = m[mt][hr];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
          mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hr], s[mt][nt][2 * hr + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mx_safe = (mx == -INFINITY) ? 0.0f : mx;
        const float corr = fast_exp2((m[mt][hr] - mx_safe) * sl2);
        m[mt][hr] = mx;
        const float neg_mx_l2 = -mx_safe * sl2;
        float rs = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const float p0 = fast_exp2(fmaf(s[mt][nt][2 * hr], sl2, neg_mx_l2));
          const float p1 = fast_exp2(fmaf(s[mt][nt][2 * hr + 1], sl2, neg_mx_l2));
          s[mt][nt][2 * hr] = p0;
          s[mt][nt][2 * hr + 1] = p1;
          rs += p0 + p1;
        }
        l[mt][hr] = l[mt][hr] * corr + rs;
#pragma unroll
        for (int dn = 0; dn < kDT; ++dn) {
          o[mt][dn][2 * hr] *= corr;
          o[mt][dn][2 * hr + 1] *= corr;
        }
      }
    }
    warp_gemm_cA_tB_add<Elem, kD, kMT, kNT, kFreshBlockAcc<Elem>, Cfg::kBLo, kPre>(o, s, cV, 0,
                                                                                  lane);
  }

  // Finalize: O /= l, L = scale*m + ln(l) (natural log, as the backward expects).
  Store<Elem>* gO = static_cast<Store<Elem>*>(p.o) + b * p.so.b + h * p.so.h + q0 * p.so.t;
  float* gL = p.lse + (static_cast<int64_t>(b) * p.heads + h) * T;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float sum = l[mt][hr];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
      for (int dn = 0; dn < kDT; ++dn) {
        o[mt][dn][2 * hr] *= inv;
        o[mt][dn][2 * hr + 1] *= inv;
      }
      const int row = q0 + wr0 + 16 * mt + g + 8 * hr;
      if (t == 0 && row < T) gL[row] = m[mt][hr] * p.scale + logf(sum);
    }
  }
  store_acc<Elem, kMT, kDT>(o, gO, p.so.t, wr0, T - q0, 1.0f, lane);
}

template <typename Elem, typename Cfg>
Status launch_flash_attn_fwd(const Params& p, const DeviceInfo& dev, cudaStream_t stream,
                             const char* name) {
  constexpr size_t smem = Cfg::template smem_bytes<Elem>();
  BLUBLAS_CHECK(smem <= static_cast<size_t>(dev.max_smem_per_block_optin),
                StatusCode::kNotSupported, name, ": needs ", smem,
                " bytes of shared memory per block, device allows ", dev.max_smem_per_block_optin);
  auto kernel = flash_attn_fwd_kernel<Elem, Cfg>;
  BLUBLAS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
  const dim3 grid((p.seq_len + Cfg::kBr - 1) / Cfg::kBr, p.heads, p.batch);
  kernel<<<grid, Cfg::kThreads, smem, stream>>>(p);
  BLUBLAS_KERNEL_LAUNCH_CHECK(name);
  return Status::success();
}

}  // namespace blublas::attn::sm80
