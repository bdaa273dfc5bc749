// grad_buckets.h (internal): which contiguous ranges of the fused step's flat gradient buffer are
// all-reduced together, and at which point of the backward (Note [Gradient buckets of the fused
// step]). A pure function of the layout, so it is tested on the CPU.
//
// Note [Gradient buckets of the fused step]
// The flat gradient buffer holds the parameters in the optimizer's order, each slice padded to 64
// elements: wte, wpe, h.0.* .. h.{L-1}.*, ln_f.*. Within a block the order is ln_1, attn.c_attn,
// attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj. The fused backward finalises gradients in the reverse
// of that order: ln_f (its LayerNorm backward), then block L-1 .. 0 (each block's slice is final
// once its ln_1 backward and its qkv weight-gradient GEMM are done), then wte + wpe together (the
// lm head adds to dwte at the start of the backward, the embedding backward at its very end). So
// the buffer is covered by L + 2 "ready units", each one contiguous range, adjacent in backward
// order (unit k+1 ends where unit k begins): the backward walks the buffer from its end to its
// start. A bucket is a run of consecutive units, closed as soon as it holds at least the target
// size (25 MiB, as DDP's default), so every bucket but the last is in [target, target + largest
// unit); each bucket is one contiguous range and is all-reduced at the ready point of its last
// unit. Padding between slices travels with its bucket (zeroed once: it stays 0 on every rank).
// GPT-2 124M at 25 MiB: ln_f + h.11 (28.3 MB), h.10, ..., h.0 (one block each), wte + wpe
// (157 MB): 13 buckets, all but the last overlapping the backward of earlier layers. The last one
// cannot overlap (dwte is final only after the embedding backward), like PyTorch DDP's bucket of
// the tied embedding.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace blu::train {

// A contiguous range of the flat buffer, in elements: [begin, end).
struct GradRange {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const { return end - begin; }
};

struct GradBucket {
  GradRange range;
  int last_unit = 0;  // launched at the ready point of this unit (an index into the units)
  int first_unit = 0;
};

// units: the ready units in backward (ready) order, each non-empty and adjacent to the previous
// (units[k+1].end == units[k].begin). target_elems: the bucket size to reach (>= 1). Throws
// blu::Error naming the unit when the units are not adjacent or empty. Buckets come back in
// launch order; together they cover [units.back().begin, units.front().end) exactly once.
std::vector<GradBucket> plan_grad_buckets(const std::vector<GradRange>& units, std::size_t target_elems);

// "13 buckets (28.3 MB .. 157.3 MB, f32)" for the step's description.
std::string describe_grad_buckets(const std::vector<GradBucket>& buckets);

}  // namespace blu::train
