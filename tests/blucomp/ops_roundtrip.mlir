// Every blu op parses, verifies and prints back in its assembly format (twice round, so the
// printed form is itself parseable).
// RUN: blu-opt %s | blu-opt | FileCheck %s

// CHECK-LABEL: func.func @all_ops
func.func @all_ops(%x: tensor<4x8xf32>, %b: tensor<8xf32>, %w: tensor<8x16xf32>, %h: tensor<2x4x8xbf16>, %hb: tensor<8xbf16>)
    -> (tensor<4x8xf32>, tensor<4x16xf32>, tensor<2x4x8xbf16>) {
  // CHECK: blu.add %{{.*}}, %{{.*}} : tensor<4x8xf32>
  %0 = blu.add %x, %x : tensor<4x8xf32>
  // CHECK: blu.mul %{{.*}}, %{{.*}} : tensor<4x8xf32>
  %1 = blu.mul %0, %x : tensor<4x8xf32>
  // CHECK: blu.bias_add %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<8xf32>
  %2 = blu.bias_add %1, %b : tensor<4x8xf32>, tensor<8xf32>
  // CHECK: blu.gelu_tanh %{{.*}} : tensor<4x8xf32>
  %3 = blu.gelu_tanh %2 : tensor<4x8xf32>
  // CHECK: blu.gelu_tanh_grad %{{.*}}, %{{.*}} : tensor<4x8xf32>
  %4 = blu.gelu_tanh_grad %3, %2 : tensor<4x8xf32>
  // CHECK: blu.layernorm %{{.*}}, %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>
  %y, %mean, %rstd = blu.layernorm %4, %b, %b {epsilon = 1.0e-5 : f32} : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>
  // CHECK: blu.matmul %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %5 = blu.matmul %y, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  // CHECK: blu.bias_add %{{.*}}, %{{.*}} : tensor<2x4x8xbf16>, tensor<8xbf16>
  %6 = blu.bias_add %h, %hb : tensor<2x4x8xbf16>, tensor<8xbf16>
  return %4, %5, %6 : tensor<4x8xf32>, tensor<4x16xf32>, tensor<2x4x8xbf16>
}

// CHECK-LABEL: func.func @fused_region
func.func @fused_region(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  // CHECK: blu.fused(%{{.*}}, %{{.*}}) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: ^bb0(%{{.*}}: tensor<4x8xf32>, %{{.*}}: tensor<8xf32>):
  // CHECK: blu.yield %{{.*}} : tensor<4x8xf32>
  %0 = blu.fused(%x, %b) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>, %c: tensor<8xf32>):
    %1 = blu.bias_add %a, %c : tensor<4x8xf32>, tensor<8xf32>
    %2 = blu.gelu_tanh %1 : tensor<4x8xf32>
    blu.yield %2 : tensor<4x8xf32>
  }
  return %0 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @transposed_matmul
func.func @transposed_matmul(%dy: tensor<4x16xf32>, %x: tensor<4x8xf32>) -> tensor<8x16xf32> {
  // dW = x^T dy
  // CHECK: blu.matmul %{{.*}}, %{{.*}} {transpose_lhs = true} : tensor<4x8xf32>, tensor<4x16xf32> -> tensor<8x16xf32>
  %0 = blu.matmul %x, %dy {transpose_lhs = true} : tensor<4x8xf32>, tensor<4x16xf32> -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// The views and sync point of a captured step (Note [Capture import]); blu.kernel on index tensors.
// CHECK-LABEL: func.func @capture_ops
func.func @capture_ops(%buf: tensor<64xf32>, %idx: tensor<6xi64>) -> (tensor<64xf32>, tensor<2x3xi64>) {
  // CHECK: blu.reshape %{{.*}} : tensor<64xf32> -> tensor<8x8xf32>
  %0 = blu.reshape %buf : tensor<64xf32> -> tensor<8x8xf32>
  // CHECK: blu.view %{{.*}} {offset = 3 : i64, strides = array<i64: 8, 0>} : tensor<8x8xf32> -> tensor<4x2xf32>
  %1 = blu.view %0 {offset = 3 : i64, strides = array<i64: 8, 0>} : tensor<8x8xf32> -> tensor<4x2xf32>
  // CHECK: blu.insert_view %{{.*}} into %{{.*}} {offset = 8 : i64, strides = array<i64: 2, 1>} : tensor<4x2xf32> into tensor<64xf32>
  %2 = blu.insert_view %1 into %buf {offset = 8 : i64, strides = array<i64: 2, 1>} : tensor<4x2xf32> into tensor<64xf32>
  // CHECK: blu.host_read %{{.*}} : tensor<64xf32>
  blu.host_read %2 : tensor<64xf32>
  // CHECK: blu.kernel "copy_"(%{{.*}}) : (tensor<6xi64>) -> tensor<2x3xi64>
  %3 = blu.kernel "copy_"(%idx) : (tensor<6xi64>) -> tensor<2x3xi64>
  return %2, %3 : tensor<64xf32>, tensor<2x3xi64>
}
