// blu-count-kernels: the number of kernel launches a function's top-level blu ops make, as the
// function attribute blu.kernels (issue 13 reports launches per step before and after fusion).
#include <cstdint>

#include "blucomp/blu_dialect.h"
#include "blucomp/passes.h"

#include "mlir/IR/Builders.h"

namespace blu::comp {
#define GEN_PASS_DEF_BLUCOUNTKERNELS
#include "blucomp/passes.h.inc"
}  // namespace blu::comp

using namespace mlir;

namespace {

struct CountKernelsPass : blu::comp::impl::BluCountKernelsBase<CountKernelsPass> {
  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    int64_t kernels = 0;
    for (Operation& op : fn.getBody().getOps()) {
      // Every top-level blu op is one launch (blu.yield only appears inside blu.fused), but
      // the views of a captured step (blu.reshape, blu.view, blu.insert_view: how the kernel that
      // reads or writes them addresses its operand, as the eager step did) and blu.host_read (a
      // copy to the host) and blu.broadcast (how its one reader, an elementwise op it is always
      // fused with, reads a recorded broadcast operand: Note [Broadcast operands]).
      if (isa<blu::comp::BluDialect>(op.getDialect()) &&
          !isa<blu::comp::ReshapeOp, blu::comp::ViewOp, blu::comp::InsertViewOp, blu::comp::HostReadOp,
               blu::comp::BroadcastOp>(op))
        ++kernels;
    }
    fn->setAttr("blu.kernels", Builder(fn.getContext()).getI64IntegerAttr(kernels));
  }
};

}  // namespace
