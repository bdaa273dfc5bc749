// blu-fuse-elementwise (run through the blu-fuse-pipeline: canonicalize, CSE, fusion): what is
// fused, what is not, and the cost rule that refuses to recompute a multi-consumer value
// (Note [Fusion cost rule] in blucomp/src/fuse_elementwise.cpp).
// RUN: blu-opt %s -split-input-file --blu-fuse-pipeline | FileCheck %s

// bias -> GELU -> residual add: one group, the three external values are its inputs.
// CHECK-LABEL: func.func @bias_gelu_residual
// CHECK-SAME: (%[[H:.*]]: tensor<4x8x64xf32>, %[[B:.*]]: tensor<64xf32>, %[[R:.*]]: tensor<4x8x64xf32>)
// CHECK-NEXT: %[[F:.*]] = blu.fused(%[[H]], %[[B]], %[[R]]) : (tensor<4x8x64xf32>, tensor<64xf32>, tensor<4x8x64xf32>) -> tensor<4x8x64xf32> {
// CHECK-NEXT: ^bb0(%[[A0:.*]]: tensor<4x8x64xf32>, %[[A1:.*]]: tensor<64xf32>, %[[A2:.*]]: tensor<4x8x64xf32>):
// CHECK-NEXT:   %[[T0:.*]] = blu.bias_add %[[A0]], %[[A1]]
// CHECK-NEXT:   %[[T1:.*]] = blu.gelu_tanh %[[T0]]
// CHECK-NEXT:   %[[T2:.*]] = blu.add %[[T1]], %[[A2]]
// CHECK-NEXT:   blu.yield %[[T2]]
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]
func.func @bias_gelu_residual(%h: tensor<4x8x64xf32>, %b: tensor<64xf32>, %r: tensor<4x8x64xf32>) -> tensor<4x8x64xf32> {
  %0 = blu.bias_add %h, %b : tensor<4x8x64xf32>, tensor<64xf32>
  %1 = blu.gelu_tanh %0 : tensor<4x8x64xf32>
  %2 = blu.add %1, %r : tensor<4x8x64xf32>
  return %2 : tensor<4x8x64xf32>
}

// -----

// The MLP: matmul -> bias+GELU -> matmul -> bias+residual. Matmuls stay outside; each
// elementwise chain between them is one group.
// CHECK-LABEL: func.func @mlp
// CHECK: %[[FC:.*]] = blu.matmul
// CHECK-NEXT: %[[G:.*]] = blu.fused(%[[FC]], %{{.*}}) :
// CHECK: blu.bias_add
// CHECK-NEXT: blu.gelu_tanh
// CHECK-NEXT: blu.yield
// CHECK: %[[PROJ:.*]] = blu.matmul %[[G]]
// CHECK-NEXT: %[[OUT:.*]] = blu.fused(%[[PROJ]], %{{.*}}, %{{.*}}) :
// CHECK: blu.bias_add
// CHECK-NEXT: blu.add
// CHECK-NEXT: blu.yield
// CHECK: return %[[OUT]]
func.func @mlp(%x: tensor<16x32xf32>, %w1: tensor<32x128xf32>, %b1: tensor<128xf32>, %w2: tensor<128x32xf32>, %b2: tensor<32xf32>) -> tensor<16x32xf32> {
  %0 = blu.matmul %x, %w1 : tensor<16x32xf32>, tensor<32x128xf32> -> tensor<16x128xf32>
  %1 = blu.bias_add %0, %b1 : tensor<16x128xf32>, tensor<128xf32>
  %2 = blu.gelu_tanh %1 : tensor<16x128xf32>
  %3 = blu.matmul %2, %w2 : tensor<16x128xf32>, tensor<128x32xf32> -> tensor<16x32xf32>
  %4 = blu.bias_add %3, %b2 : tensor<16x32xf32>, tensor<32xf32>
  %5 = blu.add %4, %x : tensor<16x32xf32>
  return %5 : tensor<16x32xf32>
}

// -----

