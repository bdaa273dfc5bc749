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
// Note [Broadcast operands] and multi-output groups (Note [Fusion cost rule]), each switched on by
// its environment variable until measured on the device: 120 -> 97 with the broadcast products,
// -> 89 with multi-output groups as well.
// RUN: env BLU_PLAN_BROADCAST=1 blu-import %t/llama.json -o %t/llama_b.mlir
// RUN: blu-opt %t/llama_b.mlir --blu-count-kernels | FileCheck %s --check-prefix=BEFORE
// RUN: blu-opt %t/llama_b.mlir --blu-fuse-pipeline --blu-count-kernels | FileCheck %s --check-prefix=BCAST
// RUN: env BLU_PLAN_MULTI_OUTPUT=1 blu-opt %t/llama_b.mlir --blu-fuse-pipeline --blu-count-kernels | FileCheck %s --check-prefix=BOTH
// RUN: env BLU_PLAN_MULTI_OUTPUT=1 BLU_PLAN_REMAT=1 BLU_PLAN_VIEWS=1 blu-opt %t/llama_b.mlir --blu-fuse-pipeline --blu-count-kernels | FileCheck %s --check-prefix=ALL
// RUN: blu-opt %t/llama_b.mlir --blu-fuse-pipeline | FileCheck %s --check-prefix=BCASTIR
// RUN: env BLU_PLAN_BROADCAST=1 BLU_PLAN_MULTI_OUTPUT=0 BLU_PLAN_REMAT=0 BLU_PLAN_VIEWS=0 blu-plan %t/llama.json -o %t/plan_b.json && FileCheck %s --check-prefix=PLANB < %t/plan_b.json
// Note [blu-plan defaults]: broadcast, multi-output and views on unless turned off.
// RUN: env -u BLU_PLAN_BROADCAST -u BLU_PLAN_MULTI_OUTPUT -u BLU_PLAN_REMAT -u BLU_PLAN_VIEWS blu-plan %t/llama.json -o %t/plan_all.json && FileCheck %s --check-prefix=PLANALL < %t/plan_all.json

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

// BCAST: blu.kernels = 97
// With multi-output the SwiGLU backward's two groups (d_up, d_gate: both read dh and the gate)
// are one (Note [Sibling groups]); with rematerialization and strided operands as well, the
// rotary groups read q and k in place and the backward recomputes the SwiGLU's saved values.
// BOTH: blu.kernels = 84
// ALL: blu.kernels = 84
// RMSNorm's x * rstd (one value per row) and * weight, and rotary's tables over batch and heads,
// inside fused groups (never a launch of their own):
// BCASTIR: blu.broadcast %{{.*}} : tensor<2x16x1xf32> to tensor<2x16x64xf32>
// BCASTIR: blu.broadcast %{{.*}} : tensor<16x8xf32> to tensor<2x4x16x8xf32>
// PLANB: "blu.broadcast"
// PLANB: "launches_after": 97
// PLANALL: "launches_after": 84
