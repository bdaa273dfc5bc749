// SwiGLU written in blu.ew (Note [Generic elementwise]) fuses into one group and lowers to one PTX
// kernel without libdevice: exp through MLIR's polynomial approximation, its floor by truncation
// (blu-expand-math, FloorFByTruncation). Registered only when ptxas is found (filecheck.cmake).
// RUN: blu-opt %s --blu-fuse-pipeline --blu-count-kernels | FileCheck %s --check-prefix=FUSED
// RUN: blu-ptx %s --out-dir %t/ptx | FileCheck %s --check-prefix=FILES
// RUN: ptxas -arch=sm_90 %t/ptx/swiglu_kernel.ptx -o %t/swiglu.cubin
// RUN: cat %t/ptx/swiglu_kernel.ptx | FileCheck %s --check-prefix=PTX

// FUSED: blu.kernels = 1
// FUSED: blu.fused
// FILES: ptx/swiglu_kernel.ptx
// PTX-NOT: call
// PTX: fma.rn.f32

func.func @swiglu(%g: tensor<64x176xf32>, %u: tensor<64x176xf32>) -> tensor<64x176xf32> {
  %0 = blu.ew "neg"(%g) : tensor<64x176xf32>
  %1 = blu.ew "exp"(%0) : tensor<64x176xf32>
  %2 = blu.ew "add_scalar"(%1) {alpha = 1.0 : f64} : tensor<64x176xf32>
  %3 = blu.ew "div"(%g, %2) : tensor<64x176xf32>
  %4 = blu.mul %3, %u : tensor<64x176xf32>
  return %4 : tensor<64x176xf32>
}
