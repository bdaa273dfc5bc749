// blu-plan-memory: liveness-based placement of a function's intermediate tensors in one arena
// (issue 13's static memory plan), reported as attributes for the runtime and the tests.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "blucomp/blu_dialect.h"
#include "blucomp/passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace blu::comp {
#define GEN_PASS_DEF_BLUPLANMEMORY
#include "blucomp/passes.h.inc"
}  // namespace blu::comp

using namespace mlir;

namespace {

// Note [Arena plan]
// The step's intermediates (every tensor result of a top-level op of the function body) are
// placed in one arena, so the runtime makes one allocation and binds kernels to offsets.
// Liveness: ops are numbered in program order; a value is live from its defining op to the last
// top-level op that uses it (a use inside a region, e.g. a blu.fused body, counts at the op that
// holds the region); a returned value lives to the end. Two values may share bytes when their
// live ranges do not overlap: a value defined by op i and last read by op j is [i, j], and an op's
// results never share with its operands (the kernel reads and writes at once: closed intervals).
// Placement: largest first (ties: earlier definition first, so the plan is deterministic), each at
// the lowest aligned offset where it overlaps no already-placed value whose range intersects its
// own. Aliases take no bytes of their own (Note [Capture import]): a blu.reshape or blu.view
// result is (a window of) its input, a blu.insert_view result is its dest (written in place), so their uses extend the live
// range of the value they alias; results listed in an op's blu.persistent_results, and anything
// aliasing a function argument, live in the step's persistent buffers (weights, moments), not in
// the arena. Greedy, not optimal (interval coloring with sizes is NP-hard), but the usual best pick for
// step-shaped graphs, and the peak it reports is what the arena is; the lower bound (the largest
// sum of sizes live at one op) is reported beside it so the gap is visible.
struct Buffer {
  Value value;
  int64_t bytes;
  int64_t first, last;  // op indices, closed
  int64_t offset = -1;
};

int64_t byte_size(Type t) {
  auto rt = dyn_cast<RankedTensorType>(t);
  if (!rt || !rt.hasStaticShape()) return -1;
  const int64_t bits = rt.getElementType().getIntOrFloatBitWidth();
  return rt.getNumElements() * ((bits + 7) / 8);
}

struct PlanMemoryPass : blu::comp::impl::BluPlanMemoryBase<PlanMemoryPass> {
  using BluPlanMemoryBase::BluPlanMemoryBase;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (alignment <= 0 || (alignment & (alignment - 1)) != 0) {
      fn.emitError() << "blu-plan-memory: alignment " << static_cast<int64_t>(alignment) << " is not a power of two";
      return signalPassFailure();
    }
    if (!fn.getBody().hasOneBlock()) {
      fn.emitError() << "blu-plan-memory: expects a function body of one block";
      return signalPassFailure();
    }
    Block& body = fn.getBody().front();
    DenseMap<Operation*, int64_t> index;
    int64_t n = 0;
    for (Operation& op : body) index[&op] = n++;

    std::vector<Buffer> buffers;
    for (Operation& op : body) {
      if (isa<blu::comp::ReshapeOp, blu::comp::ViewOp, blu::comp::InsertViewOp>(op)) continue;  // aliases
      SmallVector<int64_t> persistent;
      if (auto p = op.getAttrOfType<DenseI64ArrayAttr>("blu.persistent_results"))
        persistent.assign(p.asArrayRef().begin(), p.asArrayRef().end());
      for (Value r : op.getResults()) {
        if (!isa<TensorType>(r.getType())) continue;
        if (llvm::is_contained(persistent, static_cast<int64_t>(cast<OpResult>(r).getResultNumber()))) continue;
        const int64_t bytes = byte_size(r.getType());
        if (bytes < 0) {
          op.emitError() << "blu-plan-memory: result of dynamic or unranked shape " << r.getType();
          return signalPassFailure();
        }
        Buffer b{r, bytes, index[&op], index[&op]};
        // Uses of r and of every alias of it (reshapes of it, insert_views into it, recursively).
        SmallVector<Value> values{r};
        while (!values.empty()) {
          Value v = values.pop_back_val();
          for (OpOperand& use : v.getUses()) {
            Operation* user = body.findAncestorOpInBlock(*use.getOwner());
            if (user == nullptr) continue;
            b.last = isa<func::ReturnOp>(user) ? n : std::max(b.last, index[user]);
            if (isa<blu::comp::ReshapeOp, blu::comp::ViewOp>(user) ||
                (isa<blu::comp::InsertViewOp>(user) && use.getOperandNumber() == 1))
              values.push_back(user->getResult(0));
          }
        }
        buffers.push_back(b);
      }
    }

    // Largest first, then earlier definition (deterministic).
    std::vector<size_t> order(buffers.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
      return buffers[a].first < buffers[b].first;
    });
    const int64_t align = alignment;
    auto round_up = [align](int64_t x) { return (x + align - 1) / align * align; };
    int64_t arena = 0, unplanned = 0;
    for (size_t i : order) {
      Buffer& b = buffers[i];
      unplanned += round_up(b.bytes);
      // The placed buffers (offset >= 0) live at the same time, by offset: take the first gap that fits.
      std::vector<std::pair<int64_t, int64_t>> busy;
      for (const Buffer& o : buffers) {
        if (o.offset >= 0 && o.first <= b.last && b.first <= o.last)
          busy.push_back({o.offset, o.offset + round_up(o.bytes)});
      }
      std::sort(busy.begin(), busy.end());
      int64_t at = 0;
      for (auto [lo, hi] : busy) {
        if (at + b.bytes <= lo) break;
        at = std::max(at, round_up(hi));
      }
      b.offset = at;
      arena = std::max(arena, at + round_up(b.bytes));
    }
    // The lower bound: the largest sum of live sizes at one op.
    int64_t bound = 0;
    for (int64_t t = 0; t <= n; ++t) {
      int64_t live = 0;
      for (const Buffer& b : buffers)
        if (b.first <= t && t <= b.last) live += round_up(b.bytes);
      bound = std::max(bound, live);
    }

    Builder builder(&getContext());
    DenseMap<Value, int64_t> offset_of;
    for (const Buffer& b : buffers) offset_of[b.value] = b.offset;
    for (Operation& op : body) {
      SmallVector<int64_t> offsets;
      for (Value r : op.getResults())
        if (offset_of.count(r)) offsets.push_back(offset_of[r]);
      if (!offsets.empty()) op.setAttr("blu.arena_offsets", builder.getDenseI64ArrayAttr(offsets));
    }
    fn->setAttr("blu.arena_bytes", builder.getI64IntegerAttr(arena));
    fn->setAttr("blu.arena_lower_bound_bytes", builder.getI64IntegerAttr(bound));
    fn->setAttr("blu.unplanned_bytes", builder.getI64IntegerAttr(unplanned));
  }
};

}  // namespace
