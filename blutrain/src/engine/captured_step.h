// captured_step.h: `--engine captured` (Note [Captured engine]): the autograd engine's step,
// recorded once (blutensor's Note [Step capture]) and then run as a capture::Executable.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "blutensor/capture.h"
#include "blutrain/gpt2.h"
#include "blutrain/host_marks.h"
#include "blutrain/optimizer.h"

namespace blu::train {

// The autograd engine's step on one micro-batch (trainer.cpp's, without accumulation, --dp/--tp
// or the test hook): forward, backward, the loss read, clip_and_update, zero_grad. loss_tensor
// (optional) keeps the loss tensor (a capture finds the loss's host read by its buffer).
UpdateResult autograd_step(GPT2& model, AdamW& opt, Precision precision, double grad_clip, const Tensor& x,
                           const Tensor& y, double lr, double* loss, Tensor* loss_tensor = nullptr);

// Note [Captured engine]
// Step 1 runs eagerly (the moments exist after it, as every later step sees them); step 2 runs
// eagerly under a capture::Scope and becomes an Executable; from step 3 on, each step writes its
// batch into step 2's token tensors and runs the executable with the step's lr and AdamW step
// count: the same backend calls on the same buffers as the autograd engine, without its Python-
// like bookkeeping (no graph of autograd nodes built and torn down, no op argument checks), so
// the losses are the autograd engine's bit for bit (captured_engine_test). It is the runtime that
// blucomp's compiled step will plug into (fused kernels in place of runs of calls).
// The host reads of the step keep their roles: the loss read gives the step's loss; the gradient
// norm's read (the step's last host read: Note [Update without a host read] puts both after the
// update, which the device skips for a non-finite loss or norm) reports a non-finite step, leaving
// weights and moments as they were (--nonfinite stop then reports
// the step; which parameter's gradient was first non-finite is not tracked here). If step 2 itself
// is non-finite its record has no update, so the capture is taken again on the next step.
// The step's temporaries run in one arena (blutensor's Note [Step arena]); the progress output
// gives it after the record ("captured engine: arena X GiB (lower bound Y GiB; ...)", with blu-
// plan's beside it when a plan is bound) and --summary-json as e2e.<mode>.arena_gib;
// BLU_CAPTURE_ARENA=0 gives each temporary its own storage instead (debugging); results take the
// bytes of operands dying at their op where the op allows it (Note [In-place reuse]; the line
// says how many pairs), BLU_CAPTURE_INPLACE=0 turns that alone off (A/B on the device). The
// classifier runs in row chunks (blutensor's Note [Chunked classifier]: the [N, V] logits and their
// gradient never exist); the arena line ends with "classifier in K chunks of R rows ..." or
// "classifier as recorded (why)"; BLU_CAPTURE_CHUNKED_CLASSIFIER=0 keeps the recorded calls (A/B),
// BLU_CAPTURE_CLASSIFIER_ROWS=R sets the rows of a chunk.
// Limits: one micro-batch per step, no --dp/--tp, the non-finite test hook refused.
class CapturedStep {
 public:
  // plan: blu-plan JSON text to bind after the capture (Note [Step runtime]); "" = none.
  // graph_path: where the record's JSON is written once captured ("" = nowhere): blu-plan's input.
  // ptx_dir: where the plan's fused-group PTX files are (blu-plan --ptx-dir; the plan's folder).
  // compile_dir: with no plan, blu-plan runs on graph_path once recorded and writes there (Note
  // [blutrain --compile] in engine/compile_step.h); "" = no compiling.
  CapturedStep(GPT2& model, AdamW& opt, Precision precision, double grad_clip, std::string plan = "",
               std::string graph_path = "", std::string ptx_dir = "", std::string compile_dir = "");
  UpdateResult step(const Tensor& x, const Tensor& y, double lr, double* loss);
  // Note [Staged captured inputs] (captured_step.cpp): once captured, the recorded token tensors
  // (int32 [B, T] on the CUDA device) to stage the next batch into, then step_staged(); null
  // before the capture, on the CPU, or with BLU_CAPTURED_STAGE_COPY=1 (step() copies then).
  int32_t* staged_inputs() const;
  int32_t* staged_targets() const;
  UpdateResult step_staged(double lr, double* loss);
  HostMarks host_marks() const { return marks_; }  // the last replay's (Note [Host issue time])
  bool captured() const { return exe_ != nullptr; }
  std::string describe() const { return describe_; }  // the record's summary once captured
  // A progress line not yet shown (the executable's CUDA graphs, after its second run: Note
  // [Graph segments] in blutensor), then "" until there is another.
  std::string take_news() { return std::exchange(news_, std::string()); }
  // The executable's arena (Note [Step arena] in blutensor/capture_arena.h); enabled false before
  // the capture or with BLU_CAPTURE_ARENA=0.
  capture::ArenaStats arena() const { return exe_ ? exe_->arena() : capture::ArenaStats(); }
  // Note [Chunked classifier] (blutensor): chunk_rows 0 when the classifier runs as recorded.
  capture::Executable::ClassifierChunks classifier() const {
    return exe_ ? exe_->classifier() : capture::Executable::ClassifierChunks();
  }

 private:
  GPT2& model_;
  AdamW& opt_;
  Precision precision_;
  double grad_clip_;
  int64_t steps_ = 0;
  UpdateResult replay(double lr, double* loss);
  std::unique_ptr<capture::Executable> exe_;
  HostMarks marks_;
  bool stage_direct_ = false;  // Note [Staged captured inputs], settled at the capture
  bool one_read_ = true;       // Note [One host read a step], settled at the capture
  Tensor x_, y_;                 // the captured step's token tensors, refilled every step
  std::size_t loss_read_ = 0, norm_read_ = 0;  // among the executable's host reads
  std::string describe_;
  std::string news_;
  int64_t runs_ = 0;  // of the executable
  std::string plan_;
  std::string graph_path_;
  std::string ptx_dir_;
  std::string compile_dir_;
};

}  // namespace blu::train
