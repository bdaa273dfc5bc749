// Tensor-parallel regions and layers (Note [Tensor-parallel regions] in bludist/tensor_parallel.h).
#include "bludist/tensor_parallel.h"

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
Tensor shard(const Tensor& full, int64_t dim, const ProcessGroup& pg, const char* what) {
  BLU_CHECK(full.defined() && full.dim() > dim, what, ": expected a tensor with a dimension ", dim, ", got ",
            full.defined() ? full.describe() : "undefined");
  const int64_t n = full.sizes()[static_cast<std::size_t>(dim)], parts = pg.size();
  BLU_CHECK(n % parts == 0, what, ": dimension ", dim, " of ", full.describe(), " (", n,
            ") does not split into ", parts, " equal parts");
  blu::NoGradGuard no_grad;
  Tensor s = full.detach().narrow(dim, pg.rank() * (n / parts), n / parts).contiguous().clone();
  if (full.requires_grad()) s.requires_grad_();
  return s;
}
}  // namespace

Tensor shard_rows(const Tensor& full, const ProcessGroup& pg) { return shard(full, 0, pg, "shard_rows"); }
Tensor shard_cols(const Tensor& full, const ProcessGroup& pg) { return shard(full, 1, pg, "shard_cols"); }

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
  if (full_bias.defined()) {
    blu::NoGradGuard no_grad;
    bias_ = full_bias.detach().contiguous().clone();
    if (full_bias.requires_grad()) bias_.requires_grad_();
  }
}

Tensor RowParallelLinear::forward(const Tensor& x_shard) const {
  Tensor y = tp_reduce_from_region(blu::linear(x_shard, weight_), pg_);
  return bias_.defined() ? y + bias_ : y;
}

}  // namespace bludist
