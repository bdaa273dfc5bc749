// blublas/elementwise.h: the named elementwise kernels of a GPT-2 step: GELU (tanh approximation)
// forward and backward with an optional fused per-column bias, and the residual add. f32 or bf16
// storage, f32 arithmetic, 16-byte vector loads (scalar fallback for odd sizes or alignment).
//
//   gelu(u) = 0.5 u (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3)))      (= u * sigmoid(2 * inner))
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "blublas/dtype.h"
#include "blublas/status.h"

namespace blublas {

// out[r][c] = gelu(x[r][c] + bias[c]); bias may be null. rows x cols contiguous. out may alias x.
Status gelu_forward(void* out, const void* x, const void* bias, int64_t rows, int64_t cols,
                    Dtype dtype, cudaStream_t stream);

// dx[r][c] = dout[r][c] * gelu'(x[r][c] + bias[c]), x the forward's input (before the bias).
// bias may be null. dx may alias dout or x.
Status gelu_backward(void* dx, const void* dout, const void* x, const void* bias, int64_t rows,
                     int64_t cols, Dtype dtype, cudaStream_t stream);

// out[i] = a[i] + b[i] for n elements. out may alias a or b.
Status residual_add(void* out, const void* a, const void* b, int64_t n, Dtype dtype,
                    cudaStream_t stream);

}  // namespace blublas
