// embedding.cu: token + position embedding forward and the deterministic backward of
// Note [Deterministic embedding backward] (blublas/embedding.h). Session 2 tried three other
// backward designs; all measured slower on an H200 (embedding_variants.h, bench/NOTES.md).
//
// Backward launches: the bucketing of positions by token id -- memset, integer histogram (atomics
// on ints are exact, hence deterministic), one-block exclusive scan (also listing the ids present),
// scatter of positions into their bucket (the order inside a bucket is whatever the atomics gave)
// -- then one launch whose blocks either sum dwpe (a column sum over the batch, b in order) or
// sum one bucket per warp in increasing position order: buckets of <= 32 positions are ranked in
// registers (each lane counts the smaller positions), larger buckets re-scan the token list in
// order. dout is read twice (once per sum); see Note [Interleaved dwpe and bucket blocks].
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "blublas/check.h"
#include "blublas/embedding.h"
#include "elementwise/vector_io.cuh"
#include "embedding/embedding_variants.h"

namespace blublas {
namespace {

using fused::from_f32;
using fused::kPack16;
using fused::load_f32;
using fused::Pack;
using fused::store_f32;
using fused::to_f32;

constexpr int kThreads = 256;
constexpr int kScanThreads = 1024;
constexpr int kBucketWarps = 8;

// ---------------------------------------------------------------- forward
// One block per position (b, t): threads walk the row's packs; the token id is read once.
template <typename T, int W>
__global__ void __launch_bounds__(kThreads)
    embedding_fwd_kernel(T* __restrict__ out, const int32_t* __restrict__ tokens,
                         const T* __restrict__ wte, const T* __restrict__ wpe, int64_t seq_len,
                         int64_t channels, int64_t vocab, int* error_flag) {
  const int64_t bt = blockIdx.x;
  const int64_t t = bt % seq_len;
  const int tok = tokens[bt];
  const bool ok = tok >= 0 && tok < vocab;
  if (!ok && threadIdx.x == 0) *error_flag = 1;
  const T* erow = wte + static_cast<int64_t>(ok ? tok : 0) * channels;
  const T* prow = wpe != nullptr ? wpe + t * channels : nullptr;
  T* orow = out + bt * channels;
  for (int64_t c = static_cast<int64_t>(threadIdx.x) * W; c < channels;
       c += static_cast<int64_t>(blockDim.x) * W) {
    float o[W];
    if (prow != nullptr) {
      load_f32<T, W>(prow + c, o);
    } else {
#pragma unroll
      for (int i = 0; i < W; ++i) o[i] = 0.0f;
    }
    if (ok) {
      float e[W];
      load_f32<T, W>(erow + c, e);
#pragma unroll
      for (int i = 0; i < W; ++i) o[i] += e[i];
    }
    store_f32<T, W>(orow + c, o);
  }
}

// ---------------------------------------------------------------- backward: dwpe
// dwpe[t][c] += sum_{b in order} dout[b][t][c]; one thread per pack of (t, c).
template <typename T, int W>
__device__ __forceinline__ void embedding_dwpe_block(int64_t block, float* __restrict__ dwpe,
                                                     const T* __restrict__ dout, int64_t batch,
                                                     int64_t seq_len, int64_t channels) {
  const int64_t per_b = seq_len * channels;
  const int64_t e = (block * kThreads + threadIdx.x) * W;
  if (e >= per_b) return;
  float acc[W];
  load_f32<float, W>(dwpe + e, acc);
  float s[W];
#pragma unroll
  for (int i = 0; i < W; ++i) s[i] = 0.0f;
  for (int64_t b = 0; b < batch; ++b) {
    float v[W];
    load_f32<T, W>(dout + b * per_b + e, v);
#pragma unroll
    for (int i = 0; i < W; ++i) s[i] += v[i];
  }
#pragma unroll
  for (int i = 0; i < W; ++i) acc[i] += s[i];
  store_f32<float, W>(dwpe + e, acc);
}

// ---------------------------------------------------------------- backward: bucketing
__global__ void __launch_bounds__(kThreads)
    embedding_hist_kernel(int* __restrict__ counts, int* error_flag,
                          const int32_t* __restrict__ tokens, int64_t positions, int64_t vocab) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= positions) return;
  const int tok = tokens[i];
  if (tok >= 0 && tok < vocab) {
    atomicAdd(&counts[tok], 1);
  } else {
    *error_flag = 1;
  }
}

