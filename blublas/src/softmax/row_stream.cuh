// row_stream.cuh: the machinery of Note [Row streaming through a shared-memory ring], shared by
// the streamed softmax forward/backward and fused cross-entropy kernels (sm_90+: 1-D TMA bulk
// copies, mbarriers, clusters): the ring's shared-memory layout, the producer loop, the fixed-order
// CTA + cluster combine of per-warp partials, 16-byte pack conversion, and the host-side launch
// (grid from the SM / cluster count; the plan itself is in row_stream_plan.h).
//
// Note [Row streaming through a shared-memory ring]
// One persistent CTA per SM (or a cluster of 2-4 CTAs per row) owns whole rows. A producer warp
// streams each row's slice into a ring of shared-memory slots with 1-D bulk copies (cp.async.bulk,
// L2 evict-first: logits are read once); a slot is refilled as soon as its consumer warp releases
// it, so the next row's loads are in flight while this row is reduced and written. Consumer warps
// own chunks (chunk j of a slice goes to warp j % warps): pass 1 waits for the warp's chunks and
// folds them into a per-lane (max, sum) or dot partial; the partials combine in a fixed order
// (lane butterfly, warps in index order, cluster ranks in rank order through distributed shared
// memory and an mbarrier per row parity, never a cluster barrier); pass 2 re-reads the chunks from
// shared memory (not from L2 or HBM), writes the output with 16-byte streaming stores and
// releases the slots. HBM sees each input byte read once and each output byte written once, with
// the producer ahead by ring - slice slots. Results depend only on the data, the chunk size, the
// warp count and the cluster size (not on the SM count or timing): bitwise deterministic.
// Rows need not be 16-byte aligned (V = 50257 f32): each row is loaded as its 16-byte aligned
// window (see RowWindow), the few neighbour elements in its first and last packs are masked, and
// those packs are stored element by element; a last row whose window would end past the tensor
// goes to the resident kernels. Requirements: 16-byte aligned base pointers, a slice (times the
// inputs) that fits the ring with spare slots; other shapes use the cluster-resident or online
// kernels (row_resident.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "blublas/check.h"
#include "blublas/device_info.h"
#include "common/sm90_sync.cuh"
#include "elementwise/vector_io.cuh"
#include "reduce/reduce_primitives.cuh"
#include "softmax/row_stream_plan.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define BLUBLAS_ROW_STREAM_DEVICE 1
#else
#define BLUBLAS_ROW_STREAM_DEVICE 0
#endif

namespace blublas::fused {

struct Ring {
  uint64_t* full;
  uint64_t* empty;
  uint64_t* xbar;
  float2* warp_part;
  float2* xchg;
  float* slot_max;  // per slot: the chunk max its kept exps are relative to (keep_exp)
  unsigned char* data;
};

__device__ __forceinline__ Ring make_ring(unsigned char* smem, int ring_chunks) {
  Ring r;
  r.full = reinterpret_cast<uint64_t*>(smem);
  r.empty = r.full + ring_chunks;
  r.xbar = r.empty + ring_chunks;
  r.warp_part = reinterpret_cast<float2*>(r.xbar + 2);
  r.xchg = r.warp_part + 2 * kStreamMaxWarps;
  r.slot_max = reinterpret_cast<float*>(r.xchg + 2 * kStreamMaxCluster);
  r.data = smem + stream_header_bytes(ring_chunks);
  return r;
}

// ---------------------------------------------------------------- PTX wrappers (sm_90+)
using sm90_sync::cluster_cta_rank;
using sm90_sync::fence_proxy_async_smem;
using sm90_sync::mbar_arrive;
using sm90_sync::mbar_arrive_expect_tx;
using sm90_sync::mbar_init;
using sm90_sync::smem_u32;

// One non-blocking probe of the phase of parity `parity` (acquire at CTA or cluster scope).
template <bool kClusterScope>
__device__ __forceinline__ bool mbar_probe(uint32_t addr, uint32_t parity) {
  uint32_t done = 1;
#if BLUBLAS_ROW_STREAM_DEVICE
  if constexpr (kClusterScope) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } else {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  }
#endif
  return done != 0;
}

