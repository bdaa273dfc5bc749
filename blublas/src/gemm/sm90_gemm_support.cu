// sm90_gemm_support.cu: the plain-CUDA helpers of the sm_90a GEMM path (any arch):
//  - transpose_f32: the tf32 pre-pass. tf32 wgmma reads K-major operands only, so an MN-major
//    f32 operand is first copied K-major (rows padded to 16 bytes for TMA) into the workspace.
//  - splitk_reduce: D = epilogue(sum of the split-K fp32 partials), splits added in order 0..S-1
//    (one thread per output pair, no atomics: the same bits every run).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "blublas/check.h"
#include "gemm/epilogue.cuh"
#include "gemm/sm90_gemm_launch.h"

namespace blublas::gemm_detail::sm90 {
namespace {

constexpr int kTransposeTile = 32;
constexpr int kTransposeRows = 8;  // threads per block: 32 x 8

// dst[r * ld_dst + c] = src[c * ld_src + r] for r < rows, c < cols (per batch, blockIdx.z).
__global__ void __launch_bounds__(kTransposeTile * kTransposeRows)
    transpose_f32_kernel(float* __restrict__ dst, int64_t ld_dst, int64_t stride_dst,
                         const float* __restrict__ src, int64_t ld_src, int64_t stride_src,
                         int rows, int cols) {
  __shared__ float tile[kTransposeTile][kTransposeTile + 1];
  const float* s = src + static_cast<int64_t>(blockIdx.z) * stride_src;
  float* d = dst + static_cast<int64_t>(blockIdx.z) * stride_dst;
  const int r0 = blockIdx.x * kTransposeTile, c0 = blockIdx.y * kTransposeTile;
  // Read: consecutive threads walk r (contiguous in src).
  for (int i = threadIdx.y; i < kTransposeTile; i += kTransposeRows) {
    const int c = c0 + i, r = r0 + threadIdx.x;
    if (c < cols && r < rows) tile[i][threadIdx.x] = s[static_cast<int64_t>(c) * ld_src + r];
  }
  __syncthreads();
  // Write: consecutive threads walk c (contiguous in dst).
  for (int i = threadIdx.y; i < kTransposeTile; i += kTransposeRows) {
    const int r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) d[static_cast<int64_t>(r) * ld_dst + c] = tile[threadIdx.x][i];
  }
}

template <class OutT>
__global__ void __launch_bounds__(256)
    splitk_reduce_kernel(EpilogueArgs e, const float* __restrict__ partial, int64_t partial_ld,
                         int64_t split_stride, int splits, int batch) {
  const int pairs = (e.n + 1) / 2;
  const int64_t total = static_cast<int64_t>(batch) * e.m * pairs;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int jp = static_cast<int>(idx % pairs);
    const int64_t bi = idx / pairs;  // b * m + i
    const int i = static_cast<int>(bi % e.m);
    const int b = static_cast<int>(bi / e.m);
    const int j = 2 * jp;
    const float* src = partial + bi * partial_ld + j;
    float v0 = 0.0f, v1 = 0.0f;
    if (j + 1 < e.n) {
      for (int s = 0; s < splits; ++s) {
        const float2 v = *reinterpret_cast<const float2*>(src + s * split_stride);
        v0 += v.x;
        v1 += v.y;
      }
    } else {
      for (int s = 0; s < splits; ++s) v0 += src[s * split_stride];
    }
    epilogue_store2<OutT>(e, b, i, j, v0, v1);
  }
}

}  // namespace

Status transpose_f32(float* dst, int64_t ld_dst, int64_t stride_dst, const float* src,
                     int64_t ld_src, int64_t stride_src, int rows, int cols, int batch,
                     cudaStream_t stream) {
  BLUBLAS_CHECK(batch <= 65535, StatusCode::kNotSupported, "sm90 tf32 transpose: batch=", batch,
                " > 65535");
  const dim3 block(kTransposeTile, kTransposeRows);
  const dim3 grid((rows + kTransposeTile - 1) / kTransposeTile,
                  (cols + kTransposeTile - 1) / kTransposeTile, batch);
  BLUBLAS_CHECK(grid.y <= 65535, StatusCode::kNotSupported, "sm90 tf32 transpose: K=", cols,
                " too large");
  transpose_f32_kernel<<<grid, block, 0, stream>>>(dst, ld_dst, stride_dst, src, ld_src,
                                                   stride_src, rows, cols);
  BLUBLAS_KERNEL_LAUNCH_CHECK("sm90 transpose_f32_kernel");
  return Status::success();
}

Status splitk_reduce(const GemmProblem& p, const float* partial, int64_t partial_ld, int splits,
                     cudaStream_t stream) {
  const EpilogueArgs e = make_epilogue_args(p);
  const int64_t split_stride = partial_ld * p.m * p.batch;
  const int64_t total = static_cast<int64_t>(p.batch) * p.m * ((p.n + 1) / 2);
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((total + threads - 1) / threads, 65535));
  switch (p.cd_type) {
    case Dtype::kBF16:
      splitk_reduce_kernel<__nv_bfloat16><<<blocks, threads, 0, stream>>>(e, partial, partial_ld, split_stride, splits, p.batch);
      break;
    case Dtype::kF16:
      splitk_reduce_kernel<__half><<<blocks, threads, 0, stream>>>(e, partial, partial_ld, split_stride, splits, p.batch);
      break;
    case Dtype::kF32:
      splitk_reduce_kernel<float><<<blocks, threads, 0, stream>>>(e, partial, partial_ld, split_stride, splits, p.batch);
      break;
  }
  BLUBLAS_KERNEL_LAUNCH_CHECK("sm90 splitk_reduce_kernel");
  return Status::success();
}

}  // namespace blublas::gemm_detail::sm90