// offsets[v] = sum_{u < v} counts[u] (v <= vocab), cursor[v] = offsets[v], and the ids with a
// non-empty bucket in increasing order: present[0 .. *num_present) = {id, first slot, count}
// (so a bucket warp starts from one load). A tile scan in three
// launches: per-tile sums of (positions, non-empty ids), one block scanning the tile sums, then
// every tile scanned again with its prefix. All loads are coalesced; integer sums are exact.
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
    int2 w = warp_tot[lane];
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
  return v;  // warp_tot[31] holds the block total
}

// tile_sums[tile] = (sum of counts, number of non-empty ids) over the tile's kScanThreads ids.
__global__ void __launch_bounds__(kScanThreads)
    embedding_tile_sums_kernel(int2* __restrict__ tile_sums, const int* __restrict__ counts,
                               int64_t vocab) {
  __shared__ int2 warp_tot[32];
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

__global__ void __launch_bounds__(kScanThreads)
    embedding_tile_apply_kernel(int* __restrict__ offsets, int* __restrict__ cursor,
                                int4* __restrict__ present, const int2* __restrict__ tile_prefix,
                                const int* __restrict__ counts, int64_t vocab) {
  __shared__ int2 warp_tot[32];
  const int64_t v = static_cast<int64_t>(blockIdx.x) * kScanThreads + threadIdx.x;
  const int c = v < vocab ? counts[v] : 0;
  const int2 x = make_int2(c, c > 0 ? 1 : 0);
  const int2 inc = block_inclusive_scan2(x, warp_tot);
  const int2 pre = tile_prefix[blockIdx.x];
  if (v < vocab) {
    const int off = pre.x + inc.x - x.x;
    offsets[v] = off;
    cursor[v] = off;
    if (c > 0) present[pre.y + inc.y - x.y] = make_int4(static_cast<int>(v), off, c, 0);
  }
}

__global__ void __launch_bounds__(kThreads)
    embedding_scatter_kernel(int* __restrict__ sorted, int* __restrict__ cursor,
                             const int32_t* __restrict__ tokens, int64_t positions,
                             int64_t vocab) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= positions) return;
  const int tok = tokens[i];
  if (tok >= 0 && tok < vocab) sorted[atomicAdd(&cursor[tok], 1)] = static_cast<int>(i);
}

