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
// long for residency use an online-normalizer kernel that reads the row twice.
#include <cuda_bf16.h>

#include <cstdint>

#include "blublas/check.h"
#include "blublas/cross_entropy.h"
#include "elementwise/vector_io.cuh"
#include "reduce/reduce_primitives.cuh"
#include "softmax/row_resident.cuh"

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

__global__ void __launch_bounds__(kCountThreads)
    xent_count_kernel(int* count_out, int* error_flag, const int32_t* __restrict__ targets,
                      int64_t rows, int64_t vocab, int ignore_index) {
  int n = 0;
  bool bad = false;
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
                         int64_t chunk) {
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
  if (losses != nullptr) {
    if (owner) losses[sl.row] = lse - x_t;
    if (!valid && sl.begin == 0 && threadIdx.x == 0) losses[sl.row] = 0.0f;
  }
  if (dlogits == nullptr) return;
  const float g = (valid && n > 0) ? dloss / static_cast<float>(n) : 0.0f;
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

// ---------------------------------------------------------------- generic (online) row kernel
template <typename T, int W>
__global__ void __launch_bounds__(kGenericRowThreads)
    xent_generic_kernel(float* __restrict__ losses, T* dlogits, const T* logits,
                        const int32_t* __restrict__ targets, const int* __restrict__ count,
                        int64_t vocab, int ignore_index, float dloss) {
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
  if (losses != nullptr) {
    if (owner) losses[row] = lse - x_t;
    if (!valid && threadIdx.x == 0) losses[row] = 0.0f;
  }
  if (dlogits == nullptr) return;
  const int n = *count;
  const float g = (valid && n > 0) ? dloss / static_cast<float>(n) : 0.0f;
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
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) s += losses[r];
  const float total = block_sum(s, scratch);
  if (threadIdx.x == 0) *loss_mean = total / static_cast<float>(*count);
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

template <typename T, int W>
cudaError_t launch_rows(float* losses, T* dlogits, const T* logits, const int32_t* targets,
                        const int* count, int64_t rows, int64_t vocab, int ignore_index,
                        float dloss, bool clusters_ok, cudaStream_t s) {
  constexpr int kLoads = W == 1 ? 16 : 32 / W;
  ResidentConfig cfg;
  if (pick_resident_config(vocab, W, kLoads, clusters_ok, &cfg)) {
    if (cfg.cluster > 1) {
      return launch_resident(xent_resident_kernel<T, W, kLoads, true>, cfg, rows, s, losses,
                             dlogits, logits, targets, count, vocab, ignore_index, dloss,
                             cfg.cluster, cfg.chunk_elems);
    }
    return launch_resident(xent_resident_kernel<T, W, kLoads, false>, cfg, rows, s, losses,
                           dlogits, logits, targets, count, vocab, ignore_index, dloss,
                           cfg.cluster, cfg.chunk_elems);
  }
  xent_generic_kernel<T, W><<<static_cast<unsigned>(rows), kGenericRowThreads, 0, s>>>(
      losses, dlogits, logits, targets, count, vocab, ignore_index, dloss);
  return cudaGetLastError();
}

template <typename T>
cudaError_t run_typed(float* losses, void* dlogits, const void* logits, const int32_t* targets,
                      const int* count, int64_t rows, int64_t vocab, int ignore_index,
                      float dloss, bool clusters_ok, cudaStream_t s) {
  constexpr int W = kPack16<T>;
  auto* d = static_cast<T*>(dlogits);
  auto* l = static_cast<const T*>(logits);
  if (vocab % W == 0 && aligned16(logits) && (dlogits == nullptr || aligned16(dlogits))) {
    return launch_rows<T, W>(losses, d, l, targets, count, rows, vocab, ignore_index, dloss,
                             clusters_ok, s);
  }
  return launch_rows<T, 1>(losses, d, l, targets, count, rows, vocab, ignore_index, dloss,
                           clusters_ok, s);
}

}  // namespace

