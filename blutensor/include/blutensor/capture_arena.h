// blutensor/capture_arena.h: placement of a captured step's temporaries in one arena by their
// live ranges (Note [Step arena]), the interval placement itself (plan_arena) and what a
// capture::Executable reports of it. Why the step needs it: Note [Captured step memory].
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace blu::capture {

// Note [Captured step memory]
// Measured on an H100 (commit 827e940, d12 fp32 B8 T1024, `blutrain train --compile`): allocator
// peak 12.82 GiB for the compiled step against 9.02 GiB for the autograd engine it replays and a
// blu-plan arena of 7.88 GB (= its lower bound). The progress lines say where it went: between
// steps the autograd engine holds 1.39 GiB (weights and both AdamW moments, 3 x 124.5M x 4 B), the
// executable 5.48 GiB; above that, a step adds 7.63 GiB (autograd) and 7.34 GiB (executable: the
// same liveness as the plan's lower bound, 7.88 GB). The 4.09 GiB held between steps:
//  - the record counted 508 inputs of 3.61 GB where the weights and moments are 1.49 GB: 60 buffers
//    of 2.11 GB were classed as inputs because their first write covered them only "in part"
//    (Note [Fresh buffers] in capture_record.cpp): 12 attention outputs and 36 dq/dk/dv (25.2 MB
//    each, written whole but through permuted [B, T, H, D] views) and 12 qkv gradients (75.5 MB,
//    assembled by three copies into slices). An input no longer referenced after the capture was
//    taken for a constant made inside the step: the Executable kept its snapshot as a persistent
//    buffer (1.97 GiB) and, as the step writes it, the snapshot again to refill it before every run
//    (1.97 GiB, plus a 2.11 GB copy per step). 3.94 GiB; the rest (0.15 GiB) is bind_plan's and the
//    host reads' small buffers and the caching allocator's rounding.
//  - the peak then is 5.48 + 7.34 = 12.82 GiB. blu-plan's arena did not count these 60 buffers at
//    all (function arguments of the imported step: persistent), so its 7.88 GB was low too.
// At B16 the same 60 buffers are 4.23 GB, held twice: 7.88 GiB, the measured 23.95 vs 16.64 GiB.
// With the buffers classed as temporaries and placed in one arena (Note [Step arena]), the peak
// is the persistent state (1.39 GiB, the batch, the loss) plus the arena plus bind_plan's GEMM
// workspace. The arena's liveness is the eager step's own (the record frees where autograd did),
// so it lands where the autograd engine's in-step rise is: the 7.34 GiB above plus the 12
// attention outputs, saved for the backward and so live at the peak (the classifier's backward:
// every saved activation, the logits and their gradient), 0.28 GiB; one layer's dq/dk/dv/dqkv is
// live only inside that layer's backward. Prediction for the H100, d12 fp32 B8 T1024, both
// --compile and --engine captured: "captured engine: arena ~7.6 GiB (lower bound ~7.6 GiB)",
// allocator peak ~9.0-9.2 GiB (was 12.82), i.e. about the autograd engine's 9.02 and not yet
// below it; device memory no longer stacks the eager steps' cached blocks under the arena (they
// are released before it is allocated). At B16 ~17-18 GiB (was 23.95; autograd 16.64). On the
// CPU (d12 fp32 B1 T64) the arena is its lower bound, 0.75 GiB, and the inputs are exactly the
// weights, moments and tokens (447 buffers, 1.49 GB). blu-plan's arena over the same step is
// larger (0.93 GiB there): it places SSA values, and every strided read is a blu.view copy with
// bytes of its own, where the Executable reads the view in place.
// Below the fused engine's 7.48 GiB takes what the fused engine does, in the record or in
// blu-plan's rewrite of it: (1) the logits' gradient written over the logits (cross-entropy's
// backward reads each row's logits once, then writes that row's gradient: an in-place-safe op),
// which alone removes 1.65 GB = 1.54 GiB at B8 from the peak (arena ~6.1 GiB, peak ~7.6 GiB);
// (2) the classifier in row chunks (logits of 8192 rows at a time: the fused engine's
// --logits-chunk), which removes most of the other 1.65 GB; (3) the GELU output recomputed in the
// backward instead of kept (12 x 4*B*T*C*4 = 1.21 GB at B8); (4) gradients written into one flat
// buffer the optimizer reads (0.5 GB live from the backward to AdamW, no copies).
// (1) is in (Note [In-place reuse], src/capture/capture_inplace.cpp): cross_entropy_backward
// writes the logits' gradient over the logits, and elementwise results take the bytes of operands
// that die at their op. CPU, d12 fp32 B1 T64 (`blutrain train --engine captured`, 629
// temporaries): arena 0.752 -> 0.608 GiB, each its lower bound (0.752 -> 0.608), 97 of 136
// candidate pairs placed on one offset, losses unchanged bit for bit. At that size the step's
// peak is the gradients at the end of the backward, and the 0.144 GiB is one wte-sized buffer
// (50304 x 768 x 4 B): the tied embedding's two gradients summed into a third (binary kAdd) now
// land on the first; the logits there are 12.9 MB. Prediction for the H100, d12 fp32 B8 T1024
// (`--engine captured` or `--compile`; the first line BLU_CAPTURE_INPLACE=0 for A/B):
//   in place off: "captured engine: arena ~7.6 GiB (lower bound ~7.6 GiB ...)", peak ~9.0-9.2 GiB
//   in place on:  arena ~6.2 GiB (= its lower bound), allocator peak ~7.6-7.8 GiB
// Assumptions: the peak is the classifier's backward (every saved activation, S, plus the
// logits L and their gradient dL, 1.65 GB each); with dL on L's bytes the largest live set moves
// one node on, to the GEMMs after it: S + dL + dX (25 MB) + the classifier's wte gradient
// (154.5 MB), i.e. the old arena - 1.54 GiB + 0.17 GiB; no override covers the cross-entropy
// backward (blu-plan fuses elementwise groups and GEMM epilogues, not this op) nor keeps L alive
// past it; the rest of the peak (persistent 1.39 GiB, the GEMM workspace, small buffers, the
// allocator's rounding: 1.4-1.6 GiB over the arena in the earlier prediction) is unchanged. So
// the compiled step comes to about the fused engine's 7.48 GiB, not clearly below: (2) the
// classifier in row chunks (most of the remaining 1.65 GB) or (3) the GELU recompute (1.21 GB)
// is what takes it under. (2) is in: Note [Chunked classifier] (src/capture/capture_classifier.cpp,
// on by default in the captured engine; prediction there: arena ~4.8 GiB, peak ~6.2-6.4 GiB).
// Session 16 (H100): the capture-level chunking never engaged on CUDA (the lm head's mask add;
// fixed), and the eager steps 1-2 that precede the record peaked at 9.0-9.5 GiB anyway, so (2)
// moved into the model: GPT-2's loss is linear_cross_entropy (Note [Linear cross-entropy] in
// src/ops/classifier_ops.cpp), no [N, V] tensor in the eager step or the record. Measured at
// b2f33ee, d12 fp32 B8: autograd peak 6.32 GiB, captured arena 4.840 GiB (predicted 4.7-4.9),
// captured and compiled allocator peak 6.79 GiB (the record step's), below the fused engine's
// 7.48. The compiled step's in-use memory then rose by ~2.3 GiB at its first run: values one
// bound kernel hands to another had no arena bytes and got storages at run time (Note [Kernel
// overrides]: launches now declare what they view, fixed after the run, not yet measured).

// One temporary: its size and the first and last node (closed) that use it. inplace_of: the
// interval whose bytes this one may take at its first node (Note [In-place reuse]): that one's
// last node is this one's first, and each interval gives its bytes to at most one other.
struct ArenaInterval {
  std::size_t bytes = 0;
  int first = 0, last = 0;
  int inplace_of = -1;
};

struct ArenaPlan {
  std::vector<std::size_t> offsets;   // per interval, bytes from the arena's start
  std::size_t bytes = 0;              // the arena's size
  std::size_t lower_bound_bytes = 0;  // the largest sum of (aligned) sizes live at one node, less
                                      // what the in-place pairs at that node may share
  std::size_t summed_bytes = 0;       // every interval with bytes of its own (no reuse)
  std::size_t inplace_pairs = 0;      // hints taken: the pair placed at one offset
};

// Note [Step arena]
// Greedy interval placement, as blu-plan's Note [Arena plan]: largest first (ties: earlier first,
// then lower index: deterministic), each at the lowest aligned offset where it overlaps no placed
// interval whose node range intersects its own (closed ranges: a node's operands and results never
// share bytes). The one exception is an in-place pair (inplace_of, either way round): an interval
// whose partner is placed tries the partner's offset first, where it may overlap the partner (and
// only the partner, only at that same offset: element i of the result lands on element i of the
// operand); where that offset collides with a third interval it is placed as any other. Not
// optimal in general (sized interval colouring is NP-hard); the lower bound is reported beside it.
// alignment: a power of two (256: every dtype, every vector load).
ArenaPlan plan_arena(const std::vector<ArenaInterval>& intervals, std::size_t alignment = 256);

// An in-place pair of a captured step (Note [In-place reuse], src/capture/capture_inplace.cpp):
// at node `node`, buffer `result` (first used there) may take the bytes of buffer `operand` (last
// used there).
struct InplacePair {
  int node = -1, operand = -1, result = -1;
};

// What capture::Executable::arena() reports.
struct ArenaStats {
  bool enabled = false;               // temporaries in one arena (else: a storage each)
  std::size_t temporaries = 0;        // buffers placed in the arena
  std::size_t bytes = 0;              // the arena (all devices)
  std::size_t lower_bound_bytes = 0;  // liveness lower bound (all devices)
  std::size_t summed_bytes = 0;       // the temporaries' sizes summed
  bool inplace = false;               // in-place pairs allowed (BLU_CAPTURE_INPLACE, use_inplace)
  std::size_t inplace_candidates = 0;  // pairs the ops allow (Note [In-place reuse])
  std::size_t inplace_pairs = 0;       // of those, placed on the same bytes
  std::size_t dropped = 0;             // buffers only override sets use: no bytes (Note [Kernel
  std::size_t dropped_bytes = 0;       // overrides]), and their sizes summed
  std::size_t scratch_bytes = 0;       // overrides' scratch, summed (placed in the arena)
  std::size_t side_calls = 0;          // calls on the side stream (Note [Side stream] in
  std::size_t side_groups = 0;         // capture_side_stream.cpp) and their fork points
};

}  // namespace blu::capture
