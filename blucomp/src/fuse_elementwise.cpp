// blu-fuse-elementwise: groups chains of elementwise blu ops into blu.fused regions (one kernel
// each after lowering), never across blu.matmul / blu.layernorm and never by recomputing a value.
#include "blucomp/passes.h"
#include "node_provenance.h"

#include <cstdlib>
#include <string>

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
                bool through_broadcast) {
  Group members{root};
  group_of[root] = group;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < members.size(); ++i) {
      // Without through_broadcast a blu.broadcast's operand stays an input (see growChecked).
      if (!through_broadcast && isa<BroadcastOp>(members[i])) continue;
      for (Value operand : members[i]->getOperands()) {
        Operation* producer = operand.getDefiningOp();
        if (!isFusible(producer) || producer->getBlock() != root->getBlock() || group_of.count(producer))
          continue;
        if (!allUsersIn(producer, group_of, group) &&
            !(multi_output && extraOutputOk(producer, root, group_of, group)))
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
      if (!member_set.contains(operand.getDefiningOp()) &&
          broadcastKind(cast<RankedTensorType>(operand.getType()).getShape(), root_shape) == BroadcastKind::kNone)
        return false;
  return true;
}

// growGroup through blu.broadcast operands (a per-row statistic's chain joins the group that
// scales by it), unless that leaves an input no index map reaches (a broadcast of a product of a
// broadcast: review of d1548d2, where the verifier then failed the whole plan); then again without.
Group growChecked(Operation* root, int group, llvm::DenseMap<Operation*, int>& group_of, bool multi_output) {
  Group members = growGroup(root, group, group_of, multi_output, /*through_broadcast=*/true);
  if (inputsMapped(members)) return members;
  for (Operation* op : members) group_of.erase(op);
  return growGroup(root, group, group_of, multi_output, /*through_broadcast=*/false);
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
    const char* env = std::getenv("BLU_PLAN_MULTI_OUTPUT");
    const bool multi_output = multiOutput || (env != nullptr && std::string(env) == "1");
    for (Block& block : getOperation().getBody()) {
      llvm::DenseMap<Operation*, int> group_of;
      llvm::SmallVector<Group> groups;
      // Walk consumers before producers: the last op of a chain roots its group.
      for (Operation& op : llvm::reverse(block)) {
        if (!isFusible(&op) || group_of.count(&op)) continue;
        groups.push_back(growChecked(&op, static_cast<int>(groups.size()), group_of, multi_output));
      }
      for (Group& group : groups)
        if (group.size() >= 2) materialize(group);
    }
  }
};

}  // namespace
