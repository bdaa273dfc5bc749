// The Executable's side-stream plan (Note [Side stream] below): which recorded calls may run on a
// second CUDA stream beside the main one, and where the main stream waits for them.
#include <algorithm>
#include <cstdlib>
#include <string>

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
//  - a *side call* is a launch on CUDA (a call that runs itself, not a host read or write, or a
//    replace()d set's kernel at the set's last node, with what all its calls touch: blu-plan's
//    bound GEMM epilogues and fused groups; a launch's declared views are buffers its calls name)
//    whose results are consumed later in the step (some buffer it writes is touched again) but
//    not soon: every buffer it writes is next touched kSideMinGap or more calls later, or never
//    (a call whose result the next side call reads would make every producer chain a side call:
//    the whole forward, session 18's first version on the tiny GPT-2; Note [Side chains] takes one
//    link of it). A weight or bias gradient
//    is one (the record's dW GEMMs and bias sums write gradients that only the norm and the update read, hundreds of calls later);
//    a data gradient is not (the next call reads it), nor a LayerNorm backward (its dX), nor the
//    update (it writes what nothing in the step reads again).
//  - consecutive side calls form a *group*; the side stream runs it in order once the main
//    stream has issued the last launch before the group that writes what the group reads or
//    touches what it writes (ready_after: an event recorded there; with none, the step's start),
//    not everything before the group: the record puts a layer's dW GEMM after its dX GEMM, and
//    waiting for the dX GEMM too left the dW nothing to overlap but the small kernels after it
//    (session 18: the first version, which waited for everything, gained nothing on the compiled
//    step). The group's results take their arena bytes from that point on (start_from), so no
//    temporary the main stream still uses in between shares them.
//  - the main stream waits for (joins) a group before the first later call that touches a buffer
//    the group writes or writes a buffer the group reads, and at the latest at the fork that would
//    put more than max_in_flight groups in flight (Note [Side groups in flight]), so what a group
//    reads (an activation, the gradient coming down) stays allocated only until then: every
//    buffer a group touches lives, for the arena
//    (Note [Step arena]) and the in-place pairs (Note [In-place reuse]), up to its join. A group
//    still in flight at the end of the step (or where on_host_read stops it) is joined there. A
//    temporary a side call writes starts its life at that call, where the side stream has waited
//    for every earlier call: the bytes it takes are free.
// Every kernel keeps its own fixed reduction order, so the step's bits do not depend on the
// overlap (tested: captured_engine GPU test, side stream on vs off). Off with
// BLU_CAPTURE_SIDE_STREAM=0 or use_side_stream(false); without the arena (a storage each, freed on
// the host after its last use) and on graphs that are not on exactly one CUDA device there is no
// side stream.
//
// Note [Side groups in flight]
// Until session 21 only one group was in flight: each fork joined the group before it. The fused
// engine (blutrain Note [Weight gradients on a side stream]) forks a block's fc_proj dW and then
// its fc dW while the first still runs, and waits for a dW only before overwriting what it reads;
// its side stream overlapped 8.6 ms of its 42.1 ms of kernels in session 21's bf16 profile, the
// compiled step's 6.9 of 42.6, the last gap between the two once their kernels summed within
// 0.6 ms. So up to max_in_flight groups (BLU_CAPTURE_SIDE_IN_FLIGHT; 1 = the old plan) are open at
// once: a fork that would open one more joins the oldest,
// and a main-stream launch that conflicts with an open group joins it and every older one (the
// side stream runs groups in fork order, so waiting for a group waits for those before it; their
// buffers' lives end there too). Groups need no join between them: one stream orders them. The
// arena is as safe as before: a group's buffers live to its join, its results from its ready
// point, and the side stream reaches a group's first call only after the older groups' calls.
// Each in-flight group has its own done event (slot k % max_in_flight), recorded on the side
// stream after the group's last call, which the main stream waits for at the join. Costs: what
// a group reads lives up to one fork longer (a larger arena, reported in the engine's line).
// Measured (H100, session 22, GPT-2 d12 bf16 B16 compiled step, same call each): 2 in flight
// 442.65K tok/s at 8.04 GiB peak against 1 in flight 443.15K at 7.99 GiB (and in call 1, with the
// LayerNorm pairs too, 440.5K against 446.1K). The kernel trace says why: the side groups are
// dW GEMMs, persistent kernels with one CTA on every SM, so a second group, or the main stream's
// next GEMM, starts only when the first leaves the SMs; more groups in flight add no overlap. So
// Executables run one group in flight by default (kSideInFlightDefault), the plan keeps the
// general form (BLU_CAPTURE_SIDE_IN_FLIGHT=2 for further A/B).
constexpr int kSideMinGap = 4;

