// blu-fuse-elementwise: groups chains of elementwise blu ops into blu.fused regions (one kernel
// each after lowering), never across blu.matmul / blu.layernorm; values are recomputed only where
// Note [Rematerialization] allows (off by default).
#include "blucomp/passes.h"
#include "node_provenance.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "mlir/IR/IRMapping.h"

namespace blu::comp {
#define GEN_PASS_DEF_BLUFUSEELEMENTWISE
#include "blucomp/passes.h.inc"
}  // namespace blu::comp

using namespace mlir;
using namespace blu::comp;

namespace {

// Note [Fusion cost rule]
// Groups grow from a consumer (the group's root, its one result) up through its producers. A
// producer joins only when *every* user of its result is already in the group: its value then
// lives only inside the kernel and is never written to memory. A producer with a user outside
// the group (e.g. the residual stream h = x + a, read by the next layernorm and by the next
// residual add) would have to be recomputed in each consumer's kernel or become a second
// output; this slice refuses both: the producer stays materialized and heads its own group.
// Consequences: (1) nothing is computed twice, so fusion never adds FLOPs or reads; (2) every
// member other than the root has all its users inside the group, so no path leaves the group
// and comes back: the group is convex and the fused op can sit at the root's position;
// (3) non-elementwise ops (blu.matmul, blu.layernorm, anything outside the dialect) are never
// members, so they are boundaries.
// Multi-output groups (the multi-output option, or BLU_PLAN_MULTI_OUTPUT=1): a producer whose
// users outside the group all come after the group's root (in block order) also joins, as an
// extra result of the fused op: the kernel writes it once, which it had to be written anyway, and
// the group no longer reads it back, nor does the producer's own kernel re-read its operands. Its
// value has the root's shape (one iteration space). Training graphs keep most forward values
// for the backward (a SwiGLU's sigmoid, a norm's normalized input), so without this the cost rule
// above stops most chains at their first saved value. Still nothing is computed twice, and the
// group stays convex: every outside user comes after the root, where the fused op sits, so no
// path leaves the group and comes back.
using Group = llvm::SmallVector<Operation*, 8>;

bool isFusible(Operation* op) {
  return op && isa<ElementwiseOpInterface>(op);
}

// Note [Strided operands]
// (the views option, or BLU_PLAN_VIEWS=1: on in blu-plan, Note [blu-plan defaults].) A captured
// step reads many operands through strided windows of a buffer: the rotary embedding's halves of
// q and k ([B, H, T, D/2] views of the [B, T, H, D] projection), the heads' transposes. blu-import
// makes each such read a blu.view of the buffer's whole value; without this option a blu.view is
// a boundary (its consumer's group reads the view's value, which no buffer holds: the runtime
// keeps the group's recorded calls). With it, a blu.view of the group's shape joins the group of
// its consumers (all of them in the group, as any member) and the group's input is the view's
// source, the whole buffer: the lowering reads it through the view's offset and strides (an
// affine map from the (row, column) iteration space to the flat index, blu-lower-to-linalg), the
// plan lists the input in "view_operands" and the runtime binds the buffer from element 0.
// Growth stops at a view (its source is never a member).
bool isFusibleView(Operation* op, Operation* root) {
  auto view = dyn_cast_or_null<ViewOp>(op);
  return view && view.getResult().getType().getShape() ==
                     cast<RankedTensorType>(root->getResult(0).getType()).getShape();
}

// Note [Rematerialization]
// (the remat option, or BLU_PLAN_REMAT=1; opt-in, Note [blu-plan defaults].) A training
// step keeps forward values for the backward: the SwiGLU's exp(-g), 1 + exp(-g) and silu(g), each
// written by the forward and read back by the backward, where the gate g itself is read anyway.
// Before grouping, a value P that some elementwise op reads in a later *region* (the ops between
// two non-elementwise ops: a GEMM, attention, a reduction) is recomputed there instead, when
//  - P's chain (P and its elementwise producers, at most kMaxChain ops) bottoms out in values
//    (leaves) that buffers hold, of which at most one has P's size: the chain
//    reads no more full-size tensors than reading P did (the leaves of a broadcast are small);
//  - every later reader of P is elementwise of P's shape (so the clone fuses into its group and
//    P dies in its own region: a reader that is not keeps P materialized and nothing is cloned);
//  - no op after a leaf's definition writes the leaf's buffer (the runtime binds the leaf by its
//    buffer, Note [Value buffers], where the reader's group launches, which may be past the reader);
// Each reader gets its own clone of each chain op (shared by the chains it needs, never by two
// readers: one reader's group must not hand a clone to another's, which no buffer would hold),
// placed after the region's first op; the clones carry no blu.node (they replace no recorded call) and hold no
// buffer, so the reading group lists only its own nodes and the forward group no longer writes P.
// Costs: the chain's flops again (a few per element, in a memory-bound kernel), nothing in bytes.
constexpr size_t kMaxChain = 8;

int64_t numel(Value v) { return cast<RankedTensorType>(v.getType()).getNumElements(); }

// P's chain in block order and its leaves; false when it is not one Note [Rematerialization] takes.
bool chainOf(Operation* p, llvm::SmallVector<Operation*>& chain, llvm::SetVector<Value>& leaves) {
  llvm::SetVector<Operation*> ops;
  llvm::SmallVector<Operation*> work{p};
  while (!work.empty()) {
    Operation* op = work.pop_back_val();
    if (!ops.insert(op)) continue;
    if (ops.size() > kMaxChain || op->getNumResults() != 1) return false;
    for (Value operand : op->getOperands()) {
      Operation* producer = operand.getDefiningOp();
      if (isFusible(producer) && producer->getBlock() == p->getBlock()) work.push_back(producer);
      else leaves.insert(operand);
    }
  }
  int full = 0;
  for (Value leaf : leaves) {
    if (numel(leaf) >= numel(p->getResult(0))) ++full;
    if (bufferOf(leaf) < 0) return false;  // the runtime could not bind it
  }
  if (full > 1) return false;
  chain.assign(ops.begin(), ops.end());
  llvm::sort(chain, [](Operation* a, Operation* b) { return a->isBeforeInBlock(b); });
  return true;
}

void rematerialize(Block& block) {
  // Region of each op: the number of non-elementwise ops before it.
  llvm::DenseMap<Operation*, int> region;
  llvm::SmallVector<Operation*> region_start{nullptr};  // the op that opens region r (r > 0)
  int r = 0;
  for (Operation& op : block) {
    // A kernel that is not elementwise (count_kernels' launches less the elementwise ones).
    if (isa<BluDialect>(op.getDialect()) && !isFusible(&op) &&
        !isa<ReshapeOp, ViewOp, InsertViewOp, HostReadOp, YieldOp>(op)) {
      ++r;
      region_start.push_back(&op);
    }
    region[&op] = r;
  }
  // Per reader: original chain op -> its clone for that reader.
  llvm::DenseMap<Operation*, IRMapping> clones;
  llvm::DenseMap<int, Operation*> clone_tail;
  llvm::SmallVector<Operation*> candidates;
  for (Operation& op : block)
    if (isFusible(&op) && op.getNumResults() == 1) candidates.push_back(&op);
  for (Operation* p : candidates) {
    Value v = p->getResult(0);
    const int home = region[p];
    llvm::SmallVector<OpOperand*> later;
    bool ok = true;
    for (OpOperand& use : v.getUses()) {
      Operation* user = block.findAncestorOpInBlock(*use.getOwner());
      if (user == nullptr) { ok = false; break; }
      if (region[user] == home) continue;
      if (!isFusible(user) || user->getNumResults() != 1 ||
          cast<RankedTensorType>(user->getResult(0).getType()).getShape() !=
              cast<RankedTensorType>(v.getType()).getShape()) { ok = false; break; }
      later.push_back(&use);
    }
    if (!ok || later.empty()) continue;
    llvm::SmallVector<Operation*> chain;
    llvm::SetVector<Value> leaves;
    if (!chainOf(p, chain, leaves)) continue;
    // No write to a leaf's buffer after the leaf's value, to the end of the block: the clone runs
    // where its reader's group launches, which grouping (multi-output, siblings) may place after
    // the reader itself (review of 182c169). A reshape of the leaf holds the same bytes.
    for (Value leaf : leaves) {
      const int64_t buffer = bufferOf(leaf);
      Operation* from = leaf.getDefiningOp() ? leaf.getDefiningOp()->getNextNode() : &block.front();
      for (Operation* op = from; ok && op != nullptr; op = op->getNextNode()) {
        if (isa<ReshapeOp>(op)) continue;
        for (Value res : op->getResults())
          if (res != leaf && bufferOf(res) == buffer) ok = false;
      }
    }
    if (!ok) continue;
    for (OpOperand* use : later) {
      Operation* user = block.findAncestorOpInBlock(*use->getOwner());
      const int reg = region[user];
      IRMapping& map = clones[user];
      // After the region's first op and the clones already made there (they may be operands).
      Operation*& tail = clone_tail[reg];
      OpBuilder b(block.getParentOp()->getContext());
      b.setInsertionPointAfter(tail != nullptr ? tail : region_start[static_cast<size_t>(reg)]);
      for (Operation* op : chain) {
        if (map.contains(op->getResult(0))) continue;
        Operation* c = b.clone(*op, map);
        for (const char* attr : {"blu.node", "blu.nodes", "blu.result_buffers", "blu.persistent_results"})
          c->removeAttr(attr);
        c->setAttr("blu.remat", b.getUnitAttr());
        region[c] = reg;
        b.setInsertionPointAfter(c);
        tail = c;
      }
      use->set(map.lookup(v));
    }
  }
}

bool allUsersIn(Operation* producer, const llvm::DenseMap<Operation*, int>& group_of, int group) {
  for (Operation* user : producer->getUsers()) {
    auto it = group_of.find(user);
    if (it == group_of.end() || it->second != group) return false;
  }
  return true;
}

// Multi-output: every user of `producer` outside the group comes after `root`, and the producer's
// value has the root's shape.
bool extraOutputOk(Operation* producer, Operation* root, const llvm::DenseMap<Operation*, int>& group_of, int group) {
  if (producer->getNumResults() != 1 ||
      cast<RankedTensorType>(producer->getResult(0).getType()).getShape() !=
          cast<RankedTensorType>(root->getResult(0).getType()).getShape())
    return false;
  for (Operation* user : producer->getUsers()) {
    auto it = group_of.find(user);
    if (it != group_of.end() && it->second == group) continue;
    Operation* in_block = root->getBlock()->findAncestorOpInBlock(*user);
    if (in_block == nullptr || !root->isBeforeInBlock(in_block)) return false;
  }
  return true;
}

// Grows the group rooted at `root` to a fixed point (a producer rejected early may qualify once
// its other users have joined).
Group growGroup(Operation* root, int group, llvm::DenseMap<Operation*, int>& group_of, bool multi_output,
                bool through_broadcast, bool views) {
  Group members{root};
  group_of[root] = group;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < members.size(); ++i) {
      // Without through_broadcast a blu.broadcast's operand stays an input (see growChecked).
      if (!through_broadcast && isa<BroadcastOp>(members[i])) continue;
      if (isa<ViewOp>(members[i])) continue;  // Note [Strided operands]: its source is the input
      for (Value operand : members[i]->getOperands()) {
        Operation* producer = operand.getDefiningOp();
        const bool view = views && isFusibleView(producer, root);
        if (!(isFusible(producer) || view) || producer->getBlock() != root->getBlock() || group_of.count(producer))
          continue;
        // A view member reads its source from outside the group: the source never joins (review
        // of 182c169: y = s + view(s) pulled s in and the verifier failed the plan).
        if (llvm::any_of(producer->getResult(0).getUsers(), [&](Operation* u) {
              auto it = group_of.find(u);
              return isa<ViewOp>(u) && it != group_of.end() && it->second == group;
            }))
          continue;
        // A view is never an extra result: all its users must be members.
        if (!allUsersIn(producer, group_of, group) &&
            (view || !(multi_output && extraOutputOk(producer, root, group_of, group))))
          continue;
        group_of[producer] = group;
        members.push_back(producer);
        changed = true;
      }
    }
  }
  return members;
}

