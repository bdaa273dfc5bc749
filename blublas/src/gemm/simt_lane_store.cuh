// simt_lane_store.cuh (internal): the end of the SIMT fp32 kernels (warp and lean): one lane's
// TM x TN accumulators, laid out as 4 x 4 blocks over an LM x LN lane grid (Note [SIMT fp32
// warp tiling]), stored either as a split-K partial (plain floats, float4 where n % 4 == 0) or
// through the epilogue.
#pragma once

#include <cstdint>

#include "gemm/epilogue.cuh"
#include "gemm/simt_gemm_launch.h"

namespace blublas::gemm_detail {

template <int TM, int TN, int LM, int LN>
__device__ __forceinline__ void simt_store_lane_tile(const float (&acc)[TM][TN], const SplitArgs& split,
                                                     int split_index, int batch, int m, int n, int m0,
                                                     int n0, int row_base, int col_base,
                                                     const EpilogueArgs& e) {
  if (split.partial != nullptr) {
    float* out = split.partial + static_cast<int64_t>(split_index * split.batches + batch) * m * n;
#pragma unroll
    for (int r = 0; r < TM; ++r) {
      const int i = m0 + row_base + (r / 4) * LM * 4 + r % 4;
      if (i >= m) continue;
#pragma unroll
      for (int c4 = 0; c4 < TN / 4; ++c4) {
        const int j = n0 + col_base + c4 * LN * 4;
        float* o = out + static_cast<int64_t>(i) * n + j;
        if (n % 4 == 0 && j < n) {  // j % 4 == 0 and the workspace is 256-byte aligned
          *reinterpret_cast<float4*>(o) = make_float4(acc[r][c4 * 4 + 0], acc[r][c4 * 4 + 1],
                                                      acc[r][c4 * 4 + 2], acc[r][c4 * 4 + 3]);
        } else {
#pragma unroll
          for (int c = 0; c < 4; ++c)
            if (j + c < n) o[c] = acc[r][c4 * 4 + c];
        }
      }
    }
    return;
  }
#pragma unroll
  for (int r = 0; r < TM; ++r) {
    const int i = m0 + row_base + (r / 4) * LM * 4 + r % 4;
    if (i >= m) continue;
#pragma unroll
    for (int c4 = 0; c4 < TN / 4; ++c4) {
      const int j = n0 + col_base + c4 * LN * 4;
      epilogue_store2<float>(e, batch, i, j, acc[r][c4 * 4 + 0], acc[r][c4 * 4 + 1]);
      epilogue_store2<float>(e, batch, i, j + 2, acc[r][c4 * 4 + 2], acc[r][c4 * 4 + 3]);
    }
  }
}

}  // namespace blublas::gemm_detail
