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

// The element of the operand the iteration's index map selects (Note [Broadcast operands]).
Value BroadcastOp::buildScalar(OpBuilder&, Location, ValueRange operands) { return operands[0]; }

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

// Note [Generic elementwise]: blu.ew's functions in f32, as blutensor's CPU backend computes them.
Value EwOp::buildScalar(OpBuilder& b, Location loc, ValueRange operands) {
  const llvm::StringRef fn = getFn();
  const float alpha = static_cast<float>(getAlpha().convertToDouble());
  Value x = operands[0];
  Value c = f32Constant(b, loc, alpha);
  Value zero = f32Constant(b, loc, 0.0f), one = f32Constant(b, loc, 1.0f);
  if (fn == "neg") return b.create<arith::NegFOp>(loc, x);
  if (fn == "exp") return b.create<math::ExpOp>(loc, x);
  if (fn == "log") return b.create<math::LogOp>(loc, x);
  if (fn == "sqrt") return b.create<math::SqrtOp>(loc, x);
  if (fn == "tanh") return b.create<math::TanhOp>(loc, x);
  if (fn == "relu") return b.create<arith::MaximumFOp>(loc, x, zero);
  if (fn == "add_scalar") return b.create<arith::AddFOp>(loc, x, c);
  if (fn == "mul_scalar") return b.create<arith::MulFOp>(loc, x, c);
  if (fn == "rsub_scalar") return b.create<arith::SubFOp>(loc, c, x);
  if (fn == "rdiv_scalar") return b.create<arith::DivFOp>(loc, c, x);
  if (fn == "clamp_max") return b.create<arith::MinimumFOp>(loc, x, c);
  if (fn == "pow_scalar") {  // the verifier allows 2, 0.5, -0.5, -1
    if (alpha == 2.0f) return b.create<arith::MulFOp>(loc, x, x);
    if (alpha == 0.5f) return b.create<math::SqrtOp>(loc, x);
    if (alpha == -1.0f) return b.create<arith::DivFOp>(loc, one, x);
    return b.create<arith::DivFOp>(loc, one, b.create<math::SqrtOp>(loc, x));
  }
  Value y = operands[1];
  if (fn == "add") return b.create<arith::AddFOp>(loc, x, alpha == 1.0f ? y : b.create<arith::MulFOp>(loc, c, y).getResult());
  if (fn == "sub") return b.create<arith::SubFOp>(loc, x, y);
  if (fn == "mul") return b.create<arith::MulFOp>(loc, x, y);
  if (fn == "div") return b.create<arith::DivFOp>(loc, x, y);
  if (fn == "relu_backward") {
    Value pos = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, y, zero);
    return b.create<arith::SelectOp>(loc, pos, x, zero);
  }
  if (fn == "tanh_backward")
    return b.create<arith::MulFOp>(loc, x, b.create<arith::SubFOp>(loc, one, b.create<arith::MulFOp>(loc, y, y)));
  // eq_mask (the verifier admits nothing else)
  Value eq = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OEQ, x, y);
  return b.create<arith::SelectOp>(loc, eq, one, zero);
}
