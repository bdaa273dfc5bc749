// splitk_reduce.cu: the split-K reduction of the tensor-core paths (sm_90a wgmma and the sm80
// mma.sync kernels; plain CUDA, any arch): D = epilogue(sum of the split-K fp32 partials), splits
// added in order 0..S-1 (one thread per output pair, no atomics: the same bits every run).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "blublas/check.h"
#include "gemm/epilogue.cuh"
#include "gemm/splitk_reduce.h"

namespace blublas::gemm_detail {
namespace {

template <class OutT>
__global__ void __launch_bounds__(256)
    splitk_reduce_kernel(EpilogueArgs e, const float* __restrict__ partial, int64_t partial_ld,
                         int64_t split_stride, int splits, int batch) {
  const int pairs = (e.n + 1) / 2;
  const int64_t total = static_cast<int64_t>(batch) * e.m * pairs;
  float amax = 0.0f;  // FP8 calls (e.amax): max |D| of this thread's elements
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
    const float2 out = epilogue_store2<OutT>(e, b, i, j, v0, v1);
    amax = fmaxf(amax, fmaxf(fabsf(out.x), fabsf(out.y)));
  }
  if (e.amax != nullptr) amax_warp_commit(e.amax, amax);
}

}  // namespace

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
    case Dtype::kE4M3:
    case Dtype::kE5M2:
      return Status(StatusCode::kNotSupported, "splitk_reduce: FP8 output");
  }
  BLUBLAS_KERNEL_LAUNCH_CHECK("splitk_reduce_kernel");
  return Status::success();
}

}  // namespace blublas::gemm_detail
