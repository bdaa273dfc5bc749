// bias_grad_reduce.cu: the deterministic bias-gradient reduction of the GEMM epilogues kBiasGradA
// (bias_grad[i] = sum_k A'(i, k)) and kBiasGradB (bias_grad[j] = sum_k B'(k, j)), run as a pass
// over the operand beside the GEMM (see epilogue.cuh).
//
// Note [Fixed-order bias-gradient reduction]
// The operand is viewed as R outputs x K reduced elements, either contiguous in k ("row" layout,
// x[r*ld + k]) or contiguous in r ("col" layout, x[k*ld + r]). K is cut into chunks of
// kChunkK ("row") or kColChunkK ("col") elements, so the chunking depends only on K and the layout
// (never on the device), each chunk is summed
// in a fixed order (a strided per-lane sum and a fixed shuffle tree, or a fixed smem tree), and
// the chunk partials are added in chunk order by a second kernel. The result is bitwise the same
// on every run and every GPU, whatever tile the GEMM used. With one chunk the first kernel writes
// bias_grad directly and no workspace is needed.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "blublas/check.h"
#include "gemm/epilogue.cuh"

namespace blublas::gemm_detail {
namespace {

constexpr int kChunkK = 2048;         // "row" layout: k per chunk
constexpr int kRowWarpsPerBlock = 8;  // "row" layout: one warp per (r, chunk)
// "col" layout: k per chunk. 128 (was 512): the bf16 GPT-2 bias gradients (768 .. 3072 columns
// of 16384 rows, 256 columns a block) had 96 .. 384 blocks, under one per SM for the 768-wide
// ones: 2.1 ms of the d12 step for ~2.7 GB (1.3 TB/s, side stream off, H100, session 10).
constexpr int kColChunkK = kBiasGradColChunkK;
constexpr int kColWarps = 8, kColUnroll = 8;

// Sum of x[r*ld + k], k in [k0, k1), by one warp: lane-strided partial sums, then a fixed tree.
template <typename T>
__global__ void __launch_bounds__(kRowWarpsPerBlock * 32)
    bias_grad_row_kernel(const T* __restrict__ x, int64_t ld, int rows, int k,
                         float* __restrict__ out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = blockIdx.x * kRowWarpsPerBlock + warp;
  const int chunk = blockIdx.y;
  if (r >= rows) return;
  const int k0 = chunk * kChunkK;
  const int k1 = min(k, k0 + kChunkK);
  const T* row = x + static_cast<int64_t>(r) * ld;
  float s = 0.0f;
  for (int kk = k0 + lane; kk < k1; kk += 32) s += to_f32(row[kk]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (lane == 0) out[static_cast<int64_t>(chunk) * rows + r] = s;
}

// "col" layout: a block of 8 warps takes kColChunkK consecutive k and 32 * VEC consecutive r,
// each lane VEC consecutive r as one 16-byte load (VEC = 1: scalar, any alignment). Warp w sums
// k = k0 + w, k0 + w + 8, ... in order, kColUnroll loads in flight; the 8 warp partials are then
// added in warp order through shared memory. (The first version, 32 r x 8 k-lanes per block with
// 2048-deep chunks and scalar loads, ran 192 blocks for 768 outputs: 60-80 us per call in the GPT-2
// step, 3.9 ms of bf16's 33.7 ms step; Note [Fixed-order bias-gradient reduction].)
template <typename T, int VEC>
struct ColVec;
template <typename T>
struct ColVec<T, 1> {
  static __device__ __forceinline__ void load(const T* p, float* v) { v[0] = to_f32(*p); }
};
template <>
struct ColVec<float, 4> {
  static __device__ __forceinline__ void load(const float* p, float* v) {
    const float4 x = __ldcs(reinterpret_cast<const float4*>(p));
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  }
};
template <typename T>
struct ColVec16 {  // 8 x 16-bit
  static __device__ __forceinline__ void load(const T* p, float* v) {
    const uint4 x = __ldcs(reinterpret_cast<const uint4*>(p));
    const T* e = reinterpret_cast<const T*>(&x);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = to_f32(e[i]);
  }
};
template <>
struct ColVec<__nv_bfloat16, 8> : ColVec16<__nv_bfloat16> {};
template <>
struct ColVec<__half, 8> : ColVec16<__half> {};

template <typename T, int VEC>
__global__ void __launch_bounds__(kColWarps * 32)
    bias_grad_col_kernel(const T* __restrict__ x, int64_t ld, int rows, int k,
                         float* __restrict__ out) {
  constexpr int kCols = 32 * VEC;
  __shared__ float partial[kColWarps][kCols];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = blockIdx.x * kCols + lane * VEC;
  const int chunk = blockIdx.y;
  const int k0 = chunk * kColChunkK;
  const int k1 = min(k, k0 + kColChunkK);
  float s[VEC];
#pragma unroll
  for (int v = 0; v < VEC; ++v) s[v] = 0.0f;
  if (r < rows) {  // VEC > 1 only when rows % VEC == 0: the whole vector is in range
    const T* col = x + r;
    for (int kb = k0 + warp; kb < k1; kb += kColWarps * kColUnroll) {
      float v[kColUnroll][VEC];
#pragma unroll
      for (int u = 0; u < kColUnroll; ++u) {
        const int kk = kb + u * kColWarps;
        if (kk < k1) ColVec<T, VEC>::load(col + static_cast<int64_t>(kk) * ld, v[u]);
      }
#pragma unroll
      for (int u = 0; u < kColUnroll; ++u) {
        if (kb + u * kColWarps < k1) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) s[e] += v[u][e];
        }
      }
    }
  }
#pragma unroll
  for (int v = 0; v < VEC; ++v) partial[warp][lane * VEC + v] = s[v];
  __syncthreads();
  for (int c = threadIdx.x; c < kCols; c += kColWarps * 32) {
    const int rr = blockIdx.x * kCols + c;
    if (rr >= rows) continue;
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < kColWarps; ++w) t += partial[w][c];
    out[static_cast<int64_t>(chunk) * rows + rr] = t;
  }
}

