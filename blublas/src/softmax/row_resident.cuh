// row_resident.cuh: the machinery behind Note [Softmax row residency] (blublas/softmax.h), shared
// by the softmax and fused cross-entropy kernels: the launch configuration (cluster size, block
// size), the per-block row slice held in registers, and the fixed-order combine of per-block
// partials across a thread-block cluster through distributed shared memory.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "blublas/check.h"
#include "blublas/device_info.h"
#include "reduce/reduce_primitives.cuh"

namespace blublas::fused {

constexpr int kResidentMaxThreads = 512;
constexpr int kResidentMaxCluster = 8;
constexpr int kGenericRowThreads = 1024;

// How one row is spread: `cluster` blocks of `threads` threads, each block owning
// `chunk_elems` consecutive elements (a multiple of the pack width), kLoads packs per thread.
struct ResidentConfig {
  int cluster = 1;
  int threads = 0;
  int64_t chunk_elems = 0;
};

// Picks the smallest cluster (1, 2, 4, 8; > 1 only when clusters are available) whose blocks
// hold their slice with at most kResidentMaxThreads threads of `loads` packs of `width`.
inline bool pick_resident_config(int64_t cols, int width, int loads, bool clusters_ok,
                                 ResidentConfig* cfg) {
  const int64_t packs = cols / width;
  for (int cs = 1; cs <= kResidentMaxCluster; cs *= 2) {
    if (cs > 1 && !clusters_ok) return false;
    const int64_t per_block = (packs + cs - 1) / cs;
    const int64_t threads = ((per_block + loads - 1) / loads + 31) / 32 * 32;
    if (threads <= kResidentMaxThreads) {
      cfg->cluster = cs;
      cfg->threads = static_cast<int>(threads);
      cfg->chunk_elems = per_block * width;
      return true;
    }
  }
  return false;
}

// Whether the current device runs thread-block clusters (sm_90+).
inline Status clusters_available(bool* ok) {
  DeviceInfo info;
  BLUBLAS_RETURN_IF_ERROR(current_device_info(&info));
  *ok = info.sm_major >= 9;
  return Status::success();
}

// Launches `kernel` with gridDim.x = rows * cfg.cluster and a cluster of cfg.cluster blocks
// (plain launch when the cluster is 1).
template <typename Kernel, typename... Args>
cudaError_t launch_resident(Kernel kernel, const ResidentConfig& cfg, int64_t rows,
                            cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(static_cast<unsigned>(rows * cfg.cluster));
  lc.blockDim = dim3(static_cast<unsigned>(cfg.threads));
  lc.dynamicSmemBytes = 0;
  lc.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(cfg.cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  lc.attrs = attr;
  lc.numAttrs = cfg.cluster > 1 ? 1 : 0;
  return cudaLaunchKernelEx(&lc, kernel, args...);
}

// Combines each block's partial across the cluster in rank order; every thread of every block
// gets the same bits. `slot` is a __shared__ variable of the caller. Without a cluster (or on
// targets without clusters) the block's own value is the result.
template <bool kCluster>
__device__ __forceinline__ MaxSum cluster_combine_maxsum(MaxSum local, MaxSum* slot) {
  if constexpr (kCluster) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    if (threadIdx.x == 0) *slot = local;
    cl.sync();
    MaxSum acc{-INFINITY, 0.0f};
    const unsigned n = cl.num_blocks();
    for (unsigned r = 0; r < n; ++r) acc = maxsum_combine(acc, *cl.map_shared_rank(slot, r));
    cl.sync();  // no block leaves (freeing its slot) while another still reads it
    return acc;
#else
    __trap();
#endif
  }
  return local;
}

template <bool kCluster>
__device__ __forceinline__ float cluster_combine_sum(float local, float* slot) {
  if constexpr (kCluster) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    if (threadIdx.x == 0) *slot = local;
    cl.sync();
    float acc = 0.0f;
    const unsigned n = cl.num_blocks();
    for (unsigned r = 0; r < n; ++r) acc += *cl.map_shared_rank(slot, r);
    cl.sync();
    return acc;
#else
    __trap();
#endif
  }
  return local;
}

// Rank of this block inside its row's cluster and the row it works on (1-D grid, 1-D cluster:
// the cluster rank is blockIdx.x % cluster).
struct RowSliceIndex {
  int64_t row;
  int64_t begin;  // first element of the slice
  int64_t end;    // one past the last element of the slice
};

__device__ __forceinline__ RowSliceIndex row_slice(int cluster, int64_t chunk_elems,
                                                   int64_t cols) {
  const int64_t rank = blockIdx.x % cluster;
  RowSliceIndex s;
  s.row = blockIdx.x / cluster;
  s.begin = rank * chunk_elems;
  s.end = s.begin + chunk_elems < cols ? s.begin + chunk_elems : cols;
  return s;
}

}  // namespace blublas::fused
