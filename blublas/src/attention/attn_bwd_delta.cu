// attn_bwd_delta.cu: the first step of every attention backward, D[b, h, t] = sum_i dO * O over the
// head dim, in fp32, written to the caller's workspace as [B, H, T]. One warp per (b, t, h) row,
// lanes reading consecutive elements; the fixed shuffle tree makes it deterministic.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "attention/attention_params.h"
#include "blublas/check.h"

namespace blublas::attn {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename Elem, int kD>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) attn_bwd_delta_kernel(const Params p) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int64_t rows = static_cast<int64_t>(p.batch) * p.seq_len * p.heads;
  if (row >= rows) return;
  const int h = static_cast<int>(row % p.heads);
  const int t = static_cast<int>((row / p.heads) % p.seq_len);
  const int b = static_cast<int>(row / (static_cast<int64_t>(p.heads) * p.seq_len));
  const Elem* o = static_cast<const Elem*>(p.o) + b * p.so.b + t * p.so.t + h * p.so.h;
  const Elem* d_o = static_cast<const Elem*>(p.d_o) + b * p.sdo.b + t * p.sdo.t + h * p.sdo.h;
  float acc = 0.0f;
#pragma unroll
  for (int i = lane; i < kD; i += 32) acc = fmaf(to_f(o[i]), to_f(d_o[i]), acc);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) p.delta[(static_cast<int64_t>(b) * p.heads + h) * p.seq_len + t] = acc;
}

template <typename Elem, int kD>
Status launch(const Params& p, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(p.batch) * p.seq_len * p.heads;
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  BLUBLAS_CHECK_ARG(blocks <= 0x7fffffffLL, "attention_backward: B*T*H=", rows, " too large");
  attn_bwd_delta_kernel<Elem, kD>
      <<<static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0, stream>>>(p);
  BLUBLAS_KERNEL_LAUNCH_CHECK("attn_bwd_delta");
  return Status::success();
}

}  // namespace

Status attn_bwd_delta(const Params& p, int head_dim, bool bf16, cudaStream_t stream) {
  if (bf16) {
    return head_dim == 64 ? launch<__nv_bfloat16, 64>(p, stream)
                          : launch<__nv_bfloat16, 128>(p, stream);
  }
  return head_dim == 64 ? launch<float, 64>(p, stream) : launch<float, 128>(p, stream);
}

}  // namespace blublas::attn
