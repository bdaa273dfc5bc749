// embedding.cu: token + position embedding forward and the deterministic backward of
// Note [Deterministic embedding backward] (blublas/embedding.h); the bucketing kernels are in
// embedding_bucketing.cuh, the kernel variants for the profiler in embedding_variants.h.
//
// Backward = bucketing of positions by token id, then the sums.
// Bucketing: an integer histogram (atomics on ints are exact, hence deterministic), an exclusive
// scan (which also lists the ids present, as {id, first slot, count}, and the "big" ids with more
// than 32 positions), and a scatter of positions into their bucket (the order inside a bucket is
// whatever the atomics gave; the sums re-rank it). Either 6 small launches over global memory, or
// (vocab small enough) one block doing all of it in shared memory.
// Sums: each bucket of <= 32 positions is summed by one warp in increasing position order (each
// lane ranks its position by counting smaller ones); big buckets walk a position bitmap (Note
// [Big-bucket bitmaps] in embedding_bucketing.cuh) or, without one, re-scan the token list.
//
// Note [Chunked embedding sums] dwpe (a column sum over the batch) and the buckets both need
// every dout element; read naively that is two DRAM reads of dout. Instead the columns are cut
// into chunks of 32 lanes x 16-byte packs (f32: 128 columns = 8 MB of dout at GPT-2 size, far
// below L2), and the grid is ordered chunk by chunk: dwpe of chunk c + lead is summed while the
// buckets of chunk c are, so the buckets read chunk c's dout from L2 right after dwpe streamed it
// from DRAM. Big buckets are summed over whole rows by extra blocks at the end of the grid.
// The sums kernel is launched dependent on the bucketing (Note [Programmatic dependent launch]
// in layernorm_common.cuh): its dwpe blocks start at once, its bucket blocks wait for the buckets.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <utility>

#include "blublas/check.h"
#include "blublas/device_info.h"
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

// Constants, PDL helpers and the bucketing kernels (device code of this file, kept apart).
#include "embedding/embedding_bucketing.cuh"

constexpr int kDefaultVariant = 4;  // embedding_variants.h

