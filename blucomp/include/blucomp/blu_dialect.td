// The `blu` dialect: BluTrain's primitives on statically shaped f32/bf16 tensors, plus the
// interface that says how an elementwise op computes one element (used by fusion and lowering).
#ifndef BLUCOMP_BLU_DIALECT_TD
#define BLUCOMP_BLU_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Blu_Dialect : Dialect {
  let name = "blu";
  let cppNamespace = "::blu::comp";
  let summary = "BluTrain's training-step primitives";
  let description = [{
    Ops of one traced GPT-2 training step at fixed shapes: elementwise ops (fusible), layernorm,
    and `blu.matmul`, which stays an opaque call into blublas. `blu.fused` holds a group of
    elementwise ops that becomes one kernel.
  }];
}

// Every blu tensor: statically shaped (the step is traced at fixed shapes), f32 or bf16.
def Blu_Tensor : StaticShapeTensorOf<[F32, BF16]>;
// Any tensor a captured step holds (Note [Capture import]): also the index tensors (i32, i64,
// ui16), f16 and f64 values that only opaque kernels and views touch.
def Blu_AnyTensor : StaticShapeTensorOf<[F32, BF16, F16, F64, I32, I64, UI16]>;

// Note [Elementwise interface]
// An op that computes each output element from the elements at the same position of its
// operands (a rank-1 `bias` operand broadcasts along the last dimension) implements
// BluElementwiseOpInterface. `buildScalar` emits that per-element computation in f32 (bf16 loads
// are widened, stores narrowed by the lowering), so the fusion pass needs no per-op knowledge and
// the lowering to linalg.generic is one loop over the region's ops. Adding an elementwise op is:
// its ODS definition plus one buildScalar body (scalar_bodies.cpp).
def Blu_ElementwiseOpInterface : OpInterface<"ElementwiseOpInterface"> {
  let cppNamespace = "::blu::comp";
  let description = [{
    An elementwise blu op: fusible, lowered through its scalar body.
  }];
  let methods = [
    InterfaceMethod<
      "Emits the computation of one element in f32 from one f32 value per operand.",
      "::mlir::Value", "buildScalar",
      (ins "::mlir::OpBuilder &":$builder, "::mlir::Location":$loc,
           "::mlir::ValueRange":$operands)>
  ];
}

class Blu_Op<string mnemonic, list<Trait> traits = []> : Op<Blu_Dialect, mnemonic, traits>;

#endif  // BLUCOMP_BLU_DIALECT_TD
