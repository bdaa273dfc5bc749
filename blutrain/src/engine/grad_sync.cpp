// grad_sync.cpp: the fused step's bucketed gradient all-reduce through bludist (Note
// [Data-parallel fused step: streams and events under capture] in grad_sync.h).
#include "engine/grad_sync.h"

#include "bludist/ddp.h"
#include "bludist/process_group.h"
#include "blutensor/error.h"

namespace blu::train {

FusedGradSync::FusedGradSync(std::shared_ptr<bludist::ProcessGroup> pg, float* flat, std::vector<GradBucket> buckets)
    : pg_(std::move(pg)), flat_(flat), buckets_(std::move(buckets)) {
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
  // Average (ncclAvg) on the communication stream, ordered after `stream`; the host does not wait.
  pending_.push_back(bludist::all_reduce_gradients(*pg_, flat_ + r.begin, r.size(), stream, /*async_op=*/true));
  ++next_bucket_;
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
