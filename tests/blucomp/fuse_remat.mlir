// blu-fuse-elementwise{remat=1} (BLU_PLAN_REMAT=1 for blu-plan): a value read past the next GEMM is
// recomputed there from its chain's inputs when that reads no more full-size tensors (Note
// [Rematerialization] in blucomp/src/fuse_elementwise.cpp); the forward group then writes only its
// own result. Without the option, the same input keeps the saved value (SINGLE).
// RUN: blu-opt %s -split-input-file --pass-pipeline="builtin.module(func.func(blu-fuse-elementwise{remat=1}))" | FileCheck %s
// RUN: env BLU_PLAN_REMAT=1 blu-opt %s -split-input-file --blu-fuse-pipeline | FileCheck %s --check-prefix=ENV
// RUN: blu-opt %s -split-input-file --pass-pipeline="builtin.module(func.func(blu-fuse-elementwise))" | FileCheck %s --check-prefix=SINGLE

// The SwiGLU: the backward reads 1 + exp(-g) and silu(g); both are recomputed from g, which the
// backward group takes as its input instead; the clones carry blu.remat and no blu.node.
// CHECK-LABEL: func.func @swiglu_backward_recomputes
// CHECK-NEXT: %[[F:.*]] = blu.fused(%arg0, %arg1) {blu.nodes = array<i64: 0, 1, 2, 3, 4>} : (tensor<64x176xf32>, tensor<64x176xf32>) -> tensor<64x176xf32> {
// CHECK: blu.yield
// CHECK: blu.matmul %[[F]], %arg2
// CHECK-NEXT: blu.fused(%arg0, %arg3) {blu.nodes = array<i64: 6, 7>} : (tensor<64x176xf32>, tensor<64x176xf32>) -> tensor<64x176xf32> {
// CHECK: blu.ew "exp"(%{{.*}}) {blu.remat} : tensor<64x176xf32>
// CHECK: blu.ew "div"(%arg4, %{{.*}}) {blu.remat} : tensor<64x176xf32>
// CHECK: blu.yield
// ENV-LABEL: func.func @swiglu_backward_recomputes
// ENV-COUNT-2: blu.fused
// ENV-NOT: blu.fused
// SINGLE-LABEL: func.func @swiglu_backward_recomputes
// SINGLE-COUNT-2: blu.fused
// SINGLE-NOT: blu.fused
func.func @swiglu_backward_recomputes(%g: tensor<64x176xf32>, %u: tensor<64x176xf32>, %w: tensor<176x32xf32>, %dy: tensor<64x176xf32>) -> (tensor<64x32xf32>, tensor<64x176xf32>) attributes {blu.input_buffers = [0, 1, 2, 3]} {
  %0 = blu.ew "neg"(%g) {blu.node = 0} : tensor<64x176xf32>
  %1 = blu.ew "exp"(%0) {blu.node = 1} : tensor<64x176xf32>
  %2 = blu.ew "add_scalar"(%1) {alpha = 1.0 : f64, blu.node = 2} : tensor<64x176xf32>
  %3 = blu.ew "div"(%g, %2) {blu.node = 3} : tensor<64x176xf32>
  %4 = blu.mul %3, %u {blu.node = 4} : tensor<64x176xf32>
  %5 = blu.matmul %4, %w {blu.node = 5} : tensor<64x176xf32>, tensor<176x32xf32> -> tensor<64x32xf32>
  %6 = blu.mul %dy, %2 {blu.node = 6} : tensor<64x176xf32>
  %7 = blu.mul %6, %3 {blu.node = 7} : tensor<64x176xf32>
  return %5, %7 : tensor<64x32xf32>, tensor<64x176xf32>
}

// -----

// Not recomputed: the chain reads two full-size tensors (a + b), more than reading the sum.
// CHECK-LABEL: func.func @two_full_size_inputs
// CHECK: %[[S:.*]] = blu.add %arg0, %arg1
// CHECK: blu.mul %arg3, %[[S]]
// CHECK-NOT: blu.remat
func.func @two_full_size_inputs(%a: tensor<8x16xf32>, %b: tensor<8x16xf32>, %w: tensor<16x4xf32>, %dy: tensor<8x16xf32>) -> (tensor<8x4xf32>, tensor<8x16xf32>) attributes {blu.input_buffers = [0, 1, 2, 3]} {
  %0 = blu.add %a, %b : tensor<8x16xf32>
  %1 = blu.matmul %0, %w : tensor<8x16xf32>, tensor<16x4xf32> -> tensor<8x4xf32>
  %2 = blu.mul %dy, %0 : tensor<8x16xf32>
  return %1, %2 : tensor<8x4xf32>, tensor<8x16xf32>
}

// -----

// Not recomputed: a later reader is a GEMM (the value stays materialized anyway).
// CHECK-LABEL: func.func @gemm_reads_it_later
// CHECK-NOT: blu.remat
// CHECK: return
func.func @gemm_reads_it_later(%g: tensor<8x16xf32>, %w: tensor<16x4xf32>, %dy: tensor<8x16xf32>) -> (tensor<8x4xf32>, tensor<8x16xf32>, tensor<8x4xf32>) attributes {blu.input_buffers = [0, 1, 2]} {
  %0 = blu.ew "exp"(%g) : tensor<8x16xf32>
  %1 = blu.matmul %0, %w : tensor<8x16xf32>, tensor<16x4xf32> -> tensor<8x4xf32>
  %2 = blu.mul %dy, %0 : tensor<8x16xf32>
  %3 = blu.matmul %0, %w : tensor<8x16xf32>, tensor<16x4xf32> -> tensor<8x4xf32>
  return %1, %2, %3 : tensor<8x4xf32>, tensor<8x16xf32>, tensor<8x4xf32>
}

// -----

// Not recomputed: the leaf's buffer (0) is written again before the reader (an in-place update:
// the runtime would bind the new contents).
// CHECK-LABEL: func.func @leaf_buffer_rewritten
// CHECK-NOT: blu.remat
// CHECK: return
func.func @leaf_buffer_rewritten(%g: tensor<8x16xf32>, %w: tensor<16x4xf32>, %dy: tensor<8x16xf32>) -> (tensor<8x4xf32>, tensor<8x16xf32>, tensor<8x16xf32>) attributes {blu.input_buffers = [0, 1, 2]} {
  %0 = blu.ew "exp"(%g) : tensor<8x16xf32>
  %1 = blu.matmul %0, %w : tensor<8x16xf32>, tensor<16x4xf32> -> tensor<8x4xf32>
  %2 = blu.ew "neg"(%dy) {blu.result_buffers = array<i64: 0>} : tensor<8x16xf32>
  %3 = blu.mul %dy, %0 : tensor<8x16xf32>
  return %1, %3, %2 : tensor<8x4xf32>, tensor<8x16xf32>, tensor<8x16xf32>
}
