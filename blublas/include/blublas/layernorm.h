// blublas/layernorm.h: LayerNorm over the last dimension of a rows x cols matrix, forward (with
// an optional fused residual add) and backward (dx, dweight, dbias), f32 or bf16 activations with
// f32 statistics and f32 accumulation.
//
// Forward:  h = x (+ residual);  out = (h - mean) * rstd * weight + bias,
//           mean = sum(h) / cols, rstd = 1 / sqrt(sum((h - mean)^2) / cols + eps)   (two-pass).
// Backward: xhat = (h - mean) * rstd, g = dout * weight,
//           dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
//           dweight = sum_rows(dout * xhat), dbias = sum_rows(dout).
// dweight/dbias are reduced deterministically: per-block partials into the caller's workspace, then
// a fixed-order sum. The row partition depends on `rows` and the device's SM count (one balanced
// wave), never on timing: bit-identical run to run on a given GPU model.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "blublas/dtype.h"
#include "blublas/status.h"

namespace blublas {

// x, residual, out, residual_out, weight, bias: `dtype` (f32 or bf16); mean, rstd: f32 [rows].
// residual and residual_out are both null (no residual) or both set (residual_out = x + residual,
// in `dtype`, then normalized). bias may be null (no shift). mean and rstd may be null (not saved).
// out may alias x; residual_out may alias x or residual. Any cols >= 1; rows of length cols are
// contiguous. 16-byte vector path when cols and all pointers allow it, scalar otherwise.
Status layernorm_forward(void* out, float* mean, float* rstd, void* residual_out, const void* x,
                         const void* residual, const void* weight, const void* bias, int64_t rows,
                         int64_t cols, float eps, Dtype dtype, cudaStream_t stream);

// Workspace bytes layernorm_backward needs for rows x cols (independent of the device).
Status layernorm_backward_workspace_size(int64_t rows, int64_t cols, std::size_t* bytes);

// dx: `dtype` [rows x cols]; dweight, dbias: f32 [cols] (dbias may be null); dout, x: `dtype`
// (x is the normalized input h, i.e. residual_out when the residual was fused); mean, rstd: f32
// from the forward; weight: `dtype`. accumulate_dx: dx += result (residual gradient flow), else
// dx = result; accumulate_dparams: dweight/dbias += result, else =. dx may alias dout.
Status layernorm_backward(void* dx, float* dweight, float* dbias, const void* dout, const void* x,
                          const float* mean, const float* rstd, const void* weight, int64_t rows,
                          int64_t cols, Dtype dtype, bool accumulate_dx, bool accumulate_dparams,
                          void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

// The general backward (layernorm_backward is its accumulate_dx / f32-parameter case):
//   dx = result + residual   (residual null: dx = result; residual may alias dx or dout), the add
//                            in f32 and rounded once, as a separate add of a rounded result would
//                            give in f32 (so a pre-LayerNorm block's two input gradients in one pass);
//   dweight, dbias (dbias may be null) in `param_dtype`: f32, or `dtype` itself (the f32 sums
//                            rounded once); accumulate_dparams adds to them.
// The same kernels, workspace and determinism as layernorm_backward.
Status layernorm_backward_residual(void* dx, const void* residual, void* dweight, void* dbias,
                                   Dtype param_dtype, const void* dout, const void* x, const float* mean,
                                   const float* rstd, const void* weight, int64_t rows, int64_t cols,
                                   Dtype dtype, bool accumulate_dparams, void* workspace,
                                   std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace blublas
