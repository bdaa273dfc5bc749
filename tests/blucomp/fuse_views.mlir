// blu-fuse-elementwise{views=1} (BLU_PLAN_VIEWS=1 for blu-plan): a strided read (blu.view) joins its
// consumers' group, the group's input is the whole buffer, and blu-lower-to-linalg reads it through
// the view's offset and strides (Note [Strided operands] in blucomp/src/fuse_elementwise.cpp).
// Without the option the view stays a boundary (SINGLE).
// RUN: blu-opt %s -split-input-file --pass-pipeline="builtin.module(func.func(blu-fuse-elementwise{views=1}))" | FileCheck %s
// RUN: blu-opt %s -split-input-file --pass-pipeline="builtin.module(func.func(blu-fuse-elementwise{views=1},blu-lower-to-linalg))" | FileCheck %s --check-prefix=LINALG
// RUN: blu-opt %s -split-input-file --pass-pipeline="builtin.module(func.func(blu-fuse-elementwise))" | FileCheck %s --check-prefix=SINGLE
// RUN: env BLU_PLAN_VIEWS=1 blu-opt %s -split-input-file --blu-fuse-pipeline | FileCheck %s --check-prefix=ENV

// The rotary embedding's q2 * sin - q1 * cos on a [B=2, T=3, H=4, D=8] projection read as
// [B, H, T, D/2] halves (offsets 4 and 0): one group over the projection, both views inside.
// CHECK-LABEL: func.func @rotary_half
// CHECK-NEXT: blu.fused(%arg0, %arg1, %arg2) : (tensor<2x3x4x8xf32>, tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<2x4x3x4xf32> {
// CHECK: blu.view %arg3 {offset = 4 : i64, strides = array<i64: 96, 8, 32, 1>}
// CHECK: blu.view %arg3 {offset = 0 : i64, strides = array<i64: 96, 8, 32, 1>}
// CHECK: blu.yield
// CHECK-NOT: blu.view
// LINALG-DAG: #[[V4:.*]] = affine_map<(d0, d1) -> (d1 + (d0 mod 3) * 32 + ((d0 floordiv 3) mod 4) * 8 + (d0 floordiv 12) * 96 + 4)>
// LINALG-DAG: #[[V0:.*]] = affine_map<(d0, d1) -> (d1 + (d0 mod 3) * 32 + ((d0 floordiv 3) mod 4) * 8 + (d0 floordiv 12) * 96)>
// LINALG-LABEL: func.func @rotary_half
// LINALG: tensor.collapse_shape %arg0 {{\[\[}}0, 1, 2, 3]] : tensor<2x3x4x8xf32> into tensor<192xf32>
// LINALG: linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}, #[[V4]], #[[V0]], #{{.*}}]
// LINALG-SAME: ins(%arg1, %arg2, %{{.*}}, %{{.*}} : tensor<3x4xf32>, tensor<3x4xf32>, tensor<192xf32>, tensor<192xf32>)
// LINALG-NOT: linalg.generic
// LINALG: return
// SINGLE-LABEL: func.func @rotary_half
// SINGLE: blu.view
// SINGLE: blu.view
// SINGLE: blu.fused
// ENV-LABEL: func.func @rotary_half
// ENV-COUNT-1: blu.fused
// ENV-NOT: blu.fused
// ENV: return
func.func @rotary_half(%q: tensor<2x3x4x8xf32>, %sin: tensor<3x4xf32>, %cos: tensor<3x4xf32>) -> tensor<2x4x3x4xf32> attributes {blu.input_buffers = [0, 1, 2]} {
  %q2 = blu.view %q {offset = 4 : i64, strides = array<i64: 96, 8, 32, 1>} : tensor<2x3x4x8xf32> -> tensor<2x4x3x4xf32>
  %s = blu.broadcast %sin : tensor<3x4xf32> to tensor<2x4x3x4xf32>
  %a = blu.mul %q2, %s : tensor<2x4x3x4xf32>
  %q1 = blu.view %q {offset = 0 : i64, strides = array<i64: 96, 8, 32, 1>} : tensor<2x3x4x8xf32> -> tensor<2x4x3x4xf32>
  %c = blu.broadcast %cos : tensor<3x4xf32> to tensor<2x4x3x4xf32>
  %b = blu.mul %q1, %c : tensor<2x4x3x4xf32>
  %d = blu.ew "sub"(%b, %a) : tensor<2x4x3x4xf32>
  return %d : tensor<2x4x3x4xf32>
}

// -----

// A view read by something outside the group as well (here the return) stays a boundary (never an
// extra result): the group reads the view's value.
// CHECK-LABEL: func.func @view_read_twice
// CHECK: %[[V:.*]] = blu.view
// CHECK: blu.fused(%[[V]])
// CHECK: return
func.func @view_read_twice(%x: tensor<64xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>) attributes {blu.input_buffers = [0]} {
  %v = blu.view %x {offset = 1 : i64, strides = array<i64: 8, 2>} : tensor<64xf32> -> tensor<8x4xf32>
  %e = blu.ew "exp"(%v) : tensor<8x4xf32>
  %n = blu.ew "neg"(%e) : tensor<8x4xf32>
  return %n, %v : tensor<8x4xf32>, tensor<8x4xf32>
}

// -----

// The source of a view member never joins the group (review of 182c169: y = s + transpose(s)
// pulled s = exp(x) in, and the view then read a value inside the region: the verifier failed the
// whole plan). s heads its own group; the sum reads it directly and through the view.
// CHECK-LABEL: func.func @view_of_a_member_candidate
// CHECK: %[[S:.*]] = blu.ew "exp"(%arg0)
// CHECK-NEXT: blu.fused(%[[S]])
// CHECK: blu.view %arg1
// CHECK: blu.yield
func.func @view_of_a_member_candidate(%x: tensor<4x4xf32>) -> tensor<4x4xf32> attributes {blu.input_buffers = [0]} {
  %s = blu.ew "exp"(%x) : tensor<4x4xf32>
  %t = blu.view %s {offset = 0 : i64, strides = array<i64: 1, 4>} : tensor<4x4xf32> -> tensor<4x4xf32>
  %y = blu.add %s, %t : tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}
