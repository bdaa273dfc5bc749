// layernorm_variants.h (internal): the LayerNorm launchers with an explicit kernel-variant
// number, for blublas-profiler sweeps (blublas/tools/profile_kernels.cu, --variant=N). The public
// launchers (blublas/layernorm.h) call these with variant 0, which is always the measured best;
// every variant computes the same function, deterministically.
//
// Forward (fast path, 16-byte packs, cols <= 64 elements per lane):
//   0  default (= the best measured below: 3)
//   1  one row per warp, 8 warps per block                         (session-1 kernel)
//   3  one row per warp, 4 warps per block (finer tail)
//   5  as 1, launched dependent on the previous kernel (PDL: its launch overlaps that kernel's
//      tail; griddepcontrol.wait before the first read)
// Backward (fast path, cols <= 32 elements per lane):
//   0  default (= the best measured below: 3 for f32, 2 for bf16)
//   1  fixed 32-row chunks per block, <= 1024 partials             (session-1 kernel)
//   2  balanced persistent grid (SMs x occupancy), finish kernel launched dependent (PDL)
//   3  as 2 with the next row's x, dout, mean, rstd prefetched into registers (cols <= 768)
//   5  as 3, the main kernel launched dependent on the previous kernel (PDL)
// Numbers 2, 4, 6 (forward) and 4, 6 (backward) were streaming-cache-hint and persistent-prefetch
// variants that measured slower on an H200 and were removed (bench/NOTES.md).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "blublas/dtype.h"
#include "blublas/status.h"

namespace blublas::detail {

Status layernorm_forward_variant(int variant, void* out, float* mean, float* rstd,
                                 void* residual_out, const void* x, const void* residual,
                                 const void* weight, const void* bias, int64_t rows, int64_t cols,
                                 float eps, Dtype dtype, cudaStream_t stream);

// layernorm_backward_residual's arguments (blublas/layernorm.h) after the variant number.
Status layernorm_backward_variant(int variant, void* dx, const void* residual, void* dweight,
                                  void* dbias, Dtype param_dtype, const void* dout, const void* x,
                                  const float* mean, const float* rstd, const void* weight,
                                  int64_t rows, int64_t cols, Dtype dtype, bool accumulate_dparams,
                                  void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace blublas::detail