// ---------------------------------------------------------------- backward: bucket sums
// One warp per token id present in the batch (present[w], w < *num_present). Columns are processed in chunks of 32 * kPacks * W; inside a chunk
// the warp walks the bucket's positions in increasing order, loading kBatch rows ahead.
template <typename T, int W, int kPacks>
__device__ __forceinline__ void embedding_dwte_block(
    int64_t block, float* __restrict__ dwte, const T* __restrict__ dout,
    const int32_t* __restrict__ tokens, const int* __restrict__ offsets,
    const int* __restrict__ sorted, const int4* __restrict__ present,
    const int* __restrict__ num_present, int64_t positions, int64_t channels) {
  const int lane = threadIdx.x & 31;
  const int64_t w = block * kBucketWarps + (threadIdx.x >> 5);
  if (w >= *num_present) return;
  const int4 bucket = present[w];  // {token id, first slot in sorted, count, -}
  const int64_t v = bucket.x;
  const int off = bucket.y;
  const int k = bucket.z;
  // Small bucket: lane l holds position p_l and its rank among the bucket's positions.
  int my_pos = INT_MAX, my_rank = 0;
  if (k <= 32) {
    if (lane < k) my_pos = sorted[off + lane];
    for (int j = 0; j < k; ++j) my_rank += __shfl_sync(0xffffffffu, my_pos, j) < my_pos ? 1 : 0;
  }
  const int64_t npacks = channels / W;
  for (int64_t c0 = 0; c0 < npacks; c0 += 32 * kPacks) {
    float acc[kPacks][W];
#pragma unroll
    for (int j = 0; j < kPacks; ++j)
#pragma unroll
      for (int i = 0; i < W; ++i) acc[j][i] = 0.0f;
    auto add_row = [&](int64_t pos) {
      const T* row = dout + pos * channels;
#pragma unroll
      for (int j = 0; j < kPacks; ++j) {
        const int64_t p = c0 + lane + 32 * j;
        if (p < npacks) {
          float x[W];
          load_f32<T, W>(row + p * W, x);
#pragma unroll
          for (int i = 0; i < W; ++i) acc[j][i] += x[i];
        }
      }
    };
    if (k <= 32) {
      for (int r = 0; r < k; ++r) {
        const int src = __ffs(__ballot_sync(0xffffffffu, my_rank == r && lane < k)) - 1;
        add_row(__shfl_sync(0xffffffffu, my_pos, src));
      }
    } else {
      for (int64_t i0 = 0; i0 < positions; i0 += 32) {
        const int64_t i = i0 + lane;
        unsigned hits = __ballot_sync(0xffffffffu, i < positions && tokens[i] == v);
        while (hits != 0u) {
          const int b = __ffs(hits) - 1;
          hits &= hits - 1;
          add_row(i0 + b);
        }
      }
    }
    float* dst = dwte + v * channels;
#pragma unroll
    for (int j = 0; j < kPacks; ++j) {
      const int64_t p = c0 + lane + 32 * j;
      if (p < npacks) {
        float cur[W];
        load_f32<float, W>(dst + p * W, cur);
#pragma unroll
        for (int i = 0; i < W; ++i) cur[i] += acc[j][i];
        store_f32<float, W>(dst + p * W, cur);
      }
    }
  }
}

// Note [Interleaved dwpe and bucket blocks] The bucket sums are latency-bound (a chain of
// dependent loads per warp) and the dwpe sums are bandwidth-bound, so both run in one launch with
// their blocks interleaved (even blocks dwpe, odd blocks buckets, then whichever has blocks left):
// the streaming dwpe blocks keep DRAM busy while bucket warps wait on their chains.
template <typename T, int W, int kPacks>
__global__ void __launch_bounds__(kThreads)
    embedding_backward_sums_kernel(float* __restrict__ dwte, float* __restrict__ dwpe,
                                   const T* __restrict__ dout, const int32_t* __restrict__ tokens,
                                   const int* __restrict__ offsets, const int* __restrict__ sorted,
                                   const int4* __restrict__ present,
                                   const int* __restrict__ num_present, int64_t batch,
                                   int64_t seq_len, int64_t channels, int64_t dwpe_blocks,
                                   int64_t bucket_blocks) {
  const int64_t i = blockIdx.x;
  const int64_t m = dwpe_blocks < bucket_blocks ? dwpe_blocks : bucket_blocks;
  bool is_dwpe;
  int64_t idx;
  if (i < 2 * m) {
    is_dwpe = (i % 2) == 0;
    idx = i / 2;
  } else {
    is_dwpe = dwpe_blocks > bucket_blocks;
    idx = m + (i - 2 * m);
  }
  if (is_dwpe) {
    embedding_dwpe_block<T, W>(idx, dwpe, dout, batch, seq_len, channels);
  } else {
    embedding_dwte_block<T, W, kPacks>(idx, dwte, dout, tokens, offsets, sorted, present,
                                       num_present, batch * seq_len, channels);
  }
}

