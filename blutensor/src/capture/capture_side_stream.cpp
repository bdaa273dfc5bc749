// The Executable's side-stream plan (Note [Side stream] below): which recorded calls may run on a
// second CUDA stream beside the main one, and where the main stream waits for them.
#include <algorithm>

#include "capture/capture_internal.h"

namespace blu::capture {

// Note [Side stream]
// A captured step runs its calls in record order on one stream, so the weight-gradient GEMMs of
// the backward pass (skinny [C, 4C] x K = B*T problems whose last wave of tiles leaves SMs idle)
// never overlap the data-gradient GEMMs, LayerNorm and attention kernels beside them, as the fused
// engine's do (Note [Weight gradients on a side stream] in blutrain; H100, session 17: the compiled
// fp32 step summed 12 ms less kernel time than the fused engine and lost the step by 10 ms, all
// of it overlap). The Executable finds such calls in the record by where their results are next
// used:
//  - a *side call* is a call that runs itself (not a host read or write, not part of a replace()d
//    set) on CUDA, whose results are consumed later in the step (some buffer it writes is touched
//    again) but not soon: every buffer it writes is next touched kSideMinGap or more calls later,
//    or never (a call whose result the next side call reads would make every producer chain a
//    side call: the whole forward, session 18's first version on the tiny GPT-2). A weight or bias gradient is one (the record's dW GEMMs and
//    bias sums write gradients that only the norm and the update read, hundreds of calls later);
//    a data gradient is not (the next call reads it), nor a LayerNorm backward (its dX), nor the
//    update (it writes what nothing in the step reads again).
//  - consecutive side calls form a *group*: the main stream forks it (the side stream waits for
//    everything issued so far on the main one, so its inputs are ready) and the side stream runs
//    it in order.
//  - the main stream waits for (joins) a group before the first later call that touches a buffer
//    the group writes or writes a buffer the group reads, and at the latest at the next group's
//    fork, so at most one group is in flight and what it reads (an activation, the gradient coming
//    down) stays allocated only until then: every buffer a group touches lives, for the arena
//    (Note [Step arena]) and the in-place pairs (Note [In-place reuse]), up to its join. A group
//    still in flight at the end of the step (or where on_host_read stops it) is joined there. A
//    temporary a side call writes starts its life at that call, where the side stream has waited
//    for every earlier call: the bytes it takes are free.
// Every kernel keeps its own fixed reduction order, so the step's bits do not depend on the
// overlap (tested: captured_engine GPU test, side stream on vs off). Off with
// BLU_CAPTURE_SIDE_STREAM=0 or use_side_stream(false); without the arena (a storage each, freed on
// the host after its last use) and on graphs that are not on exactly one CUDA device there is no
// side stream.
constexpr int kSideMinGap = 4;

SidePlan side_stream_plan(const Graph& g, const std::vector<int>& override_of) {
  const int n = static_cast<int>(g.nodes.size());
  const size_t nb = g.buffers.size();
  SidePlan plan;
  plan.group_of.assign(static_cast<size_t>(n), -1);
  auto replaced = [&](int i) { return static_cast<size_t>(i) < override_of.size() && override_of[static_cast<size_t>(i)] >= 0; };
  // The in-flight group's reads and writes (flags by buffer id, with the ids to clear).
  std::vector<char> g_reads(nb, 0), g_writes(nb, 0);
  std::vector<int> touched;
  int open = -1;       // the group in flight (forked, not joined)
  bool last_side = false;  // the previous call that runs was a side call of `open`
  auto join = [&](int at) {
    plan.join_before[static_cast<size_t>(open)] = at;
    for (int b : touched) g_reads[static_cast<size_t>(b)] = g_writes[static_cast<size_t>(b)] = 0;
    touched.clear();
    open = -1;
  };
  // A replace()d set launches at its last node, touching what all its calls name.
  std::vector<std::vector<int>> members;
  for (int i = 0; i < n; ++i) {
    if (!replaced(i)) continue;
    const size_t k = static_cast<size_t>(override_of[static_cast<size_t>(i)]);
    if (members.size() <= k) members.resize(k + 1);
    members[k].push_back(i);
  }
  // Which calls are side calls: from the end, each buffer's next touching call known.
  constexpr int kNever = -1;
  std::vector<int> next_touch(nb, kNever);
  std::vector<char> candidate(static_cast<size_t>(n), 0);
  for (int i = n - 1; i >= 0; --i) {
    const Node& node = g.nodes[static_cast<size_t>(i)];
    bool writes_any = false, consumed = false, soon = false;
    for (const Arg& a : node.args) {
      for (const TensorRef& t : a.tensors) {
        if (!t.defined() || !a.write) continue;
        writes_any = true;
        const int next = next_touch[static_cast<size_t>(t.buffer)];
        if (next == kNever) continue;
        consumed = true;
        if (next - i < kSideMinGap) soon = true;
      }
    }
    candidate[static_cast<size_t>(i)] = !replaced(i) && node.device.is_cuda() && node.op != "host_read" &&
                                        node.op != "host_write" && writes_any && consumed && !soon;
    for (const Arg& a : node.args) {
      for (const TensorRef& t : a.tensors) {
        if (t.defined()) next_touch[static_cast<size_t>(t.buffer)] = i;
      }
    }
  }
  for (int i = 0; i < n; ++i) {
    const Node& node = g.nodes[static_cast<size_t>(i)];
    const bool side = candidate[static_cast<size_t>(i)] != 0;
    if (side) {
      if (!(open >= 0 && last_side)) {  // a new group: the one in flight is joined at its fork
        if (open >= 0) join(i);
        open = static_cast<int>(plan.join_before.size());
        plan.join_before.push_back(n);
        plan.fork_at.push_back(i);
      }
      plan.group_of[static_cast<size_t>(i)] = open;
      for (const Arg& a : node.args) {
        for (const TensorRef& t : a.tensors) {
          if (!t.defined()) continue;
          const size_t b = static_cast<size_t>(t.buffer);
          if (!g_reads[b] && !g_writes[b]) touched.push_back(t.buffer);
          if (a.read) g_reads[b] = 1;
          if (a.write) g_writes[b] = 1;
        }
      }
      last_side = true;
      continue;
    }
    last_side = false;
    if (open < 0) continue;
    // A call on the main stream, or a replaced set's launch (at its last node, with what all its
    // calls touch; its other nodes launch nothing).
    std::vector<int> calls{i};
    if (replaced(i)) {
      const std::vector<int>& set = members[static_cast<size_t>(override_of[static_cast<size_t>(i)])];
      if (set.back() != i) continue;
      calls = set;
    }
    bool conflict = false;
    for (int c : calls) {
      for (const Arg& a : g.nodes[static_cast<size_t>(c)].args) {
        for (const TensorRef& t : a.tensors) {
          if (!t.defined()) continue;
          const size_t b = static_cast<size_t>(t.buffer);
          if (g_writes[b] || (a.write && g_reads[b])) conflict = true;
        }
      }
    }
    if (conflict) join(i);
  }
  // Live ranges: what a group touches lives to its join (the end: the last node).
  plan.extend_to.assign(nb, -1);
  for (int i = 0; i < n; ++i) {
    const int k = plan.group_of[static_cast<size_t>(i)];
    if (k < 0) continue;
    const int until = std::min(plan.join_before[static_cast<size_t>(k)], n - 1);
    for (const Arg& a : g.nodes[static_cast<size_t>(i)].args) {
      for (const TensorRef& t : a.tensors) {
        if (t.defined()) plan.extend_to[static_cast<size_t>(t.buffer)] = std::max(plan.extend_to[static_cast<size_t>(t.buffer)], until);
      }
    }
    ++plan.side_calls;
  }
  return plan;
}

}  // namespace blu::capture
