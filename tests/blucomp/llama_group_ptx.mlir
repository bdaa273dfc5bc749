// Note [Fused group kernels]: blu-plan --ptx-dir outlines each fused group of the captured Llama
// step, compiles it with its result as an out-parameter, and says how to launch it (grid, block,
// each kernel parameter as an operand index or -1 for the result); the PTX assembles for sm_90 and
// calls nothing. 3 of the 6 groups compile today; the other three (results of rank 3 with a last
// dimension of 1: RMSNorm's per-row statistics) carry ptx_error: one-shot bufferization computes
// them into a 2-D alloc and expand_shape + memref.copy it into the out-parameter, which
// hoist-static-allocs cannot remove. Registered only when ptxas is found (filecheck.cmake).
// RUN: capture_llama_step %t/llama.json > /dev/null
// RUN: mkdir -p %t/ptx && blu-plan %t/llama.json -o %t/plan.json --ptx-dir %t/ptx
// RUN: FileCheck %s < %t/plan.json
// RUN: for f in %t/ptx/*.ptx; do ptxas -arch=sm_90 "$f" -o "$f.cubin" || exit 1; done
// RUN: cat %t/ptx/*.ptx | FileCheck %s --check-prefix=PTX
// RUN: test $(ls %t/ptx/*.ptx | wc -l) -eq 3

// CHECK: "ptx_error": "the lowered group is not one launch on its arguments"
// CHECK: "block": [
// CHECK-NEXT: 1,
// CHECK-NEXT: 256,
// CHECK: "kernel": "group_2_kernel",
// CHECK: "params": [
// CHECK-NEXT: 0,
// CHECK-NEXT: -1
// CHECK-NEXT: ],
// CHECK-NEXT: "ptx": "group_2_kernel.ptx",
// PTX-NOT: call
