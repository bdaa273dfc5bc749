// captured_step.cpp: Note [Captured engine] (captured_step.h).
#include "engine/captured_step.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "blutensor/autograd.h"
#include "blutensor/env_switch.h"
#include "blucomp/step_runtime.h"
#include "blutensor/ops.h"
#include "blutrain/files.h"
#include "engine/compile_step.h"

namespace blu::train {

CapturedStep::CapturedStep(GPT2& model, AdamW& opt, Precision precision, double grad_clip, std::string plan,
                           std::string graph_path, std::string ptx_dir, std::string compile_dir)
    : model_(model),
      opt_(opt),
      precision_(precision),
      grad_clip_(grad_clip),
      plan_(std::move(plan)),
      graph_path_(std::move(graph_path)),
      ptx_dir_(std::move(ptx_dir)),
      compile_dir_(std::move(compile_dir)) {}

UpdateResult autograd_step(GPT2& model, AdamW& opt, Precision precision, double grad_clip, const Tensor& x,
                           const Tensor& y, double lr, double* loss, Tensor* loss_tensor) {
  Tensor l = model.forward(x, y, precision);
  l.backward();
  // Note [Update without a host read]: the update first, the loss and norm reads after it.
  const DeferredUpdate d = update_unless_nonfinite(opt, grad_clip, lr, l);
  *loss = l.item();
  const UpdateResult u = d.launched ? finish_deferred_update(opt, *loss, d.norm.item())
                                    : clip_and_update(opt, grad_clip, lr, std::isfinite(*loss));
  opt.zero_grad();
  if (loss_tensor != nullptr) *loss_tensor = l;
  return u;
}

namespace {

std::string gib(std::size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

// Note [Step arena] (blutensor/capture_arena.h) as the progress output says it, and blu-plan's
// own arena when a plan is bound.
std::string arena_line(const capture::ArenaStats& a, int64_t plan_bytes, int64_t plan_bound_bytes,
                       const std::string& classifier) {
  std::string s = "captured engine: ";
  s += a.enabled ? "arena " + gib(a.bytes)
                 : "a storage per temporary (BLU_CAPTURE_ARENA=0; the arena would be " + gib(a.bytes) + ")";
  s += " (lower bound " + gib(a.lower_bound_bytes) + "; " + std::to_string(a.temporaries) + " temporaries, " +
       gib(a.summed_bytes) + " summed; " +
       (a.inplace ? std::to_string(a.inplace_pairs) + " of " + std::to_string(a.inplace_candidates) +
                        " in-place pairs shared"
                  : std::string("in place off: BLU_CAPTURE_INPLACE=0")) +
       ")";
  s += "; " + classifier;
  // Note [Side stream] (blutensor): the calls a second stream runs beside the main one.
  if (a.side_calls > 0) {
    s += "; side stream: " + std::to_string(a.side_calls) + " calls in " + std::to_string(a.side_groups) + " groups";
  }
  if (plan_bytes >= 0) {
    s += "; blu-plan's arena " + gib(static_cast<std::size_t>(plan_bytes)) + " (lower bound " +
         gib(static_cast<std::size_t>(plan_bound_bytes)) + ")";
  }
  return s + "\n";
}

}  // namespace

UpdateResult CapturedStep::step(const Tensor& x, const Tensor& y, double lr, double* loss) {
  ++steps_;
  if (exe_ == nullptr && steps_ == 1) return autograd_step(model_, opt_, precision_, grad_clip_, x, y, lr, loss);
  if (exe_ == nullptr) {
    capture::Scope scope(/*snapshot_inputs=*/true);
    Tensor loss_tensor;
    UpdateResult u = autograd_step(model_, opt_, precision_, grad_clip_, x, y, lr, loss, &loss_tensor);
    capture::Graph g = scope.finish();
    if (!u.applied) return u;  // no update in this record: capture the next step instead
    // The loss's host read reads the loss tensor's buffer; the norm's is the last read before the
    // update, or (Note [Update without a host read]) the last read of the step, after the update.
    const int loss_buffer = g.buffer_of(loss_tensor);
    std::size_t reads = 0;
    bool found_loss = false, found_norm = false;
    for (const capture::Node& n : g.nodes) {
      if (n.op == "adamw_step" && found_loss) break;  // reads before the update: the norm's is the last
      if (n.op != "host_read") continue;
      if (n.arg("src").tensors.at(0).buffer == loss_buffer) loss_read_ = reads, found_loss = true;
      norm_read_ = reads++;
      found_norm = found_loss;
    }
    BLU_CHECK(found_loss && found_norm && norm_read_ > loss_read_,
              "--engine captured: the recorded step has no loss read before its gradient norm's (",
              g.host_reads(), " host reads)");
    describe_ = "captured engine: step " + std::to_string(steps_) + " recorded: " + g.summary();
    x_ = x;
    y_ = y;
    if (!graph_path_.empty()) {
      write_file_atomic(graph_path_, g.to_json());
      describe_ += "graph: " + graph_path_ + " (blu-plan's input)\n";
    }
    // Note [blutrain --compile]: blu-plan on the record just written; a failure leaves the record.
    bool compiled = false;
    if (plan_.empty() && !compile_dir_.empty() && !graph_path_.empty()) {
      std::string why;
      compiled = compile_recorded_step(graph_path_, compile_dir_, &plan_, &ptx_dir_, &why);
      describe_ += compiled ? "compile: blu-plan wrote a plan (" + ptx_dir_ + ")\n"
                            : "compile: " + why + "; the step runs as recorded (no fused kernels)\n";
    }
    int64_t plan_arena_bytes = -1, plan_arena_bound_bytes = -1;
    std::unique_ptr<capture::Graph> record_copy;
    if (compiled) record_copy = std::make_unique<capture::Graph>(g);  // to fall back to if binding fails
    exe_ = std::make_unique<capture::Executable>(std::move(g));
    // Note [Chunked classifier] (blutensor): before the plan's kernels, which then keep the
    // classifier's calls (the lm head's GEMM + mask epilogue: bind_plan says "already replaced");
    // chunking saves the [N, V] logits and their gradient, the epilogue one pass over them.
    const bool chunk = env_switch_on("BLU_CAPTURE_CHUNKED_CLASSIFIER");
    const auto chunk_now = [&] {
      return chunk ? exe_->chunk_classifier().describe() : "classifier as recorded (BLU_CAPTURE_CHUNKED_CLASSIFIER=0)";
    };
    std::string classifier = chunk_now();
    bool plan_bound = false;  // a plan bound (not the catch below): the compiled step's rewrites apply
    if (!plan_.empty()) {
      try {
        const comp::BindReport r = comp::bind_plan(*exe_, plan_, ptx_dir_);
        describe_ += "plan: " + std::to_string(r.bound) + " kernels bound, " + std::to_string(r.kept) +
                     " left as recorded calls\n";
        plan_arena_bytes = r.plan_arena_bytes;
        plan_arena_bound_bytes = r.plan_arena_lower_bound_bytes;
        for (const std::string& why : r.reasons) describe_ += "  kept: " + why + "\n";
        plan_bound = true;
      } catch (const std::exception& e) {
        if (!compiled) throw;  // --plan FILE: the user's plan is an error to report
        exe_ = std::make_unique<capture::Executable>(std::move(*record_copy));
        classifier = chunk_now();
        describe_ += std::string("compile: the plan did not bind (") + e.what() +
                     "); the step runs as recorded (no fused kernels)\n";
      }
    }
    // Note [Classifier gradient scaling] (blutensor): after the plan's kernels; the scalings in one
    // launch each (the same bits) and, compiled only, the tied embedding's gradient added in fp32
    // (not autograd's bits in bf16). BLU_CAPTURE_CLASSIFIER_GRAD=0: as recorded;
    // BLU_CAPTURE_EMBEDDING_GRAD_F32=1 / 0: the embedding part with or without a plan.
    if (env_switch_on("BLU_CAPTURE_CLASSIFIER_GRAD")) {
      const char* f32 = std::getenv("BLU_CAPTURE_EMBEDDING_GRAD_F32");
      const bool embedding_f32 = f32 == nullptr || *f32 == '\0' ? plan_bound : std::string(f32) == "1";
      describe_ += "classifier gradients: " + exe_->fold_classifier_grads(embedding_f32) + "\n";
    }
    // Note [Weight copies from the update] (blutensor): the bf16 weight casts written by AdamW
    // (the same bits). BLU_CAPTURE_WEIGHT_COPIES=0: cast every step as recorded.
    if (env_switch_on("BLU_CAPTURE_WEIGHT_COPIES")) {
      if (const int n = exe_->fold_weight_casts(); n > 0)
        describe_ += "weight copies: " + std::to_string(n) + " bf16 casts written by the AdamW update\n";
    }
    // Note [LayerNorm backward with the residual gradient] (blutensor): after the plan's kernels,
    // which keep their nodes; the same bits (bf16 only). On by default since session 24 (+1.2% in
    // bf16 once the side plan stopped moving data-gradient GEMMs for it); BLU_CAPTURE_LN_RESIDUAL=0: off.
    // Note [One-pass LayerNorm backward] (blutensor): compiled only (a plan is bound), every
    // bf16 LayerNorm backward through blublas's one-pass kernel; BLU_CAPTURE_LN_ONE_PASS=0:
    // off, =1: also without a plan (tests).
    if (env_switch_on("BLU_CAPTURE_LN_RESIDUAL")) {
      const char* op = std::getenv("BLU_CAPTURE_LN_ONE_PASS");
      const bool one_pass =
          (op != nullptr && std::string(op) == "1") || (plan_bound && env_switch_on("BLU_CAPTURE_LN_ONE_PASS"));
      const int fused = exe_->fuse_ln_residual_grads(one_pass);
      if (fused > 0)
        describe_ += "LayerNorm backward" + std::string(one_pass ? " (one pass)" : "") +
                     " + residual gradient: " + std::to_string(fused) + " launches replaced\n";
    }
    // Note [Dead host copies] (blutensor): item()'s copies of the loss and the norm into host
    // memory, which the replays read through the host-read callback instead. BLU_CAPTURE_HOST_COPIES=1 keeps them.
    if (const char* v = std::getenv("BLU_CAPTURE_HOST_COPIES"); v == nullptr || std::string(v) != "1") {
      if (const int n = exe_->drop_dead_host_copies(); n > 0)
        describe_ += "host copies: " + std::to_string(n) + " unread copies into host memory dropped\n";
    }
    // Note [Position gradient as a copy] (blutensor): the position table's gradient as one copy of
    // the batch sum (the same bits; GPT-2's position ids are a constant of the model). Off until
    // measured (built in session 25 after its last device call); BLU_CAPTURE_POSITION_GRAD=1 on.
    if (const char* v = std::getenv("BLU_CAPTURE_POSITION_GRAD"); v != nullptr && std::string(v) == "1") {
      if (const int n = exe_->fold_position_grads(); n > 0)
        describe_ += "position gradient: " + std::to_string(n) + " identity embedding backward(s) run as a copy\n";
    }
    describe_ += arena_line(exe_->arena(), plan_arena_bytes, plan_arena_bound_bytes, classifier);
    // Note [Staged captured inputs] and Note [One host read a step]: settled once, with the record.
    const char* copy_env = std::getenv("BLU_CAPTURED_STAGE_COPY");
    const auto stageable = [](const Tensor& t) {
      return t.device().is_cuda() && t.dtype() == DType::I32 && t.is_contiguous();
    };
    stage_direct_ = !(copy_env != nullptr && std::string(copy_env) == "1") && stageable(x_) && stageable(y_);
    const char* one_read_env = std::getenv("BLU_CAPTURED_ONE_HOST_READ");
    one_read_ = one_read_env == nullptr || std::string(one_read_env) != "0";
    return u;
  }
  {
    NoGradGuard ng;
    x_.copy_(x);
    y_.copy_(y);
  }
  return replay(lr, loss);
}

// Note [Staged captured inputs]
// The trainer stages each batch from pinned host memory into fresh device tensors; the replay then
// copied them into the recorded token tensors (two allocations and two copy launches a step, all
// before the graph, with the GPU idle: Note [Host issue time]). Once captured, the recorded
// tensors themselves take the staged batch, as the fused engine's buffers do.
// BLU_CAPTURED_STAGE_COPY=1 keeps the copies (read at the capture: stage_direct_).
int32_t* CapturedStep::staged_inputs() const { return stage_direct_ ? x_.data_ptr<int32_t>() : nullptr; }
int32_t* CapturedStep::staged_targets() const { return stage_direct_ ? y_.data_ptr<int32_t>() : nullptr; }

UpdateResult CapturedStep::step_staged(double lr, double* loss) {
  BLU_CHECK(stage_direct_, "CapturedStep::step_staged: no staged token buffers (before the capture, on the "
            "CPU, or with BLU_CAPTURED_STAGE_COPY=1): call step(x, y, ...)");
  ++steps_;
  return replay(lr, loss);
}

UpdateResult CapturedStep::replay(double lr, double* loss) {
  UpdateResult u;
  *loss = NAN;
  marks_ = HostMarks();
  // Note [One host read a step]
  // The step's two host reads (the loss, then the gradient norm, both after the update: Note
  // [Update without a host read]) were two item() calls, each a synchronous device-to-host round
  // trip; the session 24 bf16 profile has 85 us between the two transfers, with the GPU idle until
  // the next step is launched. The loss's view is kept at its read and both f32 scalars are read at
  // the norm's, in one transfer (the same values: the loss is read after the update either way).
  // Measured (H200, session 25, e25962c, one call): bf16 B16 501.6K -> 504.8K tok/s. On by default
  // since; BLU_CAPTURED_ONE_HOST_READ=0 (read at the capture: one_read_): two reads.
  Tensor loss_view;
  const auto wait_mark = [&] {  // Note [Host issue time]: the first read that waits
    if (marks_.waiting == std::chrono::steady_clock::time_point{}) marks_.waiting = std::chrono::steady_clock::now();
  };
  const bool done = exe_->run({lr, opt_.step_count() + 1}, [&](std::size_t i, const Tensor& v) {
    if (i == loss_read_) {
      if (one_read_ && v.device().is_cuda() && v.dtype() == DType::F32) {
        loss_view = v;
      } else {
        wait_mark();
        *loss = v.item();
      }
    }
    if (i != norm_read_) return true;
    wait_mark();
    if (loss_view.defined() && v.dtype() == DType::F32 && v.device() == loss_view.device()) {
      NoGradGuard ng;
      const Tensor both = cat({loss_view.reshape({1}), v.reshape({1})}).to(Device::cpu());
      *loss = both.data_ptr<float>()[0];
      u.grad_norm = both.data_ptr<float>()[1];
    } else {
      if (loss_view.defined()) *loss = loss_view.item();
      u.grad_norm = v.item();
    }
    return std::isfinite(*loss) && std::isfinite(u.grad_norm);
  });
  marks_.launching = exe_->graph_launching_at();
  marks_.launched = exe_->graph_launched_at();
  // Note [Graph segments] (blutensor): the second run captured what it could.
  if (const capture::Executable::GraphStats g = exe_->graph_stats(); ++runs_ == (g.enabled ? 2 : 1))
    news_ = "captured engine: " + g.describe() + "\n";
  if (done) {
    opt_.set_step_count(opt_.step_count() + 1);
  } else {
    u.applied = false;
    u.first_nonfinite = "(not tracked by --engine captured; --engine autograd names it)";
  }
  return u;
}

}  // namespace blu::train
