// bias_grad_reduce.cu: the deterministic bias-gradient reduction of the GEMM epilogues kBiasGradA
// (bias_grad[i] = sum_k A'(i, k)) and kBiasGradB (bias_grad[j] = sum_k B'(k, j)), run as a pass
// over the operand beside the GEMM (see epilogue.cuh).
//
// Note [Fixed-order bias-gradient reduction]
// The operand is viewed as R outputs x K reduced elements, either contiguous in k ("row" layout,
// x[r*ld + k]) or contiguous in r ("col" layout, x[k*ld + r]). K is cut into chunks of
// kChunkK elements, a number that depends only on K (never on the device), each chunk is summed
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

constexpr int kChunkK = 2048;
constexpr int kRowWarpsPerBlock = 8;   // "row" layout: one warp per (r, chunk)
constexpr int kColR = 32, kColK = 8;   // "col" layout: 32 outputs x 8 k-lanes per block

// Sum of x[r*ld + k], k in [k0, k1), by one warp: lane-strided partial sums, then a fixed tree.
template <typename T>
__global__ void __launch_bounds__(kRowWarpsPerBlock * 32)
    bias_grad_row_kernel(const T* __restrict__ x, int64_t ld, int rows, int k, float* __restrict__ out) {
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

// Sum of x[k*ld + r], k in the chunk, for 32 consecutive r per block: 8 k-lanes each sum a
// strided subset, then the 8 partials are added in lane order.
template <typename T>
__global__ void __launch_bounds__(kColR * kColK)
    bias_grad_col_kernel(const T* __restrict__ x, int64_t ld, int rows, int k, float* __restrict__ out) {
  __shared__ float partial[kColK][kColR];
  const int tr = threadIdx.x % kColR, tk = threadIdx.x / kColR;
  const int r = blockIdx.x * kColR + tr;
  const int chunk = blockIdx.y;
  const int k0 = chunk * kChunkK;
  const int k1 = min(k, k0 + kChunkK);
  float s = 0.0f;
  if (r < rows) {
    for (int kk = k0 + tk; kk < k1; kk += kColK) s += to_f32(x[static_cast<int64_t>(kk) * ld + r]);
  }
  partial[tk][tr] = s;
  __syncthreads();
  if (tk == 0 && r < rows) {
    float t = 0.0f;
#pragma unroll
    for (int i = 0; i < kColK; ++i) t += partial[i][tr];
    out[static_cast<int64_t>(chunk) * rows + r] = t;
  }
}

// out[r] = sum over chunks c (in order) of partial[c*rows + r].
__global__ void bias_grad_chunk_sum_kernel(const float* __restrict__ partial, int chunks, int rows,
                                           float* __restrict__ out) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float s = 0.0f;
  for (int c = 0; c < chunks; ++c) s += partial[static_cast<int64_t>(c) * rows + r];
  out[r] = s;
}

struct ReduceView {
  const void* x = nullptr;
  int64_t ld = 0;
  int rows = 0;          // outputs
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

int chunks_of(int k) { return (k + kChunkK - 1) / kChunkK; }

template <typename T>
Status launch(const ReduceView& v, int k, float* partial_or_out, cudaStream_t stream) {
  const int chunks = chunks_of(k);
  const T* x = static_cast<const T*>(v.x);
  if (v.contiguous_k) {
    dim3 grid((v.rows + kRowWarpsPerBlock - 1) / kRowWarpsPerBlock, chunks);
    bias_grad_row_kernel<T><<<grid, kRowWarpsPerBlock * 32, 0, stream>>>(x, v.ld, v.rows, k,
                                                                         partial_or_out);
    BLUBLAS_KERNEL_LAUNCH_CHECK("bias_grad_row_kernel");
  } else {
    dim3 grid((v.rows + kColR - 1) / kColR, chunks);
    bias_grad_col_kernel<T><<<grid, kColR * kColK, 0, stream>>>(x, v.ld, v.rows, k, partial_or_out);
    BLUBLAS_KERNEL_LAUNCH_CHECK("bias_grad_col_kernel");
  }
  return Status::success();
}

}  // namespace

std::size_t bias_grad_workspace_bytes(const GemmProblem& p, const DeviceInfo& dev) {
  ReduceView v;
  if (!view_of(p, &v)) return 0;
  const int chunks = chunks_of(p.k);
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
  const int chunks = chunks_of(p.k);
  float* target = chunks > 1 ? static_cast<float*>(workspace) : p.bias_grad;
  switch (p.ab_type) {
    case Dtype::kF32: BLUBLAS_RETURN_IF_ERROR(launch<float>(v, p.k, target, stream)); break;
    case Dtype::kBF16: BLUBLAS_RETURN_IF_ERROR(launch<__nv_bfloat16>(v, p.k, target, stream)); break;
    case Dtype::kF16: BLUBLAS_RETURN_IF_ERROR(launch<__half>(v, p.k, target, stream)); break;
  }
  if (chunks > 1) {
    bias_grad_chunk_sum_kernel<<<(v.rows + 255) / 256, 256, 0, stream>>>(target, chunks, v.rows,
                                                                          p.bias_grad);
    BLUBLAS_KERNEL_LAUNCH_CHECK("bias_grad_chunk_sum_kernel");
  }
  return Status::success();
}

}  // namespace blublas::gemm_detail