// Launches `kernel`, with the programmatic-serialization attribute when `pdl`.
template <typename... KArgs, typename... Args>
cudaError_t launch(bool pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block, std::size_t smem,
                   cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

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

// ---------------------------------------------------------------- sums, session-1 (variant 1)
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

// Lane l holds position p_l of a bucket of k <= 32 positions and its rank among them; returns
// the position of rank r (all lanes).
struct SmallBucket {
  int my_pos = INT_MAX;
  int my_rank = 0;
  __device__ __forceinline__ void load(const int* __restrict__ sorted, int off, int k, int lane) {
    if (lane < k) my_pos = sorted[off + lane];
    for (int j = 0; j < k; ++j) my_rank += __shfl_sync(0xffffffffu, my_pos, j) < my_pos ? 1 : 0;
  }
  __device__ __forceinline__ int position(int r, int k, int lane) const {
    const int src = __ffs(__ballot_sync(0xffffffffu, my_rank == r && lane < k)) - 1;
    return __shfl_sync(0xffffffffu, my_pos, src);
  }
};

// One warp sums bucket {v, off, k} over whole rows (columns in chunks of 32 * kPacks packs),
// in increasing position order: ranked in registers (k <= 32), walking its position bitmap row
// (Note [Big-bucket bitmaps]; `bits` non-null) or by re-scanning the tokens.
template <typename T, int W, int kPacks>
__device__ __forceinline__ void embedding_bucket_rows(int4 bucket, float* __restrict__ dwte,
                                                      const T* __restrict__ dout,
                                                      const int32_t* __restrict__ tokens,
                                                      const int* __restrict__ sorted,
                                                      const unsigned* __restrict__ bits,
                                                      int64_t positions, int64_t channels) {
  const int lane = threadIdx.x & 31;
  const int64_t v = bucket.x;
  const int off = bucket.y;
  const int k = bucket.z;
  SmallBucket sb;
  if (k <= kSmallBucket) sb.load(sorted, off, k, lane);
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
    if (k <= kSmallBucket) {
      for (int r = 0; r < k; ++r) add_row(sb.position(r, k, lane));
    } else if (bits != nullptr) {
      const int64_t words = (positions + 31) / 32;
      for (int64_t w0 = 0; w0 < words; w0 += 32) {
        const unsigned word = w0 + lane < words ? bits[w0 + lane] : 0u;
        unsigned nz = __ballot_sync(0xffffffffu, word != 0u);
        while (nz != 0u) {
          const int l = __ffs(nz) - 1;
          nz &= nz - 1;
          unsigned b = __shfl_sync(0xffffffffu, word, l);
          while (b != 0u) {
            const int j = __ffs(b) - 1;
            b &= b - 1;
            add_row((w0 + l) * 32 + j);
          }
        }
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

// Even blocks dwpe, odd blocks buckets (one warp per present id), then whichever has blocks
// left: the streaming dwpe blocks keep DRAM busy while bucket warps wait on their load chains.
template <typename T, int W, int kPacks>
__global__ void __launch_bounds__(kThreads)
    embedding_backward_sums_kernel(float* __restrict__ dwte, float* __restrict__ dwpe,
                                   const T* __restrict__ dout, const int32_t* __restrict__ tokens,
                                   const int* __restrict__ sorted,
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
    const int64_t w = idx * kBucketWarps + (threadIdx.x >> 5);
    if (w >= *num_present) return;
    embedding_bucket_rows<T, W, kPacks>(present[w], dwte, dout, tokens, sorted, nullptr,
                                        batch * seq_len, channels);
  }
}

// ---------------------------------------------------------------- sums, chunked (Note above)
// Grid order: D(0) .. D(L-1), then for each chunk c: B(c), D(c + L); then the big-bucket blocks.
// D(c): dwpe of chunk c, nd blocks; B(c): the small buckets of chunk c, nb blocks.
struct ChunkGrid {
  int64_t nchunks, nd, nb, lead;
};

// dwpe of chunk c: thread -> (t, pack); kCP packs per lane per chunk, 32 * kCP packs per t.
template <typename T, int W, int kCP>
__device__ __forceinline__ void chunk_dwpe_block(int64_t c, int64_t idx, float* __restrict__ dwpe,
                                                 const T* __restrict__ dout, int64_t batch,
                                                 int64_t seq_len, int64_t channels) {
  constexpr int kPacksPerT = 32 * kCP;
  constexpr int kTPerBlock = kThreads / kPacksPerT;
  const int64_t t = idx * kTPerBlock + threadIdx.x / kPacksPerT;
  const int64_t p = c * kPacksPerT + threadIdx.x % kPacksPerT;
  if (t >= seq_len || p >= channels / W) return;
  const int64_t per_b = seq_len * channels;
  const int64_t e = t * channels + p * W;
  float s[W];
#pragma unroll
  for (int i = 0; i < W; ++i) s[i] = 0.0f;
  int64_t b = 0;
  for (; b + 4 <= batch; b += 4) {  // 4 loads in flight, added in b order
    float v[4][W];
#pragma unroll
    for (int j = 0; j < 4; ++j) load_f32<T, W>(dout + (b + j) * per_b + e, v[j]);
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int i = 0; i < W; ++i) s[i] += v[j][i];
  }
  for (; b < batch; ++b) {
    float v[W];
    load_f32<T, W>(dout + b * per_b + e, v);
#pragma unroll
    for (int i = 0; i < W; ++i) s[i] += v[i];
  }
  float acc[W];
  load_f32<float, W>(dwpe + e, acc);
#pragma unroll
  for (int i = 0; i < W; ++i) acc[i] += s[i];
  store_f32<float, W>(dwpe + e, acc);
}

// Small buckets of chunk c: one warp per kIds consecutive present ids (big ids are skipped: they
// are summed over whole rows). With kIds = 2 every step of the load chain (bucket, positions,
// dwte row, dout rows) has two independent loads in flight.
template <typename T, int W, int kCP, int kIds>
__device__ __forceinline__ void chunk_bucket_block(int64_t c, int64_t idx,
                                                   float* __restrict__ dwte,
                                                   const T* __restrict__ dout,
                                                   const int* __restrict__ sorted,
                                                   const int4* __restrict__ present,
                                                   const int* __restrict__ num_present,
                                                   int64_t channels) {
  const int lane = threadIdx.x & 31;
  const int64_t w0 = (idx * kBucketWarps + (threadIdx.x >> 5)) * kIds;
  const int64_t np = *num_present;
  if (w0 >= np) return;
  int4 bucket[kIds];
  int k[kIds];
#pragma unroll
  for (int q = 0; q < kIds; ++q) {
    bucket[q] = w0 + q < np ? present[w0 + q] : make_int4(0, 0, 0, 0);
    k[q] = bucket[q].z <= kSmallBucket ? bucket[q].z : 0;
  }
  SmallBucket sb[kIds];
#pragma unroll
  for (int q = 0; q < kIds; ++q) {
    if (lane < k[q]) sb[q].my_pos = sorted[bucket[q].y + lane];
  }
#pragma unroll
  for (int q = 0; q < kIds; ++q) {
    for (int j = 0; j < k[q]; ++j) {
      sb[q].my_rank += __shfl_sync(0xffffffffu, sb[q].my_pos, j) < sb[q].my_pos ? 1 : 0;
    }
  }
  const int64_t npacks = channels / W;
  float acc[kIds][kCP][W], cur[kIds][kCP][W];
#pragma unroll
  for (int q = 0; q < kIds; ++q) {
#pragma unroll
    for (int j = 0; j < kCP; ++j) {
      const int64_t p = c * 32 * kCP + lane + 32 * j;
#pragma unroll
      for (int i = 0; i < W; ++i) acc[q][j][i] = 0.0f;
      if (k[q] > 0 && p < npacks) {
        load_f32<float, W>(dwte + static_cast<int64_t>(bucket[q].x) * channels + p * W, cur[q][j]);
      }
    }
  }
  int kmax = 0;
#pragma unroll
  for (int q = 0; q < kIds; ++q) kmax = max(kmax, k[q]);
  for (int r = 0; r < kmax; ++r) {
    float x[kIds][kCP][W];
#pragma unroll
    for (int q = 0; q < kIds; ++q) {
      if (r < k[q]) {
        const T* row = dout + static_cast<int64_t>(sb[q].position(r, k[q], lane)) * channels;
#pragma unroll
        for (int j = 0; j < kCP; ++j) {
          const int64_t p = c * 32 * kCP + lane + 32 * j;
          if (p < npacks) load_f32<T, W>(row + p * W, x[q][j]);
        }
      }
    }
#pragma unroll
    for (int q = 0; q < kIds; ++q) {
      if (r < k[q]) {
#pragma unroll
        for (int j = 0; j < kCP; ++j) {
          const int64_t p = c * 32 * kCP + lane + 32 * j;
          if (p < npacks) {
#pragma unroll
            for (int i = 0; i < W; ++i) acc[q][j][i] += x[q][j][i];
          }
        }
      }
    }
  }
#pragma unroll
  for (int q = 0; q < kIds; ++q) {
    if (k[q] == 0) continue;
    float* dst = dwte + static_cast<int64_t>(bucket[q].x) * channels;
#pragma unroll
    for (int j = 0; j < kCP; ++j) {
      const int64_t p = c * 32 * kCP + lane + 32 * j;
      if (p < npacks) {
#pragma unroll
        for (int i = 0; i < W; ++i) cur[q][j][i] += acc[q][j][i];
        store_f32<float, W>(dst + p * W, cur[q][j]);
      }
    }
  }
}

template <typename T, int W, int kCP, int kIds>
__global__ void __launch_bounds__(kThreads, W * kCP * kIds <= 8 ? 4 : 2)
    embedding_chunked_sums_kernel(float* __restrict__ dwte, float* __restrict__ dwpe,
                                  const T* __restrict__ dout, const int32_t* __restrict__ tokens,
                                  const int* __restrict__ sorted,
                                  const int4* __restrict__ present,
                                  const int* __restrict__ num_present,
                                  const int* __restrict__ big, const int* __restrict__ big_count,
                                  const unsigned* __restrict__ bitmap, ChunkGrid g, int64_t batch,
                                  int64_t seq_len, int64_t channels) {
  int64_t i = blockIdx.x;
  const int64_t lead = min(g.lead, g.nchunks);
  // D(0) .. D(lead - 1)
  if (i < lead * g.nd) {
    chunk_dwpe_block<T, W, kCP>(i / g.nd, i % g.nd, dwpe, dout, batch, seq_len, channels);
    return;
  }
  i -= lead * g.nd;
  // B(c), D(c + lead) for c < nchunks - lead; then B(c) alone.
  const int64_t paired = g.nchunks - lead;
  if (i < paired * (g.nb + g.nd)) {
    const int64_t c = i / (g.nb + g.nd), r = i % (g.nb + g.nd);
    if (r >= g.nb) {
      chunk_dwpe_block<T, W, kCP>(c + lead, r - g.nb, dwpe, dout, batch, seq_len, channels);
      return;
    }
    pdl_wait();
    chunk_bucket_block<T, W, kCP, kIds>(c, r, dwte, dout, sorted, present, num_present, channels);
    return;
  }
  i -= paired * (g.nb + g.nd);
  pdl_wait();
  if (i < lead * g.nb) {
    chunk_bucket_block<T, W, kCP, kIds>(paired + i / g.nb, i % g.nb, dwte, dout, sorted, present,
                                  num_present, channels);
    return;
  }
  i -= lead * g.nb;
  // Big buckets, whole rows.
  const int64_t w = i * kBucketWarps + (threadIdx.x >> 5);
  if (w >= *big_count) return;
  constexpr int kRowPacks = W == 1 ? 8 : 8 / W;  // (64 registers: 4 blocks of 256 per SM)
  const int64_t positions = batch * seq_len;
  const unsigned* bits = bitmap != nullptr ? bitmap + w * ((positions + 31) / 32) : nullptr;
  embedding_bucket_rows<T, W, kRowPacks>(present[big[w]], dwte, dout, tokens, sorted, bits,
                                         positions, channels);
}

// ---------------------------------------------------------------- dispatch
struct WorkspaceLayout {
  std::size_t counts, offsets, cursor, sorted, present, num_present, tiles, big, big_count,
      bitmap, total;  // bytes (bitmap: 0 bytes when positions > kBitmapMaxPositions)
};

std::size_t round16(std::size_t b) { return (b + 15) / 16 * 16; }

int64_t max_big(int64_t positions) { return positions / (kSmallBucket + 1) + 1; }

WorkspaceLayout layout_for(int64_t positions, int64_t vocab) {
  WorkspaceLayout l;
  l.counts = 0;
  l.offsets = round16(static_cast<std::size_t>(vocab) * sizeof(int));
  l.cursor = l.offsets + round16(static_cast<std::size_t>(vocab + 1) * sizeof(int));
  l.sorted = l.cursor + round16(static_cast<std::size_t>(vocab) * sizeof(int));
  l.present = l.sorted + round16(static_cast<std::size_t>(positions) * sizeof(int));
  l.num_present = l.present +
                  round16(static_cast<std::size_t>(std::min(positions, vocab)) * sizeof(int4));
  l.tiles = l.num_present + 16;
  l.big = l.tiles + round16(static_cast<std::size_t>((vocab + kScanThreads - 1) / kScanThreads) *
                            sizeof(int2));
  l.big_count = l.big + round16(static_cast<std::size_t>(max_big(positions)) * sizeof(int));
  l.bitmap = l.big_count + 16;
  const std::size_t bitmap_bytes =
      positions <= kBitmapMaxPositions
          ? static_cast<std::size_t>(max_big(positions)) *
                static_cast<std::size_t>((positions + 31) / 32) * sizeof(unsigned)
          : 0;
  l.total = l.bitmap + round16(bitmap_bytes);
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

struct Buckets {
  const int* sorted;
  const int4* present;
  const int* num_present;
  const int* big;
  const int* big_count;
  const unsigned* bitmap;  // null: big buckets re-scan the tokens
};

struct BwdArgs {
  float* dwte;
  float* dwpe;
  const int32_t* tokens;
  int64_t batch, seq_len, channels;
  cudaStream_t stream;
};

template <typename T, int W>
Status sums_session1(const T* dout, const BwdArgs& a, const Buckets& bk) {
  const int64_t positions = a.batch * a.seq_len;
  constexpr int kPacks = W == 1 ? 16 : 32 / W;
  static_assert(kBucketWarps * 32 == kThreads, "one block shape for both halves");
  const int64_t dwpe_blocks =
      a.dwpe != nullptr ? (a.seq_len * a.channels / W + kThreads - 1) / kThreads : 0;
  // At most min(positions, vocab) ids are present; warps past *num_present exit at once.
  const int64_t bucket_blocks = (positions + kBucketWarps - 1) / kBucketWarps;
  embedding_backward_sums_kernel<T, W, kPacks>
      <<<static_cast<unsigned>(dwpe_blocks + bucket_blocks), kThreads, 0, a.stream>>>(
          a.dwte, a.dwpe, dout, a.tokens, bk.sorted, bk.present, bk.num_present, a.batch,
          a.seq_len, a.channels, dwpe_blocks, bucket_blocks);
  BLUBLAS_KERNEL_LAUNCH_CHECK("embedding_backward (sums)");
  return Status::success();
}

template <typename T, int W, int kCP, int kIds = 1>
Status sums_chunked(const T* dout, const BwdArgs& a, const Buckets& bk, int64_t max_present,
                    int lead, bool pdl) {
  const int64_t positions = a.batch * a.seq_len;
  constexpr int kPacksPerChunk = 32 * kCP;
  const int64_t npacks = a.channels / W;
  ChunkGrid g;
  g.nchunks = (npacks + kPacksPerChunk - 1) / kPacksPerChunk;
  g.nd = a.dwpe != nullptr ? (a.seq_len + (kThreads / kPacksPerChunk) - 1) /
                                 (kThreads / kPacksPerChunk)
                           : 0;
  g.nb = (max_present + kBucketWarps * kIds - 1) / (kBucketWarps * kIds);
  g.lead = lead;
  const int64_t big_blocks = (max_big(positions) + kBucketWarps - 1) / kBucketWarps;
  const int64_t blocks = g.nchunks * (g.nd + g.nb) + big_blocks;
  BLUBLAS_CUDA_CHECK(launch(pdl, embedding_chunked_sums_kernel<T, W, kCP, kIds>,
                            dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, a.stream,
                            a.dwte, a.dwpe, dout, a.tokens, bk.sorted, bk.present, bk.num_present,
                            bk.big, bk.big_count, bk.bitmap, g, a.batch, a.seq_len,
                            a.channels));
  BLUBLAS_KERNEL_LAUNCH_CHECK("embedding_backward (chunked sums)");
  return Status::success();
}

template <typename T, int W>
Status sums_typed(int variant, const T* dout, const BwdArgs& a, const Buckets& bk,
                  int64_t max_present, bool pdl) {
  switch (variant) {
    case 1:
      return sums_session1<T, W>(dout, a, bk);
    case 2:
    case 4:
    case 7:
      return sums_chunked<T, W, (W == 1 ? 4 : 1)>(dout, a, bk, max_present, 1, pdl);
    case 3:
    case 5:
      return sums_chunked<T, W, (W == 1 ? 4 : 1)>(dout, a, bk, max_present, 2, pdl);
    case 6:
    case 8:
      return sums_chunked<T, W, (W == 1 ? 4 : 2)>(dout, a, bk, max_present, 1, pdl);
    case 9:
      return sums_chunked<T, W, (W == 1 ? 4 : 1), 2>(dout, a, bk, max_present, 1, pdl);
    default:
      return Status(StatusCode::kInvalidArgument,
                    detail::concat("embedding_backward: unknown variant ", variant));
  }
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
  BLUBLAS_CHECK_ARG(variant >= 0 && variant <= 9, "embedding_backward: unknown variant ",
                    variant);
  if (variant == 0) variant = kDefaultVariant;
  DeviceInfo info;
  BLUBLAS_RETURN_IF_ERROR(current_device_info(&info));
  const bool pdl = info.sm_major >= 9 && variant >= 2;
  char* ws = static_cast<char*>(workspace);
  int* counts = reinterpret_cast<int*>(ws + l.counts);
  int* offsets = reinterpret_cast<int*>(ws + l.offsets);
  int* cursor = reinterpret_cast<int*>(ws + l.cursor);
  int* sorted = reinterpret_cast<int*>(ws + l.sorted);
  int4* present = reinterpret_cast<int4*>(ws + l.present);
  int* num_present = reinterpret_cast<int*>(ws + l.num_present);
  int2* tiles = reinterpret_cast<int2*>(ws + l.tiles);
  int* big = reinterpret_cast<int*>(ws + l.big);
  int* big_count = reinterpret_cast<int*>(ws + l.big_count);
  unsigned* bitmap = nullptr;  // Note [Big-bucket bitmaps]: one-block bucketing only
  // One-block bucketing when the per-id counts fit in shared memory (variants 4-6).
  const std::size_t smem_bucket = static_cast<std::size_t>(vocab) * sizeof(int);
  const bool one_block =
      variant >= 4 && positions <= kOneBlockMaxPositions &&
      smem_bucket + 1024 <= static_cast<std::size_t>(info.max_smem_per_block_optin);
  // The first launch is dependent on the caller's previous kernel only in variants 7, 8 (it
  // waits before anything else); the rest of the chain is dependent when pdl.
  const bool pdl_entry = pdl && (variant == 7 || variant == 8);
  if (one_block) {
    if (positions <= kBitmapMaxPositions) bitmap = reinterpret_cast<unsigned*>(ws + l.bitmap);
    BLUBLAS_CUDA_CHECK(cudaFuncSetAttribute(embedding_bucket_smem_kernel,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem_bucket)));
    BLUBLAS_CUDA_CHECK(launch(pdl_entry, embedding_bucket_smem_kernel, dim3(1), dim3(kScanThreads),
                              smem_bucket, stream, sorted, present, num_present, big, big_count,
                              bitmap, error_flag, tokens, static_cast<int>(positions),
                              static_cast<int>(vocab)));
    BLUBLAS_KERNEL_LAUNCH_CHECK("embedding_backward (bucketing)");
  } else {
    const int64_t ntiles = (vocab + kScanThreads - 1) / kScanThreads;
    BLUBLAS_CUDA_CHECK(launch(pdl_entry, embedding_zero_kernel, dim3(blocks_for(vocab, kThreads)),
                              dim3(kThreads), 0, stream, counts, big_count, vocab));
    BLUBLAS_CUDA_CHECK(launch(pdl, embedding_hist_kernel, dim3(blocks_for(positions, kThreads)),
                              dim3(kThreads), 0, stream, counts, error_flag, tokens, positions,
                              vocab));
    BLUBLAS_CUDA_CHECK(launch(pdl, embedding_tile_sums_kernel, dim3(static_cast<unsigned>(ntiles)),
                              dim3(kScanThreads), 0, stream, tiles,
                              static_cast<const int*>(counts), vocab));
    BLUBLAS_CUDA_CHECK(launch(pdl, embedding_tile_prefix_kernel, dim3(1), dim3(kScanThreads), 0,
                              stream, tiles, ntiles, offsets, num_present, vocab));
    BLUBLAS_CUDA_CHECK(launch(pdl, embedding_tile_apply_kernel,
                              dim3(static_cast<unsigned>(ntiles)), dim3(kScanThreads), 0, stream,
                              offsets, cursor, present, big, big_count,
                              static_cast<const int2*>(tiles), static_cast<const int*>(counts),
                              vocab));
    BLUBLAS_CUDA_CHECK(launch(pdl, embedding_scatter_kernel, dim3(blocks_for(positions, kThreads)),
                              dim3(kThreads), 0, stream, sorted, cursor, tokens, positions,
                              vocab));
    BLUBLAS_KERNEL_LAUNCH_CHECK("embedding_backward (bucketing)");
  }
  const Buckets bk{sorted, present, num_present, big, big_count, bitmap};
  const BwdArgs a{dwte, dwpe, tokens, batch, seq_len, channels, stream};
  const int64_t max_present = std::min(positions, vocab);
  if (dtype == Dtype::kF32) {
    using T = float;
    constexpr int W = kPack16<T>;
    auto* d = static_cast<const T*>(dout);
    if (channels % W == 0 && aligned_to(dout, 16) && aligned_to(dwte, 16) &&
        (dwpe == nullptr || aligned_to(dwpe, 16))) {
      return sums_typed<T, W>(variant, d, a, bk, max_present, pdl);
    }
    return sums_typed<T, 1>(variant, d, a, bk, max_present, pdl);
  }
  using T = __nv_bfloat16;
  constexpr int W = kPack16<T>;
  auto* d = static_cast<const T*>(dout);
  if (channels % W == 0 && aligned_to(dout, 16) && aligned_to(dwte, 32) &&
      (dwpe == nullptr || aligned_to(dwpe, 32))) {
    return sums_typed<T, W>(variant, d, a, bk, max_present, pdl);
  }
  return sums_typed<T, 1>(variant, d, a, bk, max_present, pdl);
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
