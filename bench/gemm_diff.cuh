// gemm_diff.cuh: what the GEMM benchmarks (gemm_bench, gemm_fp8_bench) use to compare an output
// with the reference library's on the device: max |x - ref| / max |ref| and the NaN counts, without
// copying the matrices to the host (an lm head output is 1.6 GB in bf16).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "bench_common.h"
#include "blublas/dtype.h"

namespace blu::bench {

__device__ __forceinline__ float load_f32(const float* p) {
  return *p;
}
__device__ __forceinline__ float load_f32(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}

inline int grid_for(size_t n) {
  return static_cast<int>(std::min<size_t>((n + 255) / 256, 4096));
}

// out[0] = max |x - ref| and out[1] = max |ref| over rows x cols at leading dimension ld, as float
// bits (non-negative floats order like their bits; a NaN difference wins and shows as NaN);
// out[2] / out[3] count NaNs in x (ours: NaN or never written) and in ref (cuBLAS).
template <typename TX, typename TR>
__global__ void diff_max_kernel(const TX* x, const TR* ref, int64_t rows, int64_t cols, int64_t ld,
                                unsigned* out) {
  float dmax = 0.f, rmax = 0.f;
  unsigned nan_x = 0, nan_r = 0;
  const int64_t total = rows * cols;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t / cols, j = t % cols;
    const float r = load_f32(ref + i * ld + j), xv = load_f32(x + i * ld + j);
    const float d = fabsf(xv - r);
    dmax = (d > dmax || d != d) ? d : dmax;
    rmax = fmaxf(rmax, fabsf(r));
    nan_x += xv != xv;
    nan_r += r != r;
  }
  atomicMax(out, __float_as_uint(fabsf(dmax)));
  atomicMax(out + 1, __float_as_uint(rmax));
  if (nan_x) atomicAdd(out + 2, nan_x);
  if (nan_r) atomicAdd(out + 3, nan_r);
}

// max |x - ref| / max |ref| (NaN when x holds a NaN or an unwritten poisoned element). NaN counts
// are appended to *note ("what: ours has N NaN/unwritten, cuBLAS has M NaN").
inline double rel_diff(const void* x, blublas::Dtype tx, const void* ref, blublas::Dtype tr,
                       int64_t rows, int64_t cols, int64_t ld, unsigned* scratch, const char* what,
                       std::string* note) {
  BLU_BENCH_CUDA(cudaMemset(scratch, 0, 4 * sizeof(unsigned)));
  const int g = grid_for(size_t(rows) * cols);
  auto f = [](const void* p) { return static_cast<const float*>(p); };
  auto h = [](const void* p) { return static_cast<const __nv_bfloat16*>(p); };
  if (tx == blublas::Dtype::kBF16 && tr == blublas::Dtype::kBF16)
    diff_max_kernel<<<g, 256>>>(h(x), h(ref), rows, cols, ld, scratch);
  else if (tx == blublas::Dtype::kF32 && tr == blublas::Dtype::kF32)
    diff_max_kernel<<<g, 256>>>(f(x), f(ref), rows, cols, ld, scratch);
  else if (tx == blublas::Dtype::kF32)
    diff_max_kernel<<<g, 256>>>(f(x), h(ref), rows, cols, ld, scratch);
  else
    diff_max_kernel<<<g, 256>>>(h(x), f(ref), rows, cols, ld, scratch);
  BLU_BENCH_CUDA(cudaGetLastError());
  unsigned bits[4];
  BLU_BENCH_CUDA(cudaMemcpy(bits, scratch, sizeof(bits), cudaMemcpyDeviceToHost));
  if (bits[2] || bits[3])
    *note += std::string(note->empty() ? "" : "; ") + what + ": ours has " +
             std::to_string(bits[2]) + " NaN/unwritten of " + std::to_string(rows * cols) +
             ", cuBLAS has " + std::to_string(bits[3]) + " NaN";
  float d, r;
  std::memcpy(&d, &bits[0], 4);
  std::memcpy(&r, &bits[1], 4);
  return r > 0 ? double(d) / double(r) : double(d);
}

}  // namespace blu::bench