// Note [Side chains]
// A launch whose results, from there on, only side calls of the gap rule touch is a side call too,
// however soon the first of them comes: in the record a block's qkv bias gradient (a column sum,
// reduce) sits between its data- and weight-gradient GEMMs and the LayerNorm backward, and its
// result is next read 3 calls later by the gradient casts (copy_tensors_, a side call). By
// kSideMinGap alone it ran on the main stream beside the weight-gradient GEMM on the side stream,
// which held every SM (a persistent kernel): 98 us for a ~20 us sum, with the LayerNorm backward,
// the critical path, queued behind it (H100, session 23 profile: 1.44 ms a backward layer against
// the fused engine's 1.41, whose LayerNorm backward runs beside that GEMM). One link only: a call
// that feeds a side call taken by this rule is decided by the gap rule, else the step's producer
// chains would follow their far consumers onto the side stream (the loss, read on the host at the
// end, would take the classifier, and the gradients the backward: session 18's first plan, and
// this rule's first form on the GPT-2 d12 record). Decided from the end of the step, so each
// later launch's side is known.
// Status: OFF by default (BLU_CAPTURE_SIDE_CHAIN=1 turns it on). Measured (H100, session 23, one
// call, 29c092d, compiled step, 30-step medians, on vs off): bf16 B16 462.4K vs 463.6K tok/s, fp32
// B8 53.9K vs 54.6K, tf32 B16 210.3K vs 208.1K. The prediction (the LayerNorm backward 100 us
// earlier on the critical path, ~30-60 us a layer) failed for the reason the reduce was slow: the
// LayerNorm backward now ran beside the persistent dW GEMM instead and took 104 us for 29 (the
// GEMM's CTAs hold every SM), so the next data-gradient GEMM started only 9 us earlier; in fp32
// the backward layer went 5.98 -> 6.16 ms. Work beside a persistent GEMM waits; a dW GEMM that
// leaves SMs free (fewer CTAs on the side stream) is what would let this overlap pay.
// Session 38 (H200): blu-plan now folds the bf16 step's qkv bias sum into its dW GEMM too (blucomp
// Note [16-bit bias gradients]); the set inherited the sum's main-stream place, so 12 dW GEMMs
// (one a block, ~0.2 ms each with their reductions) joined the critical path, and the compiled
// bf16 step lost what the fold saved (busy 29.99 vs the fused engine's 29.43 ms). With side chains
// the set is a side call: compiled bf16 B16 545.2K / 540.8K tok/s on vs 536.6K / 537.8K off (two
// rounds; fused 545.6K / 546.4K), fp32 B8 54.8K vs 55.1K / 55.2K, tf32 B16 232.2K / 230.7K vs
// 230.9K / 230.6K (same losses: the bits do not depend on the plan). So the default is on for a
// step whose GEMMs are 16-bit (bf16 / f16 operands), off otherwise; BLU_CAPTURE_SIDE_CHAIN=1 / 0
// forces it either way.
bool side_chains_default(const Graph& g) {
  // Read per plan: tests switch it.
  if (const char* v = std::getenv("BLU_CAPTURE_SIDE_CHAIN"); v != nullptr && *v != '\0')
    return std::string(v) == "1";
  for (const Node& nd : g.nodes) {
    if (nd.op != "gemm") continue;
    const DType t = nd.arg("a").tensors.at(0).dtype;
    return t == DType::BF16 || t == DType::F16;
  }
  return false;
}

// Note [Side gaps from a set's first node]
// The gap rule (Note [Side stream]: results next touched kSideMinGap or more calls later) took the
// consumer's position at its launch, and a replace()d set launches at its last node. So a rewrite
// that merges a data gradient's consumer with the call after it stretched the gap: with the
// LayerNorm backward and its residual add as one launch (Note [LayerNorm backward with the
// residual gradient]) the qkv and fc data-gradient GEMMs, read by that set 3 nodes later, became
// side calls that the main stream joined at once, serialising the critical path behind the side
// stream (side_plan_dump --ln-residual on session 24's bf16 record; session 22's "measured slower,
// not yet understood which join moved"). Counting launches instead overshoots the other way (the
// qkv dW GEMM, read by the casts 3 launches later, went to the main stream). The consumer's
// position is now its set's first node, where the record first needed the value: the plan of the
// record with the pairs fused is the plan without them. On the plain compiled record the plan is
// unchanged (checked with side_plan_dump). BLU_CAPTURE_SIDE_GAP_AT_LAUNCH=1: the old rule.
bool side_gap_from_first_node() {
  const char* v = std::getenv("BLU_CAPTURE_SIDE_GAP_AT_LAUNCH");
  return !(v != nullptr && std::string(v) == "1");
}

