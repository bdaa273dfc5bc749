// collectPtx: the PTX text that gpu-module-to-binary (format=isa) stored in gpu.binary objects.
#include "blucomp/ptx.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

namespace blu::comp {

std::vector<PtxKernelModule> collectPtx(mlir::ModuleOp module) {
  std::vector<PtxKernelModule> out;
  module.walk([&](mlir::gpu::BinaryOp binary) {
    for (mlir::Attribute attr : binary.getObjects()) {
      auto object = mlir::dyn_cast<mlir::gpu::ObjectAttr>(attr);
      if (!object || object.getFormat() != mlir::gpu::CompilationTarget::Assembly) continue;
      // The NVVM target stores the PTX with its C string terminator; ptxas rejects a NUL.
      llvm::StringRef text = object.getObject().getValue();
      text = text.take_until([](char c) { return c == '\0'; });
      out.push_back({binary.getSymName().str(), text.str()});
    }
  });
  return out;
}

}  // namespace blu::comp
