// blu-lower-to-linalg: one linalg.generic per fused group on the (rows, last dim) view, the
// bias indexed by the column, bf16 widened to f32 for the body and narrowed on the store.
// RUN: blu-opt %s -split-input-file --blu-fuse-elementwise --blu-lower-to-linalg | FileCheck %s

// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[COL:.*]] = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @bias_gelu_residual
// CHECK-DAG: %[[H2:.*]] = tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2]] : tensor<4x8x64xf32> into tensor<32x64xf32>
// CHECK-DAG: %[[R2:.*]] = tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2]] : tensor<4x8x64xf32> into tensor<32x64xf32>
// CHECK: %[[OUT:.*]] = linalg.generic {indexing_maps = [#[[ID]], #[[COL]], #[[ID]], #[[ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME: ins(%[[H2]], %{{.*}}, %[[R2]] : tensor<32x64xf32>, tensor<64xf32>, tensor<32x64xf32>)
// CHECK: ^bb0(%[[X:.*]]: f32, %[[B:.*]]: f32, %[[R:.*]]: f32, %{{.*}}: f32):
// CHECK-NEXT: %[[U:.*]] = arith.addf %[[X]], %[[B]] : f32
// CHECK: %[[TANH:.*]] = math.tanh
// CHECK: %[[ONE_T:.*]] = arith.addf %{{.*}}, %[[TANH]] : f32
// CHECK-NEXT: %[[G:.*]] = arith.mulf %{{.*}}, %[[ONE_T]] : f32
// CHECK-NEXT: %[[Y:.*]] = arith.addf %[[G]], %[[R]] : f32
// CHECK-NEXT: linalg.yield %[[Y]] : f32
// CHECK-NOT: linalg.generic
// CHECK: tensor.expand_shape %[[OUT]] {{\[\[}}0, 1], [2]] output_shape [4, 8, 64]
func.func @bias_gelu_residual(%h: tensor<4x8x64xf32>, %b: tensor<64xf32>, %r: tensor<4x8x64xf32>) -> tensor<4x8x64xf32> {
  %0 = blu.bias_add %h, %b : tensor<4x8x64xf32>, tensor<64xf32>
  %1 = blu.gelu_tanh %0 : tensor<4x8x64xf32>
  %2 = blu.add %1, %r : tensor<4x8x64xf32>
  return %2 : tensor<4x8x64xf32>
}

// -----

// bf16 in, bf16 out, f32 arithmetic.
// CHECK-LABEL: func.func @bf16_gelu_grad
// CHECK: linalg.generic
// CHECK: ^bb0(%[[DY:.*]]: bf16, %[[X:.*]]: bf16, %{{.*}}: bf16):
// CHECK-DAG: arith.extf %[[DY]] : bf16 to f32
// CHECK-DAG: arith.extf %[[X]] : bf16 to f32
// CHECK: %[[T:.*]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK-NEXT: linalg.yield %[[T]] : bf16
func.func @bf16_gelu_grad(%dy: tensor<64x96xbf16>, %x: tensor<64x96xbf16>) -> tensor<64x96xbf16> {
  %0 = blu.gelu_tanh_grad %dy, %x : tensor<64x96xbf16>
  return %0 : tensor<64x96xbf16>
}

// -----

// Rank 1: viewed as one row.
// CHECK-LABEL: func.func @rank1
// CHECK: tensor.expand_shape %{{.*}} {{\[\[}}0, 1]] output_shape [1, 50] : tensor<50xf32> into tensor<1x50xf32>
// CHECK: linalg.generic
// CHECK: tensor.collapse_shape %{{.*}} {{\[\[}}0, 1]] : tensor<1x50xf32> into tensor<50xf32>
func.func @rank1(%a: tensor<50xf32>, %b: tensor<50xf32>) -> tensor<50xf32> {
  %0 = blu.mul %a, %b : tensor<50xf32>
  return %0 : tensor<50xf32>
}

// -----

// A multi-output group (blu-fuse-elementwise{multi-output=1}): one linalg.generic with one
// output per result, each narrowed to its own element type; rank-3 results expanded back.
// CHECK-LABEL: func.func @two_results
// CHECK: %[[G:.*]]:2 = linalg.generic
// CHECK-SAME: outs(%{{.*}}, %{{.*}} : tensor<32x64xbf16>, tensor<32x64xf32>)
// CHECK: %[[T:.*]] = math.tanh
// CHECK: %[[N:.*]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK-NEXT: linalg.yield %[[N]], %{{.*}} : bf16, f32
// CHECK-DAG: tensor.expand_shape %[[G]]#0
// CHECK-DAG: tensor.expand_shape %[[G]]#1
func.func @two_results(%x: tensor<4x8x64xbf16>, %y: tensor<4x8x64xf32>) -> (tensor<4x8x64xbf16>, tensor<4x8x64xf32>) {
  %0:2 = blu.fused(%x, %y) : (tensor<4x8x64xbf16>, tensor<4x8x64xf32>) -> (tensor<4x8x64xbf16>, tensor<4x8x64xf32>) {
  ^bb0(%a: tensor<4x8x64xbf16>, %b: tensor<4x8x64xf32>):
    %t = blu.ew "tanh"(%b) : tensor<4x8x64xf32>
    %m = blu.ew "mul_scalar"(%a) {alpha = 2.0 : f64} : tensor<4x8x64xbf16>
    blu.yield %m, %t : tensor<4x8x64xbf16>, tensor<4x8x64xf32>
  }
  return %0#0, %0#1 : tensor<4x8x64xbf16>, tensor<4x8x64xf32>
}

// -----

// Note [Broadcast operands]: a per-row operand is read as [rows, 1] at (row, 0), a trailing one
// (rotary's [T, d] table over [B, H, T, d]) as [R, cols] at (row mod R, col).
// CHECK-DAG: #[[ROWS:.*]] = affine_map<(d0, d1) -> (d0, 0)>
// CHECK-DAG: #[[MOD:.*]] = affine_map<(d0, d1) -> (d0 mod 16, d1)>
// CHECK-LABEL: func.func @broadcast_inputs
// CHECK: tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2]] : tensor<2x16x1xf32> into tensor<32x1xf32>
// CHECK: linalg.generic {indexing_maps = [#[[ROWS]], #{{.*}}, #{{.*}}]
// CHECK-SAME: ins(%{{.*}}, %{{.*}} : tensor<32x1xf32>, tensor<32x64xf32>)
// CHECK: linalg.generic {indexing_maps = [#[[MOD]], #{{.*}}, #{{.*}}]
// CHECK-SAME: ins(%{{.*}}, %{{.*}} : tensor<16x8xf32>, tensor<128x8xf32>)
func.func @broadcast_inputs(%x: tensor<2x16x64xf32>, %r: tensor<2x16x1xf32>, %q: tensor<2x4x16x8xf32>, %c: tensor<16x8xf32>) -> (tensor<2x16x64xf32>, tensor<2x4x16x8xf32>) {
  %0 = blu.broadcast %r : tensor<2x16x1xf32> to tensor<2x16x64xf32>
  %1 = blu.mul %x, %0 : tensor<2x16x64xf32>
  %2 = blu.broadcast %c : tensor<16x8xf32> to tensor<2x4x16x8xf32>
  %3 = blu.mul %q, %2 : tensor<2x4x16x8xf32>
  return %1, %3 : tensor<2x16x64xf32>, tensor<2x4x16x8xf32>
}