// ---------------------------------------------------------------- dispatch
struct WorkspaceLayout {
  std::size_t counts, offsets, cursor, sorted, present, num_present, tiles, total;  // bytes
};

std::size_t round16(std::size_t b) { return (b + 15) / 16 * 16; }

WorkspaceLayout layout_for(int64_t positions, int64_t vocab) {
  WorkspaceLayout l;
  l.counts = 0;
  l.offsets = round16(static_cast<std::size_t>(vocab) * sizeof(int));
  l.cursor = l.offsets + round16(static_cast<std::size_t>(vocab + 1) * sizeof(int));
  l.sorted = l.cursor + round16(static_cast<std::size_t>(vocab) * sizeof(int));
  l.present = l.sorted + round16(static_cast<std::size_t>(positions) * sizeof(int));
  l.num_present = l.present + round16(static_cast<std::size_t>(std::min(positions, vocab)) * sizeof(int4));
  l.tiles = l.num_present + 16;
  l.total = l.tiles + round16(static_cast<std::size_t>((vocab + kScanThreads - 1) / kScanThreads) *
                              sizeof(int2));
  return l;
}

bool aligned_to(const void* p, std::size_t a) {
  return (reinterpret_cast<std::uintptr_t>(p) % a) == 0;
}

unsigned blocks_for(int64_t n, int per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

template <typename T, int W>
void forward_w(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t positions,
               int64_t seq_len, int64_t channels, int64_t vocab, int* error_flag,
               cudaStream_t s) {
  const int64_t packs = channels / W;
  const int threads = static_cast<int>(std::min<int64_t>(kThreads, (packs + 31) / 32 * 32));
  embedding_fwd_kernel<T, W><<<static_cast<unsigned>(positions), threads, 0, s>>>(
      out, tokens, wte, wpe, seq_len, channels, vocab, error_flag);
}

template <typename T, int W>
void backward_w(float* dwte, float* dwpe, const T* dout, const int32_t* tokens, int64_t batch,
                int64_t seq_len, int64_t channels, const int* offsets, const int* sorted,
                const int4* present, const int* num_present, cudaStream_t s) {
  const int64_t positions = batch * seq_len;
  constexpr int kPacks = W == 1 ? 16 : 32 / W;
  static_assert(kBucketWarps * 32 == kThreads, "one block shape for both halves");
  const int64_t dwpe_blocks = dwpe != nullptr ? (seq_len * channels / W + kThreads - 1) / kThreads : 0;
  // At most min(positions, vocab) ids are present; warps past *num_present exit at once.
  const int64_t bucket_blocks = (positions + kBucketWarps - 1) / kBucketWarps;
  embedding_backward_sums_kernel<T, W, kPacks>
      <<<static_cast<unsigned>(dwpe_blocks + bucket_blocks), kThreads, 0, s>>>(
          dwte, dwpe, dout, tokens, offsets, sorted, present, num_present, batch, seq_len,
          channels, dwpe_blocks, bucket_blocks);
}

Status check_sizes(const char* op, int64_t batch, int64_t seq_len, int64_t channels,
                   int64_t vocab, Dtype dtype) {
  BLUBLAS_CHECK_ARG(dtype == Dtype::kF32 || dtype == Dtype::kBF16, op, ": dtype ",
                    dtype_name(dtype), " not supported (f32, bf16)");
  BLUBLAS_CHECK_ARG(batch >= 0 && seq_len >= 0 && channels >= 1 && vocab >= 1, op,
                    ": batch=", batch, " seq_len=", seq_len, " channels=", channels,
                    " vocab=", vocab, " (need batch, seq_len >= 0, channels, vocab >= 1)");
  BLUBLAS_CHECK_ARG(vocab < INT_MAX && batch * seq_len < INT_MAX &&
                        batch * seq_len <= (int64_t{1} << 40) / channels,
                    op, ": batch=", batch, " seq_len=", seq_len, " channels=", channels,
                    " vocab=", vocab, " too large");
  return Status::success();
}

}  // namespace

