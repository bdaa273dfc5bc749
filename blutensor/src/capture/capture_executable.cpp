// capture::Executable (Note [Running a captured step], blutensor/capture.h): a captured step run
// again on the live buffers, its temporaries in one arena per device (Note [Step arena], results
// in place of dying operands where the op allows: Note [In-place reuse]) or, for debugging, a
// storage each.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>

#include "blutensor/capture.h"
#include "blutensor/env_switch.h"
#include "capture/capture_internal.h"
#ifndef BLU_TENSOR_NO_CUDA_BACKEND
#include "blutensor/cuda_allocator.h"
#endif

namespace blu::capture {

using detail::Ctx;
using detail::fill_from;
using detail::run_node;

namespace {

constexpr std::size_t kArenaAlignmentBytes = 256;

}  // namespace

Executable::Executable(Graph g)
    : use_arena_(env_switch_on("BLU_CAPTURE_ARENA")),
      use_inplace_(env_switch_on("BLU_CAPTURE_INPLACE")),
      use_side_stream_(env_switch_on("BLU_CAPTURE_SIDE_STREAM")),
      graph_(std::move(g)),
      use_graphs_(env_switch_on("BLU_CAPTURE_GRAPHS")) {
  BLU_CHECK(!recording(), "capture::Executable: not inside a capture Scope");
  if (const char* v = std::getenv("BLU_CAPTURE_SIDE_IN_FLIGHT")) {  // Note [Side groups in flight]
    const int k = std::atoi(v);
    BLU_CHECK(k >= 1 && k <= 8, "BLU_CAPTURE_SIDE_IN_FLIGHT=", v, ": expected 1 .. 8 groups");
    side_in_flight_ = k;
  }
  // Note [GEMM CTA budget] (blublas/gemm.h): the side stream's GEMMs on at most this many CTAs, so
  // the main stream's kernels beside them get SMs (0, the default: one CTA per SM). Measured
  // (H100, session 24, c10bc78, 112 CTAs, one call): compiled bf16 B16 469.5K -> 455.2K tok/s, tf32
  // B16 208.1K -> 198.7K, fp32 B8 54.7K -> 54.8K (the GEMMs lose more than the kernels beside gain).
  if (const char* v = std::getenv("BLU_CAPTURE_SIDE_GEMM_CTAS")) {
    const int k = std::atoi(v);
    BLU_CHECK(k >= 0 && k <= 4096, "BLU_CAPTURE_SIDE_GEMM_CTAS=", v, ": expected 0 (off) .. 4096 CTAs");
    side_gemm_ctas_ = k;
  }
  if (const char* v = std::getenv("BLU_CAPTURE_STREAM_PRIORITY")) stream_priority_ = std::string(v) == "1";
  if (const char* v = std::getenv("BLU_CAPTURE_SIDE_MAP_BLOCKS")) {  // Note [Side map budget]
    const int k = std::atoi(v);
    BLU_CHECK(k >= 0 && k <= 64, "BLU_CAPTURE_SIDE_MAP_BLOCKS=", v, ": expected 0 (no cap) .. 64 blocks per SM");
    side_map_blocks_ = k;
  }
  if (const char* v = std::getenv("BLU_CAPTURE_GRAPH_HEAD")) {  // Note [Graph head]
    const int k = std::atoi(v);
    BLU_CHECK(k >= 0 && k <= 100000, "BLU_CAPTURE_GRAPH_HEAD=", v, ": expected 0 (no head graph) .. 100000 calls");
    head_calls_ = k;
  }
  const size_t n = graph_.buffers.size();
  live_.resize(n);
  last_use_.assign(n, -1);
  first_use_.assign(n, -1);
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    for (const Arg& a : graph_.nodes[i].args) {
      for (const TensorRef& t : a.tensors) {
        if (!t.defined()) continue;
        last_use_[static_cast<size_t>(t.buffer)] = static_cast<int>(i);
        if (first_use_[static_cast<size_t>(t.buffer)] < 0)
          first_use_[static_cast<size_t>(t.buffer)] = static_cast<int>(i);
      }
    }
  }
  for (const Buffer& b : graph_.buffers) {
    const size_t id = static_cast<size_t>(b.id);
    std::shared_ptr<Storage> s = id < graph_.storages.size() ? graph_.storages[id].lock() : nullptr;
    if (b.origin == Origin::kInput && s == nullptr) {
      // No longer referenced: a value made inside the captured step; its snapshot is a constant.
      auto it = graph_.initial.find(b.id);
      BLU_CHECK(it != graph_.initial.end(), "capture::Executable: input buffer ", b.id, " (",
                b.nbytes,
                " bytes) is no longer referenced and has no snapshot: capture with Scope(true)");
      s = std::make_shared<Storage>(b.nbytes, b.device);
      fill_from(s, b, it->second);
      if (b.written)
        refill_.push_back(b.id);  // the step changes it: every run starts from the snapshot
    }
    if (b.origin == Origin::kInput || b.alive) {
      BLU_CHECK(s != nullptr, "capture::Executable: output buffer ", b.id,
                " is no longer referenced");
      live_[id] = s;
      ++persistent_;
    }
  }
  // The constants are filled in; the live inputs need no snapshot; the ones refilled every run
  // are read from the device (Note [Input snapshots on the host]).
  for (auto it = graph_.initial.begin(); it != graph_.initial.end();) {
    if (std::find(refill_.begin(), refill_.end(), it->first) == refill_.end()) {
      it = graph_.initial.erase(it);
      continue;
    }
    const Device d = graph_.buffers[static_cast<size_t>(it->first)].device;
    if (it->second.device() != d) it->second = it->second.to(d);
    ++it;
  }
}

