// bludist/tensor_parallel.h: Megatron-style tensor parallelism for the autograd engine: the two
// region boundaries as differentiable collectives, and column / row parallel linear layers.
//
// Note [Tensor-parallel regions]
// A column-parallel linear (weight rows = output features cut across the tp group) followed by a
// row-parallel one (weight columns = input features cut the same way) needs one collective each
// way: entering the region the input is used by every rank (forward: identity; backward: the
// ranks' input gradients are partial sums, so all-reduce them: tp_copy_to_region), and leaving it
// the ranks' partial outputs are summed (forward: all-reduce; backward: identity, every rank's
// partial output received the whole gradient: tp_reduce_from_region). Between the two, elementwise
// ops (GELU) run on the local shard. The row-parallel bias is added once, after the reduction.
// Every rank must run the same sequence of these calls (they are collectives), with the same
// shapes. Shards are cut from full weights that every rank holds identically (shard_rows /
// shard_cols: rank r takes the r-th of `size` equal parts, so the dimension must divide evenly).
//
// Note [Vocabulary-parallel embedding and cross-entropy]
// The vocabulary dimension of the tied token embedding [V, C] is cut into size equal row ranges,
// rank r holding ids [r V/size, (r + 1) V/size). Embedding: each rank looks up the ids in its range
// (the others read row 0 and are multiplied by a 0/1 mask, so their gradient is zero too) and the
// partial rows are summed (tp_reduce_from_region). Cross-entropy over logits [N, V/size] sharded the
// same way, with blutensor ops only (differentiable without a hand-written backward): the row max
// is all-reduced (max; a constant), each rank sums exp(l - max) over its columns, the sums are
// summed (tp_reduce_from_region), and the target logit is read by the rank that owns the target
// (an embedding lookup into the flattened logits, masked elsewhere) and summed the same way; the
// loss is the mean of log(sum) + max - target on every rank, so each rank's backward produces its
// own columns of softmax - onehot. The target ids are turned into local indices on the host (N
// integers a call).
// GPT-2 on these pieces and blutrain train --tp: Note [Tensor-parallel GPT-2] in blutrain/gpt2.h.
//
// Note [Async TP]
// The two collectives of a region sit right after a GEMM: the row-parallel forward all-reduces
// x_r W_r^T, the column-parallel backward all-reduces gy W_r. The overlapped forms cut that GEMM's
// rows (tokens) into `chunks` pieces: chunk i's all-reduce is issued asynchronously (CommOptions::
// async_op: the communication stream waits for chunk i's GEMM, the compute stream does not wait)
// and chunk i + 1's GEMM runs while it travels; the results are waited for (on the device) and
// copied into the output at the end. Each chunk is the same rows' sum over the same ranks, so the
// values equal the unchunked forms' up to the GEMM's rounding (rows do not mix). The other halves
// need no communication: the row-parallel backward (every rank holds the whole gy) and the
// column-parallel forward (every rank holds the whole x). chunks = 1 is the plain form. Over Gloo
// the collectives are synchronous: the same values, no overlap.
#pragma once

#include <memory>

#include "bludist/process_group.h"

namespace bludist {

// Forward: x. Backward: the gradient all-reduced (sum) over pg.
Tensor tp_copy_to_region(const Tensor& x, const std::shared_ptr<ProcessGroup>& pg);
// Forward: x all-reduced (sum) over pg, in a new tensor. Backward: the gradient as is.
Tensor tp_reduce_from_region(const Tensor& x, const std::shared_ptr<ProcessGroup>& pg);

// Rank pg.rank()'s part of `full` cut along dimension 0 (rows) or 1 (columns) into pg.size()
// equal parts, as a new contiguous leaf (requires_grad like `full`).
Tensor shard_rows(const Tensor& full, const ProcessGroup& pg);
Tensor shard_cols(const Tensor& full, const ProcessGroup& pg);

// y[..., out/size] = x W_r^T + b_r with W_r, b_r this rank's rows of the full [out, in] weight
// and [out] bias: the output stays sharded (the input of a RowParallelLinear).
class ColumnParallelLinear {
 public:
  ColumnParallelLinear(const Tensor& full_weight, const Tensor& full_bias, std::shared_ptr<ProcessGroup> pg);
  Tensor forward(const Tensor& x) const;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  std::shared_ptr<ProcessGroup> pg_;
  Tensor weight_, bias_;
};

// y = sum over ranks of x_r W_r^T, plus the full bias: x_r is this rank's [..., in/size] shard
// (a ColumnParallelLinear's output), W_r this rank's columns of the full [out, in] weight.
class RowParallelLinear {
 public:
  RowParallelLinear(const Tensor& full_weight, const Tensor& full_bias, std::shared_ptr<ProcessGroup> pg);
  Tensor forward(const Tensor& x_shard) const;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  std::shared_ptr<ProcessGroup> pg_;
  Tensor weight_, bias_;
};

// Note [Async TP]: sum over ranks of x_r W_r^T (x_r [..., in/size], weight_shard [out, in/size]),
// the all-reduce of each of `chunks` row pieces overlapping the next piece's GEMM. Backward: the
// plain row-parallel gradients (no communication).
Tensor tp_row_linear_overlapped(const Tensor& x_shard, const Tensor& weight_shard,
                                const std::shared_ptr<ProcessGroup>& pg, int chunks);
// Note [Async TP]: x W_r^T + b_r (x [..., in] the same on every rank, weight_shard [out/size, in]):
// forward as a column-parallel linear after tp_copy_to_region; backward all-reduces x's gradient
// in `chunks` row pieces, each overlapping the next piece's GEMM.
Tensor tp_column_linear_overlapped(const Tensor& x, const Tensor& weight_shard, const Tensor& bias_shard,
                                   const std::shared_ptr<ProcessGroup>& pg, int chunks);

// This rank's heads of a fused [3C, ...] QKV weight or [3C] bias (GPT-2's c_attn: q, k, v rows of
// all `heads` heads of C / heads rows each): the q, k and v rows of heads [r H/size, (r + 1) H/size),
// concatenated in that order, as a new contiguous leaf; `heads` must split evenly. With it the
// attention runs on the local heads only between a column-parallel QKV and a row-parallel
// projection (whose input columns are the same heads: shard_cols of c_proj).
Tensor shard_fused_qkv(const Tensor& full, int64_t heads, const ProcessGroup& pg);

// Token embedding with the [V, C] table's rows cut across pg (weight_shard: this rank's [V/size, C]
// rows, e.g. shard_rows(full)); ids hold global token ids; returns the full [..., C] embeddings on
// every rank (Note [Vocabulary-parallel embedding and cross-entropy]).
Tensor vocab_parallel_embedding(const Tensor& weight_shard, const Tensor& ids,
                                const std::shared_ptr<ProcessGroup>& pg);
// Mean cross-entropy of logits whose vocabulary is cut across pg (logits_shard [N, V/size]: this
// rank's columns) against global target ids [N]; the same value on every rank.
Tensor vocab_parallel_cross_entropy(const Tensor& logits_shard, const Tensor& targets,
                                    const std::shared_ptr<ProcessGroup>& pg);

}  // namespace bludist
