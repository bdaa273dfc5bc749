// cross_entropy.cu: the fused classifier (softmax + cross-entropy loss + dlogits) for f32 / bf16
// logits, see blublas/cross_entropy.h.
//
// Note [Fused classifier passes] Three launches: (1) one block counts the non-ignored targets
// (an integer: deterministic) and flags bad ones; (2) the row kernel keeps its slice of each row
// in registers (the row-resident layout of the softmax, Note [Softmax row residency]), gets the
// row's (max, sum) through the block / cluster combine, writes the row loss from the thread that
// holds the target logit (read from registers, so an in-place dlogits never races with it) and
// writes dlogits = (p - onehot) * dloss / count from the same registers: logits are read once and
// dlogits written once; (3) one block adds the row losses in a fixed order for the mean. Rows too
// long for residency use an online-normalizer kernel that reads the row twice. On sm_90+, rows of
// 32 KiB and more take the streamed row kernel instead of (1) and (2) (Note [Row streaming
// through a shared-memory ring] in softmax/row_stream.cuh): every CTA counts the targets itself,
// the row sits in shared memory between the (max, sum) pass and the dlogits pass, the target
// logit is read from there, and the next rows' loads are in flight meanwhile.
#include <cuda_bf16.h>

#include <cstdint>

#include "blublas/check.h"
#include "blublas/cross_entropy.h"
#include "elementwise/vector_io.cuh"
#include "reduce/reduce_primitives.cuh"
#include "softmax/row_resident.cuh"
#include "softmax/row_stream.cuh"

namespace blublas {
namespace {

using namespace fused;  // NOLINT: the kernel helpers of this family

constexpr int kCountThreads = 1024;

// Workspace layout: [0] int count (padded to 16 bytes), then f32 losses[rows] when the caller
// passes no losses buffer.
constexpr std::size_t kCountBytes = 16;

__device__ __forceinline__ bool target_valid(int t, int64_t vocab, int ignore_index) {
  return t != ignore_index && t >= 0 && t < vocab;
}

// Note [Cross-entropy rows]: what cross_entropy_rows adds to the fused kernels' outputs. With
// `unscaled` a valid row's gradient scale is dloss itself (not dloss / count: the caller divides
// by a count over more rows than this call sees), a target outside [0, vocab) that is not
// ignore_index gives a NaN loss (blutensor's contract: a bad target shows in the loss) instead
// of being ignored, and lse / valid (when not null) get the row's log-sum-exp and 0 / 1 for an
// ignored / any other row. The fused path passes RowOut{}: its outputs and bits are unchanged.
struct RowOut {
  float* lse = nullptr;
  float* valid = nullptr;
  bool unscaled = false;
};

__device__ __forceinline__ float row_grad_scale(bool valid, int n, float dloss, const RowOut& o) {
  if (!valid) return 0.0f;
  if (o.unscaled) return dloss;
  return n > 0 ? dloss / static_cast<float>(n) : 0.0f;
}

// The row's extra outputs and the loss of a row without a valid target, from one thread.
__device__ __forceinline__ void write_row_extras(float* losses, const RowOut& o, int64_t row, int t,
                                                 int ignore_index, bool valid, float lse) {
  if (o.lse != nullptr) o.lse[row] = lse;
  if (o.valid != nullptr) o.valid[row] = t == ignore_index ? 0.0f : 1.0f;
  if (!valid && losses != nullptr) losses[row] = o.unscaled && t != ignore_index ? NAN : 0.0f;
}

__global__ void __launch_bounds__(kCountThreads)
    xent_count_kernel(int* count_out, int* error_flag, const int32_t* __restrict__ targets,
                      int64_t rows, int64_t vocab, int ignore_index) {
  int n = 0;
  bool bad = false;
#pragma unroll 8
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int t = targets[r];
    if (target_valid(t, vocab, ignore_index)) {
      ++n;
    } else if (t != ignore_index) {
      bad = true;
    }
  }
  if (bad && error_flag != nullptr) *error_flag = 1;
  int w = n;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) w += __shfl_xor_sync(0xffffffffu, w, o);
  __shared__ int warp_counts[32];
  if ((threadIdx.x & 31) == 0) warp_counts[threadIdx.x >> 5] = w;
  __syncthreads();
  if (threadIdx.x == 0) {
    int total = 0;
    for (int i = 0; i < static_cast<int>(blockDim.x >> 5); ++i) total += warp_counts[i];
    *count_out = total;
  }
}