void Executable::use_arena(bool on) {
  if (on == use_arena_) return;
  use_arena_ = on;
  planned_ = false;
  arena_views_.clear();
}

void Executable::use_inplace(bool on) {
  if (on == use_inplace_) return;
  use_inplace_ = on;
  planned_ = false;
  arena_views_.clear();
}

void Executable::use_side_stream(bool on) {
  if (on == use_side_stream_) return;
  use_side_stream_ = on;
  planned_ = false;
  arena_views_.clear();
}

const std::vector<InplacePair>& Executable::inplace_pairs() {
  if (!planned_) plan_temporaries();
  return inplace_pairs_;
}

ArenaStats Executable::arena() {
  if (!planned_) plan_temporaries();
  return stats_;
}

Tensor Executable::buffer(int id) {
  BLU_CHECK(id >= 0 && static_cast<size_t>(id) < graph_.buffers.size(),
            "capture::Executable::buffer: buffer ", id, " of ", graph_.buffers.size());
  if (!planned_) plan_temporaries();
  const size_t i = static_cast<size_t>(id);
  const std::shared_ptr<Storage>& s =
      live_[i] != nullptr ? live_[i] : (use_arena_ ? arena_views_[i] : nullptr);
  return s != nullptr ? detail::byte_view(s, graph_.buffers[i].nbytes) : Tensor();
}