Status embedding_forward(void* out, const int32_t* tokens, const void* wte, const void* wpe,
                         int64_t batch, int64_t seq_len, int64_t channels, int64_t vocab,
                         int* error_flag, Dtype dtype, cudaStream_t stream) {
  BLUBLAS_RETURN_IF_ERROR(check_sizes("embedding_forward", batch, seq_len, channels, vocab, dtype));
  if (batch * seq_len == 0) return Status::success();
  BLUBLAS_CHECK_ARG(out && tokens && wte && error_flag,
                    "embedding_forward: out, tokens, wte and error_flag must not be null "
                    "(wpe may be)");
  const int64_t positions = batch * seq_len;
  if (dtype == Dtype::kF32) {
    using T = float;
    constexpr int W = kPack16<T>;
    auto* o = static_cast<T*>(out);
    auto* e = static_cast<const T*>(wte);
    auto* p = static_cast<const T*>(wpe);
    if (channels % W == 0 && aligned_to(out, 16) && aligned_to(wte, 16) &&
        (wpe == nullptr || aligned_to(wpe, 16))) {
      forward_w<T, W>(o, tokens, e, p, positions, seq_len, channels, vocab, error_flag, stream);
    } else {
      forward_w<T, 1>(o, tokens, e, p, positions, seq_len, channels, vocab, error_flag, stream);
    }
  } else {
    using T = __nv_bfloat16;
    constexpr int W = kPack16<T>;
    auto* o = static_cast<T*>(out);
    auto* e = static_cast<const T*>(wte);
    auto* p = static_cast<const T*>(wpe);
    if (channels % W == 0 && aligned_to(out, 16) && aligned_to(wte, 16) &&
        (wpe == nullptr || aligned_to(wpe, 16))) {
      forward_w<T, W>(o, tokens, e, p, positions, seq_len, channels, vocab, error_flag, stream);
    } else {
      forward_w<T, 1>(o, tokens, e, p, positions, seq_len, channels, vocab, error_flag, stream);
    }
  }
  BLUBLAS_KERNEL_LAUNCH_CHECK("embedding_forward");
  return Status::success();
}

Status embedding_backward_workspace_size(int64_t batch, int64_t seq_len, int64_t vocab,
                                         std::size_t* bytes) {
  BLUBLAS_CHECK_ARG(bytes != nullptr, "embedding_backward_workspace_size: bytes is null");
  BLUBLAS_CHECK_ARG(batch >= 0 && seq_len >= 0 && vocab >= 1,
                    "embedding_backward_workspace_size: batch=", batch, " seq_len=", seq_len,
                    " vocab=", vocab);
  *bytes = layout_for(batch * seq_len, vocab).total;
  return Status::success();
}

