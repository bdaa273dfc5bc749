// blu-plan-memory (Note [Arena plan] in blucomp/src/plan_memory.cpp): offsets from live ranges,
// the planned peak against the one-allocation-each total and the live-size lower bound.
// RUN: blu-opt %s -split-input-file --blu-plan-memory | FileCheck %s
// RUN: not blu-opt %s -split-input-file --blu-plan-memory=alignment=24 2>&1 | FileCheck %s --check-prefix=ALIGN

// A chain of four 1 KiB values: each lives from its op to the next one, so two slots alternate.
// %0 [0,1] at 0; %1 [1,2] at 1024; %2 [2,3] reuses 0 (%0 is dead); %3 [3,return] reuses 1024.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: blu.arena_bytes = 2048 : i64, blu.arena_lower_bound_bytes = 2048 : i64, blu.unplanned_bytes = 4096 : i64
// CHECK: blu.bias_add {{.*}}blu.arena_offsets = array<i64: 0>
// CHECK: blu.gelu_tanh {{.*}}blu.arena_offsets = array<i64: 1024>
// CHECK: blu.add {{.*}}blu.arena_offsets = array<i64: 0>
// CHECK: blu.gelu_tanh {{.*}}blu.arena_offsets = array<i64: 1024>
func.func @chain(%x: tensor<4x64xf32>, %b: tensor<64xf32>) -> tensor<4x64xf32> {
  %0 = blu.bias_add %x, %b : tensor<4x64xf32>, tensor<64xf32>
  %1 = blu.gelu_tanh %0 : tensor<4x64xf32>
  %2 = blu.add %1, %x : tensor<4x64xf32>
  %3 = blu.gelu_tanh %2 : tensor<4x64xf32>
  return %3 : tensor<4x64xf32>
}

// -----

// Several sizes and a multi-result op. Live ranges (op index): %0 [0,1], y [1,2], mean and rstd
// [1,1] (unused), %1 [2,3], %m [3,4], %2 [4,return]; every value rounds up to 256 bytes. Largest
// first (%m, %2 of 256 bytes), then the 128-byte ones by definition (%0, y, %1), then mean, rstd:
// %m 0, %2 256, %0 0, y 256 (overlaps %0), %1 512 (overlaps y and %m), mean 512, rstd 768 (both
// overlap %0, y and each other). Peak 1024 = the four values live at the layernorm (the bound);
// seven separate allocations would take 1792.
// CHECK-LABEL: func.func @block
// CHECK-SAME: blu.arena_bytes = 1024 : i64, blu.arena_lower_bound_bytes = 1024 : i64, blu.unplanned_bytes = 1792 : i64
// CHECK: blu.add {{.*}}blu.arena_offsets = array<i64: 0>
// CHECK: blu.layernorm {{.*}}blu.arena_offsets = array<i64: 256, 512, 768>
// CHECK: blu.gelu_tanh {{.*}}blu.arena_offsets = array<i64: 512>
// CHECK: blu.matmul {{.*}}blu.arena_offsets = array<i64: 0>
// CHECK: blu.mul {{.*}}blu.arena_offsets = array<i64: 256>
func.func @block(%x: tensor<4x8xf32>, %r: tensor<4x8xf32>, %g: tensor<8xf32>, %w: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %0 = blu.add %x, %r : tensor<4x8xf32>
  %y, %mean, %rstd = blu.layernorm %0, %g, %g {epsilon = 1.0e-5 : f32} : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>
  %1 = blu.gelu_tanh %y : tensor<4x8xf32>
  %m = blu.matmul %1, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %2 = blu.mul %m, %m : tensor<4x16xf32>
  return %2 : tensor<4x16xf32>
}

// ALIGN: error: blu-plan-memory: alignment 24 is not a power of two
