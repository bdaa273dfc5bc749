// softmax.cu: row softmax forward and backward (f32 / bf16). Long aligned rows on sm_90+ stream
// through a shared-memory ring (Note [Row streaming through a shared-memory ring] in
// softmax/row_stream.cuh); other rows use Note [Softmax row residency] (blublas/softmax.h):
// resident kernels keep kLoads packs per thread in registers (32 f32 values for the forward,
// 2 x 16 for the backward's y and dy), so each element is read once and written once; the generic
// kernels (rows longer than 8 blocks can hold, or long rows without clusters) use the online
// normalizer and read the row twice.
#include <cuda_bf16.h>

#include <cstdint>

#include "blublas/check.h"
#include "blublas/softmax.h"
#include "elementwise/vector_io.cuh"
#include "reduce/reduce_primitives.cuh"
#include "softmax/row_resident.cuh"
#include "softmax/row_stream.cuh"

namespace blublas {
namespace {

using namespace fused;  // NOLINT: the kernel helpers of this family

// ---------------------------------------------------------------- streamed forward
// Pass 1 per chunk and lane: the lane's max, then its sum of exp(x - max) (both from shared
// memory), folded into the lane's running (max, sum). Pass 2: y = exp(x - M) / S.
template <typename T, int kWarps>
__global__ void __launch_bounds__((kWarps + 1) * 32, 1)
    softmax_fwd_stream_kernel(T* y, const T* x, StreamArgs a) {
#if BLUBLAS_ROW_STREAM_DEVICE
  constexpr int W = kPackElems<T>;
  extern __shared__ __align__(128) unsigned char smem[];
  const StreamCta cta = stream_cta_begin(smem, a);
  const auto& [R, rank, first_row, row_step, sl, warp, lane] = cta;
  if (warp == kWarps) {
    stream_producer_warp<1>(cta, a, x, nullptr);
  } else {
    uint32_t it = 0;
    uint4 keep[kRegPacks];  // reg_chunk: this warp's first chunk of the row (its kept exps)
    for (int64_t r = first_row; r < a.rows; r += row_step, ++it) {
      const RowWindow w = row_window(a, r);
      float2 acc = MaxSumOp::identity();
      float mc_reg = -INFINITY;
      for (int jj = warp; jj < sl.count; jj += kWarps) {
        const auto* c =
            reinterpret_cast<const uint4*>(ring_wait(R, a, ring_seq(it, sl.count, jj, 0, 1)));
        const int chunk = sl.begin + jj;
        const int np = window_chunk_bytes(a, w, chunk) / 16;
        if (a.copy_only) continue;
        if (kWarps <= kRegChunkMaxWarps && a.reg_chunk && jj == warp) {
          load_chunk_regs(c, np, lane, keep);
          ring_release(R, a, ring_seq(it, sl.count, jj, 0, 1), lane);  // read only: no fence
          acc = MaxSumOp::combine(
              acc, regs_maxsum_keep<T>(keep, np, chunk * a.chunk_bytes, w, lane, &mc_reg));
        } else if (a.keep_exp) {
          const uint32_t g = ring_seq(it, sl.count, jj, 0, 1);
          acc = MaxSumOp::combine(
              acc, chunk_maxsum_keep<T>(const_cast<uint4*>(c), np, chunk * a.chunk_bytes, w, lane,
                                        &R.slot_max[g % static_cast<uint32_t>(a.ring_chunks)]));
        } else {
          acc = MaxSumOp::combine(acc, chunk_maxsum<T>(c, np, chunk * a.chunk_bytes, w, lane));
        }
      }
      const float2 st = row_combine<MaxSumOp, kWarps>(R, a, acc, it, rank);
      const float mrow = a.copy_only ? 0.0f : st.x, inv = a.copy_only ? 1.0f : 1.0f / st.y;
      const float bias = st.x * kLog2e + __log2f(st.y);  // bf16: y = ex2(x log2e - bias)
      unsigned char* ywin = reinterpret_cast<unsigned char*>(y) + w.start;
      for (int jj = warp; jj < sl.count; jj += kWarps) {
        const uint32_t g = ring_seq(it, sl.count, jj, 0, 1);
        const uint4* c = reinterpret_cast<const uint4*>(ring_slot(R, a, g));
        const int chunk = sl.begin + jj;
        const int np = window_chunk_bytes(a, w, chunk) / 16;
        const int o0 = chunk * a.chunk_bytes;
        // From registers (reg_chunk); the slot went back in pass 1.
        if (kWarps <= kRegChunkMaxWarps && a.reg_chunk && jj == warp) {
          const float f = mc_reg == -INFINITY ? 0.0f : __expf(mc_reg - mrow) * inv;
#pragma unroll
          for (int k = 0; k < kRegPacks; ++k) {
            const int p = lane + 32 * k;
            if (p < np) {
              float v[W];
              unpack_kept<T>(keep[k], v);
#pragma unroll
              for (int i = 0; i < W; ++i) v[i] *= f;
              store_pack<T, W>(ywin, w, o0 + p * 16, v, a.store_hint);
            }
          }
          continue;
        }
        if (a.keep_exp) {
          // y = e * exp(M_c - M) / S, with e = exp(x - M_c) from pass 1.
          const float mc = R.slot_max[g % static_cast<uint32_t>(a.ring_chunks)];
          const float f = mc == -INFINITY ? 0.0f : __expf(mc - mrow) * inv;
#pragma unroll 4
          for (int p = lane; p < np; p += 32) {
            float v[W];
            unpack_kept<T>(c[p], v);
#pragma unroll
            for (int i = 0; i < W; ++i) v[i] *= f;
            store_pack<T, W>(ywin, w, o0 + p * 16, v, a.store_hint);
          }
          fence_proxy_async_smem();  // pass 1 wrote this slot; the producer's TMA rewrites it next
          ring_release(R, a, g, lane);
          continue;
        }
#pragma unroll 4
        for (int p = lane; p < np; p += 32) {
          float v[W];
          unpack16<T>(c[p], v);
          if (!a.copy_only) {
#pragma unroll
            for (int i = 0; i < W; ++i) {
              if constexpr (kFastExp<T>) {
                v[i] = ex2_approx(fmaf(v[i], kLog2e, -bias));
              } else {
                v[i] = __expf(v[i] - mrow) * inv;
              }
            }
          }
          store_pack<T, W>(ywin, w, o0 + p * 16, v, a.store_hint);
        }
        ring_release(R, a, g, lane);
      }
    }
  }
  if (a.cluster > 1) cluster_sync_all();  // no CTA leaves while a peer may still write to it
#else
  (void)y;
  (void)x;
  (void)a;
  __trap();
#endif
}

// ---------------------------------------------------------------- streamed backward
// Inputs y and dy interleave in the ring (chunk j of y, then chunk j of dy). Pass 1: the lane's
// dot(y, dy) (neighbour elements of misaligned rows masked to 0); pass 2: dx = y * (dy - dot).
template <typename T, int kWarps>
__global__ void __launch_bounds__((kWarps + 1) * 32, 1)
    softmax_bwd_stream_kernel(T* dx, const T* dy, const T* y, StreamArgs a) {
#if BLUBLAS_ROW_STREAM_DEVICE
  constexpr int W = kPackElems<T>;
  extern __shared__ __align__(128) unsigned char smem[];
  const StreamCta cta = stream_cta_begin(smem, a);
  const auto& [R, rank, first_row, row_step, sl, warp, lane] = cta;
  if (warp == kWarps) {
    stream_producer_warp<2>(cta, a, y, dy);
  } else {
    uint32_t it = 0;
    for (int64_t r = first_row; r < a.rows; r += row_step, ++it) {
      const RowWindow w = row_window(a, r);
      float d0 = 0.0f, d1 = 0.0f;
      for (int jj = warp; jj < sl.count; jj += kWarps) {
        const auto* cy =
            reinterpret_cast<const uint4*>(ring_wait(R, a, ring_seq(it, sl.count, jj, 0, 2)));
        const auto* cg =
            reinterpret_cast<const uint4*>(ring_wait(R, a, ring_seq(it, sl.count, jj, 1, 2)));
        const int chunk = sl.begin + jj;
        const int np = window_chunk_bytes(a, w, chunk) / 16;
        const int o0 = chunk * a.chunk_bytes;
#pragma unroll 4
        for (int p = lane; p < np; p += 32) {
          float vy[W], vg[W];
          unpack16<T>(cy[p], vy);
          unpack16<T>(cg[p], vg);
          if (pack_at_edge(w, o0 + p * 16)) {
            mask_pack<T>(vy, w, o0 + p * 16, 0.0f);
            mask_pack<T>(vg, w, o0 + p * 16, 0.0f);
          }
#pragma unroll
          for (int i = 0; i < W; i += 2) {
            d0 = fmaf(vy[i], vg[i], d0);
            d1 = fmaf(vy[i + 1], vg[i + 1], d1);
          }
        }
      }
      const float dot = row_combine<SumOp, kWarps>(R, a, make_float2(d0 + d1, 0.0f), it, rank).x;
      unsigned char* dwin = reinterpret_cast<unsigned char*>(dx) + w.start;
      for (int jj = warp; jj < sl.count; jj += kWarps) {
        const uint32_t gy = ring_seq(it, sl.count, jj, 0, 2), gg = gy + 1;
        const uint4* cy = reinterpret_cast<const uint4*>(ring_slot(R, a, gy));
        const uint4* cg = reinterpret_cast<const uint4*>(ring_slot(R, a, gg));
        const int chunk = sl.begin + jj;
        const int np = window_chunk_bytes(a, w, chunk) / 16;
        const int o0 = chunk * a.chunk_bytes;
#pragma unroll 4
        for (int p = lane; p < np; p += 32) {
          float vy[W], vg[W];
          unpack16<T>(cy[p], vy);
          unpack16<T>(cg[p], vg);
#pragma unroll
          for (int i = 0; i < W; ++i) vy[i] = vy[i] * (vg[i] - dot);
          store_pack<T, W>(dwin, w, o0 + p * 16, vy, a.store_hint);
        }
        ring_release(R, a, gy, lane);
        ring_release(R, a, gg, lane);
      }
    }
  }
  if (a.cluster > 1) cluster_sync_all();
#else
  (void)dx;
  (void)dy;
  (void)y;
  (void)a;
  __trap();
#endif
}

// ---------------------------------------------------------------- resident forward
template <typename T, int W, int kLoads, bool kCluster>
__global__ void __launch_bounds__(kResidentMaxThreads, W > 1 ? 2 : 1)
    softmax_fwd_resident_kernel(T* y, const T* x, int64_t cols, int cluster, int64_t chunk) {
  __shared__ float scratch[32];
  __shared__ MaxSum slot;
  const RowSliceIndex sl = row_slice(kCluster ? cluster : 1, chunk, cols);
  const T* xr = x + sl.row * cols + sl.begin;
  T* yr = y + sl.row * cols + sl.begin;
  const int nvalid = static_cast<int>(sl.end - sl.begin);
  float v[kLoads][W];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int e = (k * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x)) * W;
    if (e < nvalid) {
      load_f32_stream<T, W>(xr + e, v[k]);
#pragma unroll
      for (int i = 0; i < W; ++i) m = fmaxf(m, v[k][i]);
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
  const float scale = (local.s == 0.0f ? 0.0f : __expf(mb - all.m)) / all.s;
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int e = (k * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x)) * W;
    if (e < nvalid) {
      float o[W];
#pragma unroll
      for (int i = 0; i < W; ++i) o[i] = v[k][i] * scale;
      store_f32<T, W>(yr + e, o);
    }
  }
}

