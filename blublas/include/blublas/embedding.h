// blublas/embedding.h: GPT-2's token + position embedding, forward and a deterministic backward.
//
//   out[b][t][:] = wte[tokens[b][t]][:] + wpe[t][:]
//   dwte[v][:]  += sum over (b, t) with tokens[b][t] == v, in increasing b*T + t, of dout[b][t][:]
//   dwpe[t][:]  += sum over b = 0..B-1, in order, of dout[b][t][:]
//
// Note [Deterministic embedding backward] The positions are bucketed by token id in the caller's
// workspace (integer histogram, scan, scatter); each bucket is then summed in increasing position
// order (small buckets are ranked in registers, large ones re-scan the token list in order), so no
// float is ever added by an atomic. A token id outside [0, vocab) sets *error_flag = 1 and is
// skipped (its row of out gets wpe only; it adds nothing to dwte) -- never a fault, no host sync.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "blublas/dtype.h"
#include "blublas/status.h"

namespace blublas {

// out: `dtype` [B x T x C]; wte: `dtype` [vocab x C]; wpe: `dtype` [>= T x C] (may be null: no
// position term); tokens: int32 [B x T]; error_flag: device int (required).
Status embedding_forward(void* out, const int32_t* tokens, const void* wte, const void* wpe,
                         int64_t batch, int64_t seq_len, int64_t channels, int64_t vocab,
                         int* error_flag, Dtype dtype, cudaStream_t stream);

// Workspace bytes embedding_backward needs (independent of the device).
Status embedding_backward_workspace_size(int64_t batch, int64_t seq_len, int64_t vocab,
                                         std::size_t* bytes);

// dwte: f32 [vocab x C], dwpe: f32 [T x C] or null; both accumulated (+=). dout: `dtype`.
Status embedding_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens,
                          int64_t batch, int64_t seq_len, int64_t channels, int64_t vocab,
                          int* error_flag, Dtype dtype, void* workspace,
                          std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace blublas
