// nonfinite.h (internal): the training loop's policy for a step whose loss or gradient norm is
// NaN or infinite (--nonfinite stop | skip), and the test hook that makes a step so.
//
// Note [Non-finite steps]
// A step is non-finite when its loss or its global gradient norm (before clipping) is NaN or
// infinite. The norm stands for the gradients: one NaN or infinity in any gradient makes the sum
// of squares non-finite, and the trainer computes the norm anyway (clipping, the progress line),
// so a good step pays nothing for the check:
//  - autograd engine: clip_and_update() (blutrain/optimizer.h) looks at the norm before AdamW and
//    does not update when it (or the loss) is not finite: weights, AdamW moments and AdamW's step
//    count stay bitwise as they were (its bias correction counts applied updates). Only then does
//    it look for the first parameter, in the optimizer's order, whose gradient is not finite (one
//    pass over the gradients, on the failure path only). The captured and compiled engines'
//    recorded step decides the same on the device instead (Note [Update without a host read] in
//    optimizer.cpp: a NaN clip coefficient, which AdamW takes as "skip") and reads both after.
//  - --dp: the verdict is the global norm of the averaged gradients, which every rank computes
//    from bitwise the same values (DDP) or receives as one all-reduced value (ZeRO-1, whose step
//    skips itself: bludist/zero.h), so every rank skips, or stops, at the same step without an
//    extra collective. A rank's loss counts through its gradients (a NaN loss has NaN gradients),
//    not by itself: the local losses differ per rank and the verdict must not.
//  - fused CUDA engine: its step already reads back the loss and the norm after the step (the one
//    host sync it has); they are checked there. Its AdamW runs inside the CUDA graph before the
//    host sees the norm, so the update is already applied: `stop` works (nothing is saved after
//    the bad step, and the report names the first non-finite gradient of the step's flat gradient
//    buffer: one reduction per parameter, on the failure path only); `skip` is refused by the
//    config. blublas's AdamW now skips on a non-finite grad_scale (session 22); what the fused
//    engine lacks is a clip scale that is NaN for a non-finite norm or loss (grad_global_norm's
//    min(1, max_norm / (norm + 1e-6)) is 1 for a NaN norm with fminf, 0 for an infinite one).
// The policies:
//  - stop (default): the run ends with a blu::Error (exit 1) whose message is the report: the step
//    (1-based, as in the progress line), loss, norm, the first non-finite gradient, and the last
//    checkpoint to resume from. Nothing is saved after the bad step; metrics.jsonl gets a
//    "nonfinite" event with "action": "stop".
//  - skip: no update (as above); the step counter, the learning-rate schedule and the data cursor
//    move on (the batch is consumed); a warning line replaces the progress line and metrics.jsonl
//    gets a "nonfinite" event with "action": "skip" instead of a "train" record; a non-finite loss
//    stays out of the loss history (state.json and the plot stay finite). At
//    --nonfinite-max-skips consecutive skips (default 10) the run stops as `stop` does. The count
//    of consecutive skips is not checkpointed: a resumed run starts it at 0.
// Test hook: BLUTRAIN_TEST_INJECT_NONFINITE=STEPS[@TARGET][:nan|inf|-inf], STEPS = N or N-M
// (1-based, inclusive), TARGET = a parameter name (element 0 of its gradient is overwritten after
// the backward and DDP's reduction, before clipping; with --zero 2 in backward, before its
// reduction: arm_in_backward) or "loss" (the step's loss value; one process
// only, see --dp above); default: the last parameter in the optimizer's order. Every rank applies
// it. The fused CUDA engine computes its gradients inside a CUDA graph, so there the hook writes
// element 0 of the target's *weight* before the step instead (poison_weight: a weight gone bad, the
// way a real divergence starts): the forward then makes the loss and every gradient downstream
// non-finite, which tests the engine's own device-side path to the report; "loss" is refused there.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "blutrain/gpt2.h"

namespace blu::train {

inline constexpr const char* kInjectNonfiniteEnv = "BLUTRAIN_TEST_INJECT_NONFINITE";

struct NonfiniteInjection {
  int64_t first_step = 0;  // 1-based, inclusive; first > last: never
  int64_t last_step = -1;
  std::string target;  // a parameter name, or "loss"
  double value = std::numeric_limits<double>::quiet_NaN();

  // Parses the hook's value (see the Note); throws blu::Error naming the variable.
  static NonfiniteInjection parse(const std::string& spec, const std::vector<NamedParam>& params);
  // From kInjectNonfiniteEnv; never active when it is unset or empty.
  static NonfiniteInjection from_environment(const std::vector<NamedParam>& params);
  bool enabled() const { return first_step <= last_step; }
  bool active(int64_t step) const { return step >= first_step && step <= last_step; }
  // Writes `value` into element 0 of the target's gradient, or into `loss` (a no-op for a
  // parameter target once armed in backward).
  void apply(const std::vector<NamedParam>& params, double& loss) const;
  // The fused engine's form (see the Note): `value` into element 0 of the target parameter.
  void poison_weight(const std::vector<NamedParam>& params) const;
  // --zero 2 reduce-scatters and frees each gradient inside backward, so a parameter target is
  // written by a grad-ready hook instead, into this rank's local gradient while *step (1-based)
  // is active; register it before the data-parallel hooks so it runs first.
  void arm_in_backward(const std::vector<NamedParam>& params, const int64_t* step);
  bool armed() const { return armed_; }

 private:
  bool armed_ = false;
};

class NonfinitePolicy {
 public:
  // policy: "stop" | "skip" (checked by resolve_auto); max_skips >= 1.
  NonfinitePolicy(const std::string& policy, int max_skips);
  enum class Action { kContinue, kSkip, kStop };
  // One verdict per step: kContinue (and the streak reset) for a finite step; for a non-finite
  // one kStop under `stop`, else kSkip until max_skips consecutive non-finite steps, then kStop.
  Action on_step(bool nonfinite);
  int consecutive() const { return consecutive_; }
  int max_skips() const { return max_skips_; }
  bool skips() const { return skip_; }

 private:
  bool skip_;
  int max_skips_;
  int consecutive_ = 0;
};

// "step 7: loss nan, gradient norm inf, first non-finite gradient (optimizer order):
// h.1.mlp.c_fc.weight" (or "..., every gradient finite" when first_nonfinite is empty).
std::string describe_nonfinite_step(int64_t step, double loss, double grad_norm,
                                    const std::string& first_nonfinite);

}  // namespace blu::train
