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
};

// P: anything with int fields tiles_m, tiles_n, batch, group_m, splits, kblocks (the kernel's
// KernelParams; a plain struct in the tests). Unit u = split * (tiles * batch) + b * tiles + t;
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

}  // namespace blublas::gemm_detail::sm90