// ---------------------------------------------------------------- resident row kernel
template <typename T, int W, int kLoads, bool kCluster>
__global__ void __launch_bounds__(kResidentMaxThreads, W > 1 ? 2 : 1)
    xent_resident_kernel(float* __restrict__ losses, T* dlogits, const T* logits,
                         const int32_t* __restrict__ targets, const int* __restrict__ count,
                         int64_t vocab, int ignore_index, float dloss, int cluster,
                         int64_t chunk, RowOut o) {
  __shared__ float scratch[32];
  __shared__ MaxSum slot;
  const RowSliceIndex sl = row_slice(kCluster ? cluster : 1, chunk, vocab);
  const int64_t base = sl.row * vocab + sl.begin;
  const int nvalid = static_cast<int>(sl.end - sl.begin);
  const int t = targets[sl.row];
  const int n = *count;  // written by the count launch; loaded early, used after the combine
  const bool valid = target_valid(t, vocab, ignore_index);
  const int t_local = valid ? static_cast<int>(t - sl.begin) : -1;  // may be outside the slice
  float v[kLoads][W];
  float m = -INFINITY;
  float x_t = 0.0f;
  bool owner = false;
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int e = (k * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x)) * W;
    if (e < nvalid) {
      load_f32_stream<T, W>(logits + base + e, v[k]);
#pragma unroll
      for (int i = 0; i < W; ++i) {
        m = fmaxf(m, v[k][i]);
        if (e + i == t_local) {
          x_t = v[k][i];
          owner = true;
        }
      }
    }
  }
  const float mb = block_max(m, scratch);
  const float mref = mb == -INFINITY ? 0.0f : mb;  // a fully -inf slice contributes exp(-inf) = 0
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int e = (k * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x)) * W;
    if (e < nvalid) {
#pragma unroll
      for (int i = 0; i < W; ++i) {
        v[k][i] = __expf(v[k][i] - mref);
        s += v[k][i];
      }
    }
  }
  const MaxSum local{mb, block_sum(s, scratch)};
  const MaxSum all = cluster_combine_maxsum<kCluster>(local, &slot);
  const float lse = all.m + logf(all.s);
  if (losses != nullptr && owner) losses[sl.row] = lse - x_t;
  if (sl.begin == 0 && threadIdx.x == 0) write_row_extras(losses, o, sl.row, t, ignore_index, valid, lse);
  if (dlogits == nullptr) return;
  const float g = row_grad_scale(valid, n, dloss, o);
  const float scale = (local.s == 0.0f ? 0.0f : __expf(mb - all.m)) / all.s * g;
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int e = (k * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x)) * W;
    if (e < nvalid) {
      float o[W];
#pragma unroll
      for (int i = 0; i < W; ++i) o[i] = v[k][i] * scale - (e + i == t_local ? g : 0.0f);
      store_f32<T, W>(dlogits + base + e, o);
    }
  }
}

