// simt_generic_gemm.cu: the any-dtype, any-alignment SIMT GEMM. Correct and simple rather than
// fast: it is the kAuto fallback for 16-bit operands that no tensor-core path accepts (odd leading
// dimensions, unaligned pointers) and the reference-like path forced by tests.
//
// Note [Generic SIMT tiling]
// A 64 x 64 CTA tile, 16-deep k slices, 256 threads each owning a 4 x 4 strided set of outputs
// (rows ty + 16*r, columns tx + 16*c, so stores of a warp are consecutive in j). Operands are read
// element by element with bounds checks in either major (a run-time flag: the branch is uniform)
// and converted to fp32 in shared memory; products accumulate in fp32 with FFMA.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "blublas/check.h"
#include "gemm/epilogue.cuh"
#include "gemm/simt_gemm_launch.h"

namespace blublas::gemm_detail {
namespace {

constexpr int kBM = 64, kBN = 64, kBK = 16, kThreads = 256;

template <typename InT, typename OutT>
__global__ void __launch_bounds__(kThreads)
    simt_generic_kernel(const InT* __restrict__ a, int64_t lda, int64_t stride_a, int a_k_major,
                        const InT* __restrict__ b, int64_t ldb, int64_t stride_b, int b_k_major,
                        int m, int n, int k, EpilogueArgs e) {
  __shared__ float as[kBK][kBM + 1];
  __shared__ float bs[kBK][kBN + 1];
  const int batch = blockIdx.z;
  a += batch * stride_a;
  b += batch * stride_b;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < k; k0 += kBK) {
#pragma unroll
    for (int l = 0; l < (kBM * kBK) / kThreads; ++l) {
      const int idx = tid + l * kThreads;
      int mi, ki;
      if (a_k_major) { mi = idx / kBK; ki = idx % kBK; } else { ki = idx / kBM; mi = idx % kBM; }
      const int gm = m0 + mi, gk = k0 + ki;
      float v = 0.0f;
      if (gm < m && gk < k) {
        v = to_f32(a_k_major ? a[static_cast<int64_t>(gm) * lda + gk] : a[static_cast<int64_t>(gk) * lda + gm]);
      }
      as[ki][mi] = v;
    }
#pragma unroll
    for (int l = 0; l < (kBN * kBK) / kThreads; ++l) {
      const int idx = tid + l * kThreads;
      int nj, ki;
      if (b_k_major) { nj = idx / kBK; ki = idx % kBK; } else { ki = idx / kBN; nj = idx % kBN; }
      const int gn = n0 + nj, gk = k0 + ki;
      float v = 0.0f;
      if (gn < n && gk < k) {
        v = to_f32(b_k_major ? b[static_cast<int64_t>(gn) * ldb + gk] : b[static_cast<int64_t>(gk) * ldb + gn]);
      }
      bs[ki][nj] = v;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      float ar[4], br[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) ar[r] = as[kk][ty + 16 * r];
#pragma unroll
      for (int c = 0; c < 4; ++c) br[c] = bs[kk][tx + 16 * c];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[r][c] = fmaf(ar[r], br[c], acc[r][c]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = m0 + ty + 16 * r;
    if (i >= m) continue;
#pragma unroll
    for (int c = 0; c < 4; ++c) epilogue_store1<OutT>(e, batch, i, n0 + tx + 16 * c, acc[r][c]);
  }
}

template <typename InT, typename OutT>
Status launch_typed(const GemmProblem& p, cudaStream_t stream) {
  const dim3 grid((p.n + kBN - 1) / kBN, (p.m + kBM - 1) / kBM, p.batch);
  simt_generic_kernel<InT, OutT><<<grid, kThreads, 0, stream>>>(
      static_cast<const InT*>(p.a), p.lda, p.stride_a, p.a_k_major ? 1 : 0,
      static_cast<const InT*>(p.b), p.ldb, p.stride_b, p.b_k_major ? 1 : 0, p.m, p.n, p.k,
      make_epilogue_args(p));
  BLUBLAS_KERNEL_LAUNCH_CHECK("simt_generic_kernel");
  return Status::success();
}

template <typename InT>
Status launch_in(const GemmProblem& p, cudaStream_t stream) {
  switch (p.cd_type) {
    case Dtype::kF32: return launch_typed<InT, float>(p, stream);
    case Dtype::kBF16: return launch_typed<InT, __nv_bfloat16>(p, stream);
    case Dtype::kF16: return launch_typed<InT, __half>(p, stream);
    case Dtype::kE4M3:
    case Dtype::kE5M2: break;
  }
  return Status(StatusCode::kNotSupported, "simt generic gemm: unknown output dtype");
}

}  // namespace

Status simt_generic_launch(const GemmProblem& p, cudaStream_t stream) {
  switch (p.ab_type) {
    case Dtype::kF32: return launch_typed<float, float>(p, stream);
    case Dtype::kBF16: return launch_in<__nv_bfloat16>(p, stream);
    case Dtype::kF16: return launch_in<__half>(p, stream);
    case Dtype::kE4M3:
    case Dtype::kE5M2: break;  // no FP8 SIMT kernels (validate() routes FP8 to sm90 only)
  }
  return Status(StatusCode::kNotSupported, "simt generic gemm: unsupported input dtype");
}

}  // namespace blublas::gemm_detail
