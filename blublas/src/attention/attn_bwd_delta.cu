// attn_bwd_delta.cu: the first step of every attention backward, D[b, h, t] = sum_i dO * O over the
// head dim, in fp32, written to the caller's workspace as [B, H, T]. Vector form (16-byte aligned
// views, as the mma path requires): a group of kD*size/16 lanes per row, one 16-byte load of O and
// of dO per lane; scalar form otherwise: one warp per row. Fixed shuffle trees: deterministic.
// In dQ-accumulate mode it also zeroes the chain counters and the ticket of the sm90 backward
// that follows (Note [sm90 flash backward: dQ accumulated in order]): no extra launch.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/attention_params.h"
#include "blublas/check.h"

namespace blublas::attn {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ float to_f(float x) {
  return x;
}
__device__ __forceinline__ float to_f(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// Zeroes dq_sem[thread] for this thread's linear index (every grid below has at least
// dq_sem_count threads: >= 8 per row of B*T*H).
__device__ __forceinline__ void zero_dq_sems(const Params& p, int64_t thread, int64_t count) {
  if (p.dq_sem != nullptr && thread < count) p.dq_sem[thread] = 0u;
}

template <typename Elem, int kD>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) attn_bwd_delta_kernel(const Params p,
                                                                             int64_t sems) {
  zero_dq_sems(p, static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, sems);
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

// Vector form: kLanes = kD * sizeof(Elem) / 16 lanes per row (8 for bf16 d64 ... 32 for f32 d128).
// Grid (T blocks, H, B): no index division, and consecutive rows of a block write consecutive D.
template <typename Elem, int kD>
__global__ void __launch_bounds__(256) attn_bwd_delta_vec_kernel(const Params p, int64_t sems) {
  const int64_t block =
      (static_cast<int64_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  zero_dq_sems(p, block * 256 + threadIdx.x, sems);
  constexpr int kPer = 16 / static_cast<int>(sizeof(Elem));  // elements per lane
  constexpr int kLanes = kD / kPer;
  constexpr int kRowsPerBlock = 256 / kLanes;
  const int sub = static_cast<int>(threadIdx.x) % kLanes;
  const int t =
      static_cast<int>(blockIdx.x) * kRowsPerBlock + static_cast<int>(threadIdx.x) / kLanes;
  const int h = blockIdx.y, b = blockIdx.z;
  float acc = 0.0f;
  if (t < p.seq_len) {
    const Elem* o = static_cast<const Elem*>(p.o) + b * p.so.b + t * p.so.t + h * p.so.h;
    const Elem* d_o = static_cast<const Elem*>(p.d_o) + b * p.sdo.b + t * p.sdo.t + h * p.sdo.h;
    const uint4 ov = *reinterpret_cast<const uint4*>(o + sub * kPer);
    const uint4 dv = *reinterpret_cast<const uint4*>(d_o + sub * kPer);
    const Elem* oe = reinterpret_cast<const Elem*>(&ov);
    const Elem* de = reinterpret_cast<const Elem*>(&dv);
#pragma unroll
    for (int i = 0; i < kPer; ++i) acc = fmaf(to_f(oe[i]), to_f(de[i]), acc);
  }
#pragma unroll
  for (int off = kLanes / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (t < p.seq_len && sub == 0) {
    p.delta[(static_cast<int64_t>(b) * p.heads + h) * p.seq_len + t] = acc;
  }
}

template <typename Elem, int kD>
Status launch(const Params& p, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(p.batch) * p.seq_len * p.heads;
  const int64_t sems = dq_sem_count(p.batch, p.heads, p.seq_len);
  constexpr int64_t kChunk = 16 / sizeof(Elem);
  const bool vec = reinterpret_cast<uintptr_t>(p.o) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.d_o) % 16 == 0 && p.so.b % kChunk == 0 &&
                   p.so.t % kChunk == 0 && p.so.h % kChunk == 0 && p.sdo.b % kChunk == 0 &&
                   p.sdo.t % kChunk == 0 && p.sdo.h % kChunk == 0;
  if (vec) {
    constexpr int kRowsPerBlock = static_cast<int>(256 / (kD / kChunk));
    const dim3 grid((p.seq_len + kRowsPerBlock - 1) / kRowsPerBlock, p.heads, p.batch);
    attn_bwd_delta_vec_kernel<Elem, kD><<<grid, 256, 0, stream>>>(p, sems);
    BLUBLAS_KERNEL_LAUNCH_CHECK("attn_bwd_delta_vec");
    return Status::success();
  }
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  BLUBLAS_CHECK_ARG(blocks <= 0x7fffffffLL, "attention_backward: B*T*H=", rows, " too large");
  attn_bwd_delta_kernel<Elem, kD>
      <<<static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0, stream>>>(p, sems);
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
