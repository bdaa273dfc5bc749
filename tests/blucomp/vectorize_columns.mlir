// Note [Vectorized group kernels]: blu-vectorize-columns makes the group loop take W columns per
// iteration, W-wide vector loads and stores at column j = jv * W, a per-row statistic ([rows, 1])
// one scalar load shared by the lanes, the arithmetic once per lane; blu-align-vector-access then
// lets the NVPTX backend emit ld/st.global.v4 (16 bytes: 4 f32, or 8 bf16 as 4 b32). A loop whose
// columns W does not divide stays scalar and its function gets no blu.vector_width.
// RUN: blu-opt %s --blu-to-nvvm="vector-width=4" --mlir-disable-threading --mlir-print-ir-after=blu-vectorize-columns 2>&1 >/dev/null | FileCheck %s
// RUN: blu-opt %s --blu-to-nvvm="vector-width=4" | FileCheck %s --check-prefix=PTX
// RUN: blu-opt %s --blu-to-nvvm="vector-width=8" | FileCheck %s --check-prefix=PTX8
// Scalar as before without the option (what blu-to-nvvm does by default):
// RUN: blu-opt %s --blu-to-nvvm | FileCheck %s --check-prefix=SCALAR

// CHECK-LABEL: func.func @rows_and_trailing
// CHECK-SAME: attributes {blu.vector_width = 4 : i64}
// CHECK: scf.parallel (%[[I:.*]], %[[JV:.*]]) = (%{{.*}}, %{{.*}}) to (%c32, %c16)
// CHECK: %[[J:.*]] = arith.muli %[[JV]], %c4
// CHECK: %[[R:.*]] = memref.load %{{.*}}[%[[I]], %c0] : memref<32x1xf32>
// CHECK: vector.load %{{.*}}[%[[I]], %[[J]]] : memref<32x64xf32>, vector<4xf32>
// CHECK-COUNT-4: arith.mulf %{{.*}}, %[[R]] : f32
// CHECK: vector.store %{{.*}}, %{{.*}}[%[[I]], %[[J]]] : memref<32x64xf32>, vector<4xf32>
// The trailing-dims broadcast: row mod 16 of the [16, 8] table, the column vectorized.
// CHECK: scf.parallel (%[[I2:.*]], %[[JV2:.*]]) = (%{{.*}}, %{{.*}}) to (%c128, %c2)
// CHECK: %[[J2:.*]] = arith.muli %[[JV2]], %c4
// CHECK: %[[ROW:.*]] = affine.apply affine_map<(d0) -> (d0 mod 16)>(%[[I2]])
// CHECK: vector.load %{{.*}}[%[[ROW]], %[[J2]]] : memref<16x8xf32>, vector<4xf32>
func.func @rows_and_trailing(%x: tensor<2x16x64xf32>, %r: tensor<2x16x1xf32>, %q: tensor<2x4x16x8xf32>, %c: tensor<16x8xf32>) -> (tensor<2x16x64xf32>, tensor<2x4x16x8xf32>) {
  %0 = blu.broadcast %r : tensor<2x16x1xf32> to tensor<2x16x64xf32>
  %1 = blu.mul %x, %0 : tensor<2x16x64xf32>
  %2 = blu.broadcast %c : tensor<16x8xf32> to tensor<2x4x16x8xf32>
  %3 = blu.mul %q, %2 : tensor<2x4x16x8xf32>
  return %1, %3 : tensor<2x16x64xf32>, tensor<2x4x16x8xf32>
}

// CHECK-LABEL: func.func @bf16_gelu_grad
// CHECK-SAME: attributes {blu.vector_width = 4 : i64}
// CHECK: vector.load %{{.*}} : memref<64x96xbf16>, vector<4xbf16>
func.func @bf16_gelu_grad(%dy: tensor<64x96xbf16>, %x: tensor<64x96xbf16>) -> tensor<64x96xbf16> {
  %0 = blu.gelu_tanh_grad %dy, %x : tensor<64x96xbf16>
  return %0 : tensor<64x96xbf16>
}

// A rank-1 group is one row of 768 columns (a unit row dimension, not a 1-D loop: the review of
// 893c5e8 found a canonicalization before the pass folding it into a loop the tiling took for rows).
// CHECK-LABEL: func.func @one_row
// CHECK-SAME: attributes {blu.vector_width = 4 : i64}
// CHECK: scf.parallel (%{{.*}}, %{{.*}}) = (%{{.*}}, %{{.*}}) to (%c1, %c192)
func.func @one_row(%a: tensor<768xf32>, %b: tensor<768xf32>) -> tensor<768xf32> {
  %0 = blu.mul %a, %b : tensor<768xf32>
  return %0 : tensor<768xf32>
}

// 50 columns: not a multiple of 4, scalar.
// CHECK-LABEL: func.func @odd
// CHECK-NOT: blu.vector_width
// CHECK-NOT: vector.load
// CHECK: memref.load
func.func @odd(%a: tensor<50xf32>, %b: tensor<50xf32>) -> tensor<50xf32> {
  %0 = blu.mul %a, %b : tensor<50xf32>
  return %0 : tensor<50xf32>
}

// PTX: .entry rows_and_trailing_kernel(
// PTX: ld.global.f32
// PTX: ld.global.v4.f32
// PTX: st.global.v4.f32
// PTX: .entry bf16_gelu_grad_kernel(
// PTX: .entry odd_kernel(
// PTX-NOT: .v4
// PTX: st.global.f32
// PTX8: .entry bf16_gelu_grad_kernel(
// PTX8: ld.global.v4.b32
// PTX8: ld.global.v4.b32
// PTX8: st.global.v4.b32
// SCALAR-NOT: .v4.
