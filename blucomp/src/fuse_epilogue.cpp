// blu-fuse-epilogue: folds a blu.matmul's elementwise consumer chain into the GEMM's epilogue
// (blu.matmul_epilogue: the blublas Epilogue kinds), before elementwise fusion runs.
#include "blucomp/passes.h"
#include "node_provenance.h"

#include "mlir/IR/Builders.h"

namespace blu::comp {
#define GEN_PASS_DEF_BLUFUSEEPILOGUE
#include "blucomp/passes.h.inc"
}  // namespace blu::comp

using namespace mlir;
using namespace blu::comp;

namespace {

// Note [Epilogue fusion]
// A GEMM's output passes through the epilogue registers anyway, so an elementwise op applied to
// it there costs no memory traffic: blublas's kBias / kBiasGelu (with the pre-activation kept as
// aux) / kGeluGrad and beta*C (the residual) are those epilogues. The rule mirrors Note [Fusion
// cost rule]: the product must have exactly one user (nothing else reads it, so it never reaches
// memory); then
//   bias_add(product, b)                          -> "bias"
//   add(bias_add(product, b), r), one user of the
//     bias_add                                    -> "bias_residual" (r as C, beta = 1)
//   gelu_tanh(bias_add(product, b))               -> "bias_gelu": results (gelu, pre) when the
//                                                    pre-activation has other users (the training
//                                                    step's backward reads it), else (gelu)
//   gelu_tanh_grad(product, pre)                  -> "gelu_grad" (pre as aux)
//   blu.kernel "column_sum"(dy) beside a product
//     with op(lhs) = dy^T (the dW GEMM)           -> "bias_grad": results (dW, column sums)
//     (blublas kBiasGradA; the product may have any users, both values are results)
// The new op takes the position of the last op it replaces, where every operand (lhs, rhs, bias,
// residual, pre) already dominates: each is an operand of an op that the chain's last op follows.
// For "bias_gelu" with other users of pre the op goes to the bias_add's place instead (those
// users follow the bias_add, the gelu's users follow the gelu): both results then dominate.
struct FuseEpiloguePass : blu::comp::impl::BluFuseEpilogueBase<FuseEpiloguePass> {
  void runOnOperation() override {
    llvm::SmallVector<MatmulOp> matmuls;
    getOperation().walk([&](MatmulOp mm) { matmuls.push_back(mm); });
    for (MatmulOp mm : matmuls) fuse(mm);
    llvm::SmallVector<KernelOp> sums;
    getOperation().walk([&](KernelOp k) {
      if (k.getCallee() == "column_sum" && k.getInputs().size() == 1 && k.getResults().size() == 1)
        sums.push_back(k);
    });
    for (KernelOp sum : sums) fuseBiasGrad(sum);
  }

  // Note [Epilogue fusion], "bias_grad": at the earlier of the two ops, so every user of either
  // result follows it. dy is an operand of both and dominates it; x (the GEMM's rhs) must too: when
  // x is computed between the column sum and the GEMM the two stay apart.
  void fuseBiasGrad(KernelOp sum) {
    Value dy = sum.getInputs()[0];
    for (Operation* user : dy.getUsers()) {
      auto mm = dyn_cast<MatmulOp>(user);
      if (!mm || mm.getLhs() != dy || !mm.getTransposeLhs() || mm->getBlock() != sum->getBlock())
        continue;
      Operation* at = mm->isBeforeInBlock(sum) ? mm.getOperation() : sum.getOperation();
      if (Operation* def = mm.getRhs().getDefiningOp();
          def && def->getBlock() == at->getBlock() && !def->isBeforeInBlock(at))
        continue;
      auto op = build(at, mm, "bias_grad", {}, {mm.getType(), sum.getResults()[0].getType()});
      mergeNodes(op, {mm, sum});
      inheritBuffer(mm.getResult(), op.getResult(0));
      inheritBuffer(sum->getResult(0), op.getResult(1));
      mm->replaceAllUsesWith(ValueRange{op.getResult(0)});
      sum->replaceAllUsesWith(ValueRange{op.getResult(1)});
      mm.erase();
      sum.erase();
      return;
    }
  }

  static Operation* soleUser(Value v) {
    return v.hasOneUse() ? *v.getUsers().begin() : nullptr;
  }

  MatmulEpilogueOp build(Operation* at, MatmulOp mm, llvm::StringRef kind, ValueRange extras,
                         TypeRange results) {
    OpBuilder b(at);
    llvm::SmallVector<Value> operands{mm.getLhs(), mm.getRhs()};
    operands.append(extras.begin(), extras.end());
    return b.create<MatmulEpilogueOp>(at->getLoc(), results, operands, b.getStringAttr(kind),
                                      b.getBoolAttr(mm.getTransposeLhs()),
                                      b.getBoolAttr(mm.getTransposeRhs()));
  }

  void fuse(MatmulOp mm) {
    Operation* user = soleUser(mm.getResult());
    if (!user) return;
    if (auto grad = dyn_cast<GeluTanhGradOp>(user); grad && grad.getGrad() == mm.getResult() &&
                                                     grad.getInput() != mm.getResult()) {
      auto op = build(grad, mm, "gelu_grad", {grad.getInput()}, {grad.getType()});
      mergeNodes(op, {mm, grad});
      inheritBuffer(grad.getResult(), op.getResult(0));
      grad->replaceAllUsesWith(op.getResults());
      grad.erase();
      mm.erase();
      return;
    }
    auto bias = dyn_cast<BiasAddOp>(user);
    if (!bias || bias.getInput() != mm.getResult()) return;
    Value pre = bias.getResult();
    if (Operation* next = soleUser(pre)) {
      if (auto add = dyn_cast<AddOp>(next)) {
        Value residual = add.getLhs() == pre ? add.getRhs() : add.getLhs();
        if (residual == pre) return;  // pre + pre: not a residual
        auto op = build(add, mm, "bias_residual", {bias.getBias(), residual}, {add.getType()});
        mergeNodes(op, {mm, bias, add});
        inheritBuffer(add->getResult(0), op.getResult(0));
        add->replaceAllUsesWith(op.getResults());
        add.erase();
        bias.erase();
        mm.erase();
        return;
      }
    }
    GeluTanhOp gelu;
    for (Operation* u : pre.getUsers())
      if (auto g = dyn_cast<GeluTanhOp>(u)) gelu = g;
    if (gelu) {
      const bool keep_pre = !pre.hasOneUse();
      llvm::SmallVector<Type> types{gelu.getType()};
      if (keep_pre) types.push_back(pre.getType());
      // Kept pre: at the bias_add (its other users follow it); else at the gelu.
      Operation* at = keep_pre ? bias.getOperation() : gelu.getOperation();
      auto op = build(at, mm, "bias_gelu", {bias.getBias()}, types);
      mergeNodes(op, {mm, bias, gelu});
      inheritBuffer(gelu->getResult(0), op.getResult(0));
      if (keep_pre) inheritBuffer(bias.getResult(), op.getResult(1));
      gelu->replaceAllUsesWith(ValueRange{op.getResult(0)});
      gelu.erase();
      if (keep_pre) bias->replaceAllUsesWith(ValueRange{op.getResult(1)});
      bias.erase();
      mm.erase();
      return;
    }
    auto op = build(bias, mm, "bias", {bias.getBias()}, {bias.getType()});
    mergeNodes(op, {mm, bias});
    inheritBuffer(bias.getResult(), op.getResult(0));
    bias->replaceAllUsesWith(op.getResults());
    bias.erase();
    mm.erase();
  }
};

}  // namespace