// ---------------------------------------------------------------- resident backward
template <typename T, int W, int kLoads, bool kCluster>
__global__ void __launch_bounds__(kResidentMaxThreads, W > 1 ? 2 : 1)
    softmax_bwd_resident_kernel(T* dx, const T* dy, const T* y, int64_t cols, int cluster,
                                int64_t chunk) {
  __shared__ float scratch[32];
  __shared__ float slot;
  const RowSliceIndex sl = row_slice(kCluster ? cluster : 1, chunk, cols);
  const int64_t base = sl.row * cols + sl.begin;
  const int nvalid = static_cast<int>(sl.end - sl.begin);
  float yv[kLoads][W], gv[kLoads][W];
  float dot = 0.0f;
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int e = (k * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x)) * W;
    if (e < nvalid) {
      load_f32_stream<T, W>(y + base + e, yv[k]);
      load_f32_stream<T, W>(dy + base + e, gv[k]);
#pragma unroll
      for (int i = 0; i < W; ++i) dot += yv[k][i] * gv[k][i];
    }
  }
  const float total = cluster_combine_sum<kCluster>(block_sum(dot, scratch), &slot);
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int e = (k * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x)) * W;
    if (e < nvalid) {
      float o[W];
#pragma unroll
      for (int i = 0; i < W; ++i) o[i] = yv[k][i] * (gv[k][i] - total);
      store_f32<T, W>(dx + base + e, o);
    }
  }
}

