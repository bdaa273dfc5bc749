// column_sum.cu: deterministic column sums (bias gradients) of an f32 / bf16 rows x cols matrix.
//
// Note [Column-sum partition] Rows are cut into chunks of kRowsPerChunk-or-more rows (a function
// of `rows` only, so the bits do not depend on the GPU). Stage 1: a block covers 32 packs of
// columns (a pack is 16 bytes: 4 f32 or 8 bf16) x one chunk; its 8 row-lanes each sum every 8th
// row of the chunk in order, and the 8 partials are added in row-lane order. Stage 2 adds the
// chunk partials in chunk order (skipped when there is a single chunk).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "blublas/check.h"
#include "blublas/reduce.h"
#include "elementwise/vector_io.cuh"

namespace blublas {
namespace {

using fused::kPack16;
using fused::load_f32;

constexpr int kRowLanes = 8;
constexpr int64_t kRowsPerChunk = 64;
constexpr int64_t kMaxChunks = 256;

int64_t rows_per_chunk(int64_t rows) {
  return std::max(kRowsPerChunk, (rows + kMaxChunks - 1) / kMaxChunks);
}

// dst: partial [chunk][cols] (or out directly when `direct`).
template <typename T, int W>
__global__ void __launch_bounds__(32 * kRowLanes)
    column_sum_partial_kernel(float* dst, const T* __restrict__ in, int64_t rows, int64_t cols,
                              int64_t chunk_rows, bool direct, bool accumulate) {
  __shared__ float red[kRowLanes][32 * W + 1];
  const int lane = threadIdx.x, ry = threadIdx.y;
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * 32 + lane) * W;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t r1 = std::min(rows, r0 + chunk_rows);
  float s[W];
#pragma unroll
  for (int i = 0; i < W; ++i) s[i] = 0.0f;
  if (c < cols) {
#pragma unroll 4
    for (int64_t r = r0 + ry; r < r1; r += kRowLanes) {
      float v[W];
      load_f32<T, W>(in + r * cols + c, v);
#pragma unroll
      for (int i = 0; i < W; ++i) s[i] += v[i];
    }
  }
#pragma unroll
  for (int i = 0; i < W; ++i) red[ry][lane * W + i] = s[i];
  __syncthreads();
  // Combine the row lanes in order: thread (lane, ry) finishes column lane*W + ... spread over ry.
  for (int j = ry; j < W; j += kRowLanes) {
    const int64_t cc = c + j;
    if (c < cols && cc < cols) {
      float t = 0.0f;
#pragma unroll
      for (int k = 0; k < kRowLanes; ++k) t += red[k][lane * W + j];
      if (direct) {
        dst[cc] = accumulate ? dst[cc] + t : t;
      } else {
        dst[static_cast<int64_t>(blockIdx.y) * cols + cc] = t;
      }
    }
  }
}

constexpr int kFinishLanes = 32;
__global__ void __launch_bounds__(32 * kFinishLanes)
    column_sum_finish_kernel(float* out, const float* __restrict__ partial, int64_t chunks,
                             int64_t cols, bool accumulate) {
  __shared__ float red[kFinishLanes][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float s = 0.0f;
  if (c < cols) {
#pragma unroll 4
    for (int64_t b = threadIdx.y; b < chunks; b += kFinishLanes) s += partial[b * cols + c];
  }
  red[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float t = 0.0f;
#pragma unroll
    for (int i = 0; i < kFinishLanes; ++i) t += red[i][threadIdx.x];
    out[c] = accumulate ? out[c] + t : t;
  }
}

template <typename T, int W>
void launch_w(float* out, const T* in, int64_t rows, int64_t cols, bool accumulate,
              float* partial, cudaStream_t s) {
  const int64_t cr = rows_per_chunk(rows);
  const int64_t chunks = (rows + cr - 1) / cr;
  const bool direct = chunks == 1;
  const dim3 grid(static_cast<unsigned>((cols / W + 31) / 32 + ((cols % W) ? 1 : 0)),
                  static_cast<unsigned>(chunks));
  column_sum_partial_kernel<T, W><<<grid, dim3(32, kRowLanes), 0, s>>>(
      direct ? out : partial, in, rows, cols, cr, direct, accumulate);
  if (!direct) {
    column_sum_finish_kernel<<<static_cast<unsigned>((cols + 31) / 32), dim3(32, kFinishLanes), 0, s>>>(
        out, partial, chunks, cols, accumulate);
  }
}

template <typename T>
void launch_typed(float* out, const void* in, int64_t rows, int64_t cols, bool accumulate,
                  float* partial, cudaStream_t s) {
  constexpr int W = kPack16<T>;
  const auto* p = static_cast<const T*>(in);
  if (cols % W == 0 && (reinterpret_cast<std::uintptr_t>(in) & 15u) == 0) {
    launch_w<T, W>(out, p, rows, cols, accumulate, partial, s);
  } else {
    launch_w<T, 1>(out, p, rows, cols, accumulate, partial, s);
  }
}

}  // namespace

Status column_sum_workspace_size(int64_t rows, int64_t cols, std::size_t* bytes) {
  BLUBLAS_CHECK_ARG(bytes != nullptr, "column_sum_workspace_size: bytes is null");
  BLUBLAS_CHECK_ARG(rows >= 0 && cols >= 1, "column_sum_workspace_size: rows=", rows,
                    " cols=", cols, " (need rows >= 0, cols >= 1)");
  const int64_t cr = rows_per_chunk(rows);
  const int64_t chunks = (rows + cr - 1) / cr;
  *bytes = chunks <= 1 ? 0 : static_cast<std::size_t>(chunks * cols) * sizeof(float);
  return Status::success();
}

Status column_sum(float* out, const void* in, int64_t rows, int64_t cols, Dtype dtype,
                  bool accumulate, void* workspace, std::size_t workspace_bytes,
                  cudaStream_t stream) {
  BLUBLAS_CHECK_ARG(dtype == Dtype::kF32 || dtype == Dtype::kBF16, "column_sum: dtype ",
                    dtype_name(dtype), " not supported (f32, bf16)");
  BLUBLAS_CHECK_ARG(rows >= 0 && cols >= 1, "column_sum: rows=", rows, " cols=", cols,
                    " (need rows >= 0, cols >= 1)");
  BLUBLAS_CHECK_ARG(cols <= (int64_t{1} << 36), "column_sum: cols=", cols, " too large");
  std::size_t need = 0;
  BLUBLAS_RETURN_IF_ERROR(column_sum_workspace_size(rows, cols, &need));
  BLUBLAS_CHECK(workspace_bytes >= need, StatusCode::kWorkspaceTooSmall,
                "column_sum: workspace of ", workspace_bytes, " bytes < ", need,
                " needed for rows=", rows, " cols=", cols);
  BLUBLAS_CHECK_ARG(out != nullptr, "column_sum: out must not be null");
  if (rows == 0) {
    if (!accumulate) {
      BLUBLAS_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<std::size_t>(cols) * sizeof(float),
                                         stream));
    }
    return Status::success();
  }
  BLUBLAS_CHECK_ARG(in != nullptr, "column_sum: in must not be null");
  BLUBLAS_CHECK_ARG(need == 0 || workspace != nullptr, "column_sum: workspace is null (",
                    need, " bytes needed)");
  float* partial = static_cast<float*>(workspace);
  if (dtype == Dtype::kF32) {
    launch_typed<float>(out, in, rows, cols, accumulate, partial, stream);
  } else {
    launch_typed<__nv_bfloat16>(out, in, rows, cols, accumulate, partial, stream);
  }
  BLUBLAS_KERNEL_LAUNCH_CHECK("column_sum");
  return Status::success();
}

}  // namespace blublas