// out[r] = sum over chunks c (in order) of partial[c*rows + r], 8 chunks' loads in flight.
__global__ void bias_grad_chunk_sum_kernel(const float* __restrict__ partial, int chunks, int rows,
                                           float* __restrict__ out) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  constexpr int kBatch = 8;
  float s = 0.0f;
  for (int c0 = 0; c0 < chunks; c0 += kBatch) {
    float v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (c0 + u < chunks) v[u] = partial[static_cast<int64_t>(c0 + u) * rows + r];
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (c0 + u < chunks) s += v[u];
    }
  }
  out[r] = s;
}

struct ReduceView {
  const void* x = nullptr;
  int64_t ld = 0;
  int rows = 0;  // outputs
  bool contiguous_k = true;
};

bool view_of(const GemmProblem& p, ReduceView* v) {
  if (p.epilogue == Epilogue::kBiasGradA) {
    *v = ReduceView{p.a, p.lda, p.m, p.a_k_major};
    return true;
  }
  if (p.epilogue == Epilogue::kBiasGradB) {
    *v = ReduceView{p.b, p.ldb, p.n, p.b_k_major};
    return true;
  }
  return false;
}

// Chunks depend only on K and the operand's layout (Note [Fixed-order bias-gradient reduction]).
int chunks_of(const ReduceView& v, int k) {
  const int per = v.contiguous_k ? kChunkK : kColChunkK;
  return (k + per - 1) / per;
}

template <typename T>
constexpr int col_vec() {
  return 16 / static_cast<int>(sizeof(T));
}

template <typename T, int VEC>
void launch_col(const ReduceView& v, int k, int chunks, float* out, cudaStream_t stream) {
  const dim3 grid((v.rows + 32 * VEC - 1) / (32 * VEC), chunks);
  bias_grad_col_kernel<T, VEC>
      <<<grid, kColWarps * 32, 0, stream>>>(static_cast<const T*>(v.x), v.ld, v.rows, k, out);
}