// Whether every value the members read from outside reaches the root's elements through an index
// map (Note [Broadcast operands]).
bool inputsMapped(const Group& members) {
  llvm::SmallPtrSet<Operation*, 8> member_set(members.begin(), members.end());
  const auto root_shape = cast<RankedTensorType>(members.front()->getResult(0).getType()).getShape();
  for (Operation* op : members)
    for (Value operand : op->getOperands())
      if (!member_set.contains(operand.getDefiningOp()) && !isa<ViewOp>(op) &&
          broadcastKind(cast<RankedTensorType>(operand.getType()).getShape(), root_shape) == BroadcastKind::kNone)
        return false;
  return true;
}

// growGroup through blu.broadcast operands (a per-row statistic's chain joins the group that
// scales by it), unless that leaves an input no index map reaches (a broadcast of a product of a
// broadcast: review of d1548d2, where the verifier then failed the whole plan); then again without.
Group growChecked(Operation* root, int group, llvm::DenseMap<Operation*, int>& group_of, bool multi_output,
                  bool views) {
  Group members = growGroup(root, group, group_of, multi_output, /*through_broadcast=*/true, views);
  if (inputsMapped(members)) return members;
  for (Operation* op : members) group_of.erase(op);
  return growGroup(root, group, group_of, multi_output, /*through_broadcast=*/false, views);
}

