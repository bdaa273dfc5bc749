// blu-fuse-elementwise{multi-output=1} (BLU_PLAN_MULTI_OUTPUT=1 for blu-plan): a member whose value
// is read after the group's last op becomes an extra result of the group instead of a boundary
// (Note [Fusion cost rule] in blucomp/src/fuse_elementwise.cpp). Without the option the same input
// keeps its single-output groups.
// RUN: blu-opt %s -split-input-file --pass-pipeline="builtin.module(func.func(blu-fuse-elementwise{multi-output=1}))" | FileCheck %s
// RUN: blu-opt %s -split-input-file --pass-pipeline="builtin.module(func.func(blu-fuse-elementwise))" | FileCheck %s --check-prefix=SINGLE
// RUN: env BLU_PLAN_MULTI_OUTPUT=1 blu-opt %s -split-input-file --blu-fuse-pipeline | FileCheck %s --check-prefix=ENV

// A SwiGLU forward whose sigmoid denominator the backward reads after the down projection: one
// group, its results the SwiGLU output first, then the saved value.
// CHECK-LABEL: func.func @saved_for_backward
// CHECK-NEXT: %[[F:.*]]:2 = blu.fused(%arg0, %arg1) : (tensor<64x176xf32>, tensor<64x176xf32>) -> (tensor<64x176xf32>, tensor<64x176xf32>) {
// CHECK:   %[[D:.*]] = blu.ew "add_scalar"
// CHECK-NEXT:   %[[Q:.*]] = blu.ew "div"
// CHECK-NEXT:   %[[M:.*]] = blu.mul %[[Q]]
// CHECK-NEXT:   blu.yield %[[M]], %[[D]] : tensor<64x176xf32>, tensor<64x176xf32>
// CHECK: blu.matmul %[[F]]#0
// CHECK-NEXT: blu.mul %arg3, %[[F]]#1
// SINGLE-LABEL: func.func @saved_for_backward
// SINGLE-COUNT-2: blu.fused
// SINGLE-NOT: blu.fused
// SINGLE: return
// ENV-LABEL: func.func @saved_for_backward
// ENV-COUNT-1: blu.fused
// ENV-NOT: blu.fused
func.func @saved_for_backward(%g: tensor<64x176xf32>, %u: tensor<64x176xf32>, %w: tensor<176x32xf32>, %dy: tensor<64x176xf32>) -> (tensor<64x32xf32>, tensor<64x176xf32>) {
  %0 = blu.ew "neg"(%g) : tensor<64x176xf32>
  %1 = blu.ew "exp"(%0) : tensor<64x176xf32>
  %2 = blu.ew "add_scalar"(%1) {alpha = 1.0 : f64} : tensor<64x176xf32>
  %3 = blu.ew "div"(%g, %2) : tensor<64x176xf32>
  %4 = blu.mul %3, %u : tensor<64x176xf32>
  %5 = blu.matmul %4, %w : tensor<64x176xf32>, tensor<176x32xf32> -> tensor<64x32xf32>
  %6 = blu.mul %dy, %2 : tensor<64x176xf32>
  return %5, %6 : tensor<64x32xf32>, tensor<64x176xf32>
}

// -----

// A value read by another op *before* the group's last op stays a boundary (the fused op sits
// at the root: that reader would come before its producer). Here %0 feeds the GELU (root of the
// earlier group) and the product (the later op): it joins the GELU's group as a second result,
// and the product reads it.
// CHECK-LABEL: func.func @shared_value_second_result
// CHECK-NEXT: %[[F:.*]]:2 = blu.fused(%arg0, %arg1)
// CHECK:   blu.yield %{{.*}}, %{{.*}} : tensor<8x16xf32>, tensor<8x16xf32>
// CHECK: %[[P:.*]] = blu.mul %[[F]]#1, %arg2
// CHECK-NEXT: return %[[F]]#0, %[[P]]
// SINGLE-LABEL: func.func @shared_value_second_result
// SINGLE-NOT: blu.fused
// SINGLE: return
// ENV-LABEL: func.func @shared_value_second_result
func.func @shared_value_second_result(%x: tensor<8x16xf32>, %b: tensor<16xf32>, %s: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %0 = blu.bias_add %x, %b : tensor<8x16xf32>, tensor<16xf32>
  %1 = blu.gelu_tanh %0 : tensor<8x16xf32>
  %2 = blu.mul %0, %s : tensor<8x16xf32>
  return %1, %2 : tensor<8x16xf32>, tensor<8x16xf32>
}

// -----

