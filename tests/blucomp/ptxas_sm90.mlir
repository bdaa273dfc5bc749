// The PTX that blu-ptx writes (one file per kernel) assembles with ptxas for sm_90, and needs no
// libdevice (no call instructions). Registered only when ptxas is found (filecheck.cmake).
// RUN: blu-ptx %s --out-dir %t/ptx | FileCheck %s --check-prefix=FILES
// RUN: for f in %t/ptx/*.ptx; do ptxas -arch=sm_90 "$f" -o "$f.cubin" || exit 1; done
// RUN: cat %t/ptx/*.ptx | FileCheck %s --check-prefix=PTX
// RUN: blu-ptx %s --chip sm_80 --features +ptx70 --out-dir %t/ptx80
// RUN: for f in %t/ptx80/*.ptx; do ptxas -arch=sm_80 "$f" -o "$f.cubin" || exit 1; done

// FILES-DAG: ptx/mlp_epilogue_kernel.ptx
// FILES-DAG: ptx/mlp_epilogue_kernel_0.ptx
// FILES-DAG: ptx/gelu_backward_bf16_kernel.ptx
// PTX-NOT: call
// PTX: .visible .entry
// PTX-NOT: call

// Two kernels for one function: %u is used by the GELU group and is also returned, so the
// cost rule keeps it materialized (its own kernel) instead of recomputing it.
func.func @mlp_epilogue(%h: tensor<3x5x77xf32>, %b: tensor<77xf32>, %r: tensor<3x5x77xf32>) -> (tensor<3x5x77xf32>, tensor<3x5x77xf32>) {
  %u = blu.bias_add %h, %b : tensor<3x5x77xf32>, tensor<77xf32>
  %g = blu.gelu_tanh %u : tensor<3x5x77xf32>
  %y = blu.add %g, %r : tensor<3x5x77xf32>
  return %y, %u : tensor<3x5x77xf32>, tensor<3x5x77xf32>
}

func.func @gelu_backward_bf16(%dy: tensor<33x300xbf16>, %x: tensor<33x300xbf16>, %b: tensor<300xbf16>) -> tensor<33x300xbf16> {
  %u = blu.bias_add %x, %b : tensor<33x300xbf16>, tensor<300xbf16>
  %dx = blu.gelu_tanh_grad %dy, %u : tensor<33x300xbf16>
  return %dx : tensor<33x300xbf16>
}