// ---------------------------------------------------------------- streamed row kernel
// Pass 1 as the streamed softmax forward. The warp that owns the target's chunk writes the row
// loss (the target logit read from shared memory: an in-place dlogits never races with it); pass 2
// writes dlogits = exp(x - M) * g / S - g * onehot (g = dloss / count, 0 for ignored rows).
template <typename T, int kWarps>
__global__ void __launch_bounds__((kWarps + 1) * 32, 1)
    xent_stream_kernel(float* __restrict__ losses, T* dlogits, const T* logits,
                       const int32_t* __restrict__ targets, int* __restrict__ count_out,
                       int* __restrict__ error_flag, int64_t total_rows, int64_t vocab,
                       int ignore_index, float dloss, StreamArgs a, RowOut o) {
#if BLUBLAS_ROW_STREAM_DEVICE
  constexpr int W = kPackElems<T>;
  extern __shared__ __align__(128) unsigned char smem[];
  const StreamCta cta = stream_cta_begin(smem, a);
  const auto& [R, rank, first_row, row_step, sl, warp, lane] = cta;
  if (warp == kWarps) {
    stream_producer_warp<1>(cta, a, logits, nullptr);
  } else {
    // Every CTA counts the non-ignored targets itself (64 KB from L2 for 16384 rows, while the
    // producer's first loads are in flight): no count launch before this kernel. Integer sums in
    // warp order: the same count in every CTA. CTA 0 publishes it for the mean (and a resident
    // last row); bad targets set the flag (every writer writes 1).
    int n = 0;
    {
      int local = 0;
      bool bad = false;
#pragma unroll 8
      for (int64_t i = threadIdx.x; i < total_rows; i += kWarps * 32) {
        const int ti = targets[i];
        if (target_valid(ti, vocab, ignore_index)) {
          ++local;
        } else if (ti != ignore_index) {
          bad = true;
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) local += __shfl_xor_sync(0xffffffffu, local, o);
      int* counts = reinterpret_cast<int*>(R.warp_part + kStreamMaxWarps);  // buffer 1: free now
      if (lane == 0) counts[warp] = local;
      if (bad && error_flag != nullptr) *error_flag = 1;
      consumer_sync(kWarps * 32);
#pragma unroll
      for (int i = 0; i < kWarps; ++i) n += counts[i];
      if (blockIdx.x == 0 && threadIdx.x == 0) *count_out = n;
    }
    uint32_t it = 0;
    uint4 keep[kRegPacks];  // reg_chunk: this warp's first chunk of the row (its kept exps)
    for (int64_t r = first_row; r < a.rows; r += row_step, ++it) {
      const int t = targets[r];  // in flight during pass 1
      const RowWindow w = row_window(a, r);
      float2 acc = MaxSumOp::identity();
      float mc_reg = -INFINITY;
      float xt_kept = 0.0f;  // keep_exp: the target logit, read before pass 1 overwrites it
      bool owns_target = false;
      for (int jj = warp; jj < sl.count; jj += kWarps) {
        const uint32_t g1 = ring_seq(it, sl.count, jj, 0, 1);
        const auto* c = reinterpret_cast<const uint4*>(ring_wait(R, a, g1));
        const int chunk = sl.begin + jj;
        const int nbytes = window_chunk_bytes(a, w, chunk);
        const int np = nbytes / 16;
        const int o0 = chunk * a.chunk_bytes;
        if (a.keep_exp) {
          const int t_off1 = target_valid(t, vocab, ignore_index)
                                 ? w.lead + t * static_cast<int>(sizeof(T))
                                 : -1;
          if (lane == 0 && t_off1 >= o0 && t_off1 < o0 + nbytes) {
            const int tl1 = (t_off1 - o0) / static_cast<int>(sizeof(T));
            xt_kept = to_f32(reinterpret_cast<const T*>(c)[tl1]);
            owns_target = true;
          }
          __syncwarp();
          if (kWarps <= kRegChunkMaxWarps && a.reg_chunk && jj == warp) {
            load_chunk_regs(c, np, lane, keep);
            ring_release(R, a, g1, lane);  // read only: no fence
            acc = MaxSumOp::combine(acc, regs_maxsum_keep<T>(keep, np, o0, w, lane, &mc_reg));
          } else {
            acc = MaxSumOp::combine(
                acc, chunk_maxsum_keep<T>(const_cast<uint4*>(c), np, o0, w, lane,
                                          &R.slot_max[g1 % static_cast<uint32_t>(a.ring_chunks)]));
          }
        } else {
          acc = MaxSumOp::combine(acc, chunk_maxsum<T>(c, np, o0, w, lane));
        }
      }
      const float2 st = row_combine<MaxSumOp, kWarps>(R, a, acc, it, rank);
      const float mrow = st.x, inv = 1.0f / st.y;
      if (owns_target && losses != nullptr) losses[r] = mrow + logf(st.y) - xt_kept;
      const bool valid = target_valid(t, vocab, ignore_index);
      const float g = row_grad_scale(valid, n, dloss, o);
      const float scale = g * inv;
      // bf16: dlogit = sign(g) ex2(x log2e - bias), bias = M log2e + log2(S / |g|) (g == 0:
      // bias = +inf, ex2 = 0).
      const bool g_negative = g < 0.0f;
      const float bias =
          g != 0.0f ? mrow * kLog2e + __log2f(st.y) - __log2f(fabsf(g)) : INFINITY;
      if (rank == 0 && threadIdx.x == 0)
        write_row_extras(losses, o, r, t, ignore_index, valid, mrow + logf(st.y));
      // The target's window offset (bytes); -1 when ignored.
      const int t_off = valid ? w.lead + t * static_cast<int>(sizeof(T)) : -1;
      unsigned char* dwin = reinterpret_cast<unsigned char*>(dlogits) + w.start;
      for (int jj = warp; jj < sl.count; jj += kWarps) {
        const uint32_t gs = ring_seq(it, sl.count, jj, 0, 1);
        const unsigned char* cb = ring_slot(R, a, gs);
        const uint4* c = reinterpret_cast<const uint4*>(cb);
        const int chunk = sl.begin + jj;
        const int nbytes = window_chunk_bytes(a, w, chunk);
        const int np = nbytes / 16;
        const int o0 = chunk * a.chunk_bytes;
        // Target element index inside this chunk (-1 when elsewhere or ignored).
        const int tl = (t_off >= o0 && t_off < o0 + nbytes)
                           ? (t_off - o0) / static_cast<int>(sizeof(T))
                           : -1;
        // From registers (reg_chunk); the slot went back in pass 1.
        if (kWarps <= kRegChunkMaxWarps && a.reg_chunk && jj == warp) {
          if (dlogits != nullptr) {
            const float f = mc_reg == -INFINITY ? 0.0f : __expf(mc_reg - mrow) * scale;
#pragma unroll
            for (int k = 0; k < kRegPacks; ++k) {
              const int p = lane + 32 * k;
              if (p < np) {
                float v[W];
                unpack_kept<T>(keep[k], v);
#pragma unroll
                for (int i = 0; i < W; ++i) v[i] *= f;
                const int d = tl - p * W;
                if (d >= 0 && d < W) {
#pragma unroll
                  for (int i = 0; i < W; ++i) v[i] -= i == d ? g : 0.0f;
                }
                store_pack<T, W>(dwin, w, o0 + p * 16, v, a.store_hint);
              }
            }
          }
          continue;
        }
        if (a.keep_exp) {
          // dlogit = e * exp(M_c - M) * g / S - g * onehot, e = exp(x - M_c) from pass 1.
          if (dlogits != nullptr) {
            const float mc = R.slot_max[gs % static_cast<uint32_t>(a.ring_chunks)];
            const float f = mc == -INFINITY ? 0.0f : __expf(mc - mrow) * scale;
#pragma unroll 4
            for (int p = lane; p < np; p += 32) {
              float v[W];
              unpack_kept<T>(c[p], v);
#pragma unroll
              for (int i = 0; i < W; ++i) v[i] *= f;
              const int d = tl - p * W;
              if (d >= 0 && d < W) {
#pragma unroll
                for (int i = 0; i < W; ++i) v[i] -= i == d ? g : 0.0f;
              }
              store_pack<T, W>(dwin, w, o0 + p * 16, v, a.store_hint);
            }
          }
          fence_proxy_async_smem();  // pass 1 wrote this slot; the producer's TMA rewrites it next
          ring_release(R, a, gs, lane);
          continue;
        }
        if (tl >= 0 && lane == 0 && losses != nullptr) {
          const float xt = to_f32(reinterpret_cast<const T*>(cb)[tl]);
          losses[r] = mrow + logf(st.y) - xt;
        }
        if (dlogits != nullptr) {
#pragma unroll 4
          for (int p = lane; p < np; p += 32) {
            float v[W];
            unpack16<T>(c[p], v);
#pragma unroll
            for (int i = 0; i < W; ++i) {
              if constexpr (kFastExp<T>) {
                v[i] = ex2_approx(fmaf(v[i], kLog2e, -bias));
              } else {
                v[i] = __expf(v[i] - mrow) * scale;
              }
            }
            if (kFastExp<T> && g_negative) {
#pragma unroll
              for (int i = 0; i < W; ++i) v[i] = -v[i];
            }
            const int d = tl - p * W;
            if (d >= 0 && d < W) {  // the target's pack: once per row
#pragma unroll
              for (int i = 0; i < W; ++i) v[i] -= i == d ? g : 0.0f;
            }
            store_pack<T, W>(dwin, w, o0 + p * 16, v, a.store_hint);
          }
        }
        ring_release(R, a, gs, lane);
      }
    }
  }
  if (a.cluster > 1) cluster_sync_all();
#else
  (void)losses;
  (void)dlogits;
  (void)logits;
  (void)targets;
  (void)count_out;
  (void)error_flag;
  (void)total_rows;
  (void)vocab;
  (void)ignore_index;
  (void)dloss;
  (void)a;
  (void)o;
  __trap();
#endif
}

// ---------------------------------------------------------------- generic (online) row kernel
template <typename T, int W>
__global__ void __launch_bounds__(kGenericRowThreads)
    xent_generic_kernel(float* __restrict__ losses, T* dlogits, const T* logits,
                        const int32_t* __restrict__ targets, const int* __restrict__ count,
                        int64_t vocab, int ignore_index, float dloss, RowOut o) {
  __shared__ MaxSum scratch[32];
  const int64_t row = blockIdx.x;
  const int64_t base = row * vocab;
  const int t = targets[row];
  const bool valid = target_valid(t, vocab, ignore_index);
  MaxSum st{-INFINITY, 0.0f};
  float x_t = 0.0f;
  bool owner = false;
  for (int64_t e = static_cast<int64_t>(threadIdx.x) * W; e < vocab;
       e += static_cast<int64_t>(blockDim.x) * W) {
    float v[W];
    load_f32<T, W>(logits + base + e, v);
    float m = st.m;
#pragma unroll
    for (int i = 0; i < W; ++i) {
      m = fmaxf(m, v[i]);
      if (valid && e + i == t) {
        x_t = v[i];
        owner = true;
      }
    }
    float s = st.m == -INFINITY ? 0.0f : st.s * __expf(st.m - m);
    if (m != -INFINITY) {
#pragma unroll
      for (int i = 0; i < W; ++i) s += __expf(v[i] - m);
    }
    st = {m, s};
  }
  const MaxSum all = block_maxsum(st, scratch);  // ends with a barrier: x_t is read before writes
  const float lse = all.m + logf(all.s);
  if (losses != nullptr && owner) losses[row] = lse - x_t;
  if (threadIdx.x == 0) write_row_extras(losses, o, row, t, ignore_index, valid, lse);
  if (dlogits == nullptr) return;
  const int n = *count;
  const float g = row_grad_scale(valid, n, dloss, o);
  const float inv = g / all.s;
  for (int64_t e = static_cast<int64_t>(threadIdx.x) * W; e < vocab;
       e += static_cast<int64_t>(blockDim.x) * W) {
    float v[W];
    load_f32<T, W>(logits + base + e, v);
#pragma unroll
    for (int i = 0; i < W; ++i) v[i] = __expf(v[i] - all.m) * inv - (valid && e + i == t ? g : 0.0f);
    store_f32<T, W>(dlogits + base + e, v);
  }
}

// Mean over rows: thread-strided partial sums, then the fixed block tree; / count.
__global__ void __launch_bounds__(kCountThreads)
    xent_mean_kernel(float* loss_mean, const float* __restrict__ losses,
                     const int* __restrict__ count, int64_t rows) {
  __shared__ float scratch[32];
  float s = 0.0f;
#pragma unroll 8
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) s += losses[r];
  const float total = block_sum(s, scratch);
  if (threadIdx.x == 0) *loss_mean = total / static_cast<float>(*count);
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

template <typename T, int W>
cudaError_t launch_rows(float* losses, T* dlogits, const T* logits, const int32_t* targets,
                        const int* count, int64_t rows, int64_t vocab, int ignore_index,
                        float dloss, bool clusters_ok, cudaStream_t s, const RowOut& o) {
  constexpr int kLoads = W == 1 ? 16 : 32 / W;
  ResidentConfig cfg;
  if (pick_resident_config(vocab, W, kLoads, clusters_ok, &cfg)) {
    if (cfg.cluster > 1) {
      return launch_resident(xent_resident_kernel<T, W, kLoads, true>, cfg, rows, s, losses,
                             dlogits, logits, targets, count, vocab, ignore_index, dloss,
                             cfg.cluster, cfg.chunk_elems, o);
    }
    return launch_resident(xent_resident_kernel<T, W, kLoads, false>, cfg, rows, s, losses,
                           dlogits, logits, targets, count, vocab, ignore_index, dloss,
                           cfg.cluster, cfg.chunk_elems, o);
  }
  xent_generic_kernel<T, W><<<static_cast<unsigned>(rows), kGenericRowThreads, 0, s>>>(
      losses, dlogits, logits, targets, count, vocab, ignore_index, dloss, o);
  return cudaGetLastError();
}

// Counts the targets (the count launch, or inside the streamed kernel) and runs the row kernels.
template <typename T>
cudaError_t run_typed(float* losses, void* dlogits, const void* logits, const int32_t* targets,
                      int* count, int* error_flag, int64_t rows, int64_t vocab, int ignore_index,
                      float dloss, const DeviceInfo& info, const RowStreamTuning& tu,
                      cudaStream_t s, const RowOut& o) {
  constexpr int W = kPack16<T>;
  auto* d = static_cast<T*>(dlogits);
  auto* l = static_cast<const T*>(logits);
  const bool aligned = aligned16(logits) && (dlogits == nullptr || aligned16(dlogits));
  StreamPlan plan;
  const int64_t row_bytes = vocab * static_cast<int64_t>(sizeof(T));
  const int64_t srows = streamed_rows(rows, row_bytes);
  if (aligned && srows >= 1 && plan_row_stream(srows, row_bytes, 1, tu, info, &plan)) {
    const cudaError_t err =
        plan.warps == 8
            ? launch_row_stream(xent_stream_kernel<T, 8>, plan, info, s, nullptr, losses, d, l,
                                targets, count, error_flag, rows, vocab, ignore_index, dloss,
                                plan.args, o)
        : plan.warps == 12
            ? launch_row_stream(xent_stream_kernel<T, 12>, plan, info, s, nullptr, losses, d, l,
                                targets, count, error_flag, rows, vocab, ignore_index, dloss,
                                plan.args, o)
            : launch_row_stream(xent_stream_kernel<T, 16>, plan, info, s, nullptr, losses, d, l,
                                targets, count, error_flag, rows, vocab, ignore_index, dloss,
                                plan.args, o);
    if (err != cudaSuccess || srows == rows) return err;
    // The last row, whose 16-byte window would end past the tensor: the resident kernel.
    const int64_t off = srows * vocab;
    RowOut rest = o;
    if (rest.lse != nullptr) rest.lse += srows;
    if (rest.valid != nullptr) rest.valid += srows;
    return launch_rows<T, 1>(losses ? losses + srows : nullptr, d ? d + off : nullptr, l + off,
                             targets + srows, count, rows - srows, vocab, ignore_index, dloss,
                             info.sm_major >= 9, s, rest);
  }
  xent_count_kernel<<<1, kCountThreads, 0, s>>>(count, error_flag, targets, rows, vocab,
                                                 ignore_index);
  const cudaError_t cerr = cudaGetLastError();
  if (cerr != cudaSuccess) return cerr;
  const bool clusters_ok = info.sm_major >= 9;
  if (vocab % W == 0 && aligned) {
    return launch_rows<T, W>(losses, d, l, targets, count, rows, vocab, ignore_index, dloss,
                             clusters_ok, s, o);
  }
  return launch_rows<T, 1>(losses, d, l, targets, count, rows, vocab, ignore_index, dloss,
                           clusters_ok, s, o);
}

}  // namespace