__device__ __forceinline__ uint64_t global_time_ns() {
  uint64_t t = 0;
#if BLUBLAS_ROW_STREAM_DEVICE
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
#endif
  return t;
}

// Watchdog: a wait longer than StreamArgs::watchdog_s seconds means a protocol bug; trapping turns
// a hang into a launch error the caller (and a test log) sees. No legitimate wait is longer than
// one row's transfer at full speed, but under compute-sanitizer's racecheck a kernel runs ~1000x
// slower: session 18's fused-classifier run trapped there (cudaErrorLaunchFailure, a false hang),
// so BLUBLAS_ROW_STREAM_WATCHDOG_S sets it (default 20; 0: no watchdog; the sanitizer runs use 0 and
// their own timeouts).
// Waits until the phase of parity `parity` has completed.
template <bool kClusterScope = false>
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity, uint32_t watchdog_s) {
  const uint32_t addr = smem_u32(bar);
  if (mbar_probe<kClusterScope>(addr, parity)) return;
  const uint64_t t0 = global_time_ns();
  const uint64_t limit = static_cast<uint64_t>(watchdog_s) * 1000000000ull;
  while (!mbar_probe<kClusterScope>(addr, parity)) {
    if (limit != 0 && global_time_ns() - t0 > limit) __trap();
  }
}

__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t pol = 0;
#if BLUBLAS_ROW_STREAM_DEVICE
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
#endif
  return pol;
}

// 1-D bulk copy global -> this CTA's shared memory; completes `bytes` on `bar`.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar, uint64_t policy) {
#if BLUBLAS_ROW_STREAM_DEVICE
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(smem_u32(bar)), "l"(policy)
      : "memory");
#endif
}

__device__ __forceinline__ void cluster_sync_all() {
#if BLUBLAS_ROW_STREAM_DEVICE
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;"
               ::
                   : "memory");
#endif
}

// Stores v into the float2 at `local` in the shared memory of cluster rank `rank` and arrives
// (release, cluster scope) on that rank's mbarrier at `bar_local`.
__device__ __forceinline__ void remote_put_arrive(float2* local, uint64_t* bar_local,
                                                  uint32_t rank, float2 v) {
#if BLUBLAS_ROW_STREAM_DEVICE
  uint32_t ra = 0, rb = 0;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(ra)
               : "r"(smem_u32(local)), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(rb)
               : "r"(smem_u32(bar_local)), "r"(rank));
  asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};" ::"r"(ra), "f"(v.x), "f"(v.y)
               : "memory");
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(rb)
               : "memory");
#endif
}

// Barrier among the consumer warps only (the producer warp never joins).
__device__ __forceinline__ void consumer_sync(int threads) {
  asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory");
}

// ---------------------------------------------------------------- 16-byte packs
template <typename T>
constexpr int kPackElems = 16 / static_cast<int>(sizeof(T));

