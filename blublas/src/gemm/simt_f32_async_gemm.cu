// simt_f32_async_gemm.cu: the strict-fp32 SIMT GEMM for 16-byte aligned operands, 128 x 128
// tiles fed by a cp.async pipeline (FFMA only, no tensor-core instruction). The register-staged
// kernel (simt_f32_gemm.cu) stays for unaligned operands and small problems.
//
// Note [cp.async SIMT pipeline]
// Version 1 (simt_f32_gemm.cu) stages each 8-deep k slice through registers and, for a k-major
// operand, stores it transposed with four scalar STS per float4; on an H200 it reached 0.79
// (NT) to 0.85 (NN) of cuBLAS on the GPT-2 shapes. Here the copy is asynchronous and needs no
// registers: the m/n-contiguous operand moves in 16-byte cp.async chunks, the k-contiguous one in
// 4-byte cp.async copies that land transposed (as[k][m]) directly, so shared memory keeps the
// k-outer layout the inner loop reads with two float4 per operand per k. Slices are 16 deep in a
// 3-stage ring (51 KB per CTA, 2 CTAs per SM): one barrier per 16 k instead of per 8, and loads
// run two slices ahead. Edges use the zero-fill (src-size) form, so any M, N, K is exact.
// The thread-to-output mapping and the epilogue (including split-K partials) are version 1's.
// Measured on an H200 (run 9): slower than version 1 (NN 0.77 vs 0.85, NT 0.69 vs 0.79 of
// cuBLAS), so simt_f32_gemm.cu does not route to it (kUseAsyncKernel = false). Suspects: the
// 4-byte cp.async count for k-major operands and 2-way conflicts on their transposed stores.
#include <cstdint>

#include "blublas/check.h"
#include "common/arch.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/simt_gemm_launch.h"

namespace blublas::gemm_detail {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 16, kStages = 3, kThreads = 256;
constexpr int kStride = kBM + 4;                    // floats per k row of a stage (both operands)
constexpr int kStageFloats = 2 * kBK * kStride;     // A then B
constexpr int kSmemBytes = kStages * kStageFloats * 4;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async_16(float* dst, const float* src, int src_bytes) {
#if BLUBLAS_SM80_ENABLED
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(src_bytes));
#endif
}
__device__ __forceinline__ void cp_async_4(float* dst, const float* src, int src_bytes) {
#if BLUBLAS_SM80_ENABLED
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(src_bytes));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if BLUBLAS_SM80_ENABLED
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if BLUBLAS_SM80_ENABLED
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// One operand slice (128 rows of its M or N extent, kBK of k starting at k0, guarded by n_rows
// and k_end) into s[k][r]. KMAJ: element (r, k) at x[r*ld + k]; else at x[k*ld + r].
template <bool KMAJ>
__device__ __forceinline__ void load_slice(float* s, const float* __restrict__ x, int64_t ld,
                                           int r0, int k0, int n_rows, int k_end) {
  if constexpr (KMAJ) {
    // 128 x 16 elements, 8 per thread; a warp reads 2 rows x 64 contiguous bytes.
#pragma unroll
    for (int l = 0; l < kBM * kBK / kThreads; ++l) {
      const int e = threadIdx.x + l * kThreads;
      const int r = e / kBK, kq = e % kBK;
      const int gr = r0 + r, gk = k0 + kq;
      const bool ok = gr < n_rows && gk < k_end;
      cp_async_4(s + kq * kStride + r, ok ? x + static_cast<int64_t>(gr) * ld + gk : x, ok ? 4 : 0);
    }
  } else {
    // 16 k rows x 32 chunks of 4 floats, 2 per thread.
#pragma unroll
    for (int l = 0; l < kBM * kBK / 4 / kThreads; ++l) {
      const int c = threadIdx.x + l * kThreads;
      const int kr = c / (kBM / 4), r4 = (c % (kBM / 4)) * 4;
      const int gk = k0 + kr, gr = r0 + r4;
      const int valid = gk < k_end ? max(0, min(4, n_rows - gr)) : 0;
      cp_async_16(s + kr * kStride + r4, valid > 0 ? x + static_cast<int64_t>(gk) * ld + gr : x,
                  valid * 4);
    }
  }
}

