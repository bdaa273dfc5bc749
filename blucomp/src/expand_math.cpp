// blu-expand-math: replaces math.tanh (and friends) with MLIR's f32 polynomial approximations,
// and math.absf with a sign-bit mask, so the PTX calls no libdevice function (Note [GPU
// pipeline] in pipelines.cpp).
#include "blucomp/passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace blu::comp {
#define GEN_PASS_DEF_BLUEXPANDMATH
#include "blucomp/passes.h.inc"
}  // namespace blu::comp

using namespace mlir;

namespace {

// Note [fabs without libdevice]
// convert-gpu-to-nvvm (MLIR 19) turns math.absf and even llvm.intr.fabs into calls to libdevice's
// __nv_fabsf, which gpu-module-to-binary can only resolve by linking libdevice.10.bc from a CUDA
// toolkit. |x| for f32 is clearing the sign bit: an integer and on the bit pattern, which the
// NVPTX backend emits as one and.b32 (what __nv_fabsf compiles to anyway).
struct AbsFAsSignMask : OpRewritePattern<math::AbsFOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::AbsFOp op, PatternRewriter& rewriter) const override {
    if (!op.getType().isF32()) return failure();
    Location loc = op.getLoc();
    Type i32 = rewriter.getI32Type();
    Value bits = rewriter.create<arith::BitcastOp>(loc, i32, op.getOperand());
    Value mask = rewriter.create<arith::ConstantOp>(loc, rewriter.getI32IntegerAttr(0x7fffffff));
    Value cleared = rewriter.create<arith::AndIOp>(loc, bits, mask);
    rewriter.replaceOpWithNewOp<arith::BitcastOp>(op, op.getType(), cleared);
    return success();
  }
};

// MLIR's exp approximation rounds with math.floor, which convert-gpu-to-nvvm also sends to
// libdevice (__nv_floorf). For f32 in int32's range: t = trunc(x) (fptosi/sitofp), minus 1 where
// t > x (negative non-integers). The exp reduction's argument is clamped to +-127 * ln 2 first, so
// it is always in range there.
struct FloorFByTruncation : OpRewritePattern<math::FloorOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::FloorOp op, PatternRewriter& rewriter) const override {
    if (!op.getType().isF32()) return failure();
    Location loc = op.getLoc();
    Value x = op.getOperand();
    Value i = rewriter.create<arith::FPToSIOp>(loc, rewriter.getI32Type(), x);
    Value t = rewriter.create<arith::SIToFPOp>(loc, op.getType(), i);
    Value above = rewriter.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, t, x);
    Value one = rewriter.create<arith::ConstantOp>(loc, rewriter.getF32FloatAttr(1.0f));
    Value down = rewriter.create<arith::SubFOp>(loc, t, one);
    rewriter.replaceOpWithNewOp<arith::SelectOp>(op, above, down, t);
    return success();
  }
};

// convert-gpu-to-nvvm also sends math.sqrt (llvm.intr.sqrt) to libdevice. For f32 it is one PTX
// instruction, the correctly rounded sqrt.rn.f32 (what __nv_sqrtf is): emitted as inline PTX.
struct SqrtFAsPtx : OpRewritePattern<math::SqrtOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::SqrtOp op, PatternRewriter& rewriter) const override {
    if (!op.getType().isF32()) return failure();
    auto asm_op = rewriter.create<LLVM::InlineAsmOp>(op.getLoc(), op.getType(), ValueRange{op.getOperand()},
                                                     "sqrt.rn.f32 $0, $1;", "=f,f", /*has_side_effects=*/false,
                                                     /*is_align_stack=*/false, LLVM::AsmDialectAttr(), ArrayAttr());
    rewriter.replaceOp(op, asm_op.getResult(0));
    return success();
  }
};

struct ExpandMathPass : blu::comp::impl::BluExpandMathBase<ExpandMathPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateMathPolynomialApproximationPatterns(patterns);
    patterns.add<AbsFAsSignMask, FloorFByTruncation, SqrtFAsPtx>(&getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

}  // namespace
