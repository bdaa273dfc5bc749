// recorded_twin.h: two copies of a small test model trained side by side, A eagerly and B by a
// capture::Executable of its step 2, on the same batches (tokens(seed) makes one): step 1 eager on
// both, step 2 eager on A and recorded on B, then step(k) runs A eagerly and replays B's record with
// the next batch written into the recorded batch tensors. The capture tests compare A and B.
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include "blutensor/autograd.h"
#include "blutensor/capture.h"
#include "blutensor/optim.h"
#include "support/adamw_step.h"

namespace blu::test {

template <typename Model>
struct RecordedTwin {
  using Tokens = std::function<Tensor(uint64_t seed)>;
  Model a, b;
  optim::AdamW opt_a, opt_b;
  Tokens tokens;
  Tensor xb, yb;  // the batch tensors B's record reads
  double loss_a1 = 0, loss_b1 = 0, loss_a2 = 0, loss_b2 = 0;
  std::unique_ptr<capture::Executable> exe;

  template <typename... ModelArgs>
  RecordedTwin(const optim::AdamWOptions& o, Tokens make_tokens, ModelArgs... args)
      : a(args...), b(args...), opt_a(a.params(), o), opt_b(b.params(), o), tokens(std::move(make_tokens)) {
    loss_a1 = adamw_step(a, opt_a, tokens(11), tokens(12));
    loss_b1 = adamw_step(b, opt_b, tokens(11), tokens(12));
    xb = tokens(13);
    yb = tokens(14);
    loss_a2 = adamw_step(a, opt_a, tokens(13), tokens(14));
    capture::Scope scope(true);
    loss_b2 = adamw_step(b, opt_b, xb, yb);
    exe = std::make_unique<capture::Executable>(scope.finish());
  }

  // Step k (>= 3) with learning rate lr on both: {A's loss, B's replayed loss}; B's run must
  // complete (false: it stopped at a host read).
  std::pair<double, double> step(int k, double lr, bool* ran = nullptr) {
    const double loss_a = adamw_step(a, opt_a, tokens(100 + k), tokens(200 + k));
    {
      NoGradGuard ng;
      xb.copy_(tokens(100 + k));
      yb.copy_(tokens(200 + k));
    }
    const bool ok = exe->run({lr, k});
    if (ran != nullptr) *ran = ok;
    return {loss_a, ok ? exe->host_reads().back().item() : 0.0};
  }
};

}  // namespace blu::test