template <bool A_KMAJ, bool B_KMAJ>
__global__ void __launch_bounds__(kThreads, 2)
    simt_f32_async_kernel(const float* __restrict__ a, int64_t lda, int64_t stride_a,
                          const float* __restrict__ b, int64_t ldb, int64_t stride_b, int m, int n,
                          int k_total, SplitArgs split, EpilogueArgs e) {
  extern __shared__ __align__(16) float smem[];
  const int batch = blockIdx.z % split.batches;
  const int split_index = blockIdx.z / split.batches;
  a += batch * stride_a;
  b += batch * stride_b;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int tx = threadIdx.x % (kBN / 8), ty = threadIdx.x / (kBN / 8);
  const int k_lo = split.k_split > 0 ? split_index * split.k_split : 0;
  const int k_hi = split.k_split > 0 ? min(k_total, k_lo + split.k_split) : k_total;
  const int slices = (k_hi - k_lo + kBK - 1) / kBK;

  float acc[8][8];
#pragma unroll
  for (int r = 0; r < 8; ++r) {
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[r][c] = 0.0f;
  }

  auto load_stage = [&](int stage, int slice) {
    float* sa = smem + stage * kStageFloats;
    float* sb = sa + kBK * kStride;
    const int k0 = k_lo + slice * kBK;
    load_slice<A_KMAJ>(sa, a, lda, m0, k0, m, k_hi);
    load_slice<B_KMAJ>(sb, b, ldb, n0, k0, n, k_hi);
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < slices) load_stage(s, s);
    cp_async_commit();
  }

  for (int kt = 0; kt < slices; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int next = kt + kStages - 1;
    if (next < slices) load_stage(next % kStages, next);
    cp_async_commit();

    const float* sa = smem + (kt % kStages) * kStageFloats;
    const float* sb = sa + kBK * kStride;
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      const float4 a0 = *reinterpret_cast<const float4*>(sa + kk * kStride + ty * 4);
      const float4 a1 = *reinterpret_cast<const float4*>(sa + kk * kStride + ty * 4 + kBM / 2);
      const float4 b0 = *reinterpret_cast<const float4*>(sb + kk * kStride + tx * 4);
      const float4 b1 = *reinterpret_cast<const float4*>(sb + kk * kStride + tx * 4 + kBN / 2);
      const float fa[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float fb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int r = 0; r < 8; ++r) {
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[r][c] = fmaf(fa[r], fb[c], acc[r][c]);
      }
    }
  }
  cp_async_wait<0>();

  if (split.partial != nullptr) {
    float* out = split.partial + static_cast<int64_t>(split_index * split.batches + batch) * m * n;
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int i = m0 + (r < 4 ? ty * 4 + r : kBM / 2 + ty * 4 + (r - 4));
      if (i >= m) continue;
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const int j = n0 + (c < 4 ? tx * 4 + c : kBN / 2 + tx * 4 + (c - 4));
        if (j < n) out[static_cast<int64_t>(i) * n + j] = acc[r][c];
      }
    }
    return;
  }
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int i = m0 + (r < 4 ? ty * 4 + r : kBM / 2 + ty * 4 + (r - 4));
    if (i >= m) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int j = n0 + h * (kBN / 2) + tx * 4;
      epilogue_store2<float>(e, batch, i, j, acc[r][h * 4 + 0], acc[r][h * 4 + 1]);
      epilogue_store2<float>(e, batch, i, j + 2, acc[r][h * 4 + 2], acc[r][h * 4 + 3]);
    }
  }
}

template <bool A_KMAJ, bool B_KMAJ>
Status launch(const GemmProblem& p, const SplitArgs& split, int splits, cudaStream_t stream) {
  auto kernel = simt_f32_async_kernel<A_KMAJ, B_KMAJ>;
  BLUBLAS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const dim3 grid((p.n + kBN - 1) / kBN, (p.m + kBM - 1) / kBM, p.batch * splits);
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(
      static_cast<const float*>(p.a), p.lda, p.stride_a, static_cast<const float*>(p.b), p.ldb,
      p.stride_b, p.m, p.n, p.k, split, make_epilogue_args(p));
  BLUBLAS_KERNEL_LAUNCH_CHECK("simt_f32_async_kernel");
  return Status::success();
}

bool aligned16(const void* ptr, int64_t ld, int64_t stride) {
  return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0 && ld % 4 == 0 && stride % 4 == 0;
}

}  // namespace

bool simt_f32_async_accepts(const GemmProblem& p) {
  return p.ab_type == Dtype::kF32 && aligned16(p.a, p.lda, p.stride_a) &&
         aligned16(p.b, p.ldb, p.stride_b);
}

Status simt_f32_async_launch(const GemmProblem& p, const SplitArgs& split, int splits,
                             cudaStream_t stream) {
  if (p.a_k_major) {
    return p.b_k_major ? launch<true, true>(p, split, splits, stream)
                       : launch<true, false>(p, split, splits, stream);
  }
  return p.b_k_major ? launch<false, true>(p, split, splits, stream)
                     : launch<false, false>(p, split, splits, stream);
}

}  // namespace blublas::gemm_detail