// Multi-consumer refusal: %0 feeds GELU and the product, which end in different groups (both
// are returned). Fusing %0 into either would recompute it in the other: it stays materialized,
// and no group has two ops, so nothing is wrapped.
// CHECK-LABEL: func.func @shared_value_is_not_recomputed
// CHECK-NOT: blu.fused
// CHECK: %[[T:.*]] = blu.bias_add
// CHECK-NEXT: blu.gelu_tanh %[[T]]
// CHECK-NEXT: blu.mul %[[T]]
// CHECK-NOT: blu.fused
func.func @shared_value_is_not_recomputed(%x: tensor<8x16xf32>, %b: tensor<16xf32>, %s: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %0 = blu.bias_add %x, %b : tensor<8x16xf32>, tensor<16xf32>
  %1 = blu.gelu_tanh %0 : tensor<8x16xf32>
  %2 = blu.mul %0, %s : tensor<8x16xf32>
  return %1, %2 : tensor<8x16xf32>, tensor<8x16xf32>
}

// -----

// The residual stream h = x + a is read by the next layernorm and by the next residual add:
// it is not fused into the later add (a second consumer outside), and the layernorm is a
// boundary. The later GELU -> add chain is still one group.
// CHECK-LABEL: func.func @residual_stream
// CHECK: %[[H:.*]] = blu.add %{{.*}}, %{{.*}} : tensor<8x16xf32>
// CHECK-NEXT: %[[Y:.*]], %{{.*}}, %{{.*}} = blu.layernorm %[[H]]
// CHECK-NEXT: %[[OUT:.*]] = blu.fused(%[[Y]], %[[H]]) :
// CHECK: blu.gelu_tanh
// CHECK-NEXT: blu.add
// CHECK-NEXT: blu.yield
// CHECK: return %[[OUT]]
func.func @residual_stream(%x: tensor<8x16xf32>, %a: tensor<8x16xf32>, %w: tensor<16xf32>) -> tensor<8x16xf32> {
  %h = blu.add %x, %a : tensor<8x16xf32>
  %y, %mean, %rstd = blu.layernorm %h, %w, %w : tensor<8x16xf32>, tensor<16xf32>, tensor<16xf32> -> tensor<8x16xf32>, tensor<8xf32>, tensor<8xf32>
  %g = blu.gelu_tanh %y : tensor<8x16xf32>
  %out = blu.add %g, %h : tensor<8x16xf32>
  return %out : tensor<8x16xf32>
}

// -----

// A value with several consumers that all end in one group is fused (no recomputation: it is
// computed once inside the kernel). The GELU backward: dx = gelu_grad(dy, u) with u = x + b
// also feeding a second branch joined by the final add.
// CHECK-LABEL: func.func @shared_value_inside_one_group
// CHECK-NEXT: %[[F:.*]] = blu.fused
// CHECK: blu.bias_add
// CHECK-NEXT: blu.gelu_tanh_grad
// CHECK-NEXT: blu.mul
// CHECK-NEXT: blu.add
// CHECK-NEXT: blu.yield
// CHECK: return %[[F]]
func.func @shared_value_inside_one_group(%dy: tensor<8x16xf32>, %x: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<8x16xf32> {
  %u = blu.bias_add %x, %b : tensor<8x16xf32>, tensor<16xf32>
  %dx = blu.gelu_tanh_grad %dy, %u : tensor<8x16xf32>
  %p = blu.mul %u, %dy : tensor<8x16xf32>
  %out = blu.add %dx, %p : tensor<8x16xf32>
  return %out : tensor<8x16xf32>
}

// -----

// CSE runs first: two identical GELUs of one value become one, then fuse with their consumer.
// CHECK-LABEL: func.func @cse_then_fuse
// CHECK: blu.fused
// CHECK-COUNT-1: blu.gelu_tanh
// CHECK-NOT: blu.gelu_tanh
// CHECK: blu.add
func.func @cse_then_fuse(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = blu.gelu_tanh %x : tensor<8x16xf32>
  %1 = blu.gelu_tanh %x : tensor<8x16xf32>
  %2 = blu.add %0, %1 : tensor<8x16xf32>
  return %2 : tensor<8x16xf32>
}
