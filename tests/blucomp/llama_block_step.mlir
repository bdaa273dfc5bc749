// A training step of blutensor's Llama-style block (Note [Llama block]: RMSNorm, rotary, SwiGLU;
// no kernel of its own for any of them), captured by capture_llama_step and imported: blutensor's
// unary/binary calls become blu.ew (Note [Generic elementwise]) and fuse like any blu op, with no
// code for Llama in blucomp: 136 launches -> 120 (the SiLU backward's nine calls are one group,
// RMSNorm's mean scale + eps + rsqrt another). Not fused yet: the broadcast products (RMSNorm's
// x * rstd, rotary's cos/sin) and the reductions.
// RUN: capture_llama_step %t/llama.json | FileCheck %s --check-prefix=CAPTURE
// RUN: blu-import %t/llama.json -o %t/llama.mlir
// RUN: blu-opt %t/llama.mlir --blu-count-kernels | FileCheck %s --check-prefix=BEFORE
// RUN: blu-opt %t/llama.mlir --blu-fuse-pipeline --blu-count-kernels | FileCheck %s --check-prefix=AFTER

// CAPTURE: llama block step (B=2 T=16 C=64 heads=4 hidden=176): 137 nodes (136 launches, 1 host reads)
// CAPTURE: unary:kExp x1
// BEFORE: blu.kernels = 136
// AFTER: blu.kernels = 120
// AFTER: blu.fused
// AFTER-SAME: blu.nodes = array<i64: [[#]], [[#]], [[#]]>
// AFTER-NEXT: ^bb0(
// AFTER-NEXT: blu.ew "mul_scalar"
// AFTER-NEXT: blu.ew "add_scalar"
// AFTER-NEXT: blu.ew "pow_scalar"{{.*}}alpha = -5.000000e-01
// AFTER: blu.ew "neg"
// AFTER-NEXT: blu.ew "exp"