// Note [Cheap side calls first]
// A group issues its calls in record order, and the record puts a block's weight-gradient GEMM
// before its bias sum (autograd's order), so with Note [Side chains] the qkv bias sum ran after the
// persistent dW GEMM on the side stream, and the dW GEMM, ready as soon as the attention backward
// was, took the SMs as the data-gradient GEMM's CTAs left, before the main stream's LayerNorm
// backward could launch (session 24 trace). With this rule a group issues its non-GEMM calls (bias
// sums, casts: short kernels of many small CTAs) before its GEMMs, each moved only past GEMMs it
// shares no buffer with (neither writes what the other touches), so the side stream's bias sum
// runs beside the data-gradient GEMM's tail and the dW GEMM launches when the LayerNorm backward
// does; with Note [Stream priorities] the LayerNorm's blocks then go first. The arena is unchanged:
// what a group writes lives from its ready point and what it touches to its join, whatever the
// order inside it. Same kernels on the same values: the same bits.
// Status: OFF (BLU_CAPTURE_SIDE_CHEAP_FIRST=1 turns it on). Measured (H100, session 24, 9a99331, one
// call, with side chains, against the default plan): bf16 B16 463.8K vs 465.7K tok/s, fp32 B8
// 53.5K vs 54.6K, tf32 B16 210.7K vs 209.7K; with stream priorities too, no better. The dW GEMM,
// once its CTAs are resident, still holds the SMs the LayerNorm backward needs.
bool side_cheap_first_default() {
  const char* v = std::getenv("BLU_CAPTURE_SIDE_CHEAP_FIRST");  // read per plan: tests switch it
  return v != nullptr && std::string(v) == "1";
}

namespace {

// One buffer a launch touches, and how (a replaced set: the union over its calls).
struct Touch {
  int buffer;
  bool read, write;
};

// Whether two launches conflict: one writes a buffer the other touches.
bool conflict(const std::vector<Touch>& a, const std::vector<Touch>& b) {
  for (const Touch& x : a) {
    for (const Touch& y : b) {
      if (x.buffer == y.buffer && (x.write || y.write)) return true;
    }
  }
  return false;
}

// Note [Cheap side calls first]: per group, its launches with each non-GEMM one moved before the
// GEMMs ahead of it that it does not conflict with; empty where that is the record's order.
std::vector<std::vector<int>> cheap_first_order(const SidePlan& plan, const std::vector<std::vector<Touch>>& touches,
                                                const std::vector<char>& launches, const std::vector<char>& gemm) {
  std::vector<std::vector<int>> members(plan.fork_at.size());
  for (size_t i = 0; i < plan.group_of.size(); ++i) {
    if (launches[i] && plan.group_of[i] >= 0) members[static_cast<size_t>(plan.group_of[i])].push_back(static_cast<int>(i));
  }
  std::vector<std::vector<int>> order(members.size());
  for (size_t k = 0; k < members.size(); ++k) {
    std::vector<int> o;
    bool moved = false;
    for (int u : members[k]) {
      size_t at = o.size();
      if (!gemm[static_cast<size_t>(u)]) {
        while (at > 0 && gemm[static_cast<size_t>(o[at - 1])] &&
               !conflict(touches[static_cast<size_t>(u)], touches[static_cast<size_t>(o[at - 1])]))
          --at;
      }
      moved = moved || at != o.size();
      o.insert(o.begin() + static_cast<std::ptrdiff_t>(at), u);
    }
    if (moved) order[k] = std::move(o);
  }
  return order;
}

}  // namespace

