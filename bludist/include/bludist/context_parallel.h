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
// from ring_shift's backward. Blocks entirely above the diagonal (source rank > r, causal) are
// still computed, fully masked (they contribute exactly 0): every rank then has the same graph, so
// the backward's ring_shifts line up across ranks. Not yet: causal load balancing (each rank a
// chunk from each end of the sequence, so no rank computes masked-out blocks), a fused kernel,
// the GPT-2 wiring and blutrain --cp.
#pragma once

#include <memory>

#include "bludist/process_group.h"

namespace bludist {

// y = x of rank (rank - 1) mod size (x goes to rank + 1); backward: the gradient of rank + 1.
Tensor ring_shift(const Tensor& x, const std::shared_ptr<ProcessGroup>& pg);

// Attention of this rank's queries over the whole sequence cut across pg in rank order (Note
// [Ring attention]); scale 1/sqrt(D). Returns this rank's [B, H, Tl, D] output.
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                      const std::shared_ptr<ProcessGroup>& pg);

}  // namespace bludist
