// Note [Fused group kernels]: blu-plan --ptx-dir outlines each fused group of the captured Llama
// step, compiles it with its result as an out-parameter, and says how to launch it (grid, block,
// each kernel parameter as an operand index or -1 for the result); the PTX assembles for sm_90 and
// calls nothing. 3 of the 6 groups compile today; the others carry ptx_error (sqrt needs libdevice
// in convert-gpu-to-nvvm; two do not lower to one launch on their arguments yet). Registered only
// when ptxas is found (filecheck.cmake).
// RUN: capture_llama_step %t/llama.json > /dev/null
// RUN: mkdir -p %t/ptx && blu-plan %t/llama.json -o %t/plan.json --ptx-dir %t/ptx
// RUN: FileCheck %s < %t/plan.json
// RUN: for f in %t/ptx/*.ptx; do ptxas -arch=sm_90 "$f" -o "$f.cubin" || exit 1; done
// RUN: cat %t/ptx/*.ptx | FileCheck %s --check-prefix=PTX
// RUN: test $(ls %t/ptx/*.ptx | wc -l) -eq 3

// CHECK: "ptx_error": "the GPU pipeline failed: failed to legalize operation 'llvm.intr.sqrt'
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
