// Reads the PTX that gpu-module-to-binary (format=isa) left in a module's gpu.binary ops: the
// hand-off from the compiler to the runtime (and to `blu-ptx`, which the ptxas test runs).
#pragma once

#include <string>
#include <vector>

#include "mlir/IR/BuiltinOps.h"

namespace blu::comp {

struct PtxKernelModule {
  std::string name;  // the gpu.binary symbol (one per outlined kernel module)
  std::string ptx;   // the PTX text
};

// Every gpu.binary object in `module` whose format is assembly (PTX), in module order.
std::vector<PtxKernelModule> collectPtx(mlir::ModuleOp module);

}  // namespace blu::comp