// Note [Sibling groups]
// (with multi-output.) Two groups of one shape that read a common input and do not depend on each
// other (the SwiGLU backward's d_up = dh * silu(g) and d_gate = dh * up * silu'(g): both read dh and
// g) read that input twice. The earlier one (A) joins the later one (B) when every reader of A's
// values outside A comes after B's root: the merged group sits at B's root, A's root becomes one of
// its results (multi-output), and no path leaves the merged group and comes back (a path A -> X ->
// B would need X, a reader of A, before B's root).
std::vector<Value> outsideInputs(const Group& members) {
  llvm::SmallPtrSet<Operation*, 8> member_set(members.begin(), members.end());
  std::vector<Value> inputs;
  for (Operation* op : members)
    for (Value operand : op->getOperands())
      if (!member_set.contains(operand.getDefiningOp())) inputs.push_back(operand);
  return inputs;
}

Operation* rootOf(const Group& members) {
  Operation* root = members.front();
  for (Operation* op : members)
    if (root->isBeforeInBlock(op)) root = op;
  return root;
}

void mergeSiblings(llvm::SmallVector<Group>& groups, llvm::DenseMap<Operation*, int>& group_of) {
  for (size_t b = 0; b < groups.size(); ++b) {
    if (groups[b].empty()) continue;
    for (size_t a = 0; a < groups.size(); ++a) {
      if (a == b || groups[a].empty()) continue;
      Operation* root_a = rootOf(groups[a]);
      Operation* root_b = rootOf(groups[b]);
      if (!root_a->isBeforeInBlock(root_b) ||
          cast<RankedTensorType>(root_a->getResult(0).getType()).getShape() !=
              cast<RankedTensorType>(root_b->getResult(0).getType()).getShape())
        continue;
      const std::vector<Value> in_a = outsideInputs(groups[a]), in_b = outsideInputs(groups[b]);
      if (!llvm::any_of(in_a, [&](Value v) { return llvm::is_contained(in_b, v); })) continue;
      bool ok = true;
      for (Operation* op : groups[a])
        for (Operation* user : op->getUsers()) {
          Operation* u = root_b->getBlock()->findAncestorOpInBlock(*user);
          auto it = group_of.find(u);
          const bool inside = it != group_of.end() && (it->second == static_cast<int>(a) || it->second == static_cast<int>(b));
          if (!inside && (u == nullptr || !root_b->isBeforeInBlock(u))) ok = false;
        }
      if (!ok) continue;
      for (Operation* op : groups[a]) {
        group_of[op] = static_cast<int>(b);
        groups[b].push_back(op);
      }
      groups[a].clear();
    }
  }
}

