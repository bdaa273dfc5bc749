// capture::Executable's CUDA graphs (Note [Graph segments]): the step cut at its host reads, each
// stretch that nothing changes per run captured once into a graph and launched whole after that.
#include <algorithm>
#include <atomic>

#include "blutensor/capture.h"
#include "capture/capture_internal.h"
#ifndef BLU_TENSOR_NO_CUDA_BACKEND
#include "blutensor/cuda_allocator.h"
#endif

namespace blu::capture {

using detail::Ctx;

// Note [Graph segments]
// A captured step launches some 500-600 calls from the host, and its host reads (the loss, then
// the gradient norm; before AdamW until session 22, after it since blutrain's Note [Update without
// a host read]) wait for the device; what the host spends issuing
// calls after a wait is time the GPU idles. The executable therefore cuts the step at its host reads into segments and runs each segment whose
// calls are the same every run as one CUDA graph:
//  - A segment's body ends at its host read or before an earlier call that touches host memory
//    (a copy to the CPU synchronises); its tail, run eagerly, holds those calls, the host read
//    and the calls on host memory right after it (item() records the read, then its copy to the
//    CPU: session 20's first device call found segment 1's capture refused at that copy).
//  - Capturable: on one CUDA device, with the arena (every temporary at a fixed address; live
//    buffers are fixed already), no host_write, no adamw_step (its lr and step count change per
//    run: a body ends before it, and AdamW's handful of launches run eagerly in the tail), and no
//    buffer that would get a storage of its own during the run.
//  - When: the first run after a plan is eager (each op's one-time host set-up: function
//    attributes, blucomp's per-stream workspaces); the second captures every capturable segment
//    just before it would run (nothing runs during a capture), then launches it; later runs only
//    launch. A re-plan (replace(), use_*()) drops the graphs.
//  - Capture: on a non-blocking stream of the executable's own (the caller's stream may be the
//    legacy one, which cannot be captured) made current for the segment, relaxed mode; the ops'
//    own scratch (DeviceBuffer, workspaces) comes from one private pool of the caching allocator
//    (Note [Private pools]), which keeps every such block for the graphs' lifetime. Side-stream
//    groups (Note [Side stream]) fork and join through events of the capture's own and are all
//    joined before the segment ends (a capture cannot end with unjoined work), so a group does
//    not overlap a host read in a graph run; the main stream records the step's start event
//    again after each graph launch, and a group forked later in an eager stretch waits for that
//    when its ready point ran inside a graph. The graph is launched on the
//    caller's current stream, so it is ordered after the batch copies like the eager calls.
//  - Memory: the graphs keep their scratch blocks (the private pool) for their lifetime, and the
//    run that captured them then empties the allocator's shared cache (the eager runs' scratch,
//    which graph runs no longer use): on the H100 before that, device memory grew by 0.20 GiB
//    (bf16 compiled, 9.24 -> 9.44) and 0.67 GiB (fp32 captured, 6.88 -> 7.55) over eager runs.
//  - A capture that fails (an op that synchronises) is ended and dropped; that segment runs
//    eagerly and graphs stay off for this plan, graph_stats().why saying why. An op that issued
//    on a stream other than the current one would not fail but run outside the graph: what the
//    bit-for-bit test below would catch (every blutensor op issues on current_stream()).
// The graphs run the same kernels with the same arguments on the same addresses in the same
// stream order, so a graph run is bit for bit the eager one (tests/blutrain/
// captured_engine_gpu_test.cpp: losses and checkpoints with BLU_CAPTURE_GRAPHS=0 vs on).
//
// Note [Graph head]
// cudaGraphLaunch is not cheap for a step of 500 calls: Note [Host issue time] (blutrain) measured
// the launch call at ~0.5 ms for the compiled bf16 step's graph and ~0.35 ms for the fused
// engine's (H200, session 25), ~1.5% of a 32 ms step if the GPU starts only once the call returns
// (it is idle before: the trainer synchronises between steps). So the step's first stretch is cut
// after head_calls_ calls (BLU_CAPTURE_GRAPH_HEAD, default 48, 0 = no cut): a graph of the
// embedding and the first layer or two (~1 ms of GPU work in bf16), which the GPU runs while the
// host launches the rest. The cut is a segment boundary like a host read's, without its tail: a
// side group in flight there is joined at the head's end, the next graph follows in stream order.
// Predicted: bf16 +0.5..1.5% if the GPU waited for the whole call, nothing if it did not.
//
// Measured (H100, d7b1e30, GPT-2 124M): 2 of 3 segments captured (476 calls; AdamW's 4 eager),
// bf16 B16 compiled 440.5K tok/s vs 432.9K without graphs (+1.8%), fp32 B8 53.6K vs 52.9K
// (+1.3%); session 19's profile had suggested ~1 ms of idle a bf16 step, but only ~0.3 ms was
// more than the fused engine's, and the gain came from the norm-and-clip stretch right after the
// loss read's sync, not from the forward/backward (the host runs well ahead there).

// Note [Stream priorities]
// The side stream's weight-gradient GEMMs are persistent kernels (one CTA on every SM): whichever
// of two ready kernels the hardware dispatches first takes the SMs, and in the bf16 profile of
// session 24 (H100, compiled step, one backward layer) the side stream's dW GEMM took them from
// the main stream's qkv bias sum and LayerNorm backward, the critical path (1.432 ms a layer
// against the fused engine's 1.397). A CUDA stream priority decides between ready blocks of two
// streams (it never preempts a running CTA), and a captured graph keeps each kernel node's
// capture-stream priority only when instantiated with cudaGraphInstantiateFlagUseNodePriority
// (otherwise every node runs at the launch stream's). BLU_CAPTURE_STREAM_PRIORITY=1 captures the
// main stream's calls on a stream of the device's highest priority (the side stream keeps the
// default, the lowest) and instantiates with that flag; GraphStats::prioritized counts the kernel
// nodes that came out high (the proof that the capture kept them). Eager runs are unchanged. The
// fused engine's switch is BLUTRAIN_STREAM_PRIORITY=1. Same kernels, same order per stream: the
// same bits. Status: OFF. Measured (H100, session 24, 88842ce, one call, 30-step medians): compiled
// fp32 B8 53.0K vs 54.4K tok/s, tf32 B16 205.9K vs 207.2K; fused bf16 470.3K vs 474.3K, fp32 53.6K
// vs 54.2K. The tf32 trace doubles the time two streams run at once (18.7 vs 10.1 ms) for no gain:
// a priority orders pending blocks only, and a persistent GEMM's resident CTAs keep their SMs.

namespace {

[[maybe_unused]] std::atomic<std::uint64_t> next_pool{1};  // CUDA backend only

}  // namespace

std::string Executable::GraphStats::describe() const {
  if (!enabled) return "CUDA graphs off (" + why + ")";
  std::string s = "CUDA graphs: " + std::to_string(captured) + " of " + std::to_string(segments) + " segments (" +
                  std::to_string(captured_calls) + " calls in graphs, " + std::to_string(eager_calls) + " launched one by one)";
  if (prioritized >= 0) s += "; " + std::to_string(prioritized) + " kernel nodes at the main stream's high priority";
  if (!why.empty()) s += "; " + why;
  return s;
}

void Executable::use_graphs(bool on) {
  if (on == use_graphs_) return;
  use_graphs_ = on;
  planned_ = false;
  arena_views_.clear();
}

Executable::~Executable() { drop_graphs(); }

void Executable::drop_graphs() noexcept {
  for (Segment& seg : segments_) seg.exec = cuda::GraphExec();
  prioritized_ = 0;
#ifndef BLU_TENSOR_NO_CUDA_BACKEND
  if (pool_refs_ > 0 && !graph_.nodes.empty()) {
    const int device = graph_.nodes.front().device.index;
    try {
      for (; pool_refs_ > 0; --pool_refs_) cuda::CachingAllocator::get().release_pool(device, pool_);
    } catch (...) {  // a destructor's path: the pool then stays (its blocks are not handed out)
    }
  }
#endif
  pool_refs_ = 0;
  pool_ = 0;
  graphs_failed_ = false;
  graphs_why_.clear();
  runs_since_plan_ = 0;
}

// The segments of the plan: cut after each host read; which may run as a graph and why not.
void Executable::plan_segments(bool one_cuda_device) {
  segments_.clear();
  graphs_why_.clear();
  if (!use_graphs_) graphs_why_ = "BLU_CAPTURE_GRAPHS=0";
  else if (!use_arena_) graphs_why_ = "no arena: temporaries get storages per run";
  else if (!one_cuda_device) graphs_why_ = "the step is not on one CUDA device";
  graphs_enabled_ = graphs_why_.empty();
  const int n = static_cast<int>(graph_.nodes.size());
  const auto is_read = [&](int k) { return graph_.nodes[static_cast<size_t>(k)].op == "host_read"; };
  const auto on_host = [&](int k) {  // a call on host memory (a copy to the CPU synchronises)
    for (const Arg& a : graph_.nodes[static_cast<size_t>(k)].args) {
      for (const TensorRef& t : a.tensors) {
        if (t.defined() && !graph_.buffers[static_cast<size_t>(t.buffer)].device.is_cuda()) return true;
      }
    }
    return false;
  };
  const auto is_call = [&](int k) {  // a launch: a node that runs itself, or a replaced set's last
    const int ov = static_cast<size_t>(k) < override_of_.size() ? override_of_[static_cast<size_t>(k)] : -1;
    return ov < 0 || overrides_[static_cast<size_t>(ov)].nodes.back() == k;
  };
  for (int begin = 0; begin < n; begin = segments_.back().end) {
    Segment seg;
    seg.begin = begin;
    // The body ends at the host read, or before an earlier call on host memory; the tail runs
    // eagerly. A host read is recorded before the copy to the CPU that makes it
    // (Tensor::to_double_vector): the calls on host memory right after it join its tail too.
    // The body also ends before AdamW (its lr and step count change per run), which then runs
    // eagerly in the tail: with the update before the step's reads (blutrain Note [Update without
    // a host read]) everything before it stays one graph.
    int i = begin;
    while (i < n && !is_read(i) && !on_host(i) && graph_.nodes[static_cast<size_t>(i)].op != "adamw_step") ++i;
    // Note [Graph head]: the step's first stretch cut after head_calls_ calls (when it has more
    // than twice that), with no tail: a short graph the GPU starts on at once.
    int head = -1;
    if (segments_.empty() && graphs_enabled_ && head_calls_ > 0) {
      int calls = 0, total = 0;
      for (int k = begin; k < i; ++k) total += is_call(k) ? 1 : 0;
      for (int k = begin; k < i && head < 0 && total > 2 * head_calls_; ++k) {
        if (is_call(k) && ++calls == head_calls_) head = k + 1;
      }
    }
    seg.body_end = head >= 0 ? head : i;
    if (head >= 0) {
      i = head;
    } else {
      for (; i < n && !is_read(i); ++i) seg.tail_calls += is_call(i) ? 1 : 0;
      for (i = std::min(i + 1, n); i < n && !is_read(i) && on_host(i); ++i) seg.tail_calls += is_call(i) ? 1 : 0;
    }
    seg.end = i;
    std::string why;
    for (int k = seg.begin; k < seg.body_end; ++k) {
      const Node& node = graph_.nodes[static_cast<size_t>(k)];
      seg.calls += is_call(k) ? 1 : 0;
      if (!why.empty()) continue;
      if (node.op == "adamw_step") why = "AdamW's lr and step change per run";
      if (node.op == "host_write") why = "node " + std::to_string(k) + " writes from the host";
      for (const Arg& a : node.args) {
        for (const TensorRef& t : a.tensors) {
          const size_t id = static_cast<size_t>(t.buffer);
          if (t.defined() && live_[id] == nullptr && arena_views_[id] == nullptr && !dropped_[id] && why.empty())
            why = "buffer " + std::to_string(t.buffer) + " would get a storage during the run";
        }
      }
    }
    seg.capturable = graphs_enabled_ && seg.calls > 0 && why.empty();
    if (graphs_enabled_ && seg.calls > 0 && !why.empty() && graphs_why_.empty())
      graphs_why_ = "segment " + std::to_string(segments_.size()) + " eager: " + why;
    segments_.push_back(std::move(seg));
  }
}

Executable::GraphStats Executable::graph_stats() {
  if (!planned_) plan_temporaries();
  GraphStats g;
  g.enabled = graphs_enabled_;
  g.why = graphs_why_;
  g.segments = static_cast<int>(segments_.size());
  g.prioritized = stream_priority_ ? prioritized_ : -1;
  for (const Segment& seg : segments_) {
    if (seg.exec.valid()) {
      ++g.captured;
      g.captured_calls += seg.calls;
    } else {
      g.eager_calls += seg.calls;
    }
    g.eager_calls += seg.tail_calls;
  }
  return g;
}

// Captures seg (nothing runs) and instantiates it; false when the capture failed (the segment then
// runs eagerly and graphs stay off for this plan).
bool Executable::capture_segment(Segment& seg, Ctx& ctx, const StepScalars& scalars, SideRun& side) {
#ifdef BLU_TENSOR_NO_CUDA_BACKEND
  (void)seg, (void)ctx, (void)scalars, (void)side;
  return false;
#else
  const int device = graph_.nodes.front().device.index;
  // Note [Stream priorities]: the main stream's calls captured at the device's highest priority.
  if (capture_stream_.get() == nullptr)
    capture_stream_ = cuda::Stream::create(device, true, stream_priority_ ? cuda::GraphExec::highest_stream_priority(device) : 0);
  if (side.on) {
    while (capture_ready_.size() < side_ready_.size()) capture_ready_.push_back(cuda::Event::create(device));
    while (capture_done_.size() < static_cast<size_t>(side_in_flight_)) capture_done_.push_back(cuda::Event::create(device));
  }
  if (pool_ == 0) pool_ = (std::uint64_t{0xB1C} << 48) | next_pool.fetch_add(1);
  cudaStream_t s = capture_stream_.get();
  cuda::CachingAllocator& alloc = cuda::CachingAllocator::get();
  const cudaStream_t main = side.main;
  join_side(side);  // an eager group still in flight from before the host read
  std::string error;
  bool routed = false;
  try {
    cuda::GraphExec::begin_capture(s);
    alloc.begin_allocate_to_pool(device, pool_, s);
    ++pool_refs_;
    routed = true;
    cuda::StreamGuard guard(s, device);
    side.main = s;
    side.capturing = true;
    side.seg_begin = seg.begin;
    if (side.on) capture_ready_.back().record(s);  // the segment's start
    run_nodes(seg.begin, seg.body_end, ctx, scalars, side, nullptr);  // no host read inside
    join_side(side);
  } catch (const std::exception& e) {
    error = e.what();
  }
  side.main = main;
  side.capturing = false;
  side.in_flight.clear();
  side.issuing = -1;
  if (routed) alloc.end_allocate_to_pool(device, pool_);
  if (error.empty()) {
    try {
      int prioritized = 0;
      seg.exec = cuda::GraphExec::end_capture(s, stream_priority_, stream_priority_ ? &prioritized : nullptr);
      prioritized_ += prioritized;
      return true;
    } catch (const std::exception& e) {
      error = e.what();
    }
  } else {
    cuda::GraphExec::abandon_capture(s);
  }
  // The side stream may have been left in the dropped capture; nothing issued to it ran.
  if (side.on) side_stream_ = cuda::Stream::create(device);
  graphs_failed_ = true;
  graphs_why_ = "the capture of segment " + std::to_string(&seg - segments_.data()) + " failed (" + error +
                "); eager from then on";
  return false;
#endif
}

}  // namespace blu::capture
