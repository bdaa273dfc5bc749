// Per-element semantics of the elementwise blu ops (Note [Elementwise interface] in
// blu_dialect.td): each buildScalar emits the f32 computation of one output element.
// GELU uses the tanh form with blublas's constants, so fused kernels match the eager path.
#include "blucomp/blu_dialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

using namespace mlir;
using namespace blu::comp;

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

Value f32Constant(OpBuilder& b, Location loc, float value) {
  return b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(value));
}

// tanh(sqrt(2/pi) (x + 0.044715 x^3)), the inner term of the tanh GELU.
Value geluTanhInner(OpBuilder& b, Location loc, Value x) {
  Value x2 = b.create<arith::MulFOp>(loc, x, x);
  Value x3 = b.create<arith::MulFOp>(loc, x2, x);
  Value poly = b.create<arith::AddFOp>(
      loc, x, b.create<arith::MulFOp>(loc, f32Constant(b, loc, kGeluCubic), x3));
  Value z = b.create<arith::MulFOp>(loc, f32Constant(b, loc, kSqrt2OverPi), poly);
  return b.create<math::TanhOp>(loc, z);
}

}  // namespace

Value AddOp::buildScalar(OpBuilder& b, Location loc, ValueRange operands) {
  return b.create<arith::AddFOp>(loc, operands[0], operands[1]);
}

Value MulOp::buildScalar(OpBuilder& b, Location loc, ValueRange operands) {
  return b.create<arith::MulFOp>(loc, operands[0], operands[1]);
}

Value BiasAddOp::buildScalar(OpBuilder& b, Location loc, ValueRange operands) {
  return b.create<arith::AddFOp>(loc, operands[0], operands[1]);
}

// 0.5 x (1 + t)
Value GeluTanhOp::buildScalar(OpBuilder& b, Location loc, ValueRange operands) {
  Value x = operands[0];
  Value t = geluTanhInner(b, loc, x);
  Value half_x = b.create<arith::MulFOp>(loc, f32Constant(b, loc, 0.5f), x);
  Value one_plus_t = b.create<arith::AddFOp>(loc, f32Constant(b, loc, 1.0f), t);
  return b.create<arith::MulFOp>(loc, half_x, one_plus_t);
}

// dy * (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2))
Value GeluTanhGradOp::buildScalar(OpBuilder& b, Location loc, ValueRange operands) {
  Value dy = operands[0];
  Value x = operands[1];
  Value t = geluTanhInner(b, loc, x);
  Value half = f32Constant(b, loc, 0.5f);
  Value one = f32Constant(b, loc, 1.0f);
  Value left = b.create<arith::MulFOp>(loc, half, b.create<arith::AddFOp>(loc, one, t));
  Value sech2 = b.create<arith::SubFOp>(loc, one, b.create<arith::MulFOp>(loc, t, t));
  Value x2 = b.create<arith::MulFOp>(loc, x, x);
  Value dz = b.create<arith::MulFOp>(
      loc, f32Constant(b, loc, kSqrt2OverPi),
      b.create<arith::AddFOp>(
          loc, one, b.create<arith::MulFOp>(loc, f32Constant(b, loc, 3.0f * kGeluCubic), x2)));
  Value right = b.create<arith::MulFOp>(loc, b.create<arith::MulFOp>(loc, half, x),
                                        b.create<arith::MulFOp>(loc, sech2, dz));
  return b.create<arith::MulFOp>(loc, dy, b.create<arith::AddFOp>(loc, left, right));
}
