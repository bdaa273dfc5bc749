// blublas/cross_entropy.h: the fused classifier: logits [rows x vocab] and int32 targets ->
// per-row loss, mean loss over the non-ignored rows, and dlogits, without materializing the
// probabilities (logits are read once: each row stays on chip between the max/sum and the
// gradient; see Note [Softmax row residency] in softmax.h).
//
//   loss[r]    = logsumexp(logits[r]) - logits[r][t_r]        (0 where t_r == ignore_index)
//   count      = #{r : t_r != ignore_index}                  (integer, computed on the device)
//   loss_mean  = sum_r loss[r] / count                        (fixed-order sum; NaN if count == 0)
//   dlogits[r] = (softmax(logits[r]) - onehot(t_r)) * dloss / count   (0 for ignored rows)
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "blublas/dtype.h"
#include "blublas/status.h"

namespace blublas {

// Workspace bytes cross_entropy_fused needs for `rows` (independent of the device).
Status cross_entropy_workspace_size(int64_t rows, std::size_t* bytes);

// logits, dlogits: `dtype` (f32 or bf16), rows contiguous with row length vocab. dlogits may be
// null (forward only) or alias logits (in place). losses: f32 [rows] or null; loss_mean: f32
// scalar on the device or null. A target outside [0, vocab) that is not ignore_index is treated
// as ignored and sets *error_flag = 1 (when error_flag is not null); the flag is never cleared.
Status cross_entropy_fused(float* losses, float* loss_mean, void* dlogits, const void* logits,
                           const int32_t* targets, int64_t rows, int64_t vocab, int ignore_index,
                           float dloss, int* error_flag, Dtype dtype, void* workspace,
                           std::size_t workspace_bytes, cudaStream_t stream);

// The per-row pieces, for callers that reduce and scale across calls themselves (blutensor's
// chunked linear_cross_entropy: its mean counts the rows of every chunk). Per row r:
//   losses[r]  = logsumexp(logits[r]) - logits[r][t_r]; 0 where t_r == ignore_index; NaN where
//                t_r is outside [0, vocab) and not ignore_index (a bad target shows in the loss)
//   lse[r]     = logsumexp(logits[r])                                    (lse may be null)
//   valid[r]   = 0 where t_r == ignore_index, else 1                     (valid may be null)
//   dlogits[r] = (softmax(logits[r]) - onehot(t_r)) * dloss, not divided by any count; 0 for
//                ignored rows and bad targets                     (dlogits may be null or alias logits)
// The same kernels as cross_entropy_fused (one streamed pass for rows of 32 KiB and more on
// sm_90); workspace: cross_entropy_workspace_size(rows) bytes, 16-byte aligned.
Status cross_entropy_rows(float* losses, float* lse, float* valid, void* dlogits, const void* logits,
                          const int32_t* targets, int64_t rows, int64_t vocab, int ignore_index,
                          float dloss, Dtype dtype, void* workspace, std::size_t workspace_bytes,
                          cudaStream_t stream);

}  // namespace blublas
