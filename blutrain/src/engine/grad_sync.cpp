// grad_sync.cpp: the fused step's bucketed gradient all-reduce through bludist (Note
// [Data-parallel fused step: streams and events under capture] in grad_sync.h).
#include "engine/grad_sync.h"

#include "bludist/ddp.h"
#include "bludist/process_group.h"
#include "blutensor/error.h"

namespace blu::train {

FusedGradSync::FusedGradSync(std::shared_ptr<bludist::ProcessGroup> pg, float* flat, std::vector<GradBucket> buckets,
                             bool sum)
    : pg_(std::move(pg)), flat_(flat), buckets_(std::move(buckets)), sum_(sum) {
  BLU_CHECK(pg_ != nullptr, "fused data-parallel step: no process group");
  BLU_CHECK(!buckets_.empty(), "fused data-parallel step: no gradient buckets");
}

FusedGradSync::~FusedGradSync() = default;

int FusedGradSync::ranks() const { return pg_->size(); }

void FusedGradSync::unit_ready(int unit, cudaStream_t stream) {
  if (next_bucket_ >= buckets_.size()) return;
  BLU_CHECK(buckets_[next_bucket_].last_unit >= unit, "fused data-parallel step: ready unit ", unit,
            " passed bucket ", next_bucket_, " (last unit ", buckets_[next_bucket_].last_unit, ") unlaunched");
  if (buckets_[next_bucket_].last_unit != unit) return;
  const GradRange& r = buckets_[next_bucket_].range;
  // Average (ncclAvg; ncclSum when the caller pre-scaled) on the communication stream, ordered
  // after `stream`; the host does not wait.
  pending_.push_back(reduce(flat_ + r.begin, r.size(), stream));
  ++next_bucket_;
}

bludist::Work FusedGradSync::reduce(float* begin, std::size_t n, cudaStream_t stream) {
  if (!sum_) return bludist::all_reduce_gradients(*pg_, begin, n, stream, /*async_op=*/true);
  bludist::CommOptions o;
  o.stream = stream;
  o.async_op = true;
  return pg_->all_reduce(begin, n, bludist::DType::F32, bludist::ReduceOp::kSum, o);
}

void FusedGradSync::reduce_early(float* begin, std::size_t n, cudaStream_t stream) {
  BLU_CHECK(early_.empty(), "fused data-parallel step: an early reduction is still pending");
  early_.push_back(reduce(begin, n, stream));
}

void FusedGradSync::wait_early(cudaStream_t stream) {
  for (const bludist::Work& w : early_) w.wait(stream);
  early_.clear();
}

void FusedGradSync::all_gather(void* out, const void* in, std::size_t n, blu::DType dtype, cudaStream_t stream) {
  bludist::CommOptions o;
  o.stream = stream;  // not async: `stream` waits for the gathered rows
  pg_->all_gather(out, in, n, dtype, o);
}

void FusedGradSync::wait_all(cudaStream_t stream) {
  BLU_CHECK(next_bucket_ == buckets_.size(), "fused data-parallel step: only ", next_bucket_, " of ",
            buckets_.size(), " gradient buckets were launched before the optimizer");
  for (const bludist::Work& w : pending_) w.wait(stream);
  pending_.clear();
  next_bucket_ = 0;
}

std::string FusedGradSync::describe() const {
  return blu::detail::str_cat("gradients averaged over ", pg_->size(), " ranks (", bludist::backend_name(pg_->backend()),
                              ") inside the backward: ", describe_grad_buckets(buckets_));
}

}  // namespace blu::train
