// embedding_variants.h (internal): embedding_backward with an explicit variant number, for
// blublas-profiler sweeps (blublas/tools/profile_kernels.cu, --variant=N). The public launcher
// (blublas/embedding.h) calls it with variant 0, the measured best.
//
//   0, 1  bucketing in 6 launches, then one launch summing dwpe and the buckets with interleaved
//         blocks (session-1 design; dout read twice from DRAM)
//
// Tried in session 2 and removed (H200, B16 T1024 C768 V50304 f32; bench/NOTES.md): the same
// bucketing launched as a PDL chain with column-chunked sums (dout once from DRAM, the second
// read of each 128-column chunk from L2): 68.0 us vs 65.8; a one-block shared-memory bucketing
// (1 launch instead of 6) + chunked sums: 96 us; two bucket ids per warp: 86 us.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "blublas/dtype.h"
#include "blublas/status.h"

namespace blublas::detail {

Status embedding_backward_variant(int variant, float* dwte, float* dwpe, const void* dout,
                                  const int32_t* tokens, int64_t batch, int64_t seq_len,
                                  int64_t channels, int64_t vocab, int* error_flag, Dtype dtype,
                                  void* workspace, std::size_t workspace_bytes,
                                  cudaStream_t stream);

}  // namespace blublas::detail
