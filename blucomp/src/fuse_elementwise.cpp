// blu-fuse-elementwise: groups chains of elementwise blu ops into blu.fused regions (one kernel
// each after lowering), never across blu.matmul / blu.layernorm and never by recomputing a value.
#include "blucomp/passes.h"
#include "node_provenance.h"

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
// members, so they are boundaries. Multi-output groups (keep the value and still fuse) are the
// next step once a memory-traffic cost model exists.
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

// Grows the group rooted at `root` to a fixed point (a producer rejected early may qualify once
// its other users have joined).
Group growGroup(Operation* root, int group, llvm::DenseMap<Operation*, int>& group_of) {
  Group members{root};
  group_of[root] = group;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < members.size(); ++i) {
      for (Value operand : members[i]->getOperands()) {
        Operation* producer = operand.getDefiningOp();
        if (!isFusible(producer) || producer->getBlock() != root->getBlock() ||
            group_of.count(producer) || !allUsersIn(producer, group_of, group))
          continue;
        group_of[producer] = group;
        members.push_back(producer);
        changed = true;
      }
    }
  }
  return members;
}

// Replaces the members (root last in block order) with one blu.fused at the root's position.
void materialize(Group members) {
  llvm::sort(members, [](Operation* a, Operation* b) { return a->isBeforeInBlock(b); });
  Operation* root = members.back();
  llvm::SmallPtrSet<Operation*, 8> member_set(members.begin(), members.end());
  llvm::SetVector<Value> inputs;
  for (Operation* op : members)
    for (Value operand : op->getOperands())
      if (!member_set.contains(operand.getDefiningOp())) inputs.insert(operand);

  OpBuilder builder(root);
  auto fused =
      builder.create<FusedOp>(root->getLoc(), root->getResult(0).getType(), inputs.getArrayRef());
  Block* body = new Block();
  fused.getBody().push_back(body);
  IRMapping mapping;
  for (Value input : inputs) mapping.map(input, body->addArgument(input.getType(), input.getLoc()));
  builder.setInsertionPointToStart(body);
  for (Operation* op : members) builder.clone(*op, mapping);
  builder.create<YieldOp>(root->getLoc(), mapping.lookup(root->getResult(0)));

  blu::comp::mergeNodes(fused, members);  // Note [Node provenance]
  blu::comp::inheritBuffer(root->getResult(0), fused.getResult());
  root->getResult(0).replaceAllUsesWith(fused.getResult());
  for (Operation* op : llvm::reverse(members)) op->erase();
}

struct FuseElementwisePass : blu::comp::impl::BluFuseElementwiseBase<FuseElementwisePass> {
  void runOnOperation() override {
    for (Block& block : getOperation().getBody()) {
      llvm::DenseMap<Operation*, int> group_of;
      llvm::SmallVector<Group> groups;
      // Walk consumers before producers: the last op of a chain roots its group.
      for (Operation& op : llvm::reverse(block)) {
        if (!isFusible(&op) || group_of.count(&op)) continue;
        groups.push_back(growGroup(&op, static_cast<int>(groups.size()), group_of));
      }
      for (Group& group : groups)
        if (group.size() >= 2) materialize(group);
    }
  }
};

}  // namespace
