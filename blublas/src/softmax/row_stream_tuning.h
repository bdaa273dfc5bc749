// row_stream_tuning.h (internal, host side): the knobs of Note [Row streaming through a
// shared-memory ring] (softmax/row_stream.cuh) and launcher variants that take them explicitly.
// The public launchers (softmax.h, cross_entropy.h) call these with the defaults below; the
// blublas-profiler passes other values to sweep variants on the device. Nothing here reads the
// environment or keeps global state.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "blublas/dtype.h"
#include "blublas/status.h"

namespace blublas::fused {

struct RowStreamTuning {
  int mode = 1;                    // 0: never stream (cluster-resident / online kernels); 1: auto
  int chunk_bytes = 8192;          // bytes per ring slot (multiple of 16, >= 1024)
  int consumer_warps = 16;         // 8, 12 or 16 consumer warps (plus one producer warp)
  int cluster = 0;                 // CTAs sharing a row: 0 = auto, or 1, 2, 4
  int64_t min_row_bytes = 32768;   // shorter rows keep the block-per-row kernels
  int store_hint = 1;              // 0: plain st.global, 1: st.global.cs (evict-first)
  // softmax fwd / xent: pass 1 stores exp(x - chunk max) in the slot (f32; fp16 for bf16 rows)
  // and pass 2 scales it: one exp per element (run 3, H200: +1-7% over recomputing the exp).
  int keep_exp = 1;
  // With keep_exp, 8 KiB chunks and at most 12 consumer warps: each warp's first chunk of a row
  // lives in registers and its slot is freed at once (row_stream.cuh). Inert at 16 warps.
  int reg_chunk = 1;
  int copy_only = 0;               // diagnostic (softmax forward only): y = x through the same
                                   // ring and combine, no exp: the pipeline's own ceiling
};

Status softmax_forward_tuned(void* y, const void* x, int64_t rows, int64_t cols, Dtype dtype,
                             cudaStream_t stream, const RowStreamTuning& tuning);

Status softmax_backward_tuned(void* dx, const void* dy, const void* y, int64_t rows,
                              int64_t cols, Dtype dtype, cudaStream_t stream,
                              const RowStreamTuning& tuning);

Status cross_entropy_fused_tuned(float* losses, float* loss_mean, void* dlogits,
                                 const void* logits, const int32_t* targets, int64_t rows,
                                 int64_t vocab, int ignore_index, float dloss, int* error_flag,
                                 Dtype dtype, void* workspace, std::size_t workspace_bytes,
                                 cudaStream_t stream, const RowStreamTuning& tuning);

// Which path a call with these sizes and 16-byte aligned pointers takes on the current device
// ("stream cluster=2 chunk=8192 ring=27 grid=132", or "resident/online"): for the profiler's
// report and the tests' failure messages. `inputs` is 1 (softmax forward, cross-entropy) or 2
// (softmax backward).
std::string row_path_name(int64_t rows, int64_t cols, int inputs, Dtype dtype,
                          const RowStreamTuning& tuning);

}  // namespace blublas::fused
