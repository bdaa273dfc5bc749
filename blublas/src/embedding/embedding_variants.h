// embedding_variants.h (internal): embedding_backward with an explicit variant number, for
// blublas-profiler sweeps (blublas/tools/profile_kernels.cu, --variant=N). The public launcher
// (blublas/embedding.h) calls it with variant 0, the measured best. Every variant computes the
// same sums in the same order (Note [Deterministic embedding backward]), so the bits agree.
//
//   0  default (= the best measured below)
//   1  session-1: bucketing in 6 launches, then one launch summing dwpe and the buckets with
//      interleaved blocks; dout is read from DRAM twice
//   2  the same bucketing launched dependent (PDL), then Note [Chunked embedding sums]: dout is
//      read once from DRAM, the second read of each column chunk hits L2; dwpe runs 1 chunk ahead
//   3  as 2 with dwpe 2 chunks ahead
//   4  single-block bucketing in shared memory (vocab <= ~56K) + chunked sums, dwpe 1 ahead
//   5  as 4 with dwpe 2 chunks ahead
//   6  as 4 with two 16-byte packs per lane per chunk (half the chunks, 2x the L2 footprint)
//   7  as 4 with the bucketing launched dependent on the caller's previous kernel (PDL)
//   8  as 6, likewise
//   9  as 4 with two bucket ids per warp (two independent load chains in flight)
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
