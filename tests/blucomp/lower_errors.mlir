// Ops without a lowering yet fail blu-lower-to-linalg with a clear error (no silent skip).
// RUN: blu-opt %s -split-input-file -verify-diagnostics --blu-lower-to-linalg

func.func @matmul_not_lowered(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{'blu.matmul' op has no lowering to linalg yet (blu.matmul becomes a blublas call}}
  %0 = blu.matmul %a, %b : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

func.func @layernorm_not_lowered(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'blu.layernorm' op has no lowering to linalg yet}}
  %y, %m, %r = blu.layernorm %x, %w, %w : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>
  return %y : tensor<4x8xf32>
}