// Note [Step arena] for the Executable: every temporary (not persistent, used by some node) is an
// interval [first use, last use] over the node order, last use extended to the end for a buffer a
// host read reads (its view outlives the step) and to an override's last node for what the
// override touches (replace() did that); a buffer only overridden nodes use is no temporary (no
// bytes: Note [Kernel overrides]) and an override's scratch is one, live at the set's last node.
// With use_inplace, a result may take the bytes of an
// operand that dies at its node where the op allows it (Note [In-place reuse]; never at a node an
// override replaced). One plan per device; each temporary then gets a Storage
// that is a window of its device's arena (the arena kept alive by every window), so views, host
// reads and overrides address it like any storage, and nothing is allocated per run. The arena is
// allocated here, once per plan: on CUDA by the caching allocator (a Storage), so its statistics
// count it.
void Executable::plan_temporaries() {
  drop_graphs();  // their addresses are the old plan's
  planned_ = true;
  stats_ = ArenaStats();
  arena_views_.assign(graph_.buffers.size(), nullptr);
  stats_.enabled = use_arena_;
  const int end = static_cast<int>(graph_.nodes.size()) - 1;
  std::vector<int> last = last_use_;
  for (const Node& node : graph_.nodes) {
    if (node.op != "host_read") continue;
    for (const TensorRef& t : node.arg("src").tensors) {
      if (t.defined()) last[static_cast<size_t>(t.buffer)] = end;
    }
  }
  // Note [Side stream]: with the arena, on one CUDA device only; what a group touches lives to its
  // join.
  side_ = SidePlan();
  side_record_at_.clear();
  std::vector<int> first = first_use_;
  // An override's scratch on the side stream lives from its group's start to its join.
  std::vector<std::pair<int, int>> scratch_span(overrides_.size());
  for (size_t k = 0; k < overrides_.size(); ++k) scratch_span[k] = {overrides_[k].nodes.back(), overrides_[k].nodes.back()};
  bool one_cuda_device = !graph_.nodes.empty();
  for (const Node& node : graph_.nodes) {
    one_cuda_device = one_cuda_device && node.device.is_cuda() && node.device == graph_.nodes.front().device;
  }
  if (use_side_stream_ && use_arena_ && one_cuda_device) {
    SidePlan side = side_stream_plan(graph_, override_of_, side_in_flight_);
    if (side.side_calls > 0) {
      side_record_at_.assign(graph_.nodes.size(), {});
      for (size_t k = 0; k < side.ready_after.size(); ++k) {
        if (side.ready_after[k] >= 0) side_record_at_[static_cast<size_t>(side.ready_after[k])].push_back(static_cast<int>(k));
      }
      for (size_t id = 0; id < last.size(); ++id) {
        last[id] = std::max(last[id], side.extend_to[id]);
        if (side.start_from[id] >= 0 && first[id] >= 0) first[id] = std::min(first[id], side.start_from[id]);
      }
      for (size_t k = 0; k < overrides_.size(); ++k) {
        const int g = side.group_of[static_cast<size_t>(overrides_[k].nodes.back())];
        if (g < 0) continue;
        scratch_span[k] = {side.ready_after[static_cast<size_t>(g)] + 1,
                           std::min(side.join_before[static_cast<size_t>(g)], end)};
      }
      stats_.side_calls = side.side_calls;
      stats_.side_groups = side.fork_at.size();
      side_ = std::move(side);
    }
  }
  // A buffer every node of which an override replaced, and that no launch views, gets no bytes
  // (Note [Kernel overrides]).
  dropped_.assign(graph_.buffers.size(), 0);
  if (!overrides_.empty()) {
    std::vector<char> outside(graph_.buffers.size(), 0);  // some node that runs itself uses it, or a launch views it
    const auto mark_args = [&](size_t i) {
      for (const Arg& a : graph_.nodes[i].args) {
        for (const TensorRef& t : a.tensors) {
          if (t.defined()) outside[static_cast<size_t>(t.buffer)] = 1;
        }
      }
    };
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      if (i >= override_of_.size() || override_of_[i] < 0) mark_args(i);
    }
    for (const Override& o : overrides_) {
      if (o.views.empty()) {
        for (int i : o.nodes) mark_args(static_cast<size_t>(i));
      }
      for (int b : o.views) outside[static_cast<size_t>(b)] = 1;
    }
    for (const Buffer& b : graph_.buffers) {
      const size_t id = static_cast<size_t>(b.id);
      if (live_[id] != nullptr || first_use_[id] < 0 || outside[id]) continue;
      dropped_[id] = 1;
      ++stats_.dropped;
      stats_.dropped_bytes += b.nbytes;
    }
  }
  // device -> temporaries: a buffer id, or -(k + 1) for override k's scratch.
  std::map<std::string, std::vector<int>> by_device;
  std::vector<char> temporary(graph_.buffers.size(), 0);
  for (const Buffer& b : graph_.buffers) {
    const size_t id = static_cast<size_t>(b.id);
    if (live_[id] != nullptr || first_use_[id] < 0 || dropped_[id]) continue;
    by_device[b.device.str()].push_back(b.id);
    temporary[id] = 1;
  }
  std::map<std::string, Device> device_of;
  for (size_t k = 0; k < overrides_.size(); ++k) {
    Override& o = overrides_[k];
    o.scratch = nullptr;
    if (o.scratch_bytes == 0) continue;
    const Device d = graph_.nodes[static_cast<size_t>(o.nodes.back())].device;
    by_device[d.str()].push_back(-static_cast<int>(k) - 1);
    device_of.emplace(d.str(), d);
    stats_.scratch_bytes += o.scratch_bytes;
  }
  stats_.inplace = use_inplace_;
  inplace_pairs_.clear();
  std::vector<int> taker(graph_.buffers.size(), -1);  // per result buffer: the operand it takes
  if (use_inplace_) {
    inplace_pairs_ = detail::inplace_pairs(graph_, first, last, temporary, override_of_);
    for (const InplacePair& p : inplace_pairs_) taker[static_cast<size_t>(p.result)] = p.operand;
  }
  stats_.inplace_candidates = inplace_pairs_.size();
  for (const auto& [device_name, ids] : by_device) {
    std::vector<ArenaInterval> intervals;
    std::map<int, int> index_of;  // buffer id -> interval
    for (int id : ids) {
      index_of[id] = static_cast<int>(intervals.size());
      if (id < 0) {  // an override's scratch: live at the node its launch runs at (on the side
                     // stream: from its group's start to its join)
        const size_t k = static_cast<size_t>(-id - 1);
        intervals.push_back({overrides_[k].scratch_bytes, scratch_span[k].first, scratch_span[k].second});
        continue;
      }
      const size_t i = static_cast<size_t>(id);
      intervals.push_back({graph_.buffers[i].nbytes, first[i], last[i]});
    }
    for (size_t k = 0; k < ids.size(); ++k) {
      const int operand = ids[k] >= 0 ? taker[static_cast<size_t>(ids[k])] : -1;
      if (operand >= 0) intervals[k].inplace_of = index_of.at(operand);
    }
    const ArenaPlan plan = plan_arena(intervals, kArenaAlignmentBytes);
    stats_.temporaries += static_cast<size_t>(std::count_if(ids.begin(), ids.end(), [](int id) { return id >= 0; }));
    stats_.bytes += plan.bytes;
    stats_.lower_bound_bytes += plan.lower_bound_bytes;
    stats_.summed_bytes += plan.summed_bytes;
    stats_.inplace_pairs += plan.inplace_pairs;
    if (!use_arena_ || plan.bytes == 0) continue;
    const Device device =
        ids.front() >= 0 ? graph_.buffers[static_cast<size_t>(ids.front())].device : device_of.at(device_name);
    // Host storage is 64-byte aligned, CUDA's (the caching allocator's blocks) 512: on the host,
    // room to start the arena at the plan's alignment.
    const std::size_t slack = device.is_cpu() ? kArenaAlignmentBytes - 1 : 0;
#ifndef BLU_TENSOR_NO_CUDA_BACKEND
    // The eager steps before left their blocks cached (free, reserved): hand them back first, so
    // that the one large block does not come on top of them (device memory, not the allocator's
    // allocated bytes, would otherwise peak at the eager step's reserve plus the arena).
    if (device.is_cuda()) cuda::CachingAllocator::get().empty_cache(device.index);
#endif
    auto arena = std::make_shared<Storage>(plan.bytes + slack, device);
    const auto start = reinterpret_cast<uintptr_t>(arena->data());
    char* base = static_cast<char*>(arena->data()) +
                 (kArenaAlignmentBytes - start % kArenaAlignmentBytes) % kArenaAlignmentBytes;
    BLU_CHECK(reinterpret_cast<uintptr_t>(base) + plan.bytes <= start + plan.bytes + slack,
              "capture::Executable: the arena of ", plan.bytes, " bytes on ", device.str(),
              " is not ", kArenaAlignmentBytes, "-byte aligned");
    for (size_t k = 0; k < ids.size(); ++k) {
      if (ids[k] < 0) {
        Override& o = overrides_[static_cast<size_t>(-ids[k] - 1)];
        o.scratch = std::make_shared<Storage>(base + plan.offsets[k], o.scratch_bytes, device, [arena](void*) {});
        continue;
      }
      const Buffer& b = graph_.buffers[static_cast<size_t>(ids[k])];
      arena_views_[static_cast<size_t>(b.id)] =
          std::make_shared<Storage>(base + plan.offsets[k], b.nbytes, device, [arena](void*) {});
    }
  }
  plan_segments(one_cuda_device);
}

