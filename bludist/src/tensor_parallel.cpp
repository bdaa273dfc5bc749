// Tensor-parallel regions and layers (Note [Tensor-parallel regions] in bludist/tensor_parallel.h).
#include "bludist/tensor_parallel.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "blutensor/autograd.h"
#include "blutensor/error.h"
#include "blutensor/ops.h"

namespace bludist {

Tensor tp_copy_to_region(const Tensor& x, const std::shared_ptr<ProcessGroup>& pg) {
  BLU_CHECK(pg, "tp_copy_to_region: null process group");
  Tensor y = x.detach().clone();  // a fresh output for the autograd node
  return blu::autograd::record("tp_copy_to_region", y, {x}, {},
                               [pg](const Tensor& gy, const blu::BackwardContext&) {
                                 Tensor g = gy.contiguous().clone();
                                 pg->all_reduce(g, ReduceOp::kSum);
                                 return std::vector<Tensor>{g};
                               });
}

Tensor tp_reduce_from_region(const Tensor& x, const std::shared_ptr<ProcessGroup>& pg) {
  BLU_CHECK(pg, "tp_reduce_from_region: null process group");
  Tensor y = x.detach().contiguous().clone();
  pg->all_reduce(y, ReduceOp::kSum);
  return blu::autograd::record("tp_reduce_from_region", y, {x}, {},
                               [](const Tensor& gy, const blu::BackwardContext&) {
                                 return std::vector<Tensor>{gy};
                               });
}

namespace {
// A contiguous copy of `part` as a new leaf that requires grad when `full` does.
Tensor new_leaf(const Tensor& part, const Tensor& full) {
  blu::NoGradGuard no_grad;
  Tensor s = part.contiguous().clone();
  if (full.requires_grad()) s.requires_grad_();
  return s;
}

Tensor shard(const Tensor& full, int64_t dim, const ProcessGroup& pg, const char* what) {
  BLU_CHECK(full.defined() && full.dim() > dim, what, ": expected a tensor with a dimension ", dim, ", got ",
            full.defined() ? full.describe() : "undefined");
  const int64_t n = full.sizes()[static_cast<std::size_t>(dim)], parts = pg.size();
  BLU_CHECK(n % parts == 0, what, ": dimension ", dim, " of ", full.describe(), " (", n,
            ") does not split into ", parts, " equal parts");
  return new_leaf(full.detach().narrow(dim, pg.rank() * (n / parts), n / parts), full);
}
}  // namespace

Tensor shard_rows(const Tensor& full, const ProcessGroup& pg) { return shard(full, 0, pg, "shard_rows"); }
Tensor shard_cols(const Tensor& full, const ProcessGroup& pg) { return shard(full, 1, pg, "shard_cols"); }

Tensor shard_fused_qkv(const Tensor& full, int64_t heads, const ProcessGroup& pg) {
  BLU_CHECK(full.defined() && full.dim() >= 1 && full.sizes()[0] % 3 == 0, "shard_fused_qkv: expected a fused [3C, ...] ",
            "QKV tensor, got ", full.defined() ? full.describe() : "undefined");
  const int64_t C = full.sizes()[0] / 3, parts = pg.size();
  BLU_CHECK(heads > 0 && C % heads == 0 && heads % parts == 0, "shard_fused_qkv: ", heads, " heads of ",
            full.describe(), " do not split into ", parts, " equal parts of whole heads");
  const int64_t rows = C / parts, lo = pg.rank() * rows;  // whole heads: C / heads divides rows
  blu::NoGradGuard no_grad;
  Tensor f = full.detach();
  return new_leaf(blu::cat({f.narrow(0, lo, rows), f.narrow(0, C + lo, rows), f.narrow(0, 2 * C + lo, rows)}, 0),
                  full);
}

ColumnParallelLinear::ColumnParallelLinear(const Tensor& full_weight, const Tensor& full_bias,
                                           std::shared_ptr<ProcessGroup> pg)
    : pg_(std::move(pg)) {
  BLU_CHECK(pg_, "ColumnParallelLinear: null process group");
  weight_ = shard_rows(full_weight, *pg_);
  if (full_bias.defined()) bias_ = shard_rows(full_bias, *pg_);
}

Tensor ColumnParallelLinear::forward(const Tensor& x) const {
  return blu::linear(tp_copy_to_region(x, pg_), weight_, bias_);
}

RowParallelLinear::RowParallelLinear(const Tensor& full_weight, const Tensor& full_bias,
                                     std::shared_ptr<ProcessGroup> pg)
    : pg_(std::move(pg)) {
  BLU_CHECK(pg_, "RowParallelLinear: null process group");
  weight_ = shard_cols(full_weight, *pg_);
  if (full_bias.defined()) bias_ = new_leaf(full_bias.detach(), full_bias);
}

namespace {
// Rows [r0, r0 + n) of `chunks` near-equal pieces of `rows`.
std::pair<int64_t, int64_t> chunk_rows(int64_t rows, int chunks, int c) {
  const int64_t per = (rows + chunks - 1) / chunks, r0 = std::min<int64_t>(rows, c * per);
  return {r0, std::min<int64_t>(per, rows - r0)};
}

// out = a @ b^T (a [rows, k], b [n, k]) with each of `chunks` row pieces all-reduced (sum) over pg
// as soon as its GEMM is issued (Note [Async TP]); the pieces are waited for and copied into out.
Tensor chunked_matmul_all_reduce(const Tensor& a, const Tensor& b_t, const std::shared_ptr<ProcessGroup>& pg,
                                 int chunks) {
  const int64_t rows = a.size(0);
  if (rows == 0) return blu::empty({0, b_t.size(1)}, blu::TensorOptions(a.dtype()).device(a.device()));
  std::vector<Tensor> pieces;
  std::vector<Work> works;
  CommOptions async;
  async.async_op = true;
  for (int c = 0; c < chunks; ++c) {
    const auto [r0, n] = chunk_rows(rows, chunks, c);
    if (n == 0) break;
    pieces.push_back(blu::matmul(a.narrow(0, r0, n), b_t).contiguous());
    works.push_back(pg->all_reduce(pieces.back(), ReduceOp::kSum, async));
  }
  Tensor out = blu::empty({rows, b_t.size(1)}, blu::TensorOptions(pieces.at(0).dtype()).device(a.device()));
  for (std::size_t c = 0; c < pieces.size(); ++c) {
    works[c].wait();
    out.narrow(0, chunk_rows(rows, chunks, static_cast<int>(c)).first, pieces[c].size(0)).copy_(pieces[c]);
  }
  return out;
}

// chunks == 1 is the plain form (any input it takes); chunks > 1 cuts rows: [..., features].
void check_chunks(const char* op, int chunks, const Tensor& x, const std::shared_ptr<ProcessGroup>& pg) {
  BLU_CHECK(pg, op, ": null process group");
  BLU_CHECK(chunks >= 1, op, ": chunks must be >= 1, got ", chunks);
  BLU_CHECK(chunks == 1 || (x.defined() && x.dim() >= 2), op, ": ", chunks, " row chunks need an input [..., features], got ",
            x.defined() ? x.describe() : "undefined");
}
}  // namespace

Tensor tp_row_linear_overlapped(const Tensor& x_shard, const Tensor& weight_shard,
                                const std::shared_ptr<ProcessGroup>& pg, int chunks) {
  check_chunks("tp_row_linear_overlapped", chunks, x_shard, pg);
  if (chunks == 1) return tp_reduce_from_region(blu::linear(x_shard, weight_shard), pg);
  const int64_t in = x_shard.size(x_shard.dim() - 1), out_f = weight_shard.size(0);
  BLU_CHECK(weight_shard.dim() == 2 && weight_shard.size(1) == in, "tp_row_linear_overlapped: weight ",
            weight_shard.describe(), " does not take inputs ", x_shard.describe());
  blu::Shape out_shape = x_shard.sizes();
  out_shape.back() = out_f;
  Tensor y;
  {
    blu::NoGradGuard no_grad;
    const Tensor x2 = x_shard.detach().reshape({-1, in});
    y = chunked_matmul_all_reduce(x2, weight_shard.detach().transpose(0, 1), pg, chunks).reshape(out_shape);
  }
  return blu::autograd::record(
      "tp_row_linear_overlapped", y, {x_shard, weight_shard}, {x_shard, weight_shard},
      [in, out_f](const Tensor& gy, const blu::BackwardContext& ctx) {
        const Tensor gy2 = gy.reshape({-1, out_f});
        const Tensor& x = ctx.saved[0];
        const Tensor& w = ctx.saved[1];
        Tensor gx = ctx.needs_input_grad[0] ? blu::matmul(gy2, w).reshape(x.sizes()) : Tensor();
        Tensor gw = ctx.needs_input_grad[1] ? blu::matmul(gy2.transpose(0, 1), x.reshape({-1, in})) : Tensor();
        return std::vector<Tensor>{gx, gw};
      });
}

Tensor tp_column_linear_overlapped(const Tensor& x, const Tensor& weight_shard, const Tensor& bias_shard,
                                   const std::shared_ptr<ProcessGroup>& pg, int chunks) {
  check_chunks("tp_column_linear_overlapped", chunks, x, pg);
  if (chunks == 1) return blu::linear(tp_copy_to_region(x, pg), weight_shard, bias_shard);
  const int64_t in = x.size(x.dim() - 1), out_f = weight_shard.size(0);
  BLU_CHECK(weight_shard.dim() == 2 && weight_shard.size(1) == in, "tp_column_linear_overlapped: weight ",
            weight_shard.describe(), " does not take inputs ", x.describe());
  Tensor y;
  {
    blu::NoGradGuard no_grad;
    y = blu::linear(x.detach(), weight_shard.detach(), bias_shard.defined() ? bias_shard.detach() : Tensor());
  }
  std::vector<Tensor> inputs = {x, weight_shard};
  if (bias_shard.defined()) inputs.push_back(bias_shard);
  return blu::autograd::record(
      "tp_column_linear_overlapped", y, inputs, {x, weight_shard},
      [in, out_f, pg, chunks, has_bias = bias_shard.defined()](const Tensor& gy, const blu::BackwardContext& ctx) {
        const Tensor gy2 = gy.reshape({-1, out_f});
        const Tensor& x_saved = ctx.saved[0];
        const Tensor& w = ctx.saved[1];
        // The input gradient's rank partials, all-reduced piece by piece under the next piece's GEMM.
        Tensor gx = ctx.needs_input_grad[0]
                        ? chunked_matmul_all_reduce(gy2, w, pg, chunks).reshape(x_saved.sizes())
                        : Tensor();
        Tensor gw = ctx.needs_input_grad[1] ? blu::matmul(gy2.transpose(0, 1), x_saved.reshape({-1, in})) : Tensor();
        std::vector<Tensor> grads = {gx, gw};
        if (has_bias) grads.push_back(ctx.needs_input_grad[2] ? blu::sum(gy2, {0}) : Tensor());
        return grads;
      });
}

Tensor RowParallelLinear::forward(const Tensor& x_shard) const {
  Tensor y = tp_reduce_from_region(blu::linear(x_shard, weight_), pg_);
  return bias_.defined() ? y + bias_ : y;
}

namespace {
// Global ids -> (indices into this rank's [rank n, (rank + 1) n) range, 0 outside it, plus i * stride;
// 1/0 mask), on `device` (Note [Vocabulary-parallel embedding and cross-entropy]). An id outside
// the whole vocabulary [0, n size) is an error naming `op` (the same on every rank: ids are shared).
std::pair<Tensor, Tensor> local_ids(const char* op, const Tensor& ids, const ProcessGroup& pg, int64_t n,
                                    int64_t stride, DType mask_dtype, blu::Device device) {
  const int64_t lo = pg.rank() * n, vocab = n * pg.size();
  const std::vector<double> g = ids.to_double_vector();
  std::vector<int64_t> idx(g.size());
  std::vector<double> mask(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    const int64_t t = static_cast<int64_t>(g[i]);
    BLU_CHECK(t >= 0 && t < vocab, op, ": id ", t, " at position ", i, " of ", ids.describe(),
              " is outside the vocabulary [0, ", vocab, ")");
    const bool mine = t >= lo && t < lo + n;
    idx[i] = static_cast<int64_t>(i) * stride + (mine ? t - lo : 0);
    mask[i] = mine ? 1.0 : 0.0;
  }
  return {blu::from_vector(idx, ids.sizes()).to(device),
          blu::from_vector(mask, ids.sizes()).to(mask_dtype).to(device)};
}
}  // namespace

Tensor vocab_parallel_embedding(const Tensor& weight_shard, const Tensor& ids,
                                const std::shared_ptr<ProcessGroup>& pg) {
  BLU_CHECK(pg && weight_shard.dim() == 2, "vocab_parallel_embedding: expected a [V/size, C] weight shard, got ",
            weight_shard.describe());
  const int64_t n = weight_shard.sizes()[0];
  auto [idx, mask] = local_ids("vocab_parallel_embedding", ids, *pg, n, 0, weight_shard.dtype(), weight_shard.device());
  Tensor rows = blu::embedding(weight_shard, idx) * mask.unsqueeze(-1);
  return tp_reduce_from_region(rows, pg);
}

Tensor vocab_parallel_cross_entropy(const Tensor& logits_shard, const Tensor& targets,
                                    const std::shared_ptr<ProcessGroup>& pg) {
  BLU_CHECK(pg && logits_shard.dim() == 2 && targets.dim() == 1 && targets.sizes()[0] == logits_shard.sizes()[0],
            "vocab_parallel_cross_entropy: expected logits [N, V/size] and targets [N], got ", logits_shard.describe(),
            " and ", targets.describe());
  const int64_t rows = logits_shard.sizes()[0], cols = logits_shard.sizes()[1];
  // The target logit: row i's column (target - lo) of the flattened shard, masked off-range.
  auto [idx, mask] = local_ids("vocab_parallel_cross_entropy", targets, *pg, cols, cols, logits_shard.dtype(),
                               logits_shard.device());
  Tensor m;
  {
    blu::NoGradGuard no_grad;
    m = blu::amax(logits_shard.detach(), {1}, true).contiguous().clone();
    pg->all_reduce(m, ReduceOp::kMax);
  }
  Tensor sum_exp = tp_reduce_from_region(blu::sum(blu::exp(logits_shard - m), {1}), pg);
  Tensor picked = blu::embedding(logits_shard.reshape({rows * cols, 1}), idx).reshape({rows}) * mask;
  Tensor target_logit = tp_reduce_from_region(picked, pg);
  return blu::mean(blu::log(sum_exp) + m.reshape({rows}) - target_logit);
}

}  // namespace bludist