Status cross_entropy_workspace_size(int64_t rows, std::size_t* bytes) {
  BLUBLAS_CHECK_ARG(bytes != nullptr, "cross_entropy_workspace_size: bytes is null");
  BLUBLAS_CHECK_ARG(rows >= 0, "cross_entropy_workspace_size: rows=", rows, " must be >= 0");
  *bytes = kCountBytes + static_cast<std::size_t>(rows) * sizeof(float);
  return Status::success();
}

namespace {

// The checks and launches shared by cross_entropy_fused and cross_entropy_rows (`op` names the
// entry point in errors).
Status run_checked(const char* op, float* losses, float* loss_mean, void* dlogits, const void* logits,
                   const int32_t* targets, int64_t rows, int64_t vocab, int ignore_index, float dloss,
                   int* error_flag, Dtype dtype, void* workspace, std::size_t workspace_bytes,
                   cudaStream_t stream, const fused::RowStreamTuning& tuning, const RowOut& o) {
  BLUBLAS_CHECK_ARG(dtype == Dtype::kF32 || dtype == Dtype::kBF16, op, ": dtype ",
                    dtype_name(dtype), " not supported (f32, bf16)");
  BLUBLAS_CHECK_ARG(rows >= 0 && vocab >= 1, op, ": rows=", rows, " vocab=", vocab,
                    " (need rows >= 0, vocab >= 1)");
  BLUBLAS_CHECK_ARG(rows * kResidentMaxCluster <= 2147483647LL && vocab <= 2147483647LL, op,
                    ": rows=", rows, " vocab=", vocab, " too large");
  std::size_t need = 0;
  BLUBLAS_RETURN_IF_ERROR(cross_entropy_workspace_size(rows, &need));
  BLUBLAS_CHECK(workspace_bytes >= need, StatusCode::kWorkspaceTooSmall, op, ": workspace of ",
                workspace_bytes, " bytes < ", need, " needed for rows=", rows);
  BLUBLAS_CHECK_ARG(logits != nullptr && targets != nullptr && workspace != nullptr, op,
                    ": logits, targets and workspace must not be null");
  BLUBLAS_CHECK(aligned16(workspace), StatusCode::kMisaligned, op,
                ": workspace must be 16-byte aligned");
  if (rows == 0) return Status::success();
  DeviceInfo info;
  BLUBLAS_RETURN_IF_ERROR(current_device_info(&info));
  int* count = static_cast<int*>(workspace);
  float* row_losses = losses;
  if (row_losses == nullptr && loss_mean != nullptr) {
    row_losses = reinterpret_cast<float*>(static_cast<char*>(workspace) + kCountBytes);
  }
  const cudaError_t err =
      dtype == Dtype::kF32
          ? run_typed<float>(row_losses, dlogits, logits, targets, count, error_flag, rows, vocab,
                             ignore_index, dloss, info, tuning, stream, o)
          : run_typed<__nv_bfloat16>(row_losses, dlogits, logits, targets, count, error_flag,
                                     rows, vocab, ignore_index, dloss, info, tuning, stream, o);
  BLUBLAS_CHECK(err == cudaSuccess, StatusCode::kCudaError, op, ": row kernel launch failed: ",
                cudaGetErrorString(err), " (rows=", rows, " vocab=", vocab, ")");
  if (loss_mean != nullptr) {
    xent_mean_kernel<<<1, kCountThreads, 0, stream>>>(loss_mean, row_losses, count, rows);
    BLUBLAS_KERNEL_LAUNCH_CHECK("cross_entropy_fused (mean)");
  }
  return Status::success();
}

}  // namespace

