// tool_registry.h: the dialect registry blu-opt, blu-ptx and blu-plan share: every upstream dialect
// and extension, the LLVM IR translations (gpu-module-to-binary needs them) and the blu dialect.
#pragma once

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"

#include "blucomp/blu_dialect.h"

namespace blu::comp {

inline void registerToolDialects(mlir::DialectRegistry& registry) {
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::registerAllToLLVMIRTranslations(registry);
  registry.insert<BluDialect>();
}

}  // namespace blu::comp
