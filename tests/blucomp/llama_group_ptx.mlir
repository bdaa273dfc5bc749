// Note [Fused group kernels]: blu-plan --ptx-dir outlines each fused group of the captured Llama
// step, compiles it with its result as an out-parameter, and says how to launch it (grid, block,
// each kernel parameter as an operand index or -1 for the result); the PTX assembles for sm_90 and
// calls nothing. All 14 groups of blu-plan's defaults (Note [blu-plan defaults]) compile (outlined
// on their 2-D view: a rank-3 result was otherwise computed into a 2-D alloc and copied out);
// RMSNorm's rsqrt is sqrt.rn.f32, not libdevice. Group 0 (RMSNorm's scale and output, 64 columns)
// reads and writes 4 columns per thread (Note [Vectorized group kernels]: 16 vectors of 4 floats a
// row, the per-row statistic, parameter 0, a scalar load) and runs 16 rows of 16 threads a block,
// columns on thread x (Note [Thread mapping]); the rotary groups, which read q / k through
// strided windows (Note [Strided operands]), stay scalar.
// Registered only when ptxas is found (filecheck.cmake).
// RUN: capture_llama_step %t/llama.json > /dev/null
// RUN: mkdir -p %t/ptx && blu-plan %t/llama.json -o %t/plan.json --ptx-dir %t/ptx
// RUN: FileCheck %s < %t/plan.json
// RUN: for f in %t/ptx/*.ptx; do ptxas -arch=sm_90 "$f" -o "$f.cubin" || exit 1; done
// RUN: cat %t/ptx/*.ptx | FileCheck %s --check-prefix=PTX
// RUN: test $(ls %t/ptx/*.ptx | wc -l) -eq 14
// RUN: grep -q sqrt.rn.f32 %t/ptx/group_0_kernel.ptx
// RUN: grep -q ld.global.v4.f32 %t/ptx/group_0_kernel.ptx
// RUN: grep -q st.global.v4.f32 %t/ptx/group_0_kernel.ptx
// RUN: not grep -q "\.v4" %t/ptx/group_1_kernel.ptx

// CHECK-NOT: ptx_error
// CHECK: "block": [
// CHECK-NEXT: 16,
// CHECK-NEXT: 16,
// CHECK: "kernel": "group_0_kernel",
// CHECK: "params": [
// CHECK-NEXT: 0,
// CHECK-NEXT: 1,
// CHECK-NEXT: 2,
// CHECK-NEXT: -1,
// CHECK-NEXT: -2
// CHECK-NEXT: ],
// CHECK-NEXT: "ptx": "group_0_kernel.ptx",
// CHECK: "vector_params": [
// CHECK-NEXT: 1,
// CHECK-NEXT: 2,
// CHECK-NEXT: 3,
// CHECK-NEXT: 4
// CHECK-NEXT: ],
// CHECK-NEXT: "vector_width": 4
// PTX-NOT: call
