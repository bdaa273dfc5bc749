// The blu-to-nvvm pipeline reaches NVVM and PTX: one outlined kernel per fused group, launched
// over (rows, column tiles) x 256 threads, bare-pointer kernel arguments (one per buffer), no
// libdevice calls, and a gpu.binary holding PTX for sm_90 (Note [GPU pipeline]).
// RUN: blu-opt %s --blu-to-nvvm | FileCheck %s
// (--mlir-disable-threading: the gpu.modules' IR dumps come in module order; with threads they
// came in any order and the NVVM-LABEL sequence failed about one run in three.)
// RUN: blu-opt %s --blu-to-nvvm --mlir-disable-threading --mlir-print-ir-after=convert-gpu-to-nvvm 2>&1 >/dev/null | FileCheck %s --check-prefix=NVVM
// RUN: blu-opt %s --blu-to-nvvm="chip=sm_80 features=+ptx70 threads-per-block=128" | FileCheck %s --check-prefix=SM80
// Note [Thread mapping]: a narrow last dimension (here told as 96: tiles of 128 columns) makes a
// block 2 rows of 128 threads, columns on thread x.
// RUN: blu-opt %s --blu-to-nvvm="last-dim=96" --mlir-disable-threading --mlir-print-ir-after=convert-gpu-to-nvvm 2>&1 >/dev/null | FileCheck %s --check-prefix=NARROW
// NARROW-LABEL: gpu.module @bias_gelu_residual_kernel
// NARROW: gpu.known_block_size = array<i32: 128, 2, 1>

// Host side: memrefs, one launch for the fused bias+GELU+residual group (8 rows, 1000 columns
// in 4 tiles of 256), the bias passed unreshaped.
// CHECK-LABEL: func.func @bias_gelu_residual
// CHECK-SAME: (%{{.*}}: memref<2x4x1000xf32>, %[[B:.*]]: memref<1000xf32>, %{{.*}}: memref<2x4x1000xf32>) -> memref<2x4x1000xf32>
// CHECK: gpu.launch_func @bias_gelu_residual_kernel::@bias_gelu_residual_kernel blocks in (%{{.*}}, %{{.*}}, %{{.*}}) threads in (%{{.*}}, %{{.*}}, %{{.*}}) args(%{{.*}} : memref<8x1000xf32>, %[[B]] : memref<1000xf32>, %{{.*}} : memref<8x1000xf32>, %{{.*}} : memref<8x1000xf32>)
// CHECK-NOT: gpu.launch_func
// CHECK: return
// CHECK: gpu.binary @bias_gelu_residual_kernel [#gpu.object<#nvvm.target<chip = "sm_90", features = "+ptx80">
// CHECK-SAME: assembly = "{{.*}}.target sm_90{{.*}}.visible .entry bias_gelu_residual_kernel(
// CHECK-NOT: call
// CHECK-SAME: "
// CHECK: gpu.binary @bf16_gelu_grad_kernel

// NVVM-LABEL: gpu.module @bias_gelu_residual_kernel [#nvvm.target<chip = "sm_90", features = "+ptx80">]
// NVVM: llvm.func @bias_gelu_residual_kernel(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
// NVVM-SAME: gpu.known_block_size = array<i32: 256, 1, 1>, gpu.known_grid_size = array<i32: 8, 4, 1>, nvvm.kernel
// NVVM-DAG: nvvm.read.ptx.sreg.ctaid.x
// NVVM-DAG: nvvm.read.ptx.sreg.ctaid.y
// NVVM-DAG: nvvm.read.ptx.sreg.tid.x
// NVVM: llvm.cond_br
// NVVM-NOT: llvm.call
// NVVM: llvm.return
// NVVM-LABEL: gpu.module @bf16_gelu_grad_kernel
// NVVM: llvm.fpext %{{.*}} : bf16 to f32
// NVVM: llvm.fptrunc %{{.*}} : f32 to bf16
// NVVM-NOT: llvm.call

// SM80: gpu.binary @bias_gelu_residual_kernel [#gpu.object<#nvvm.target<chip = "sm_80", features = "+ptx70">
// SM80-SAME: .target sm_80
// SM80-SAME: .maxntid 128, 1, 1
func.func @bias_gelu_residual(%h: tensor<2x4x1000xf32>, %b: tensor<1000xf32>, %r: tensor<2x4x1000xf32>) -> tensor<2x4x1000xf32> {
  %0 = blu.bias_add %h, %b : tensor<2x4x1000xf32>, tensor<1000xf32>
  %1 = blu.gelu_tanh %0 : tensor<2x4x1000xf32>
  %2 = blu.add %1, %r : tensor<2x4x1000xf32>
  return %2 : tensor<2x4x1000xf32>
}

func.func @bf16_gelu_grad(%dy: tensor<64x96xbf16>, %x: tensor<64x96xbf16>) -> tensor<64x96xbf16> {
  %0 = blu.gelu_tanh_grad %dy, %x : tensor<64x96xbf16>
  return %0 : tensor<64x96xbf16>
}