// Replaces the members (root last in block order) with one blu.fused at the root's position: its
// first result the root's value, then (multi-output) each member value read outside the group.
void materialize(Group members) {
  llvm::sort(members, [](Operation* a, Operation* b) { return a->isBeforeInBlock(b); });
  Operation* root = members.back();
  llvm::SmallPtrSet<Operation*, 8> member_set(members.begin(), members.end());
  llvm::SetVector<Value> inputs;
  for (Operation* op : members)
    for (Value operand : op->getOperands())
      if (!member_set.contains(operand.getDefiningOp())) inputs.insert(operand);
  llvm::SmallVector<Value> outputs{root->getResult(0)};
  for (Operation* op : members) {
    if (op == root) continue;
    const bool outside = llvm::any_of(op->getResult(0).getUsers(), [&](Operation* u) {
      return !member_set.contains(root->getBlock()->findAncestorOpInBlock(*u));
    });
    if (outside) outputs.push_back(op->getResult(0));
  }
  llvm::SmallVector<Type> types;
  for (Value v : outputs) types.push_back(v.getType());

  OpBuilder builder(root);
  auto fused = builder.create<FusedOp>(root->getLoc(), types, inputs.getArrayRef());
  Block* body = new Block();
  fused.getBody().push_back(body);
  IRMapping mapping;
  for (Value input : inputs) mapping.map(input, body->addArgument(input.getType(), input.getLoc()));
  builder.setInsertionPointToStart(body);
  for (Operation* op : members) builder.clone(*op, mapping);
  llvm::SmallVector<Value> yielded;
  for (Value v : outputs) yielded.push_back(mapping.lookup(v));
  builder.create<YieldOp>(root->getLoc(), yielded);

  blu::comp::mergeNodes(fused, members);  // Note [Node provenance]
  for (auto [v, r] : llvm::zip(outputs, fused.getResults())) {
    blu::comp::inheritBuffer(v, r);
    v.replaceAllUsesWith(r);
  }
  for (Operation* op : llvm::reverse(members)) op->erase();
}