// Note [Side map budget]
// A side call's elementwise map kernel launches the full grid (32 blocks of 256 threads per SM,
// capped by its size) and, once its inputs are ready, fills every SM. Session 25's bf16 profile
// (H200, bf83857) caught it: the early classifier scaling (Note [Early classifier scaling], fp32
// [V, C] read and write, 82 us, a side call) became ready with the dX scaling that starts the
// backward's critical chain and took the GPU first; the chain's scale_tensors waited 66 us for
// blocks to retire. BLU_CAPTURE_SIDE_MAP_BLOCKS=k launches side calls' map kernels with at most k
// blocks per SM (0, the default: the full grid), to leave the SMs to the main stream's kernels
// beside them. A map is a grid-stride loop over independent elements: the same bits at any grid.
// Other kernels (reductions, GEMMs: Note [GEMM CTA budget]) keep their grids.
// Predicted at k = 2: bf16 compiled +0.1..0.3% (the chain's 66 us). Measured (H200, session 25
// call 5, 0247a18, two alternating rounds, default 2 then): bf16 513.90K vs 515.85K with the full
// grid (-0.4%, within the call-to-call noise of ~0.5%), fp32 55.20K both, tf32 229.70K vs 229.50K.
// Half right: the chain's scale_tensors started 2 us after the scaling (not 66), but the scaling
// ran 223 us instead of 85 (2 blocks per SM draw ~0.4 of the bandwidth, not 0.8) and shared the
// memory system with the chain that much longer: the head stretch 7.860 ms vs 7.832. Off by
// default since; the next candidate is to issue that scaling where the chain is in a GEMM.

