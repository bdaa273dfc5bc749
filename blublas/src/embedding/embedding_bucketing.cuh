// embedding_bucketing.cuh: the bucketing half of the embedding backward (included by
// embedding.cu inside its anonymous namespace): positions grouped by token id with an integer
// histogram, an exclusive scan and a scatter -- either six small launches over global memory
// (any vocab) or one block in shared memory (vocab * 4 bytes of counts) -- plus the constants and
// programmatic-dependent-launch helpers the sums share. Integer atomics only: the counts and
// offsets are exact; the order inside a bucket is re-ranked by the sums.
#pragma once

constexpr int kThreads = 256;
constexpr int kScanThreads = 1024;
constexpr int kBucketWarps = 8;
constexpr int kSmallBucket = 32;  // buckets up to this size are ranked in registers

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// ---------------------------------------------------------------- bucketing, global memory
// Workspace arrays (bytes in WorkspaceLayout): counts[vocab], offsets[vocab + 1], cursor[vocab],
// sorted[positions], present[min(positions, vocab)] = {id, first slot, count, 0},
// num_present, tiles[ceil(vocab / 1024)], big[positions / 33 + 1] (indices into present),
// big_count. Each kernel of the chain waits for its predecessor (PDL) and lets its successor
// launch at once.

__global__ void __launch_bounds__(kThreads)
    embedding_zero_kernel(int* __restrict__ counts, int* __restrict__ big_count, int64_t vocab) {
  pdl_wait();  // (wait before trigger: the successors' dwpe blocks read dout without waiting)
  pdl_trigger();
  const int64_t v = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (v < vocab) counts[v] = 0;
  if (v == 0) *big_count = 0;
}

__global__ void __launch_bounds__(kThreads)
    embedding_hist_kernel(int* __restrict__ counts, int* error_flag,
                          const int32_t* __restrict__ tokens, int64_t positions, int64_t vocab) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= positions) return;
  const int tok = tokens[i];
  if (tok >= 0 && tok < vocab) {
    atomicAdd(&counts[tok], 1);
  } else {
    *error_flag = 1;
  }
}

// Inclusive scan of int2 over a block (every thread's value); warp_tot[31] = the block total.
__device__ __forceinline__ int2 block_inclusive_scan2(int2 v, int2* warp_tot) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int nx = __shfl_up_sync(0xffffffffu, v.x, o);
    const int ny = __shfl_up_sync(0xffffffffu, v.y, o);
    if (lane >= o) {
      v.x += nx;
      v.y += ny;
    }
  }
  __syncthreads();  // warp_tot may still be read by a previous call
  if (lane == 31) warp_tot[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int2 w = lane < static_cast<int>(blockDim.x >> 5) ? warp_tot[lane] : make_int2(0, 0);
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int nx = __shfl_up_sync(0xffffffffu, w.x, o);
      const int ny = __shfl_up_sync(0xffffffffu, w.y, o);
      if (lane >= o) {
        w.x += nx;
        w.y += ny;
      }
    }
    warp_tot[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  if (warp > 0) {
    v.x += warp_tot[warp - 1].x;
    v.y += warp_tot[warp - 1].y;
  }
  return v;
}

// tile_sums[tile] = (sum of counts, number of non-empty ids) over the tile's kScanThreads ids.
__global__ void __launch_bounds__(kScanThreads)
    embedding_tile_sums_kernel(int2* __restrict__ tile_sums, const int* __restrict__ counts,
                               int64_t vocab) {
  __shared__ int2 warp_tot[32];
  pdl_wait();
  pdl_trigger();
  const int64_t v = static_cast<int64_t>(blockIdx.x) * kScanThreads + threadIdx.x;
  const int c = v < vocab ? counts[v] : 0;
  block_inclusive_scan2(make_int2(c, c > 0 ? 1 : 0), warp_tot);
  if (threadIdx.x == 0) tile_sums[blockIdx.x] = warp_tot[31];
}