template <typename T>
__device__ __forceinline__ void unpack16(const uint4& u, float (&v)[kPackElems<T>]) {
  if constexpr (sizeof(T) == 4) {
    v[0] = __uint_as_float(u.x);
    v[1] = __uint_as_float(u.y);
    v[2] = __uint_as_float(u.z);
    v[3] = __uint_as_float(u.w);
  } else {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
}

template <typename T>
__device__ __forceinline__ uint4 pack16(const float (&v)[kPackElems<T>]) {
  uint4 u;
  if constexpr (sizeof(T) == 4) {
    u.x = __float_as_uint(v[0]);
    u.y = __float_as_uint(v[1]);
    u.z = __float_as_uint(v[2]);
    u.w = __float_as_uint(v[3]);
  } else {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
      w[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
    u = make_uint4(w[0], w[1], w[2], w[3]);
  }
  return u;
}

__device__ __forceinline__ void store16(void* p, const uint4& u, int hint) {
  if (hint == 1) {
    __stcs(reinterpret_cast<uint4*>(p), u);
  } else {
    *reinterpret_cast<uint4*>(p) = u;
  }
}

// ---------------------------------------------------------------- ring protocol
// This CTA's slice of each row: chunks [begin, begin + count) of the row's chunks_per_row.
struct Slice {
  int begin;
  int count;
};

__device__ __forceinline__ Slice cta_slice(const StreamArgs& a, int rank) {
  const int b = rank * a.chunks_per_row / a.cluster;
  const int e = (rank + 1) * a.chunks_per_row / a.cluster;
  return {b, e - b};
}

// Row r's window: the 16-byte aligned byte range covering it (rows need not be 16-byte aligned:
// a window starts up to 15 bytes before its row and ends up to 15 after it, inside the
// neighbouring rows, whose bytes are read and masked, never written). Window offsets are relative
// to the 16-byte aligned base pointer; `lead` is where the row starts inside its window.
struct RowWindow {
  int64_t start;
  int lead;
  int bytes;
  int row_end;  // lead + row bytes: one past the row's last byte, as a window offset
};

__device__ __forceinline__ RowWindow row_window(const StreamArgs& a, int64_t r) {
  const int64_t b = r * a.row_bytes, e = b + a.row_bytes;
  RowWindow w;
  w.start = b & ~int64_t{15};
  w.lead = static_cast<int>(b - w.start);
  w.bytes = static_cast<int>(((e + 15) & ~int64_t{15}) - w.start);
  w.row_end = w.lead + static_cast<int>(a.row_bytes);
  return w;
}

// Bytes of window chunk `chunk` (0 past the window's end: an empty slot that still cycles).
__device__ __forceinline__ int window_chunk_bytes(const StreamArgs& a, const RowWindow& w,
                                                  int chunk) {
  const int left = w.bytes - chunk * a.chunk_bytes;
  return left <= 0 ? 0 : (left < a.chunk_bytes ? left : a.chunk_bytes);
}

// Whether the 16-byte pack at window offset o holds bytes outside the row (first / last packs of
// misaligned rows only).
__device__ __forceinline__ bool pack_at_edge(const RowWindow& w, int o) {
  return o < w.lead || o + 16 > w.row_end;
}

// Replaces the elements of the pack at window offset o that lie outside the row by `fill`.
template <typename T, int W>
__device__ __forceinline__ void mask_pack(float (&v)[W], const RowWindow& w, int o, float fill) {
#pragma unroll
  for (int i = 0; i < W; ++i) {
    const int ob = o + i * static_cast<int>(sizeof(T));
    if (ob < w.lead || ob >= w.row_end) v[i] = fill;
  }
}

// Stores the pack at window offset o of the output window starting at `dst`: 16 bytes when the
// pack is inside the row, else only the row's elements (the neighbours belong to other rows).
template <typename T, int W>
__device__ __forceinline__ void store_pack(unsigned char* dst, const RowWindow& w, int o,
                                           const float (&v)[W], int hint) {
  if (!pack_at_edge(w, o)) {
    store16(dst + o, pack16<T>(v), hint);
    return;
  }
#pragma unroll
  for (int i = 0; i < W; ++i) {
    const int ob = o + i * static_cast<int>(sizeof(T));
    if (ob >= w.lead && ob < w.row_end) *reinterpret_cast<T*>(dst + ob) = from_f32<T>(v[i]);
  }
}

// Thread 0 initializes the barriers; then the CTA (and the cluster) synchronize.
__device__ __forceinline__ void stream_init(const Ring& R, const StreamArgs& a) {
  if (threadIdx.x == 0) {
    for (int i = 0; i < a.ring_chunks; ++i) {
      mbar_init(&R.full[i], 1);
      mbar_init(&R.empty[i], 1);
    }
    mbar_init(&R.xbar[0], static_cast<uint32_t>(a.cluster));
    mbar_init(&R.xbar[1], static_cast<uint32_t>(a.cluster));
#if BLUBLAS_ROW_STREAM_DEVICE
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
  }
  if (a.cluster > 1) {
    cluster_sync_all();
  } else {
    __syncthreads();
  }
}

// What every streamed row kernel sets up first: the ring in dynamic shared memory, its barriers
// (stream_init), the rows this CTA walks (one row per cluster at a time), its chunk slice, and
// which warp this thread is. Warp kWarps (the last) is the producer (stream_producer_warp).
struct StreamCta {
  Ring R;
  uint32_t rank;
  int64_t first_row, row_step;
  Slice sl;
  int warp, lane;
};

__device__ __forceinline__ StreamCta stream_cta_begin(unsigned char* smem, const StreamArgs& a) {
  StreamCta c;
  c.R = make_ring(smem, a.ring_chunks);
  c.rank = a.cluster > 1 ? cluster_cta_rank() : 0u;
  stream_init(c.R, a);
  c.first_row = blockIdx.x / a.cluster;
  c.row_step = gridDim.x / a.cluster;
  c.sl = cta_slice(a, static_cast<int>(c.rank));
  c.warp = static_cast<int>(threadIdx.x >> 5);
  c.lane = static_cast<int>(threadIdx.x & 31);
  return c;
}

// The ring sequence number of input k of local chunk jj of the it-th row this CTA handles.
__device__ __forceinline__ uint32_t ring_seq(uint32_t it, int slice_count, int jj, int k,
                                             int inputs) {
  return (it * static_cast<uint32_t>(slice_count) + static_cast<uint32_t>(jj)) *
             static_cast<uint32_t>(inputs) +
         static_cast<uint32_t>(k);
}

// The producer (one thread): every row of this cluster, every chunk of the slice, every input.
template <int kInputs>
__device__ __forceinline__ void stream_produce(const Ring& R, const StreamArgs& a,
                                               const unsigned char* src0,
                                               const unsigned char* src1, int64_t first_row,
                                               int64_t row_step, Slice s) {
  const uint64_t policy = l2_evict_first_policy();
  const uint32_t nc = static_cast<uint32_t>(a.ring_chunks);
  uint32_t g = 0;
  for (int64_t r = first_row; r < a.rows; r += row_step) {
    const RowWindow w = row_window(a, r);
    for (int jj = 0; jj < s.count; ++jj) {
      const int chunk = s.begin + jj;
      const int64_t off = w.start + static_cast<int64_t>(chunk) * a.chunk_bytes;
      const uint32_t bytes = static_cast<uint32_t>(window_chunk_bytes(a, w, chunk));
#pragma unroll
      for (int k = 0; k < kInputs; ++k, ++g) {
        const uint32_t slot = g % nc, round = g / nc;
        if (round > 0) mbar_wait(&R.empty[slot], (round - 1) & 1u, a.watchdog_s);
        if (bytes == 0) {
          mbar_arrive(&R.full[slot]);  // an empty chunk of a shorter window
          continue;
        }
        mbar_arrive_expect_tx(&R.full[slot], bytes);
        bulk_load(R.data + static_cast<size_t>(slot) * a.chunk_bytes,
                  (k == 0 ? src0 : src1) + off, bytes, &R.full[slot], policy);
      }
    }
  }
}

// The producer warp's part: one lane issues every load of the CTA's rows (kInputs sources
// interleaved in the ring); the whole warp then joins the kernel's final synchronisation.
template <int kInputs>
__device__ __forceinline__ void stream_producer_warp(const StreamCta& c, const StreamArgs& a,
                                                     const void* src0, const void* src1) {
  if (c.lane == 0) {
    stream_produce<kInputs>(c.R, a, static_cast<const unsigned char*>(src0),
                            static_cast<const unsigned char*>(src1), c.first_row, c.row_step,
                            c.sl);
  }
  __syncwarp();
}

__device__ __forceinline__ const unsigned char* ring_wait(const Ring& R, const StreamArgs& a,
                                                         uint32_t g) {
  const uint32_t nc = static_cast<uint32_t>(a.ring_chunks);
  const uint32_t slot = g % nc;
  mbar_wait(&R.full[slot], (g / nc) & 1u, a.watchdog_s);
  return R.data + static_cast<size_t>(slot) * a.chunk_bytes;
}

__device__ __forceinline__ const unsigned char* ring_slot(const Ring& R, const StreamArgs& a,
                                                         uint32_t g) {
  return R.data + static_cast<size_t>(g % static_cast<uint32_t>(a.ring_chunks)) * a.chunk_bytes;
}

// After __syncwarp: lane 0 gives slot g back to the producer.
__device__ __forceinline__ void ring_release(const Ring& R, const StreamArgs& a, uint32_t g,
                                             int lane) {
  __syncwarp();
  if (lane == 0) mbar_arrive(&R.empty[g % static_cast<uint32_t>(a.ring_chunks)]);
}

// (max, sum) partials as float2 {m, s}.
struct MaxSumOp {
  __device__ static float2 identity() { return make_float2(-INFINITY, 0.0f); }
  __device__ static float2 combine(float2 a, float2 b) {
    const MaxSum r = maxsum_combine(MaxSum{a.x, a.y}, MaxSum{b.x, b.y});
    return make_float2(r.m, r.s);
  }
  __device__ static float2 warp_reduce(float2 v) {
    const MaxSum r = warp_maxsum(MaxSum{v.x, v.y});
    return make_float2(r.m, r.s);
  }
};

// Plain sums in .x.
struct SumOp {
  __device__ static float2 identity() { return make_float2(0.0f, 0.0f); }
  __device__ static float2 combine(float2 a, float2 b) { return make_float2(a.x + b.x, 0.0f); }
  __device__ static float2 warp_reduce(float2 v) { return make_float2(warp_sum(v.x), 0.0f); }
};

// Every consumer thread gets the row's combined value (same bits in every CTA of the cluster):
// lanes by butterfly, warps in index order, cluster ranks in rank order. Row parity selects the
// buffers (see the Note: a buffer is rewritten two rows later, after every reader has passed the
// next row's exchange).
template <class Op, int kWarps>
__device__ __forceinline__ float2 row_combine(const Ring& R, const StreamArgs& a, float2 lane_val,
                                              uint32_t it, uint32_t rank) {
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int buf = static_cast<int>(it & 1u);
  float2 acc;
  if constexpr (std::is_same_v<Op, MaxSumOp>) {
    // Latency matters here (the memory pipe idles while a row's statistics combine): the max
    // first (exact, any order), then every partial rescaled by one independent exp and summed
    // (butterfly over lanes, warps in index order).
    float m = lane_val.x;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sl = m == -INFINITY ? 0.0f : lane_val.y * __expf(lane_val.x - m);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sl += __shfl_xor_sync(0xffffffffu, sl, o);
    if (lane == 0) R.warp_part[buf * kStreamMaxWarps + warp] = make_float2(m, sl);
    consumer_sync(kWarps * 32);
    float2 parts[kWarps];
    float mall = -INFINITY;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) {
      parts[i] = R.warp_part[buf * kStreamMaxWarps + i];
      mall = fmaxf(mall, parts[i].x);
    }
    float sall = 0.0f;
    if (mall != -INFINITY) {
#pragma unroll
      for (int i = 0; i < kWarps; ++i) sall += parts[i].y * __expf(parts[i].x - mall);
    }
    acc = make_float2(mall, sall);
  } else {
    const float2 w = Op::warp_reduce(lane_val);
    if (lane == 0) R.warp_part[buf * kStreamMaxWarps + warp] = w;
    consumer_sync(kWarps * 32);
    acc = R.warp_part[buf * kStreamMaxWarps];
#pragma unroll
    for (int i = 1; i < kWarps; ++i) acc = Op::combine(acc, R.warp_part[buf * kStreamMaxWarps + i]);
  }
  if (a.cluster == 1) return acc;
  if (threadIdx.x == 0) {
    for (int q = 0; q < a.cluster; ++q) {
      remote_put_arrive(&R.xchg[buf * kStreamMaxCluster + rank], &R.xbar[buf],
                        static_cast<uint32_t>(q), acc);
    }
  }
  mbar_wait<true>(&R.xbar[buf], (it >> 1) & 1u, a.watchdog_s);
  float2 all = R.xchg[buf * kStreamMaxCluster];
  for (int q = 1; q < a.cluster; ++q) all = Op::combine(all, R.xchg[buf * kStreamMaxCluster + q]);
  return all;
}

// exp for the streamed kernels. f32 data: __expf(x - m) (FADD, FMUL, MUFU). bf16 data (kFastExp):
// ex2(x * log2(e) - b) with b precomputed (FFMA + MUFU; pass 2 folds 1/S into b as well): the
// exponent's extra error, |b| * 2^-24, is far below a bf16 output's rounding, and bf16 rows are
// where instruction issue, not HBM, comes close to the limit.
constexpr float kLog2e = 1.4426950408889634f;

template <typename T>
constexpr bool kFastExp = sizeof(T) == 2;

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// One chunk's (max, sum of exp(x - max)) for this lane: the max pass, then the sum pass, both
// from shared memory (neighbour elements of misaligned rows masked to -inf).
template <typename T>
__device__ __forceinline__ float2 chunk_maxsum(const uint4* c, int np, int o0, const RowWindow& w,
                                               int lane) {
  constexpr int W = kPackElems<T>;
  float cm = -INFINITY;
#pragma unroll 4
  for (int p = lane; p < np; p += 32) {
    float v[W];
    unpack16<T>(c[p], v);
    if (pack_at_edge(w, o0 + p * 16)) mask_pack<T>(v, w, o0 + p * 16, -INFINITY);
#pragma unroll
    for (int i = 0; i < W; ++i) cm = fmaxf(cm, v[i]);
  }
  const float mref = cm == -INFINITY ? 0.0f : cm;
  const float bias = mref * kLog2e;
  float s0 = 0.0f, s1 = 0.0f;
#pragma unroll 4
  for (int p = lane; p < np; p += 32) {
    float v[W];
    unpack16<T>(c[p], v);
    if (pack_at_edge(w, o0 + p * 16)) mask_pack<T>(v, w, o0 + p * 16, -INFINITY);
#pragma unroll
    for (int i = 0; i < W; i += 2) {
      if constexpr (kFastExp<T>) {
        s0 += ex2_approx(fmaf(v[i], kLog2e, -bias));
        s1 += ex2_approx(fmaf(v[i + 1], kLog2e, -bias));
      } else {
        s0 += __expf(v[i] - mref);
        s1 += __expf(v[i + 1] - mref);
      }
    }
  }
  return make_float2(cm, s0 + s1);
}

// The kept exps of a pack, packed: f32 as is, fp16 pairs for bf16 rows (e is in [0, 1]).
template <typename T>
__device__ __forceinline__ uint4 pack_kept(const float (&v)[kPackElems<T>]) {
  if constexpr (sizeof(T) == 4) {
    return pack16<T>(v);
  } else {
    uint32_t h[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __half2 q = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
      h[i] = *reinterpret_cast<const uint32_t*>(&q);
    }
    return make_uint4(h[0], h[1], h[2], h[3]);
  }
}

// keep_exp pass 1: the warp's chunk max M_c (lanes combined), then e = exp(x - M_c) written back
// over x in the slot (f32, or fp16 for bf16 rows: e is in [0, 1], fp16 keeps 11 bits, below a bf16
// output's rounding) and summed; lane 0 records M_c for the slot. Pass 2 then needs one multiply
// per element instead of an exp. The writes are made visible to the async proxy before the slot
// goes back to the producer (ring_release after fence_proxy_async).
template <typename T>
__device__ __forceinline__ float2 chunk_maxsum_keep(uint4* c, int np, int o0, const RowWindow& w,
                                                    int lane, float* slot_max) {
  constexpr int W = kPackElems<T>;
  float cm = -INFINITY;
#pragma unroll 4
  for (int p = lane; p < np; p += 32) {
    float v[W];
    unpack16<T>(c[p], v);
    if (pack_at_edge(w, o0 + p * 16)) mask_pack<T>(v, w, o0 + p * 16, -INFINITY);
#pragma unroll
    for (int i = 0; i < W; ++i) cm = fmaxf(cm, v[i]);
  }
  cm = warp_max(cm);
  if (lane == 0) *slot_max = cm;
  const float mref = cm == -INFINITY ? 0.0f : cm;
  const float bias = mref * kLog2e;
  float s0 = 0.0f, s1 = 0.0f;
#pragma unroll 4
  for (int p = lane; p < np; p += 32) {
    float v[W];
    unpack16<T>(c[p], v);
    if (pack_at_edge(w, o0 + p * 16)) mask_pack<T>(v, w, o0 + p * 16, -INFINITY);
#pragma unroll
    for (int i = 0; i < W; i += 2) {
      if constexpr (kFastExp<T>) {
        v[i] = ex2_approx(fmaf(v[i], kLog2e, -bias));
        v[i + 1] = ex2_approx(fmaf(v[i + 1], kLog2e, -bias));
      } else {
        v[i] = __expf(v[i] - mref);
        v[i + 1] = __expf(v[i + 1] - mref);
      }
      s0 += v[i];
      s1 += v[i + 1];
    }
    c[p] = pack_kept<T>(v);
  }
  return make_float2(cm, s0 + s1);
}

// The kept exps of a pack as floats (f32 as stored; fp16 pairs for bf16 rows).
template <typename T>
__device__ __forceinline__ void unpack_kept(const uint4& u, float (&v)[kPackElems<T>]) {
  if constexpr (sizeof(T) == 4) {
    unpack16<T>(u, v);
  } else {
    const uint32_t q[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&q[i]));
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
}

// Register-held chunk (reg_chunk, with keep_exp and 8 KiB chunks): each warp copies its first
// chunk of the row (16 packs per lane) into registers and gives the slot back at once, so a row
// pins only the slots of its other chunks and the producer runs that much further ahead (an f32
// row of 25 chunks pins 9 of the 28 slots instead of 25). Pass 1 then works on the registers and
// keeps the exps there.
constexpr int kRegChunkBytes = 8192;
constexpr int kRegPacks = kRegChunkBytes / 16 / 32;
// 64 registers of chunk per thread fit the register file only up to 12 consumer warps (13 warps
// of 157 registers); the 16-warp kernels (120 registers) would spill and never take this path.
constexpr int kRegChunkMaxWarps = 12;

__device__ __forceinline__ void load_chunk_regs(const uint4* c, int np, int lane,
                                                uint4 (&keep)[kRegPacks]) {
#pragma unroll
  for (int k = 0; k < kRegPacks; ++k) {
    const int p = lane + 32 * k;
    keep[k] = p < np ? c[p] : make_uint4(0u, 0u, 0u, 0u);
  }
}

template <typename T>
__device__ __forceinline__ float2 regs_maxsum_keep(uint4 (&keep)[kRegPacks], int np, int o0,
                                                   const RowWindow& w, int lane, float* mc_out) {
  constexpr int W = kPackElems<T>;
  float cm = -INFINITY;
#pragma unroll
  for (int k = 0; k < kRegPacks; ++k) {
    const int p = lane + 32 * k;
    if (p < np) {
      float v[W];
      unpack16<T>(keep[k], v);
      if (pack_at_edge(w, o0 + p * 16)) mask_pack<T>(v, w, o0 + p * 16, -INFINITY);
#pragma unroll
      for (int i = 0; i < W; ++i) cm = fmaxf(cm, v[i]);
    }
  }
  cm = warp_max(cm);
  *mc_out = cm;
  const float mref = cm == -INFINITY ? 0.0f : cm;
  const float bias = mref * kLog2e;
  float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
  for (int k = 0; k < kRegPacks; ++k) {
    const int p = lane + 32 * k;
    if (p < np) {
      float v[W];
      unpack16<T>(keep[k], v);
      if (pack_at_edge(w, o0 + p * 16)) mask_pack<T>(v, w, o0 + p * 16, -INFINITY);
#pragma unroll
      for (int i = 0; i < W; i += 2) {
        if constexpr (kFastExp<T>) {
          v[i] = ex2_approx(fmaf(v[i], kLog2e, -bias));
          v[i + 1] = ex2_approx(fmaf(v[i + 1], kLog2e, -bias));
        } else {
          v[i] = __expf(v[i] - mref);
          v[i + 1] = __expf(v[i + 1] - mref);
        }
        s0 += v[i];
        s1 += v[i + 1];
      }
      keep[k] = pack_kept<T>(v);
    }
  }
  return make_float2(cm, s0 + s1);
}

// ---------------------------------------------------------------- host: launch
// Per-process cache of the host queries a launch needs (a launch stays a few microseconds of host
// time): whether the kernel's dynamic shared-memory limit was raised on a device (cluster 0) and
// how many clusters of a size co-reside. Keyed by device, kernel, shared memory and cluster size.
struct StreamLaunchCacheEntry {
  int device;
  const void* kernel;
  int smem_bytes;
  int cluster;
  int value;
};

inline std::mutex& stream_cache_mutex() {
  static std::mutex m;
  return m;
}

inline std::vector<StreamLaunchCacheEntry>& stream_cache() {
  static std::vector<StreamLaunchCacheEntry> entries;
  return entries;
}

inline bool stream_cache_get(int device, const void* kernel, int smem, int cluster, int* value) {
  std::lock_guard<std::mutex> lock(stream_cache_mutex());
  for (const StreamLaunchCacheEntry& e : stream_cache()) {
    if (e.device == device && e.kernel == kernel && e.smem_bytes == smem && e.cluster == cluster) {
      *value = e.value;
      return true;
    }
  }
  return false;
}

inline void stream_cache_put(int device, const void* kernel, int smem, int cluster, int value) {
  std::lock_guard<std::mutex> lock(stream_cache_mutex());
  stream_cache().push_back({device, kernel, smem, cluster, value});
}

// Launches a persistent streamed kernel: one CTA per SM (cluster 1) or as many clusters as the
// device co-schedules, never more than the rows. *grid_out (optional) receives the grid size.
template <typename Kernel, typename... Args>
cudaError_t launch_row_stream(Kernel kernel, const StreamPlan& p, const DeviceInfo& info,
                              cudaStream_t stream, int* grid_out, Args... args) {
  const void* key = reinterpret_cast<const void*>(kernel);
  int cached = 0;
  cudaError_t e = cudaSuccess;
  if (!stream_cache_get(info.device, key, 0, 0, &cached)) {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             info.max_smem_per_block_optin);
    if (e != cudaSuccess) return e;
    stream_cache_put(info.device, key, 0, 0, 1);
  }
  const int cs = p.args.cluster;
  cudaLaunchConfig_t lc = {};
  lc.blockDim = dim3(static_cast<unsigned>((p.warps + 1) * 32));
  lc.dynamicSmemBytes = static_cast<size_t>(p.smem_bytes);
  lc.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(cs);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  lc.attrs = attr;
  lc.numAttrs = cs > 1 ? 1 : 0;
  int64_t clusters = info.sm_count / cs;
  if (cs > 1) {
    int active = 0;
    if (!stream_cache_get(info.device, key, p.smem_bytes, cs, &active)) {
      lc.gridDim = dim3(static_cast<unsigned>(clusters * cs));
      e = cudaOccupancyMaxActiveClusters(&active, kernel, &lc);
      if (e != cudaSuccess) return e;
      stream_cache_put(info.device, key, p.smem_bytes, cs, active);
    }
    if (active < 1) return cudaErrorInvalidConfiguration;
    clusters = active;
  }
  if (clusters > p.args.rows) clusters = p.args.rows;
  if (clusters < 1) clusters = 1;
  lc.gridDim = dim3(static_cast<unsigned>(clusters * cs));
  if (grid_out != nullptr) *grid_out = static_cast<int>(clusters * cs);
  return cudaLaunchKernelEx(&lc, kernel, args...);
}

}  // namespace blublas::fused
