// Test support: a small MLP (blutensor nn) trained with AdamW on a fixed global batch per step,
// on one process (pg null: the whole batch) or data-parallel over `pg` through
// DistributedDataParallel (each rank a contiguous slice of every micro-batch). Returns the
// global-batch mean loss of every step, so both runs must agree to fp32 rounding.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bludist/process_group.h"
#include "common/run_command.h"

namespace bludist::test {

struct MlpRunOptions {
  int steps = 20;
  int accum = 1;                   // micro-steps per step (no_sync on all but the last)
  int global_batch = 48;           // rows per step, split into accum micro-batches, then ranks
  std::size_t bucket_cap_bytes = 2048;  // small: several buckets
  bool skip_unused = false;        // a parameter that gets no gradient (finish_gradient_sync)
  blu::Device device = blu::kCPU;
  bool zero1 = false;              // with pg: ZeroAdamW (sharded state) instead of DDP + AdamW
  int zero_stage = 1;              // with zero1: 2 also shards the gradients (bucket_cap_bytes chunks)
  // Checkpoint/restart (DDP + AdamW only): resume from `checkpoint` when it exists, rank 0 saves
  // it (atomically) after every step; rank fail_rank exits with status 7 when it reaches step
  // fail_at_step (a simulated crash). Steps not run in this attempt are NaN in the result.
  std::string checkpoint;
  int fail_rank = -1, fail_at_step = -1;
};

std::vector<double> train_mlp(const std::shared_ptr<ProcessGroup>& pg, const MlpRunOptions& o,
                              int64_t* buckets_reduced = nullptr);

// Shell commands (blurun and its programs): tests/common/run_command.h.
using blu::test::CommandResult;
using blu::test::rank_program;
using blu::test::run_command;

}  // namespace bludist::test
