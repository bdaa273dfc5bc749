// operand_repack.cu: the misaligned-operand repack of the GEMM dispatcher (operand_repack.h).
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
  } else {
    repack_kernel<uint16_t><<<grid, threads, 0, stream>>>(
        static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), s.outer, s.inner,
        s.ld_src, s.stride_src, s.ld_dst(), s.stride_dst());
  }
  BLUBLAS_KERNEL_LAUNCH_CHECK("gemm operand repack_kernel");
  return Status::success();
}

}  // namespace blublas::gemm_detail
