// blublas/softmax.h: softmax along the last dimension of a rows x cols matrix, forward and
// backward, f32 or bf16 storage with f32 arithmetic, any row length (50304, odd sizes, ...).
//
// Note [Softmax row residency] Each row is read from memory once. On sm_90+, rows of 32 KiB and
// more stream through a shared-memory ring per SM (TMA bulk copies; the next rows load while one
// is reduced and written; Note [Row streaming through a shared-memory ring] in
// src/softmax/row_stream.cuh). Otherwise a row is split over a cluster of 1-8 thread blocks
// (sm_90 clusters; one block elsewhere) that keep their slice in registers, combine (max, sum)
// partials in rank order through distributed shared memory, and write the result from
// registers. Rows too long for either use an online-normalizer kernel that reads the row twice
// (the second read mostly from L2). Results are bitwise deterministic for a given device type.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "blublas/dtype.h"
#include "blublas/status.h"

namespace blublas {

// y = softmax(x) row-wise. y may alias x.
Status softmax_forward(void* y, const void* x, int64_t rows, int64_t cols, Dtype dtype,
                       cudaStream_t stream);

// dx = y * (dy - sum(dy * y)) row-wise. dx may alias dy.
Status softmax_backward(void* dx, const void* dy, const void* y, int64_t rows, int64_t cols,
                        Dtype dtype, cudaStream_t stream);

}  // namespace blublas
