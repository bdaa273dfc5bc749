// blu-fuse-epilogue (Note [Epilogue fusion] in blucomp/src/fuse_epilogue.cpp): a GEMM's bias,
// bias + residual, bias + GELU and GELU-gradient consumers folded into blu.matmul_epilogue.
// RUN: blu-opt %s -split-input-file --blu-fuse-epilogue | FileCheck %s
// blu-import makes a bf16 step's bias gradient (kSum of a bf16 dY into a bf16 [1, C]) the
// column_sum that folds below (session 38; before, only f32 sums were imported so):
// RUN: mkdir -p %t && echo '{"format": "blu-capture", "version": 1, "buffers": [{"alive": true, "bytes": 192, "device": "cuda:0", "id": 0, "origin": "input", "written": false}, {"alive": true, "bytes": 12, "device": "cuda:0", "id": 1, "origin": "internal", "written": true}], "nodes": [{"op": "reduce", "device": "cuda:0", "args": [{"enum": "kSum", "name": "op", "value": 0}, {"name": "out", "read": false, "write": true, "tensor": {"buffer": 1, "dtype": "bf16", "offset": 0, "sizes": [1, 6], "strides": [6, 1]}}, {"name": "a", "read": true, "write": false, "tensor": {"buffer": 0, "dtype": "bf16", "offset": 0, "sizes": [16, 6], "strides": [6, 1]}}]}]}' > %t/bf16_sum.json
// RUN: blu-import %t/bf16_sum.json | FileCheck %s --check-prefix=IMPORTBF16
// IMPORTBF16: blu.kernel "column_sum"(%{{.*}}) {{.*}} : (tensor<16x6xbf16>) -> tensor<6xbf16>

// CHECK-LABEL: func.func @bias
// CHECK-NEXT: %[[E:.*]] = blu.matmul_epilogue "bias"(%arg0, %arg1, %arg2) {transpose_rhs = true} : (tensor<4x8xf32>, tensor<6x8xf32>, tensor<6xf32>) -> tensor<4x6xf32>
// CHECK-NEXT: return %[[E]]
func.func @bias(%x: tensor<4x8xf32>, %w: tensor<6x8xf32>, %b: tensor<6xf32>) -> tensor<4x6xf32> {
  %0 = blu.matmul %x, %w {transpose_rhs = true} : tensor<4x8xf32>, tensor<6x8xf32> -> tensor<4x6xf32>
  %1 = blu.bias_add %0, %b : tensor<4x6xf32>, tensor<6xf32>
  return %1 : tensor<4x6xf32>
}

// -----

// The residual may be either operand of the add.
// CHECK-LABEL: func.func @bias_residual
// CHECK-NEXT: %[[E:.*]] = blu.matmul_epilogue "bias_residual"(%arg0, %arg1, %arg2, %arg3) {transpose_rhs = true}
// CHECK-NEXT: return %[[E]]
func.func @bias_residual(%x: tensor<4x8xf32>, %w: tensor<6x8xf32>, %b: tensor<6xf32>, %r: tensor<4x6xf32>) -> tensor<4x6xf32> {
  %0 = blu.matmul %x, %w {transpose_rhs = true} : tensor<4x8xf32>, tensor<6x8xf32> -> tensor<4x6xf32>
  %1 = blu.bias_add %0, %b : tensor<4x6xf32>, tensor<6xf32>
  %2 = blu.add %r, %1 : tensor<4x6xf32>
  return %2 : tensor<4x6xf32>
}

// -----

// GELU whose pre-activation nothing else reads: one result.
// CHECK-LABEL: func.func @bias_gelu
// CHECK-NEXT: %[[E:.*]] = blu.matmul_epilogue "bias_gelu"(%arg0, %arg1, %arg2) : (tensor<4x8xf32>, tensor<8x6xf32>, tensor<6xf32>) -> tensor<4x6xf32>
// CHECK-NEXT: return %[[E]]
func.func @bias_gelu(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>, %b: tensor<6xf32>) -> tensor<4x6xf32> {
  %0 = blu.matmul %x, %w : tensor<4x8xf32>, tensor<8x6xf32> -> tensor<4x6xf32>
  %1 = blu.bias_add %0, %b : tensor<4x6xf32>, tensor<6xf32>
  %2 = blu.gelu_tanh %1 : tensor<4x6xf32>
  return %2 : tensor<4x6xf32>
}

// -----

// The training step's case: the backward reads the pre-activation, so the epilogue also returns it
// (blublas kBiasGelu's aux), and the GELU gradient's GEMM takes it back as its own epilogue's aux.
// CHECK-LABEL: func.func @bias_gelu_keeps_pre
// CHECK-NEXT: %[[E:.*]]:2 = blu.matmul_epilogue "bias_gelu"(%arg0, %arg1, %arg2) : (tensor<4x8xf32>, tensor<8x6xf32>, tensor<6xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>)
// CHECK-NEXT: %[[G:.*]] = blu.matmul_epilogue "gelu_grad"(%arg3, %arg4, %[[E]]#1) : (tensor<4x5xf32>, tensor<5x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
// CHECK-NEXT: return %[[E]]#0, %[[G]]
func.func @bias_gelu_keeps_pre(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>, %b: tensor<6xf32>, %dy: tensor<4x5xf32>, %w2: tensor<5x6xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>) {
  %0 = blu.matmul %x, %w : tensor<4x8xf32>, tensor<8x6xf32> -> tensor<4x6xf32>
  %1 = blu.bias_add %0, %b : tensor<4x6xf32>, tensor<6xf32>
  %2 = blu.gelu_tanh %1 : tensor<4x6xf32>
  %3 = blu.matmul %dy, %w2 : tensor<4x5xf32>, tensor<5x6xf32> -> tensor<4x6xf32>
  %4 = blu.gelu_tanh_grad %3, %1 : tensor<4x6xf32>
  return %2, %4 : tensor<4x6xf32>, tensor<4x6xf32>
}