// ---------------------------------------------------------------- generic (online) kernels
template <typename T, int W>
__global__ void __launch_bounds__(kGenericRowThreads)
    softmax_fwd_generic_kernel(T* y, const T* x, int64_t cols) {
  __shared__ MaxSum scratch[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * cols;
  MaxSum st{-INFINITY, 0.0f};
  for (int64_t e = static_cast<int64_t>(threadIdx.x) * W; e < cols;
       e += static_cast<int64_t>(blockDim.x) * W) {
    float v[W];
    load_f32<T, W>(x + base + e, v);
    float m = st.m;
#pragma unroll
    for (int i = 0; i < W; ++i) m = fmaxf(m, v[i]);
    float s = st.m == -INFINITY ? 0.0f : st.s * __expf(st.m - m);
    if (m != -INFINITY) {
#pragma unroll
      for (int i = 0; i < W; ++i) s += __expf(v[i] - m);
    }
    st = {m, s};
  }
  const MaxSum all = block_maxsum(st, scratch);
  const float inv = 1.0f / all.s;
  for (int64_t e = static_cast<int64_t>(threadIdx.x) * W; e < cols;
       e += static_cast<int64_t>(blockDim.x) * W) {
    float v[W];
    load_f32<T, W>(x + base + e, v);
#pragma unroll
    for (int i = 0; i < W; ++i) v[i] = __expf(v[i] - all.m) * inv;
    store_f32<T, W>(y + base + e, v);
  }
}

template <typename T, int W>
__global__ void __launch_bounds__(kGenericRowThreads)
    softmax_bwd_generic_kernel(T* dx, const T* dy, const T* y, int64_t cols) {
  __shared__ float scratch[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * cols;
  float dot = 0.0f;
  for (int64_t e = static_cast<int64_t>(threadIdx.x) * W; e < cols;
       e += static_cast<int64_t>(blockDim.x) * W) {
    float a[W], b[W];
    load_f32<T, W>(y + base + e, a);
    load_f32<T, W>(dy + base + e, b);
#pragma unroll
    for (int i = 0; i < W; ++i) dot += a[i] * b[i];
  }
  const float total = block_sum(dot, scratch);
  for (int64_t e = static_cast<int64_t>(threadIdx.x) * W; e < cols;
       e += static_cast<int64_t>(blockDim.x) * W) {
    float a[W], b[W];
    load_f32<T, W>(y + base + e, a);
    load_f32<T, W>(dy + base + e, b);
#pragma unroll
    for (int i = 0; i < W; ++i) a[i] = a[i] * (b[i] - total);
    store_f32<T, W>(dx + base + e, a);
  }
}

// ---------------------------------------------------------------- dispatch
bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

// kLoads per thread: 32 floats of registers per array in the forward, 16 per array backward
// (half that for the scalar path, whose per-element addresses and predicates also take registers).
template <typename T, int W, bool kBackward>
constexpr int kLoadsFor = W == 1 ? (kBackward ? 8 : 16) : (kBackward ? 16 : 32) / W;

template <typename T, int W>
Status forward_w(T* y, const T* x, int64_t rows, int64_t cols, bool clusters_ok, cudaStream_t s) {
  constexpr int kLoads = kLoadsFor<T, W, false>;
  ResidentConfig cfg;
  cudaError_t err;
  if (pick_resident_config(cols, W, kLoads, clusters_ok, &cfg)) {
    if (cfg.cluster > 1) {
      err = launch_resident(softmax_fwd_resident_kernel<T, W, kLoads, true>, cfg, rows, s, y, x,
                            cols, cfg.cluster, cfg.chunk_elems);
    } else {
      err = launch_resident(softmax_fwd_resident_kernel<T, W, kLoads, false>, cfg, rows, s, y, x,
                            cols, cfg.cluster, cfg.chunk_elems);
    }
  } else {
    softmax_fwd_generic_kernel<T, W><<<static_cast<unsigned>(rows), kGenericRowThreads, 0, s>>>(
        y, x, cols);
    err = cudaGetLastError();
  }
  BLUBLAS_CHECK(err == cudaSuccess, StatusCode::kCudaError, "softmax_forward: launch failed: ",
                cudaGetErrorString(err), " (rows=", rows, " cols=", cols, ")");
  return Status::success();
}

template <typename T, int W>
Status backward_w(T* dx, const T* dy, const T* y, int64_t rows, int64_t cols, bool clusters_ok,
                  cudaStream_t s) {
  constexpr int kLoads = kLoadsFor<T, W, true>;
  ResidentConfig cfg;
  cudaError_t err;
  if (pick_resident_config(cols, W, kLoads, clusters_ok, &cfg)) {
    if (cfg.cluster > 1) {
      err = launch_resident(softmax_bwd_resident_kernel<T, W, kLoads, true>, cfg, rows, s, dx,
                            dy, y, cols, cfg.cluster, cfg.chunk_elems);
    } else {
      err = launch_resident(softmax_bwd_resident_kernel<T, W, kLoads, false>, cfg, rows, s, dx,
                            dy, y, cols, cfg.cluster, cfg.chunk_elems);
    }
  } else {
    softmax_bwd_generic_kernel<T, W><<<static_cast<unsigned>(rows), kGenericRowThreads, 0, s>>>(
        dx, dy, y, cols);
    err = cudaGetLastError();
  }
  BLUBLAS_CHECK(err == cudaSuccess, StatusCode::kCudaError, "softmax_backward: launch failed: ",
                cudaGetErrorString(err), " (rows=", rows, " cols=", cols, ")");
  return Status::success();
}

Status check_args(const char* op, int64_t rows, int64_t cols, Dtype dtype) {
  BLUBLAS_CHECK_ARG(dtype == Dtype::kF32 || dtype == Dtype::kBF16, op, ": dtype ",
                    dtype_name(dtype), " not supported (f32, bf16)");
  BLUBLAS_CHECK_ARG(rows >= 0 && cols >= 1, op, ": rows=", rows, " cols=", cols,
                    " (need rows >= 0, cols >= 1)");
  BLUBLAS_CHECK_ARG(rows * kResidentMaxCluster <= 2147483647LL && cols <= (int64_t{1} << 40),
                    op, ": rows=", rows, " cols=", cols, " too large");
  return Status::success();
}

// Launches the streamed kernel when the plan allows (sets *launched): on all rows but a last row
// whose 16-byte window would end past the tensor, which the resident kernel takes.
template <typename T>
Status try_stream_forward(void* y, const void* x, int64_t rows, int64_t cols,
                          const DeviceInfo& info, const RowStreamTuning& tu, cudaStream_t s,
                          bool* launched) {
  *launched = false;
  StreamPlan plan;
  const int64_t row_bytes = cols * static_cast<int64_t>(sizeof(T));
  const int64_t srows = streamed_rows(rows, row_bytes);
  if (srows < 1 || !aligned16(x) || !aligned16(y) ||
      !plan_row_stream(srows, row_bytes, 1, tu, info, &plan)) {
    return Status::success();
  }
  auto* yt = static_cast<T*>(y);
  auto* xt = static_cast<const T*>(x);
  const cudaError_t err =
      plan.warps == 8
          ? launch_row_stream(softmax_fwd_stream_kernel<T, 8>, plan, info, s, nullptr, yt, xt,
                              plan.args)
      : plan.warps == 12
          ? launch_row_stream(softmax_fwd_stream_kernel<T, 12>, plan, info, s, nullptr, yt, xt,
                              plan.args)
          : launch_row_stream(softmax_fwd_stream_kernel<T, 16>, plan, info, s, nullptr, yt, xt,
                              plan.args);
  BLUBLAS_CHECK(err == cudaSuccess, StatusCode::kCudaError,
                "softmax_forward: streamed launch failed: ", cudaGetErrorString(err), " (rows=",
                rows, " cols=", cols, ", ", describe_plan(plan), ")");
  if (srows < rows) {
    BLUBLAS_RETURN_IF_ERROR((forward_w<T, 1>(yt + srows * cols, xt + srows * cols, rows - srows,
                                             cols, info.sm_major >= 9, s)));
  }
  *launched = true;
  return Status::success();
}

template <typename T>
Status try_stream_backward(void* dx, const void* dy, const void* y, int64_t rows, int64_t cols,
                           const DeviceInfo& info, const RowStreamTuning& tu, cudaStream_t s,
                           bool* launched) {
  *launched = false;
  StreamPlan plan;
  const int64_t row_bytes = cols * static_cast<int64_t>(sizeof(T));
  const int64_t srows = streamed_rows(rows, row_bytes);
  if (srows < 1 || !aligned16(dx) || !aligned16(dy) || !aligned16(y) ||
      !plan_row_stream(srows, row_bytes, 2, tu, info, &plan)) {
    return Status::success();
  }
  auto* d = static_cast<T*>(dx);
  auto* g = static_cast<const T*>(dy);
  auto* p = static_cast<const T*>(y);
  const cudaError_t err =
      plan.warps == 8
          ? launch_row_stream(softmax_bwd_stream_kernel<T, 8>, plan, info, s, nullptr, d, g, p,
                              plan.args)
      : plan.warps == 12
          ? launch_row_stream(softmax_bwd_stream_kernel<T, 12>, plan, info, s, nullptr, d, g, p,
                              plan.args)
          : launch_row_stream(softmax_bwd_stream_kernel<T, 16>, plan, info, s, nullptr, d, g, p,
                              plan.args);
  BLUBLAS_CHECK(err == cudaSuccess, StatusCode::kCudaError,
                "softmax_backward: streamed launch failed: ", cudaGetErrorString(err), " (rows=",
                rows, " cols=", cols, ", ", describe_plan(plan), ")");
  if (srows < rows) {
    const int64_t off = srows * cols;
    BLUBLAS_RETURN_IF_ERROR((backward_w<T, 1>(d + off, g + off, p + off, rows - srows, cols,
                                              info.sm_major >= 9, s)));
  }
  *launched = true;
  return Status::success();
}

template <typename T>
Status forward_typed(void* y, const void* x, int64_t rows, int64_t cols, cudaStream_t s,
                     const RowStreamTuning& tu) {
  DeviceInfo info;
  BLUBLAS_RETURN_IF_ERROR(current_device_info(&info));
  bool launched = false;
  BLUBLAS_RETURN_IF_ERROR(try_stream_forward<T>(y, x, rows, cols, info, tu, s, &launched));
  if (launched) return Status::success();
  const bool clusters_ok = info.sm_major >= 9;
  constexpr int W = kPack16<T>;
  if (cols % W == 0 && aligned16(x) && aligned16(y)) {
    return forward_w<T, W>(static_cast<T*>(y), static_cast<const T*>(x), rows, cols, clusters_ok,
                           s);
  }
  return forward_w<T, 1>(static_cast<T*>(y), static_cast<const T*>(x), rows, cols, clusters_ok, s);
}

template <typename T>
Status backward_typed(void* dx, const void* dy, const void* y, int64_t rows, int64_t cols,
                      cudaStream_t s, const RowStreamTuning& tu) {
  DeviceInfo info;
  BLUBLAS_RETURN_IF_ERROR(current_device_info(&info));
  bool launched = false;
  BLUBLAS_RETURN_IF_ERROR(
      try_stream_backward<T>(dx, dy, y, rows, cols, info, tu, s, &launched));
  if (launched) return Status::success();
  const bool clusters_ok = info.sm_major >= 9;
  constexpr int W = kPack16<T>;
  auto* d = static_cast<T*>(dx);
  auto* g = static_cast<const T*>(dy);
  auto* p = static_cast<const T*>(y);
  if (cols % W == 0 && aligned16(dx) && aligned16(dy) && aligned16(y)) {
    return backward_w<T, W>(d, g, p, rows, cols, clusters_ok, s);
  }
  return backward_w<T, 1>(d, g, p, rows, cols, clusters_ok, s);
}

}  // namespace

namespace fused {

Status softmax_forward_tuned(void* y, const void* x, int64_t rows, int64_t cols, Dtype dtype,
                             cudaStream_t stream, const RowStreamTuning& tuning) {
  BLUBLAS_RETURN_IF_ERROR(check_args("softmax_forward", rows, cols, dtype));
  if (rows == 0) return Status::success();
  BLUBLAS_CHECK_ARG(y && x, "softmax_forward: y and x must not be null");
  if (dtype == Dtype::kF32) return forward_typed<float>(y, x, rows, cols, stream, tuning);
  return forward_typed<__nv_bfloat16>(y, x, rows, cols, stream, tuning);
}

Status softmax_backward_tuned(void* dx, const void* dy, const void* y, int64_t rows,
                              int64_t cols, Dtype dtype, cudaStream_t stream,
                              const RowStreamTuning& tuning) {
  BLUBLAS_RETURN_IF_ERROR(check_args("softmax_backward", rows, cols, dtype));
  if (rows == 0) return Status::success();
  BLUBLAS_CHECK_ARG(dx && dy && y, "softmax_backward: dx, dy and y must not be null");
  if (dtype == Dtype::kF32) return backward_typed<float>(dx, dy, y, rows, cols, stream, tuning);
  return backward_typed<__nv_bfloat16>(dx, dy, y, rows, cols, stream, tuning);
}

std::string row_path_name(int64_t rows, int64_t cols, int inputs, Dtype dtype,
                          const RowStreamTuning& tuning) {
  DeviceInfo info;
  if (!current_device_info(&info).ok()) return "no device";
  StreamPlan plan;
  const int64_t row_bytes = cols * static_cast<int64_t>(dtype_size(dtype));
  const int64_t srows = streamed_rows(rows, row_bytes);
  if (srows >= 1 && plan_row_stream(srows, row_bytes, inputs, tuning, info, &plan)) {
    return describe_plan(plan) + (srows < rows ? " + last row resident" : "");
  }
  return "resident/online";
}

}  // namespace fused

Status softmax_forward(void* y, const void* x, int64_t rows, int64_t cols, Dtype dtype,
                       cudaStream_t stream) {
  return fused::softmax_forward_tuned(y, x, rows, cols, dtype, stream, fused::RowStreamTuning{});
}

Status softmax_backward(void* dx, const void* dy, const void* y, int64_t rows, int64_t cols,
                        Dtype dtype, cudaStream_t stream) {
  return fused::softmax_backward_tuned(dx, dy, y, rows, cols, dtype, stream,
                                       fused::RowStreamTuning{});
}

}  // namespace blublas
