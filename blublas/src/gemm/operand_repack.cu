// operand_repack.cu: the operand copies of the GEMM paths (operand_repack.h): the misaligned-
// operand repack of the dispatcher, and transpose_f32 (the sm90 tf32 pre-pass for MN-major
// operands; the SIMT path's B transpose for NT problems, Note [SIMT NT via a transposed B]).
// Each thread writes one aligned 16-byte chunk of the destination (8 16-bit or 4 fp32 elements)
// from element-wise loads of the source, whose rows may start at any element offset; loads of a
// warp are consecutive in memory, so the copy runs near memory bandwidth. Padding elements of the
// destination rows are left unwritten: the GEMM kernels never read past `inner`.
#include <algorithm>
#include <cstdint>

#include "blublas/check.h"
#include "gemm/operand_repack.h"

namespace blublas::gemm_detail {
namespace {

template <typename T>
__global__ void repack_kernel(const T* __restrict__ src, T* __restrict__ dst, int64_t outer,
                              int64_t inner, int64_t ld_src, int64_t stride_src, int64_t ld_dst,
                              int64_t stride_dst) {
  constexpr int kPer = 16 / sizeof(T);
  const int64_t chunks = (inner + kPer - 1) / kPer;
  const int batch = blockIdx.z;
  src += batch * stride_src;
  dst += batch * stride_dst;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < chunks;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t i0 = c * kPer;
      const T* s = src + o * ld_src + i0;
      union {
        uint4 v;
        T e[kPer];
      } u;
      u.v = make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int q = 0; q < kPer; ++q) {
        if (i0 + q < inner) u.e[q] = s[q];
      }
      *reinterpret_cast<uint4*>(dst + o * ld_dst + i0) = u.v;
    }
  }
}

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

}  // namespace

int64_t RepackSpec::ld_dst() const {
  const int64_t per16 = 16 / static_cast<int64_t>(dtype_size(type));
  return (inner + per16 - 1) / per16 * per16;
}

std::size_t RepackSpec::bytes() const {
  return static_cast<std::size_t>(batch) * static_cast<std::size_t>(stride_dst()) * dtype_size(type);
}

Status repack_operand(const RepackSpec& s, const void* src, void* dst, cudaStream_t stream) {
  BLUBLAS_CHECK(reinterpret_cast<std::uintptr_t>(dst) % 16 == 0, StatusCode::kMisaligned,
                "gemm operand repack: destination not 16-byte aligned");
  BLUBLAS_CHECK(s.batch <= 65535, StatusCode::kNotSupported, "gemm operand repack: batch > 65535");
  const int per16 = static_cast<int>(16 / dtype_size(s.type));
  const int64_t chunks = (s.inner + per16 - 1) / per16;
  const int threads = 128;
  const unsigned gx = static_cast<unsigned>(std::min<int64_t>((chunks + threads - 1) / threads, 1024));
  const unsigned gy = static_cast<unsigned>(std::min<int64_t>(s.outer, 65535));
  const dim3 grid(gx, gy, s.batch);
  if (dtype_size(s.type) == 4) {
    repack_kernel<float><<<grid, threads, 0, stream>>>(
        static_cast<const float*>(src), static_cast<float*>(dst), s.outer, s.inner, s.ld_src,
        s.stride_src, s.ld_dst(), s.stride_dst());
  } else if (dtype_size(s.type) == 1) {  // FP8
    repack_kernel<uint8_t><<<grid, threads, 0, stream>>>(
        static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), s.outer, s.inner, s.ld_src,
        s.stride_src, s.ld_dst(), s.stride_dst());
  } else {
    repack_kernel<uint16_t><<<grid, threads, 0, stream>>>(
        static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), s.outer, s.inner,
        s.ld_src, s.stride_src, s.ld_dst(), s.stride_dst());
  }
  BLUBLAS_KERNEL_LAUNCH_CHECK("gemm operand repack_kernel");
  return Status::success();
}

Status transpose_f32(float* dst, int64_t ld_dst, int64_t stride_dst, const float* src,
                     int64_t ld_src, int64_t stride_src, int rows, int cols, int batch,
                     cudaStream_t stream) {
  BLUBLAS_CHECK(batch <= 65535, StatusCode::kNotSupported, "gemm operand transpose: batch=", batch,
                " > 65535");
  const dim3 block(kTransposeTile, kTransposeRows);
  const dim3 grid((rows + kTransposeTile - 1) / kTransposeTile,
                  (cols + kTransposeTile - 1) / kTransposeTile, batch);
  BLUBLAS_CHECK(grid.y <= 65535, StatusCode::kNotSupported, "gemm operand transpose: cols=", cols,
                " too large");
  transpose_f32_kernel<<<grid, block, 0, stream>>>(dst, ld_dst, stride_dst, src, ld_src,
                                                   stride_src, rows, cols);
  BLUBLAS_KERNEL_LAUNCH_CHECK("gemm transpose_f32_kernel");
  return Status::success();
}

}  // namespace blublas::gemm_detail
