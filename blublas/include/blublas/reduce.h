// blublas/reduce.h: column sums of a rows x cols matrix (bias gradients: dbias = sum_rows(dout)),
// f32 or bf16 input, f32 output and accumulation. Deterministic: rows are cut into chunks whose
// size depends only on `rows`; each chunk is summed in a fixed order into the caller's workspace
// and the chunk partials are added in chunk order.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "blublas/dtype.h"
#include "blublas/status.h"

namespace blublas {

Status column_sum_workspace_size(int64_t rows, int64_t cols, std::size_t* bytes);

// out[c] (+)= sum_r in[r][c]; accumulate: add to out, else overwrite. in: `dtype`, row stride cols.
Status column_sum(float* out, const void* in, int64_t rows, int64_t cols, Dtype dtype,
                  bool accumulate, void* workspace, std::size_t workspace_bytes,
                  cudaStream_t stream);

}  // namespace blublas