Status cross_entropy_workspace_size(int64_t rows, std::size_t* bytes) {
  BLUBLAS_CHECK_ARG(bytes != nullptr, "cross_entropy_workspace_size: bytes is null");
  BLUBLAS_CHECK_ARG(rows >= 0, "cross_entropy_workspace_size: rows=", rows, " must be >= 0");
  *bytes = kCountBytes + static_cast<std::size_t>(rows) * sizeof(float);
  return Status::success();
}

Status cross_entropy_fused(float* losses, float* loss_mean, void* dlogits, const void* logits,
                           const int32_t* targets, int64_t rows, int64_t vocab, int ignore_index,
                           float dloss, int* error_flag, Dtype dtype, void* workspace,
                           std::size_t workspace_bytes, cudaStream_t stream) {
  BLUBLAS_CHECK_ARG(dtype == Dtype::kF32 || dtype == Dtype::kBF16, "cross_entropy_fused: dtype ",
                    dtype_name(dtype), " not supported (f32, bf16)");
  BLUBLAS_CHECK_ARG(rows >= 0 && vocab >= 1, "cross_entropy_fused: rows=", rows,
                    " vocab=", vocab, " (need rows >= 0, vocab >= 1)");
  BLUBLAS_CHECK_ARG(rows * kResidentMaxCluster <= 2147483647LL && vocab <= 2147483647LL,
                    "cross_entropy_fused: rows=", rows, " vocab=", vocab, " too large");
  std::size_t need = 0;
  BLUBLAS_RETURN_IF_ERROR(cross_entropy_workspace_size(rows, &need));
  BLUBLAS_CHECK(workspace_bytes >= need, StatusCode::kWorkspaceTooSmall,
                "cross_entropy_fused: workspace of ", workspace_bytes, " bytes < ", need,
                " needed for rows=", rows);
  BLUBLAS_CHECK_ARG(logits != nullptr && targets != nullptr && workspace != nullptr,
                    "cross_entropy_fused: logits, targets and workspace must not be null");
  BLUBLAS_CHECK(aligned16(workspace), StatusCode::kMisaligned,
                "cross_entropy_fused: workspace must be 16-byte aligned");
  if (rows == 0) return Status::success();
  bool clusters_ok = false;
  BLUBLAS_RETURN_IF_ERROR(clusters_available(&clusters_ok));
  int* count = static_cast<int*>(workspace);
  float* row_losses = losses;
  if (row_losses == nullptr && loss_mean != nullptr) {
    row_losses = reinterpret_cast<float*>(static_cast<char*>(workspace) + kCountBytes);
  }
  xent_count_kernel<<<1, kCountThreads, 0, stream>>>(count, error_flag, targets, rows, vocab,
                                                      ignore_index);
  BLUBLAS_KERNEL_LAUNCH_CHECK("cross_entropy_fused (count)");
  const cudaError_t err =
      dtype == Dtype::kF32
          ? run_typed<float>(row_losses, dlogits, logits, targets, count, rows, vocab,
                             ignore_index, dloss, clusters_ok, stream)
          : run_typed<__nv_bfloat16>(row_losses, dlogits, logits, targets, count, rows, vocab,
                                     ignore_index, dloss, clusters_ok, stream);
  BLUBLAS_CHECK(err == cudaSuccess, StatusCode::kCudaError,
                "cross_entropy_fused: row kernel launch failed: ", cudaGetErrorString(err),
                " (rows=", rows, " vocab=", vocab, ")");
  if (loss_mean != nullptr) {
    xent_mean_kernel<<<1, kCountThreads, 0, stream>>>(loss_mean, row_losses, count, rows);
    BLUBLAS_KERNEL_LAUNCH_CHECK("cross_entropy_fused (mean)");
  }
  return Status::success();
}

}  // namespace blublas