void Executable::replace(std::vector<int> nodes, LaunchFn launch, std::vector<int> views) {
  BLU_CHECK(launch, "capture::Executable::replace: no launch");
  add_override(std::move(nodes), std::move(launch), 0, nullptr, std::move(views));
}

void Executable::replace(std::vector<int> nodes, std::size_t scratch_bytes, ScratchLaunchFn launch,
                         std::vector<int> views) {
  BLU_CHECK(launch, "capture::Executable::replace: no launch");
  add_override(std::move(nodes), nullptr, scratch_bytes, std::move(launch), std::move(views));
}

void Executable::add_override(std::vector<int> nodes, LaunchFn launch, std::size_t scratch_bytes,
                              ScratchLaunchFn scratch_launch, std::vector<int> views) {
  BLU_CHECK(!nodes.empty(), "capture::Executable::replace: no nodes");
  for (int b : views) {
    BLU_CHECK(b >= 0 && static_cast<size_t>(b) < graph_.buffers.size(), "capture::Executable::replace: viewed buffer ",
              b, " of ", graph_.buffers.size());
  }
  std::sort(nodes.begin(), nodes.end());
  override_of_.resize(graph_.nodes.size(), -1);
  for (size_t k = 0; k < nodes.size(); ++k) {
    const int n = nodes[k];
    BLU_CHECK(n >= 0 && static_cast<size_t>(n) < graph_.nodes.size(),
              "capture::Executable::replace: node ", n, " of ", graph_.nodes.size());
    BLU_CHECK(k == 0 || nodes[k - 1] != n, "capture::Executable::replace: node ", n,
              " listed twice");
    BLU_CHECK(graph_.nodes[static_cast<size_t>(n)].op != "host_read",
              "capture::Executable::replace: node ", n, " is a host read (it stays where it is)");
    BLU_CHECK(override_of_[static_cast<size_t>(n)] < 0, "capture::Executable::replace: node ", n,
              " is already replaced by override ", override_of_[static_cast<size_t>(n)]);
  }
  for (int n : nodes) {
    override_of_[static_cast<size_t>(n)] = static_cast<int>(overrides_.size());
    // The kernel runs at the set's last node: what the set touches lives until then at least.
    for (const Arg& a : graph_.nodes[static_cast<size_t>(n)].args) {
      for (const TensorRef& t : a.tensors) {
        if (t.defined())
          last_use_[static_cast<size_t>(t.buffer)] =
              std::max(last_use_[static_cast<size_t>(t.buffer)], nodes.back());
      }
    }
  }
  // A viewed buffer lives at the launch, wherever the calls named it: until it at least, and from
  // it at the latest (a launch that writes a buffer the record first touches later: Note [Early
  // classifier scaling]'s G; session 24's first device run of it, without this, had the arena
  // give G's bytes to temporaries live in between: a CUDA fault in bf16).
  for (int b : views) {
    const size_t u = static_cast<size_t>(b);
    last_use_[u] = std::max(last_use_[u], nodes.back());
    first_use_[u] = first_use_[u] < 0 ? nodes.back() : std::min(first_use_[u], nodes.back());
  }
  overrides_.push_back({std::move(nodes), std::move(launch), scratch_bytes, std::move(scratch_launch), nullptr,
                        std::move(views)});
  planned_ = false;  // the live ranges changed: plan (and allocate) again at the next run
  arena_views_.clear();
}

