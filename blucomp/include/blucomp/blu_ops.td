// The ops of the `blu` dialect (first slice): elementwise add/mul/bias_add/gelu_tanh(+grad),
// layernorm forward, matmul (an opaque blublas call) and the `blu.fused` region with its yield.
#ifndef BLUCOMP_BLU_OPS_TD
#define BLUCOMP_BLU_OPS_TD

include "blucomp/blu_dialect.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

class Blu_ElementwiseOp<string mnemonic, list<Trait> traits = []>
    : Blu_Op<mnemonic, traits # [Pure, DeclareOpInterfaceMethods<Blu_ElementwiseOpInterface>]>;

// --- elementwise, same shapes ------------------------------------------------------------------

def Blu_AddOp : Blu_ElementwiseOp<"add", [SameOperandsAndResultType, Commutative]> {
  let summary = "elementwise sum of two tensors of one type (also the residual add)";
  let arguments = (ins Blu_Tensor:$lhs, Blu_Tensor:$rhs);
  let results = (outs Blu_Tensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Blu_MulOp : Blu_ElementwiseOp<"mul", [SameOperandsAndResultType, Commutative]> {
  let summary = "elementwise product of two tensors of one type";
  let arguments = (ins Blu_Tensor:$lhs, Blu_Tensor:$rhs);
  let results = (outs Blu_Tensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Blu_GeluTanhOp : Blu_ElementwiseOp<"gelu_tanh", [SameOperandsAndResultType]> {
  let summary = "GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))";
  let arguments = (ins Blu_Tensor:$input);
  let results = (outs Blu_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Blu_GeluTanhGradOp : Blu_ElementwiseOp<"gelu_tanh_grad", [SameOperandsAndResultType]> {
  let summary = "backward of gelu_tanh: grad * d gelu_tanh(x) / dx";
  let arguments = (ins Blu_Tensor:$grad, Blu_Tensor:$input);
  let results = (outs Blu_Tensor:$result);
  let assemblyFormat = "$grad `,` $input attr-dict `:` type($result)";
}

// --- elementwise with a broadcast operand ------------------------------------------------------

def Blu_EwOp : Blu_ElementwiseOp<"ew", [SameOperandsAndResultType]> {
  let summary = "one of blutensor's elementwise functions, by name (Note [Generic elementwise])";
  let description = [{
    `blu.ew "sub"(%a, %b) : tensor<8x16xf32>`, `blu.ew "mul_scalar"(%x) {alpha = 0.5} : ...`: the
    unary and binary functions of blutensor's backends (UnaryOp / BinaryOp in kernel_args.h), so
    that a captured step's elementwise calls fuse whatever model they come from (SiLU, RMSNorm's
    pieces, the backward of any composite). Unary: neg exp log sqrt tanh relu add_scalar
    mul_scalar pow_scalar (alpha 2, 0.5, -0.5, -1 only) rsub_scalar rdiv_scalar clamp_max; binary:
    add (a + alpha b) sub mul div relu_backward tanh_backward eq_mask. Same shapes only.
  }];
  let arguments = (ins StrAttr:$fn, Variadic<Blu_Tensor>:$inputs, DefaultValuedAttr<F64Attr, "1.0">:$alpha);
  let results = (outs Blu_Tensor:$result);
  let assemblyFormat = "$fn `(` $inputs `)` attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Blu_BiasAddOp : Blu_ElementwiseOp<"bias_add", [AllTypesMatch<["input", "result"]>]> {
  let summary = "input + bias, the rank-1 bias broadcast along the input's last dimension";
  let arguments = (ins Blu_Tensor:$input, Blu_Tensor:$bias);
  let results = (outs Blu_Tensor:$result);
  let assemblyFormat = "$input `,` $bias attr-dict `:` type($input) `,` type($bias)";
  let hasVerifier = 1;
}

def Blu_BroadcastOp : Blu_ElementwiseOp<"broadcast", []> {
  let summary = "a tensor repeated to a larger shape (Note [Broadcast operands])";
  let description = [{
    `blu.broadcast %r : tensor<2x64x1xf32> to tensor<2x64x128xf32>`: the operand is the result's
    shape with its last dimension 1 (one value per row, e.g. RMSNorm's rstd), or the result's
    trailing dimensions (repeated over the leading ones, e.g. rotary tables [T, d] over
    [B, H, T, d], a weight [C] over [B, T, C]). Elementwise with a per-element identity body: in
    a blu.fused region the operand is read through its own index map, so nothing of the larger
    shape is ever written.
  }];
  let arguments = (ins Blu_Tensor:$input);
  let results = (outs Blu_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasVerifier = 1;
}

// --- not elementwise ---------------------------------------------------------------------------

def Blu_LayerNormOp : Blu_Op<"layernorm", [Pure]> {
  let summary = "layer normalisation over the last dimension, with the saved mean and rstd";
  let description = [{
    `y = (x - mean) * rstd * weight + bias` per row of the last dimension; `mean` and `rstd`
    (f32, the input's shape without its last dimension) are kept for the backward.
  }];
  let arguments = (ins Blu_Tensor:$input, Blu_Tensor:$weight, Blu_Tensor:$bias,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs Blu_Tensor:$result, Blu_Tensor:$mean, Blu_Tensor:$rstd);
  let assemblyFormat = [{
    $input `,` $weight `,` $bias attr-dict `:` type($input) `,` type($weight) `,` type($bias)
    `->` type($result) `,` type($mean) `,` type($rstd)
  }];
  let hasVerifier = 1;
}

def Blu_MatmulOp : Blu_Op<"matmul", [Pure]> {
  let summary = "GEMM, an opaque call into blublas (never fused)";
  let description = [{
    `result = op(lhs) * op(rhs)` on rank-2 tensors, where op transposes when the matching
    `transpose_*` attribute is set. The compiler never looks inside: the runtime calls the
    blublas launcher for it, and fusion treats it as a boundary.
  }];
  let arguments = (ins Blu_Tensor:$lhs, Blu_Tensor:$rhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_lhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_rhs);
  let results = (outs Blu_Tensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Blu_MatmulEpilogueOp : Blu_Op<"matmul_epilogue", [Pure]> {
  let summary = "GEMM with a blublas epilogue (bias, bias + residual, bias + GELU, GELU gradient)";
  let description = [{
    `blu.matmul_epilogue "bias_gelu"(%lhs, %rhs, %bias) {transpose_rhs = true} : ...`: the
    product of `blu.matmul` followed in the same kernel by its epilogue (blublas::Epilogue):
      "bias"           (lhs, rhs, bias)           -> op(lhs) op(rhs) + bias
      "bias_residual"  (lhs, rhs, bias, residual) -> op(lhs) op(rhs) + bias + residual (beta = 1)
      "bias_gelu"      (lhs, rhs, bias)           -> gelu_tanh(pre) [, pre], pre = product + bias
      "gelu_grad"      (lhs, rhs, pre)            -> product * gelu_tanh'(pre)
      "bias_grad"      (lhs, rhs)                 -> product, row sums of op(lhs) (the dW GEMM
                                                     dY^T X with the bias gradient of dY)
    Made by blu-fuse-epilogue (Note [Epilogue fusion]); never lowered by blucomp, a launch.
  }];
  let arguments = (ins Variadic<Blu_Tensor>:$operands, StrAttr:$epilogue,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_lhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_rhs);
  let results = (outs Variadic<Blu_Tensor>:$results);
  let assemblyFormat = [{
    $epilogue `(` $operands `)` attr-dict `:` functional-type($operands, $results)
  }];
  let hasVerifier = 1;
}

def Blu_KernelOp : Blu_Op<"kernel", [Pure]> {
  let summary = "a named blublas launcher the compiler does not look into (attention, ...)";
  let description = [{
    `blu.kernel "attention_forward"(%qkv) : (...) -> (...)`: the runtime calls the blublas
    launcher named by `callee` with the operands and results as its tensors, in order. Like
    `blu.matmul` it is a fusion boundary; unlike it, its shapes are the launcher's business, so
    the verifier checks only that the callee is one the runtime knows (Note [Opaque kernels]).
  }];
  let arguments = (ins StrAttr:$callee, Variadic<Blu_AnyTensor>:$inputs);
  let results = (outs Variadic<Blu_AnyTensor>:$results);
  let assemblyFormat = "$callee `(` $inputs `)` attr-dict `:` functional-type($inputs, $results)";
  let hasVerifier = 1;
}

// --- fusion ------------------------------------------------------------------------------------

// ---- views and sync points of a captured step (Note [Capture import])

def Blu_ReshapeOp : Blu_Op<"reshape", [Pure]> {
  let summary = "the same elements in row-major order under another static shape (no kernel)";
  let description = [{
    `blu.reshape %x : tensor<6xf32> -> tensor<2x3xf32>`: element counts and element types match.
    An alias, not a copy: no launch (blu-count-kernels) and no arena bytes of its own
    (blu-plan-memory extends its source's live range instead).
  }];
  let arguments = (ins Blu_AnyTensor:$input);
  let results = (outs Blu_AnyTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Blu_ViewOp : Blu_Op<"view", [Pure]> {
  let summary = "a strided window of a tensor, materialised (one copy kernel)";
  let description = [{
    `blu.view %x {offset = 3, strides = array<i64: 8, 1>} : tensor<64xf32> -> tensor<4x2xf32>`:
    element (i, j) of the result is element offset + i*strides[0] + j*strides[1] of the source's
    row-major flattening. Strides are >= 0 (0 broadcasts); every element read is in bounds.
    With `window` (a fused group's kernel, Note [Strided operands]): the strides index a window of
    that shape, of which the result is the row-major reshape (same element count and last dim).
  }];
  let arguments = (ins Blu_AnyTensor:$input, I64Attr:$offset, DenseI64ArrayAttr:$strides,
                       OptionalAttr<DenseI64ArrayAttr>:$window);
  let results = (outs Blu_AnyTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Blu_InsertViewOp : Blu_Op<"insert_view", [Pure, AllTypesMatch<["dest", "result"]>]> {
  let summary = "dest with a strided window replaced by source (a write into part of a buffer)";
  let description = [{
    `blu.insert_view %src into %dst {offset = 8, strides = array<i64: 1>} : tensor<8xf32> into
    tensor<64xf32>`: the result is dst with element offset + sum(i_k * strides[k]) set to
    src[i...] (row-major flattening of dst); no two source elements land on one element.
  }];
  let arguments = (ins Blu_AnyTensor:$source, Blu_AnyTensor:$dest, I64Attr:$offset,
                       DenseI64ArrayAttr:$strides);
  let results = (outs Blu_AnyTensor:$result);
  let assemblyFormat = "$source `into` $dest attr-dict `:` type($source) `into` type($dest)";
  let hasVerifier = 1;
}

def Blu_HostReadOp : Blu_Op<"host_read"> {
  let summary = "the host reads a value here (item(), a norm): a synchronisation point";
  let description = [{
    Where the eager step copied a value to the host. Not pure: it stays where it is. A compiled
    step must end here or keep the value on the device (Note [Step capture] in blutensor).
  }];
  let arguments = (ins Blu_AnyTensor:$input);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Blu_FusedOp : Blu_Op<"fused", [IsolatedFromAbove, SingleBlock]> {
  let summary = "a group of elementwise blu ops that becomes one kernel";
  let description = [{
    The region's block arguments are the group's inputs (one per operand, same types); its ops
    are elementwise blu ops; `blu.yield` returns the group's results: the last op's value first,
    then any member value kept for users outside the group (multi-output fusion, Note [Fusion
    cost rule]). Every result has the first one's shape; each input has that shape or is a
    rank-1 tensor of its last dimension (a bias).
  }];
  let arguments = (ins Variadic<Blu_Tensor>:$inputs);
  let results = (outs Variadic<Blu_Tensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "`(` $inputs `)` attr-dict `:` functional-type($inputs, $results) $body";
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
}

def Blu_YieldOp : Blu_Op<"yield", [Pure, Terminator, HasParent<"FusedOp">]> {
  let summary = "returns the values of a blu.fused region";
  let arguments = (ins Variadic<Blu_Tensor>:$values);
  let assemblyFormat = "$values attr-dict `:` type($values)";
}

#endif  // BLUCOMP_BLU_OPS_TD
