// sm90_work_units.h (internal, host and device): the sm_90a GEMM kernel's work-unit numbering
// (Note [sm90 work units] in sm90_gemm_kernel.cuh): unit index -> (split, batch, tile row, tile
// column, k-block range). Kept apart from the kernel, with no CUDA headers, so that the CPU tests
// (tests/blublas/gemm_property_test.cpp) check the very function the kernel runs: every unit maps
// to a distinct tile, every tile is covered, and the splits of a tile partition its k-blocks.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define BLUBLAS_SM90_HD __host__ __device__ __forceinline__
#else
#define BLUBLAS_SM90_HD inline
#endif

namespace blublas::gemm_detail::sm90 {

struct WorkUnit {
  int batch, tm, tn, split, kb0, kb1;
  int sk_cta = 0;  // stream-K: the partition's CTA whose iterations these are (Note [sm90 stream-K])
};

// P: anything with int fields tiles_m, tiles_n, batch, group_m, splits, kblocks, num_units,
// sk_ctas, sk_gran, sk_units (the kernel's KernelParams; a plain struct in the tests). Unit u = split * (tiles * batch) + b * tiles + t;
// t walks the tiles in groups of group_m tile rows (column-major inside a group).
template <class P>
BLUBLAS_SM90_HD WorkUnit decode_unit(const P& p, int u) {
  WorkUnit w;
  const int tiles = p.tiles_m * p.tiles_n;
  const int per_split = tiles * p.batch;
  w.split = u / per_split;
  const int r = u - w.split * per_split;
  w.batch = r / tiles;
  const int t = r - w.batch * tiles;
  const int per_group = p.group_m * p.tiles_n;
  const int g = t / per_group;
  const int first_m = g * p.group_m;
  const int rows_left = p.tiles_m - first_m;
  const int rows_in_group = rows_left < p.group_m ? rows_left : p.group_m;
  const int in_group = t - g * per_group;
  w.tm = first_m + in_group % rows_in_group;
  w.tn = in_group / rows_in_group;
  w.kb0 = static_cast<int>(static_cast<int64_t>(w.split) * p.kblocks / p.splits);
  w.kb1 = static_cast<int>(static_cast<int64_t>(w.split + 1) * p.kblocks / p.splits);
  return w;
}

// Note [sm90 stream-K]
// (bf16 / f16 inputs, cooperative tiles without a cluster: KernelConfig::kStreamK.)
// Wave quantization: a skinny weight-gradient GEMM (qkv dW 2304 x 768, K = 16384) has 108 tiles of
// 128 x 128 for 132 SMs (82% of the GPU busy), attn_proj dW (768 x 768) 36; split-K fills the GPU
// but writes every split's whole fp32 tile to memory and reads it back in a second kernel. With
// stream-K (p.sk_ctas = V > 0, splits = 1) the tiles * kblocks k-iterations are cut into V equal
// ranges in tile order ("partition CTAs", V = the SM count: the plan's, whatever the grid):
// partition CTA v takes [sk_begin(v), sk_begin(v + 1)), boundaries on multiples of sk_gran
// k-blocks (2 when kblocks is even, so the fused bias gradient's 128-k chunks stay whole), each
// tile it touches one unit. A tile cut between partition CTAs is finished by the one holding its
// first k-blocks (there its kb0 = 0 unit is the last); every later part (kb0 > 0) is the first
// unit of partition CTAs v + 1, v + 2, ..., which store their fp32 accumulators in a workspace
// slot of their own and raise a flag; the finisher waits for them in order and adds them to its
// registers, then runs the ordinary epilogue. The sums' order depends on the shape and V only:
// the same bits every run and under any CTA budget (Note [GEMM CTA budget]).
// Measured (H200, session 32, interleaved with cuBLAS in one process): SLOWER than the strided
// units on every GPT-2 shape, so opt-in (BLUBLAS_SM90_STREAMK=1): qkv dW (2304 x 768, K = 16384)
// 0.669 of cuBLAS vs 0.765, lm head dX 0.706 vs 1.001, d48 fc_proj dW 0.515 vs 0.763. The cause
// is L2 reuse: with strided units every CTA starts its tile at k = 0 at the same time, so the
// tiles that share an A row panel or a B column panel read each k-slice within a short window
// and L2 serves all but the first; stream-K staggers the CTAs' k offsets by construction, so
// each tile streams its panels from DRAM on its own (qkv dW with 128 x 256 tiles: ~680 MB
// against ~100 MB). What could keep the reuse: stream-K for the last partial wave only (the
// data-parallel waves stay aligned), or uniform splits with an in-kernel running-sum fixup
// (every unit of a wave at the same k-slab), whose per-unit overhead eats most of the wave gain
// on qkv dW (9 units of 23 k-blocks per CTA).
// A launched CTA b runs partition CTAs b, b + grid, ... in DESCENDING order: a partition CTA only
// waits on higher ones, and those have either run already on the same CTA or sit on other
// resident CTAs that reach them without waiting on lower ones, so nothing waits forever (by
// induction from the highest, which waits for nothing).
// 32-bit arithmetic (64-bit division spilled the fused bias gradient's 56-register warps): the
// launcher takes stream-K only when tiles * kblocks * sk_ctas < 2^31.
template <class P>
BLUBLAS_SM90_HD int sk_begin(const P& p, int v) {
  return p.sk_gran * ((v * p.sk_units) / p.sk_ctas);
}

// Units of partition CTA v.
template <class P>
BLUBLAS_SM90_HD int sk_unit_count(const P& p, int v) {
  const int b = sk_begin(p, v), e = sk_begin(p, v + 1);
  if (b >= e) return 0;
  return (e - 1) / p.kblocks - b / p.kblocks + 1;
}

// Local units of launched CTA `first` (grid `step`): stream-K, its partition CTAs' units
// (descending partition CTAs, ascending units inside one); else units first, first + step, ...
template <class P>
BLUBLAS_SM90_HD int local_unit_count(const P& p, int first, int step) {
  if (p.sk_ctas > 0) {
    int n = 0;
    for (int v = first; v < p.sk_ctas; v += step) n += sk_unit_count(p, v);
    return n;
  }
  return first < p.num_units ? (p.num_units - 1 - first) / step + 1 : 0;
}

template <class P>
BLUBLAS_SM90_HD WorkUnit local_unit(const P& p, int first, int step, int j) {
  if (p.sk_ctas > 0) {
    int v = first + (p.sk_ctas - 1 - first) / step * step;  // the highest partition CTA first
    int n = sk_unit_count(p, v);
    while (j >= n && v - step >= first) {
      j -= n;
      v -= step;
      n = sk_unit_count(p, v);
    }
    const int b = sk_begin(p, v), e = sk_begin(p, v + 1);
    const int t = b / p.kblocks + j;
    WorkUnit w = decode_unit(p, t);  // splits == 1: the tile, kb [0, kblocks)
    const int t0 = t * p.kblocks;
    w.kb0 = (b > t0 ? b : t0) - t0;
    w.kb1 = (e < t0 + p.kblocks ? e : t0 + p.kblocks) - t0;
    w.sk_cta = v;
    return w;
  }
  return decode_unit(p, first + j * step);
}

// Stream-K: the partition CTAs whose first unit holds a later part of the tile that unit w
// (kb0 = 0 < kb1 < kblocks, the last of partition CTA w.sk_cta) finishes: w.sk_cta + 1 .. the
// returned one, in k order.
template <class P>
BLUBLAS_SM90_HD int sk_last_contributor(const P& p, const WorkUnit& w) {
  const int tile_end = sk_begin(p, w.sk_cta + 1) - w.kb1 + p.kblocks;
  int h = w.sk_cta + 1;
  while (h + 1 < p.sk_ctas && sk_begin(p, h + 1) < tile_end) ++h;
  return h;
}

}  // namespace blublas::gemm_detail::sm90