namespace detail {

Status embedding_backward_variant(int variant, float* dwte, float* dwpe, const void* dout,
                                  const int32_t* tokens, int64_t batch, int64_t seq_len,
                                  int64_t channels, int64_t vocab, int* error_flag, Dtype dtype,
                                  void* workspace, std::size_t workspace_bytes,
                                  cudaStream_t stream) {
  BLUBLAS_RETURN_IF_ERROR(
      check_sizes("embedding_backward", batch, seq_len, channels, vocab, dtype));
  BLUBLAS_CHECK_ARG(variant == 0 || variant == 1, "embedding_backward: unknown variant ",
                    variant, " (0, 1)");
  const int64_t positions = batch * seq_len;
  const WorkspaceLayout l = layout_for(positions, vocab);
  BLUBLAS_CHECK(workspace_bytes >= l.total, StatusCode::kWorkspaceTooSmall,
                "embedding_backward: workspace of ", workspace_bytes, " bytes < ", l.total,
                " needed for batch=", batch, " seq_len=", seq_len, " vocab=", vocab);
  if (positions == 0) return Status::success();
  BLUBLAS_CHECK_ARG(dwte && dout && tokens && error_flag && workspace,
                    "embedding_backward: dwte, dout, tokens, error_flag and workspace must not be "
                    "null (dwpe may be)");
  BLUBLAS_CHECK(aligned_to(workspace, 16), StatusCode::kMisaligned,
                "embedding_backward: workspace must be 16-byte aligned");
  char* ws = static_cast<char*>(workspace);
  int* counts = reinterpret_cast<int*>(ws + l.counts);
  int* offsets = reinterpret_cast<int*>(ws + l.offsets);
  int* cursor = reinterpret_cast<int*>(ws + l.cursor);
  int* sorted = reinterpret_cast<int*>(ws + l.sorted);
  int4* present = reinterpret_cast<int4*>(ws + l.present);
  int* num_present = reinterpret_cast<int*>(ws + l.num_present);
  BLUBLAS_CUDA_CHECK(cudaMemsetAsync(counts, 0, static_cast<std::size_t>(vocab) * sizeof(int),
                                     stream));
  embedding_hist_kernel<<<blocks_for(positions, kThreads), kThreads, 0, stream>>>(
      counts, error_flag, tokens, positions, vocab);
  int2* tiles = reinterpret_cast<int2*>(ws + l.tiles);
  const int64_t ntiles = (vocab + kScanThreads - 1) / kScanThreads;
  embedding_tile_sums_kernel<<<static_cast<unsigned>(ntiles), kScanThreads, 0, stream>>>(
      tiles, counts, vocab);
  embedding_tile_prefix_kernel<<<1, kScanThreads, 0, stream>>>(tiles, ntiles, offsets,
                                                               num_present, vocab);
  embedding_tile_apply_kernel<<<static_cast<unsigned>(ntiles), kScanThreads, 0, stream>>>(
      offsets, cursor, present, tiles, counts, vocab);
  embedding_scatter_kernel<<<blocks_for(positions, kThreads), kThreads, 0, stream>>>(
      sorted, cursor, tokens, positions, vocab);
  BLUBLAS_KERNEL_LAUNCH_CHECK("embedding_backward (bucketing)");
  if (dtype == Dtype::kF32) {
    using T = float;
    constexpr int W = kPack16<T>;
    auto* d = static_cast<const T*>(dout);
    if (channels % W == 0 && aligned_to(dout, 16) && aligned_to(dwte, 16) &&
        (dwpe == nullptr || aligned_to(dwpe, 16))) {
      backward_w<T, W>(dwte, dwpe, d, tokens, batch, seq_len, channels, offsets, sorted, present,
                       num_present, stream);
    } else {
      backward_w<T, 1>(dwte, dwpe, d, tokens, batch, seq_len, channels, offsets, sorted, present,
                       num_present, stream);
    }
  } else {
    using T = __nv_bfloat16;
    constexpr int W = kPack16<T>;
    auto* d = static_cast<const T*>(dout);
    if (channels % W == 0 && aligned_to(dout, 16) && aligned_to(dwte, 32) &&
        (dwpe == nullptr || aligned_to(dwpe, 32))) {
      backward_w<T, W>(dwte, dwpe, d, tokens, batch, seq_len, channels, offsets, sorted, present,
                       num_present, stream);
    } else {
      backward_w<T, 1>(dwte, dwpe, d, tokens, batch, seq_len, channels, offsets, sorted, present,
                       num_present, stream);
    }
  }
  BLUBLAS_KERNEL_LAUNCH_CHECK("embedding_backward (sums)");
  return Status::success();
}

}  // namespace detail

Status embedding_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens,
                          int64_t batch, int64_t seq_len, int64_t channels, int64_t vocab,
                          int* error_flag, Dtype dtype, void* workspace,
                          std::size_t workspace_bytes, cudaStream_t stream) {
  return detail::embedding_backward_variant(0, dwte, dwpe, dout, tokens, batch, seq_len,
                                            channels, vocab, error_flag, dtype, workspace,
                                            workspace_bytes, stream);
}

}  // namespace blublas