// -----

// A product read twice stays a plain blu.matmul (the epilogue would hide it from the second user).
// CHECK-LABEL: func.func @shared_product
// CHECK-NEXT: blu.matmul %arg0
// CHECK-NEXT: blu.bias_add
// CHECK-NOT: blu.matmul_epilogue
func.func @shared_product(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>, %b: tensor<6xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>) {
  %0 = blu.matmul %x, %w : tensor<4x8xf32>, tensor<8x6xf32> -> tensor<4x6xf32>
  %1 = blu.bias_add %0, %b : tensor<4x6xf32>, tensor<6xf32>
  return %0, %1 : tensor<4x6xf32>, tensor<4x6xf32>
}

// -----

// The bias gradient (column sums of dY) joins the dW GEMM dY^T X as its second result, at the
// earlier of the two ops: here the GEMM, whose result is read before the column sum runs.
// CHECK-LABEL: func.func @bias_grad
// CHECK-NEXT: %[[E:.*]]:2 = blu.matmul_epilogue "bias_grad"(%arg0, %arg1) {transpose_lhs = true} : (tensor<16x6xf32>, tensor<16x8xf32>) -> (tensor<6x8xf32>, tensor<6xf32>)
// CHECK-NEXT: %[[S:.*]] = blu.mul %[[E]]#0, %[[E]]#0
// CHECK-NEXT: return %[[S]], %[[E]]#1
func.func @bias_grad(%dy: tensor<16x6xf32>, %x: tensor<16x8xf32>) -> (tensor<6x8xf32>, tensor<6xf32>) {
  %dw = blu.matmul %dy, %x {transpose_lhs = true} : tensor<16x6xf32>, tensor<16x8xf32> -> tensor<6x8xf32>
  %sq = blu.mul %dw, %dw : tensor<6x8xf32>
  %db = blu.kernel "column_sum"(%dy) : (tensor<16x6xf32>) -> tensor<6xf32>
  return %sq, %db : tensor<6x8xf32>, tensor<6xf32>
}

// -----

// A bf16 step's bias gradient: bf16 sums of the bf16 dY (blu-import since session 38; the runtime
// sums into f32 and casts, Note [16-bit bias gradients] in step_runtime.cpp) fold the same way.
// CHECK-LABEL: func.func @bias_grad_bf16
// CHECK-NEXT: %[[E:.*]]:2 = blu.matmul_epilogue "bias_grad"(%arg0, %arg1) {transpose_lhs = true} : (tensor<16x6xbf16>, tensor<16x8xbf16>) -> (tensor<6x8xbf16>, tensor<6xbf16>)
// CHECK-NEXT: return %[[E]]#0, %[[E]]#1
func.func @bias_grad_bf16(%dy: tensor<16x6xbf16>, %x: tensor<16x8xbf16>) -> (tensor<6x8xbf16>, tensor<6xbf16>) {
  %db = blu.kernel "column_sum"(%dy) : (tensor<16x6xbf16>) -> tensor<6xbf16>
  %dw = blu.matmul %dy, %x {transpose_lhs = true} : tensor<16x6xbf16>, tensor<16x8xbf16> -> tensor<6x8xbf16>
  return %dw, %db : tensor<6x8xbf16>, tensor<6xbf16>
}

// -----

// A column sum of a tensor no dW GEMM reads stays a kernel.
// CHECK-LABEL: func.func @lone_column_sum
// CHECK-NEXT: blu.kernel "column_sum"
func.func @lone_column_sum(%dy: tensor<16x6xf32>) -> tensor<6xf32> {
  %db = blu.kernel "column_sum"(%dy) : (tensor<16x6xf32>) -> tensor<6xf32>
  return %db : tensor<6xf32>
}

// -----

// The GEMM's other operand is computed after the column sum: fusing at the column sum would use
// it before its definition, so the two stay apart.
// CHECK-LABEL: func.func @bias_grad_rhs_after_sum
// CHECK-NEXT: blu.kernel "column_sum"
// CHECK-NEXT: blu.gelu_tanh
// CHECK-NEXT: blu.matmul %arg0
// CHECK-NOT: blu.matmul_epilogue
func.func @bias_grad_rhs_after_sum(%dy: tensor<16x6xf32>, %h: tensor<16x8xf32>) -> (tensor<6x8xf32>, tensor<6xf32>) {
  %db = blu.kernel "column_sum"(%dy) : (tensor<16x6xf32>) -> tensor<6xf32>
  %x = blu.gelu_tanh %h : tensor<16x8xf32>
  %dw = blu.matmul %dy, %x {transpose_lhs = true} : tensor<16x6xf32>, tensor<16x8xf32> -> tensor<6x8xf32>
  return %dw, %db : tensor<6x8xf32>, tensor<6xf32>
}