template <typename T>
Status launch(const ReduceView& v, int k, float* partial_or_out, cudaStream_t stream) {
  const int chunks = chunks_of(v, k);
  const T* x = static_cast<const T*>(v.x);
  if (v.contiguous_k) {
    dim3 grid((v.rows + kRowWarpsPerBlock - 1) / kRowWarpsPerBlock, chunks);
    bias_grad_row_kernel<T>
        <<<grid, kRowWarpsPerBlock * 32, 0, stream>>>(x, v.ld, v.rows, k, partial_or_out);
    BLUBLAS_KERNEL_LAUNCH_CHECK("bias_grad_row_kernel");
  } else {
    constexpr int kVec = col_vec<T>();
    const bool vec =
        reinterpret_cast<std::uintptr_t>(x) % 16 == 0 && v.ld % kVec == 0 && v.rows % kVec == 0;
    if (vec) {
      launch_col<T, kVec>(v, k, chunks, partial_or_out, stream);
    } else {
      launch_col<T, 1>(v, k, chunks, partial_or_out, stream);
    }
    BLUBLAS_KERNEL_LAUNCH_CHECK("bias_grad_col_kernel");
  }
  return Status::success();
}

}  // namespace

std::size_t bias_grad_workspace_bytes(const GemmProblem& p, const DeviceInfo& dev) {
  ReduceView v;
  if (!view_of(p, &v)) return 0;
  const int chunks = chunks_of(v, p.k);
  return chunks > 1 ? static_cast<std::size_t>(chunks) * v.rows * sizeof(float) : 0;
}

Status bias_grad_run(const GemmProblem& p, const DeviceInfo& dev, void* workspace,
                     std::size_t workspace_bytes, cudaStream_t stream) {
  ReduceView v;
  if (!view_of(p, &v)) return Status::success();
  BLUBLAS_CHECK_ARG(p.batch == 1, "gemm bias_grad: batch must be 1 (batch=", p.batch, ")");
  const std::size_t need = bias_grad_workspace_bytes(p, dev);
  BLUBLAS_CHECK(workspace_bytes >= need && (need == 0 || workspace != nullptr),
                StatusCode::kWorkspaceTooSmall, "gemm bias_grad: needs ", need,
                " workspace bytes, got ", workspace_bytes);
  BLUBLAS_CHECK(reinterpret_cast<std::uintptr_t>(workspace) % alignof(float) == 0,
                StatusCode::kMisaligned, "gemm bias_grad: workspace not 4-byte aligned");
  const int chunks = chunks_of(v, p.k);
  float* target = chunks > 1 ? static_cast<float*>(workspace) : p.bias_grad;
  switch (p.ab_type) {
    case Dtype::kF32:
      BLUBLAS_RETURN_IF_ERROR(launch<float>(v, p.k, target, stream));
      break;
    case Dtype::kBF16:
      BLUBLAS_RETURN_IF_ERROR(launch<__nv_bfloat16>(v, p.k, target, stream));
      break;
    case Dtype::kF16:
      BLUBLAS_RETURN_IF_ERROR(launch<__half>(v, p.k, target, stream));
      break;
    case Dtype::kE4M3:
    case Dtype::kE5M2:  // validate() keeps FP8 away from the bias-gradient epilogues
      return Status(StatusCode::kNotSupported, "gemm bias_grad: FP8 operands");
  }
  if (chunks > 1) BLUBLAS_RETURN_IF_ERROR(bias_grad_finish(target, chunks, v.rows, p.bias_grad, stream));
  return Status::success();
}

Status bias_grad_finish(const float* partial, int chunks, int rows, float* out, cudaStream_t stream) {
  bias_grad_chunk_sum_kernel<<<(rows + 255) / 256, 256, 0, stream>>>(partial, chunks, rows, out);
  BLUBLAS_KERNEL_LAUNCH_CHECK("bias_grad_chunk_sum_kernel");
  return Status::success();
}

}  // namespace blublas::gemm_detail