namespace fused {

Status cross_entropy_fused_tuned(float* losses, float* loss_mean, void* dlogits,
                                 const void* logits, const int32_t* targets, int64_t rows,
                                 int64_t vocab, int ignore_index, float dloss, int* error_flag,
                                 Dtype dtype, void* workspace, std::size_t workspace_bytes,
                                 cudaStream_t stream, const RowStreamTuning& tuning) {
  return run_checked("cross_entropy_fused", losses, loss_mean, dlogits, logits, targets, rows, vocab,
                     ignore_index, dloss, error_flag, dtype, workspace, workspace_bytes, stream,
                     tuning, RowOut{});
}

}  // namespace fused

Status cross_entropy_fused(float* losses, float* loss_mean, void* dlogits, const void* logits,
                           const int32_t* targets, int64_t rows, int64_t vocab, int ignore_index,
                           float dloss, int* error_flag, Dtype dtype, void* workspace,
                           std::size_t workspace_bytes, cudaStream_t stream) {
  return fused::cross_entropy_fused_tuned(losses, loss_mean, dlogits, logits, targets, rows, vocab,
                                          ignore_index, dloss, error_flag, dtype, workspace,
                                          workspace_bytes, stream, fused::RowStreamTuning{});
}

Status cross_entropy_rows(float* losses, float* lse, float* valid, void* dlogits, const void* logits,
                          const int32_t* targets, int64_t rows, int64_t vocab, int ignore_index,
                          float dloss, Dtype dtype, void* workspace, std::size_t workspace_bytes,
                          cudaStream_t stream) {
  BLUBLAS_CHECK_ARG(losses != nullptr, "cross_entropy_rows: losses must not be null");
  RowOut o;
  o.lse = lse;
  o.valid = valid;
  o.unscaled = true;
  return run_checked("cross_entropy_rows", losses, nullptr, dlogits, logits, targets, rows, vocab,
                     ignore_index, dloss, nullptr, dtype, workspace, workspace_bytes, stream,
                     fused::RowStreamTuning{}, o);
}

}  // namespace blublas