// In place: tile_sums[i] <- exclusive prefix of tile sums; offsets[vocab] and *num_present get
// the totals. One block, looping over the tiles in order with a carry.
__global__ void __launch_bounds__(kScanThreads)
    embedding_tile_prefix_kernel(int2* __restrict__ tile_sums, int64_t tiles,
                                 int* __restrict__ offsets, int* __restrict__ num_present,
                                 int64_t vocab) {
  __shared__ int2 warp_tot[32];
  pdl_wait();
  pdl_trigger();
  int2 carry = make_int2(0, 0);
  for (int64_t base = 0; base < tiles; base += kScanThreads) {
    const int64_t i = base + threadIdx.x;
    const int2 x = i < tiles ? tile_sums[i] : make_int2(0, 0);
    const int2 inc = block_inclusive_scan2(x, warp_tot);
    if (i < tiles) tile_sums[i] = make_int2(carry.x + inc.x - x.x, carry.y + inc.y - x.y);
    carry.x += warp_tot[31].x;
    carry.y += warp_tot[31].y;
  }
  if (threadIdx.x == 0) {
    offsets[vocab] = carry.x;
    *num_present = carry.y;
  }
}

// offsets / cursor / present for the tile; big buckets are appended to `big` (the order of that
// list only decides which warp sums which big bucket, never the result).
__global__ void __launch_bounds__(kScanThreads)
    embedding_tile_apply_kernel(int* __restrict__ offsets, int* __restrict__ cursor,
                                int4* __restrict__ present, int* __restrict__ big,
                                int* __restrict__ big_count, const int2* __restrict__ tile_prefix,
                                const int* __restrict__ counts, int64_t vocab) {
  __shared__ int2 warp_tot[32];
  pdl_wait();
  pdl_trigger();
  const int64_t v = static_cast<int64_t>(blockIdx.x) * kScanThreads + threadIdx.x;
  const int c = v < vocab ? counts[v] : 0;
  const int2 x = make_int2(c, c > 0 ? 1 : 0);
  const int2 inc = block_inclusive_scan2(x, warp_tot);
  const int2 pre = tile_prefix[blockIdx.x];
  if (v < vocab) {
    const int off = pre.x + inc.x - x.x;
    offsets[v] = off;
    cursor[v] = off;
    if (c > 0) {
      const int slot = pre.y + inc.y - x.y;
      present[slot] = make_int4(static_cast<int>(v), off, c, 0);
      if (c > kSmallBucket) big[atomicAdd(big_count, 1)] = slot;
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    embedding_scatter_kernel(int* __restrict__ sorted, int* __restrict__ cursor,
                             const int32_t* __restrict__ tokens, int64_t positions,
                             int64_t vocab) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= positions) return;
  const int tok = tokens[i];
  if (tok >= 0 && tok < vocab) sorted[atomicAdd(&cursor[tok], 1)] = static_cast<int>(i);
}

// ---------------------------------------------------------------- bucketing, one block
// The whole bucketing in shared memory (counts of all ids: vocab * 4 bytes): histogram, scan
// (thread t owns a contiguous id range), present / big lists, scatter. One launch instead of six;
// its successor (the sums) may launch at once.
constexpr int kTokBatch = 8;  // token loads in flight per thread
constexpr int64_t kOneBlockMaxPositions = 1 << 17;  // beyond this one SM is the bottleneck
constexpr int64_t kBitmapMaxPositions = 1 << 16;    // bitmap workspace ~ positions^2 / 264 B

//
// Note [Big-bucket bitmaps] A bucket of > 32 positions cannot be ranked in registers. With
// `bitmap` set (positions <= kBitmapMaxPositions), big bucket j gets a row of ceil(positions / 32)
// words in which bit p is set for each of its positions (atomicOr: the result does not depend on
// the order), instead of slots in `sorted`; the sums walk the row's words and bits in order, i.e.
// in increasing position order, for a cost of positions / 1024 coalesced loads per big bucket
// (the fallback re-scans the token list: positions / 32 loads).
__global__ void __launch_bounds__(kScanThreads)
    embedding_bucket_smem_kernel(int* __restrict__ sorted, int4* __restrict__ present,
                                 int* __restrict__ num_present, int* __restrict__ big,
                                 int* __restrict__ big_count, unsigned* __restrict__ bitmap,
                                 int* error_flag, const int32_t* __restrict__ tokens,
                                 int positions, int vocab) {
  extern __shared__ int cnt[];  // [vocab]
  __shared__ int2 warp_tot[32];
  __shared__ int big_n;
  // Wait before trigger: when this kernel is itself launched dependent, the sums kernel's dwpe
  // blocks (which never wait) must not start before the caller's previous kernel is complete.
  pdl_wait();
  pdl_trigger();
  const int tid = threadIdx.x;
  for (int v = tid; v < vocab; v += kScanThreads) cnt[v] = 0;
  if (tid == 0) big_n = 0;
  __syncthreads();
  bool bad = false;
  for (int base = 0; base < positions; base += kScanThreads * kTokBatch) {
    int tok[kTokBatch];
#pragma unroll
    for (int j = 0; j < kTokBatch; ++j) {
      const int i = base + j * kScanThreads + tid;
      tok[j] = i < positions ? tokens[i] : -1;
    }
#pragma unroll
    for (int j = 0; j < kTokBatch; ++j) {
      const int i = base + j * kScanThreads + tid;
      if (tok[j] >= 0 && tok[j] < vocab) {
        atomicAdd(&cnt[tok[j]], 1);
      } else if (i < positions) {
        bad = true;
      }
    }
  }
  if (bad) *error_flag = 1;
  __syncthreads();
  const int per = (vocab + kScanThreads - 1) / kScanThreads;
  const int v0 = min(vocab, tid * per), v1 = min(vocab, v0 + per);
  int2 mine = make_int2(0, 0);
  for (int v = v0; v < v1; ++v) {
    const int c = cnt[v];
    mine.x += c;
    mine.y += c > 0 ? 1 : 0;
  }
  const int2 inc = block_inclusive_scan2(mine, warp_tot);
  int off = inc.x - mine.x, slot = inc.y - mine.y;
  for (int v = v0; v < v1; ++v) {
    const int c = cnt[v];
    int cursor = off;  // becomes the scatter cursor; -(big index + 1) for bitmap buckets
    if (c > 0) {
      present[slot] = make_int4(v, off, c, 0);
      if (c > kSmallBucket) {
        const int j = atomicAdd(&big_n, 1);
        big[j] = slot;
        if (bitmap != nullptr) cursor = -(j + 1);
      }
      ++slot;
    }
    cnt[v] = cursor;
    off += c;
  }
  if (tid == kScanThreads - 1) *num_present = inc.y;
  __syncthreads();
  if (tid == 0) *big_count = big_n;
  const int words = (positions + 31) / 32;
  if (bitmap != nullptr) {
    for (int i = tid; i < big_n * words; i += kScanThreads) bitmap[i] = 0u;
    __syncthreads();  // (bar.sync orders the block's global writes too)
  }
  for (int base = 0; base < positions; base += kScanThreads * kTokBatch) {
    int tok[kTokBatch];
#pragma unroll
    for (int j = 0; j < kTokBatch; ++j) {
      const int i = base + j * kScanThreads + tid;
      tok[j] = i < positions ? tokens[i] : -1;
    }
#pragma unroll
    for (int j = 0; j < kTokBatch; ++j) {
      const int i = base + j * kScanThreads + tid;
      if (tok[j] >= 0 && tok[j] < vocab) {
        const int cur = cnt[tok[j]];  // its sign never changes during the scatter
        if (cur < 0) {
          atomicOr(&bitmap[static_cast<int64_t>(-cur - 1) * words + i / 32], 1u << (i % 32));
        } else {
          sorted[atomicAdd(&cnt[tok[j]], 1)] = i;
        }
      }
    }
  }
}