// The residual stream h = x + a is read by the layernorm before the later add: not an extra
// result of that add's group (the layernorm comes before the group's root), so h stays its own op.
// CHECK-LABEL: func.func @reader_before_the_root
// SINGLE-LABEL: func.func @reader_before_the_root
// CHECK: %[[H:.*]] = blu.add %arg0, %arg1 : tensor<8x16xf32>
// CHECK-NEXT: blu.layernorm %[[H]]
// CHECK-NEXT: %[[OUT:.*]] = blu.fused(%{{.*}}, %[[H]]) : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
func.func @reader_before_the_root(%x: tensor<8x16xf32>, %a: tensor<8x16xf32>, %w: tensor<16xf32>) -> tensor<8x16xf32> {
  %h = blu.add %x, %a : tensor<8x16xf32>
  %y, %mean, %rstd = blu.layernorm %h, %w, %w : tensor<8x16xf32>, tensor<16xf32>, tensor<16xf32> -> tensor<8x16xf32>, tensor<8xf32>, tensor<8xf32>
  %g = blu.gelu_tanh %y : tensor<8x16xf32>
  %out = blu.add %g, %h : tensor<8x16xf32>
  return %out : tensor<8x16xf32>
}

// -----

// A value of another shape than the root's (a [16] row feeding a bias add, read again later)
// cannot be an extra result (one iteration space per group): it stays its own op, an input.
// CHECK-LABEL: func.func @other_shape_is_not_a_result
// CHECK: blu.fused
// CHECK-SAME: -> tensor<8x16xf32>
func.func @other_shape_is_not_a_result(%x: tensor<8x16xf32>, %b: tensor<16xf32>) -> (tensor<8x16xf32>, tensor<16xf32>) {
  %c = blu.ew "neg"(%b) : tensor<16xf32>
  %0 = blu.bias_add %x, %c : tensor<8x16xf32>, tensor<16xf32>
  %1 = blu.gelu_tanh %0 : tensor<8x16xf32>
  %2 = blu.ew "exp"(%c) : tensor<16xf32>
  return %1, %2 : tensor<8x16xf32>, tensor<16xf32>
}

// -----

// A broadcast of a product of a broadcast (review of d1548d2): pulling the inner product into the
// outer group would leave [16, 1] as an input no index map reaches from [2, 4, 16, 8] (the verifier
// then failed the whole step), so that group is grown again without going through its broadcasts.
// CHECK-LABEL: func.func @broadcast_of_a_broadcast_product
// CHECK: %[[T:.*]] = blu.fused(%arg1, %arg0) : (tensor<16x1xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
// CHECK: blu.fused(%[[T]], %arg2) : (tensor<16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
func.func @broadcast_of_a_broadcast_product(%a: tensor<16x8xf32>, %r: tensor<16x1xf32>, %q: tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32> {
  %0 = blu.broadcast %r : tensor<16x1xf32> to tensor<16x8xf32>
  %1 = blu.mul %a, %0 : tensor<16x8xf32>
  %2 = blu.broadcast %1 : tensor<16x8xf32> to tensor<2x4x16x8xf32>
  %3 = blu.mul %q, %2 : tensor<2x4x16x8xf32>
  return %3 : tensor<2x4x16x8xf32>
}

// -----

// Note [Sibling groups]: d_up = dh * s and d_gate = dh * u * s' read dh and g; neither reads the
// other, and both are read only by the GEMMs after them: one group, d_gate first (the later root),
// then d_up. Without multi-output they stay two groups.
// CHECK-LABEL: func.func @siblings_merge
// CHECK-NEXT: %[[F:.*]]:2 = blu.fused(%arg1, %arg0, %arg2)
// CHECK: blu.yield
// CHECK-NEXT: }
// CHECK-NEXT: blu.matmul %[[F]]#1, %arg3
// CHECK-NEXT: blu.matmul %[[F]]#0, %arg3
// SINGLE-LABEL: func.func @siblings_merge
// SINGLE-COUNT-2: blu.fused
// SINGLE-NOT: blu.fused
// SINGLE: return
func.func @siblings_merge(%dh: tensor<8x16xf32>, %g: tensor<8x16xf32>, %u: tensor<8x16xf32>, %w: tensor<16x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>) {
  %0 = blu.ew "exp"(%g) : tensor<8x16xf32>
  %1 = blu.mul %dh, %0 : tensor<8x16xf32>
  %2 = blu.ew "neg"(%g) : tensor<8x16xf32>
  %3 = blu.mul %dh, %2 : tensor<8x16xf32>
  %4 = blu.mul %3, %u : tensor<8x16xf32>
  %5 = blu.matmul %1, %w : tensor<8x16xf32>, tensor<16x4xf32> -> tensor<8x4xf32>
  %6 = blu.matmul %4, %w : tensor<8x16xf32>, tensor<16x4xf32> -> tensor<8x4xf32>
  return %5, %6 : tensor<8x4xf32>, tensor<8x4xf32>
}
