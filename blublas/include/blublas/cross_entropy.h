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

}  // namespace blublas
