// bludist/context_parallel.h: context parallelism for the autograd engine: the sequence cut across
// ranks, attention over the whole of it by passing K/V blocks around a ring.
//
// Note [Ring attention]
// Rank r holds positions [r Tl, (r + 1) Tl) of q, k and v ([B, H, Tl, D] each). In n steps every
// rank sees every K/V block: at step s it holds the block of rank (r - s) mod n, computes that
// block's attention with its queries (scores, the causal mask on the diagonal block, a row
// log-sum-exp), merges it into its running output with log-sum-exp weights
// (out = out_a e^(lse_a - lse) + out_b e^(lse_b - lse), lse = logaddexp(lse_a, lse_b)), and passes
// the block on (ring_shift: to rank + 1, from rank - 1). Everything is blutensor ops plus
// ring_shift, a differentiable collective whose backward passes the gradient the other way round,
// so the backward is autograd's: the second ring of the K/V gradients back to their owners comes
// from ring_shift's backward. K and V travel as one tensor, so each rank has one chain of
// ring_shifts and their backward order cannot differ between ranks (two chains could interleave
// differently on ranks whose graphs differ, swapping same-sized messages), and every rank must use
// the block of every step (else its backward never reaches that ring_shift while the others wait
// on it). With contiguous chunks that forces the blocks above the diagonal to be computed fully
// masked (rank 0 does n blocks of work for 1 of use). Balanced mode cuts the sequence into 2n
// chunks and gives rank r chunks r and 2n-1-r (the zigzag layout): a rank's second chunk faces
// every first-half K/V chunk, so every step's block is used, the masked half-blocks are skipped and
// every rank computes 2 of the 4 half-blocks a step (3 at the first, two of them diagonal): the
// same work on every rank. GPT-2 uses it under blutrain --cp (Note [Context-parallel GPT-2] in
// blutrain/gpt2.h). Not yet: a fused kernel (the blocks are blutensor ops: a [Tl, Tl] score tensor).
#pragma once

#include <memory>

#include "bludist/process_group.h"

namespace bludist {

// y = x of rank (rank - 1) mod size (x goes to rank + 1); backward: the gradient of rank + 1.
Tensor ring_shift(const Tensor& x, const std::shared_ptr<ProcessGroup>& pg);

// Attention of this rank's queries over the whole sequence cut across pg in rank order (Note
// [Ring attention]); scale 1/sqrt(D). Returns this rank's [B, H, Tl, D] output. balanced: the
// sequence is cut into 2 size chunks and rank r holds chunks r and 2 size - 1 - r (in that order
// along Tl, which must be even), so with causal masking every rank computes the same amount.
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                      const std::shared_ptr<ProcessGroup>& pg, bool balanced = false);

}  // namespace bludist