bool Executable::run(const StepScalars& scalars, const HostReadFn& on_host_read) {
  BLU_CHECK(!recording(), "capture::Executable::run: not inside a capture Scope");
  if (!planned_) plan_temporaries();
  // The storages of this run, made where a call is first issued from the host: a run whose first
  // segment is a graph launches it before this copy of every buffer's storage (1229 shared
  // pointers for GPT-2 124M), with the GPU idle until it does (blutrain Note [Host issue time]).
  Ctx ctx;
  bool have_ctx = false;
  const auto need_ctx = [&]() -> Ctx& {
    if (!have_ctx) {
      ctx.storages = live_;
      if (use_arena_) {
        for (size_t id = 0; id < live_.size(); ++id) {
          if (arena_views_[id] != nullptr) ctx.storages[id] = arena_views_[id];
        }
      }
      have_ctx = true;
    }
    return ctx;
  };
  host_reads_.clear();
  graph_launched_at_ = graph_launching_at_ = {};
  for (int id : refill_)
    fill_from(live_[static_cast<size_t>(id)], graph_.buffers[static_cast<size_t>(id)],
              graph_.initial.at(id));
  // Note [Side stream]: the main stream is the caller's current stream of the graph's device.
  SideRun side;
  side.on = !side_.fork_at.empty();
  side.device = side.on ? graph_.nodes.front().device.index : -1;
  if (side.on) {
    side.main = cuda::current_stream(side.device);
    if (side_stream_.get() == nullptr || side_stream_.device() != side.device) {
      side_stream_ = cuda::Stream::create(side.device);
      side_done_.clear();
      side_ready_.clear();
    }
    while (side_done_.size() < static_cast<size_t>(side_in_flight_)) side_done_.push_back(cuda::Event::create(side.device));
    while (side_ready_.size() < side_.fork_at.size() + 1) side_ready_.push_back(cuda::Event::create(side.device));
    side_ready_.back().record(side.main);  // the step's start: groups that wait for nothing in it
  }
  // Note [Graph segments]: the first run after a plan is eager (every op's one-time host set-up),
  // the second captures what it can, later runs replay.
  const bool graphs_now = runs_since_plan_ >= 1 && !graphs_failed_;
  ++runs_since_plan_;
  const int device = graph_.nodes.empty() ? -1 : graph_.nodes.front().device.index;
  [[maybe_unused]] bool captured_now = false;  // read with the CUDA backend only
  for (Segment& seg : segments_) {
    if (seg.capturable && graphs_now && !seg.exec.valid()) captured_now |= capture_segment(seg, need_ctx(), scalars, side);
    if (seg.exec.valid()) {
      join_side(side);  // an eager group still in flight from before the host read
      cuda::DeviceGuard guard(device);
      const bool first = graph_launched_at_ == std::chrono::steady_clock::time_point{};
      if (first) graph_launching_at_ = std::chrono::steady_clock::now();
      seg.exec.launch(cuda::current_stream(device));  // its side groups were joined inside it
      if (first) graph_launched_at_ = std::chrono::steady_clock::now();
      side.graph_end = seg.body_end;
      // A group forked later in an eager stretch whose ready point ran inside the graph waits for
      // the graph (events recorded inside a capture are the capture's own).
      if (side.on) side_ready_.back().record(side.main);
    } else if (!run_nodes(seg.begin, seg.body_end, need_ctx(), scalars, side, on_host_read)) {
      return false;
    }
    if (seg.body_end < seg.end && !run_nodes(seg.body_end, seg.end, need_ctx(), scalars, side, on_host_read)) return false;
  }
  join_side(side);
#ifndef BLU_TENSOR_NO_CUDA_BACKEND
  // Note [Graph segments]: the graphs' scratch lives in their private pool from now on; what the
  // eager runs left cached in the shared pools would only add to the device's memory.
  if (captured_now) cuda::CachingAllocator::get().empty_cache(device);
#endif
  return true;
}