struct FuseElementwisePass : blu::comp::impl::BluFuseElementwiseBase<FuseElementwisePass> {
  using BluFuseElementwiseBase::BluFuseElementwiseBase;

  void runOnOperation() override {
    // Each option is on when the pass option says so or its variable is 1 (blu-plan's defaults).
    const auto on = [](bool option, const char* var) {
      const char* v = std::getenv(var);
      return option || (v != nullptr && std::string(v) == "1");
    };
    const bool multi_output = on(multiOutput, "BLU_PLAN_MULTI_OUTPUT");
    const bool remat_on = on(remat, "BLU_PLAN_REMAT");
    const bool views_on = on(views, "BLU_PLAN_VIEWS");
    for (Block& block : getOperation().getBody()) {
      if (remat_on) rematerialize(block);  // Note [Rematerialization]
      llvm::DenseMap<Operation*, int> group_of;
      llvm::SmallVector<Group> groups;
      // Walk consumers before producers: the last op of a chain roots its group.
      for (Operation& op : llvm::reverse(block)) {
        if (!isFusible(&op) || group_of.count(&op)) continue;
        groups.push_back(growChecked(&op, static_cast<int>(groups.size()), group_of, multi_output, views_on));
      }
      if (multi_output) mergeSiblings(groups, group_of);  // Note [Sibling groups]
      for (Group& group : groups)
        if (group.size() >= 2) materialize(group);
    }
  }
};

}  // namespace