SidePlan side_stream_plan(const Graph& g, const std::vector<int>& override_of, int max_in_flight, int chains_or_default,
                          bool cheap_first) {
  const bool chains = chains_or_default < 0 ? side_chains_default(g) : chains_or_default != 0;
  const int n = static_cast<int>(g.nodes.size());
  const size_t nb = g.buffers.size();
  SidePlan plan;
  plan.group_of.assign(static_cast<size_t>(n), -1);
  plan.extend_to.assign(nb, -1);
  auto set_of = [&](int i) {
    return static_cast<size_t>(i) < override_of.size() ? override_of[static_cast<size_t>(i)] : -1;
  };
  // Launch units: a call that runs itself at its node; a replace()d set at its last node, with
  // what all its calls touch (its other nodes launch nothing: skipped below).
  std::vector<std::vector<int>> members;
  for (int i = 0; i < n; ++i) {
    const int k = set_of(i);
    if (k < 0) continue;
    if (members.size() <= static_cast<size_t>(k)) members.resize(static_cast<size_t>(k) + 1);
    members[static_cast<size_t>(k)].push_back(i);
  }
  std::vector<std::vector<Touch>> touches(static_cast<size_t>(n));
  std::vector<char> launches(static_cast<size_t>(n), 0), on_cuda(static_cast<size_t>(n), 0), gemm(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    const int k = set_of(i);
    if (k >= 0 && members[static_cast<size_t>(k)].back() != i) continue;
    launches[static_cast<size_t>(i)] = 1;
    const std::vector<int> single{i};
    const std::vector<int>& calls = k >= 0 ? members[static_cast<size_t>(k)] : single;
    bool cuda = true;
    std::vector<Touch>& t = touches[static_cast<size_t>(i)];
    for (int c : calls) {
      const Node& node = g.nodes[static_cast<size_t>(c)];
      cuda = cuda && node.device.is_cuda() && node.op != "host_read" && node.op != "host_write";
      if (node.op == "gemm") gemm[static_cast<size_t>(i)] = 1;
      for (const Arg& a : node.args) {
        for (const TensorRef& r : a.tensors) {
          if (r.defined()) t.push_back({r.buffer, a.read, a.write});
        }
      }
    }
    on_cuda[static_cast<size_t>(i)] = cuda ? 1 : 0;
  }
  // Which launches are side calls: from the end, each buffer's next touching launch known.
  constexpr int kNever = -1;
  std::vector<int> next_touch(nb, kNever);
  std::vector<char> candidate(static_cast<size_t>(n), 0);
  // Per buffer: a later launch touches it that is not a side call by the gap rule (a main-stream
  // launch, or a side call by Note [Side chains], so chains are one link long).
  std::vector<char> not_gap_side_later(nb, 0);
  // Note [Side gaps from a set's first node]: a launch is consumed where its consumer's set begins.
  const bool from_first = side_gap_from_first_node();
  for (int i = n - 1; i >= 0; --i) {
    if (!launches[static_cast<size_t>(i)]) continue;
    const int k = set_of(i);
    const int first_node = from_first && k >= 0 ? members[static_cast<size_t>(k)].front() : i;
    bool writes_any = false, consumed = false, soon = false, chained = false;
    for (const Touch& t : touches[static_cast<size_t>(i)]) {
      if (!t.write) continue;
      writes_any = true;
      const size_t b = static_cast<size_t>(t.buffer);
      const int next = next_touch[b];
      if (next == kNever) continue;
      consumed = true;
      if (next - i >= kSideMinGap) continue;
      // Note [Side chains]: soon, unless only side calls of the gap rule touch it from here on.
      if (chains && !not_gap_side_later[b])
        chained = true;
      else
        soon = true;
    }
    const bool side = on_cuda[static_cast<size_t>(i)] && writes_any && consumed && !soon;
    candidate[static_cast<size_t>(i)] = side;
    for (const Touch& t : touches[static_cast<size_t>(i)]) {
      next_touch[static_cast<size_t>(t.buffer)] = first_node;
      if (!side || chained) not_gap_side_later[static_cast<size_t>(t.buffer)] = 1;
    }
  }
  // Groups, forks and joins, in launch order. A group is settled at its join, with what it reads
  // and writes at hand: it lives to the join (extend_to); it may start after the last main-stream
  // launch before its fork that writes what it reads or touches what it writes (ready_after: a
  // side launch of an earlier group is ordered by the side stream itself), so what it writes lives
  // from there on (start_from), and no temporary the main stream still uses in between shares it.
  // Up to max_in_flight groups are open at once (Note [Side groups in flight]): the oldest is
  // joined at a fork that would open one more; joining a group joins the older ones with it.
  plan.start_from.assign(nb, -1);
  struct Open {
    int k;
    std::vector<char> reads, writes;
    std::vector<int> touched;
  };
  std::vector<Open> open;  // in fork order
  const int cap = std::max(1, max_in_flight);
  bool last_side = false;  // the previous launch was a side call of open.back()
  auto join_one = [&](Open& o, int at) {
    const size_t k = static_cast<size_t>(o.k);
    plan.join_before[k] = at;
    int ready = -1;
    for (int j = plan.fork_at[k] - 1; j >= 0 && ready < 0; --j) {
      if (!launches[static_cast<size_t>(j)] || plan.group_of[static_cast<size_t>(j)] >= 0) continue;
      for (const Touch& t : touches[static_cast<size_t>(j)]) {
        const size_t b = static_cast<size_t>(t.buffer);
        if ((t.write && o.reads[b]) || o.writes[b]) {
          ready = j;
          break;
        }
      }
    }
    plan.ready_after[k] = ready;
    const int until = std::min(at, n - 1);
    for (int b : o.touched) {
      const size_t u = static_cast<size_t>(b);
      plan.extend_to[u] = std::max(plan.extend_to[u], until);
      if (o.writes[u]) plan.start_from[u] = plan.start_from[u] < 0 ? ready + 1 : std::min(plan.start_from[u], ready + 1);
    }
  };
  // Joins open[0 .. upto] (the oldest first) before launch `at`.
  auto join_upto = [&](size_t upto, int at) {
    for (size_t q = 0; q <= upto; ++q) join_one(open[q], at);
    open.erase(open.begin(), open.begin() + static_cast<std::ptrdiff_t>(upto + 1));
  };
  for (int i = 0; i < n; ++i) {
    if (!launches[static_cast<size_t>(i)]) continue;
    const std::vector<Touch>& ts = touches[static_cast<size_t>(i)];
    if (candidate[static_cast<size_t>(i)]) {
      if (!(!open.empty() && last_side)) {  // a new group
        if (static_cast<int>(open.size()) >= cap) join_upto(open.size() - static_cast<size_t>(cap), i);
        Open o;
        o.k = static_cast<int>(plan.fork_at.size());
        o.reads.assign(nb, 0);
        o.writes.assign(nb, 0);
        open.push_back(std::move(o));
        plan.fork_at.push_back(i);
        plan.join_before.push_back(n);
        plan.ready_after.push_back(-1);
      }
      Open& o = open.back();
      plan.group_of[static_cast<size_t>(i)] = o.k;
      ++plan.side_calls;
      for (const Touch& t : ts) {
        const size_t b = static_cast<size_t>(t.buffer);
        if (!o.reads[b] && !o.writes[b]) o.touched.push_back(t.buffer);
        if (t.read) o.reads[b] = 1;
        if (t.write) o.writes[b] = 1;
      }
      last_side = true;
      continue;
    }
    last_side = false;
    // The newest open group this launch conflicts with is joined here, with every older one.
    for (size_t q = open.size(); q-- > 0;) {
      bool conflict = false;
      for (const Touch& t : ts) {
        const size_t b = static_cast<size_t>(t.buffer);
        if (open[q].writes[b] || (t.write && open[q].reads[b])) conflict = true;
      }
      if (conflict) {
        join_upto(q, i);
        break;
      }
    }
  }
  if (!open.empty()) join_upto(open.size() - 1, n);
  if (cheap_first) plan.issue_order = cheap_first_order(plan, touches, launches, gemm);
  return plan;
}

}  // namespace blu::capture