// Note [Side groups in flight]: a group's done event is recorded on the side stream once its last
// call is issued (at the next launch that is not its own, or at its join), in its slot.
void Executable::end_issuing(SideRun& side) {
  if (side.issuing < 0) return;
  std::vector<cuda::Event>& done = side.capturing ? capture_done_ : side_done_;
  done[static_cast<size_t>(side.issuing % side_in_flight_)].record(side_stream_.get());
  side.issuing = -1;
}

// The main stream waits for the oldest group in flight.
void Executable::join_front(SideRun& side) {
  const int k = side.in_flight.front();
  if (side.issuing == k) end_issuing(side);
  std::vector<cuda::Event>& done = side.capturing ? capture_done_ : side_done_;
  done[static_cast<size_t>(k % side_in_flight_)].wait(side.main);
  side.in_flight.erase(side.in_flight.begin());
}

void Executable::join_side(SideRun& side) {
  end_issuing(side);
  while (!side.in_flight.empty()) join_front(side);
}

// Runs nodes [begin, end) one by one from the host (or into a capture: side.capturing). False when
// on_host_read stopped the run (the side stream joined).
bool Executable::run_nodes(int begin, int end, Ctx& ctx, const StepScalars& scalars, SideRun& side,
                           const HostReadFn& on_host_read) {
  // The call at node j, or the kernel of the replaced set ending there (a set's other nodes: nothing).
  const auto launch_call = [&](size_t j) {
    const int ov = j < override_of_.size() ? override_of_[j] : -1;
    if (ov < 0) {
      run_node(graph_.nodes[j], j, ctx);
      return;
    }
    if (static_cast<int>(j) != overrides_[static_cast<size_t>(ov)].nodes.back()) return;
    const ViewFn view = [&ctx, j](const TensorRef& r) {
      BLU_CHECK(!r.defined() || ctx.storages[static_cast<size_t>(r.buffer)] != nullptr,
                "capture::Executable: the override of nodes ending at ", j, " viewed buffer ", r.buffer,
                ", which has no bytes: declare it in replace()'s views");
      return ctx.view(r);
    };
    Override& o = overrides_[static_cast<size_t>(ov)];
    try {
      if (o.scratch_launch) {
        const std::shared_ptr<Storage> scratch =
            o.scratch != nullptr ? o.scratch : std::make_shared<Storage>(o.scratch_bytes, graph_.nodes[j].device);
        o.scratch_launch(view, detail::byte_view(scratch, o.scratch_bytes));
      } else {
        o.launch(view);
      }
    } catch (const Error& e) {
      BLU_THROW("capture::Executable: the override of nodes ending at ", j, " failed: ", e.what());
    }
  };
  // Note [Cheap side calls first]: a group's launches issued at its fork in the plan's order (no
  // bookkeeping without such an order: the default plan).
  std::vector<char> issued_early(side_.issue_order.empty() ? 0 : static_cast<size_t>(std::max(0, end - begin)), 0);
  for (size_t i = static_cast<size_t>(begin); i < static_cast<size_t>(end); ++i) {
    Node& node = graph_.nodes[i];
    const int ov = i < override_of_.size() ? override_of_[i] : -1;
    if (side.on) {
      // Note [Side groups in flight]: a launch outside the group being issued ends it; the plan's
      // joins come in fork order.
      const bool launch = ov < 0 || overrides_[static_cast<size_t>(ov)].nodes.back() == static_cast<int>(i);
      if (launch && side.issuing >= 0 && side_.group_of[i] != side.issuing) end_issuing(side);
      while (!side.in_flight.empty() &&
             side_.join_before[static_cast<size_t>(side.in_flight.front())] <= static_cast<int>(i))
        join_front(side);
    }
    if (node.op == "adamw_step") {
      for (Arg& a : node.args) {
        if (a.name == "hp.lr" && scalars.lr >= 0) a.number = scalars.lr;
        if (a.name == "hp.step" && scalars.step >= 0) a.integer = scalars.step;
      }
    }
    // Without the arena: a storage per temporary, from its first use (with it, only a device's
    // temporaries of zero bytes in all come here); an override's views from its launch on.
    const auto give_bytes = [&](int id) {
      std::shared_ptr<Storage>& s = ctx.storages[static_cast<size_t>(id)];
      if (s == nullptr && !dropped_[static_cast<size_t>(id)]) {
        const Buffer& b = graph_.buffers[static_cast<size_t>(id)];
        s = std::make_shared<Storage>(b.nbytes, b.device);
      }
    };
    for (const Arg& a : node.args) {
      for (const TensorRef& t : a.tensors) {
        if (t.defined()) give_bytes(t.buffer);
      }
    }
    if (ov >= 0 && overrides_[static_cast<size_t>(ov)].nodes.back() == static_cast<int>(i)) {
      for (int b : overrides_[static_cast<size_t>(ov)].views) give_bytes(b);
    }
    // Note [Side stream]: a side call (a node, or a replaced set's launch at its last node) runs
    // with the side stream current. A group not in flight here is forked: it waits for its
    // ready_after launch where that event is one this stretch may wait for (recorded in this
    // capture, or outside any after the last graph), else for the stretch's (or step's) start.
    std::optional<cuda::StreamGuard> on_side;
    std::optional<cuda::GemmCtaBudget> side_ctas;
    std::optional<cuda::MapBlockBudget> side_maps;
    const int group = side.on ? side_.group_of[i] : -1;
    const std::vector<int>* early = nullptr;
    if (group >= 0) {
      const size_t k = static_cast<size_t>(group);
      if (side.issuing != group) {  // its fork (the plan joined what had to be joined above)
        if (k < side_.issue_order.size() && !side_.issue_order[k].empty() &&
            std::all_of(side_.issue_order[k].begin(), side_.issue_order[k].end(),
                        [&](int j) { return j >= static_cast<int>(i) && j < end; }))
          early = &side_.issue_order[k];
        const int ready = side_.ready_after[k];
        const bool own = ready >= 0 && ready >= (side.capturing ? side.seg_begin : side.graph_end);
        std::vector<cuda::Event>& ready_events = side.capturing ? capture_ready_ : side_ready_;
        ready_events[own ? k : ready_events.size() - 1].wait(side_stream_.get());
        side.in_flight.push_back(group);
        side.issuing = group;
      }
      on_side.emplace(side_stream_.get(), side.device);
      if (side_gemm_ctas_ > 0) side_ctas.emplace(side_gemm_ctas_);
      if (side_map_blocks_ > 0) side_maps.emplace(side_map_blocks_);  // Note [Side map budget]
    }
    if (early != nullptr) {
      for (int j : *early) {
        launch_call(static_cast<size_t>(j));
        issued_early[static_cast<size_t>(j - begin)] = 1;
      }
    } else if (issued_early.empty() || !issued_early[i - static_cast<size_t>(begin)]) {
      launch_call(i);
    }
    side_maps.reset();
    side_ctas.reset();
    on_side.reset();
    if (side.on) {
      std::vector<cuda::Event>& ready_events = side.capturing ? capture_ready_ : side_ready_;
      for (int k : side_record_at_[i]) ready_events[static_cast<size_t>(k)].record(side.main);
    }
    if (node.op == "host_read") {
      host_reads_.push_back(ctx.view(node.arg("src").tensors.at(0)));
      if (on_host_read && !on_host_read(host_reads_.size() - 1, host_reads_.back())) {
        join_side(side);
        return false;
      }
    }
    if (use_arena_) continue;
    // Temporaries die after their last use (the storage lives on in a host-read view if any).
    for (const Arg& a : node.args) {
      for (const TensorRef& t : a.tensors) {
        const size_t id = static_cast<size_t>(t.buffer);
        if (t.defined() && live_[id] == nullptr && last_use_[id] == static_cast<int>(i))
          ctx.storages[id].reset();
      }
    }
  }
  return true;
}

}  // namespace blu::capture
