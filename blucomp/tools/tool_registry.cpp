// tool_registry.cpp: registerToolDialects (tool_registry.h).
#include "tool_registry.h"

#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"

#include "blucomp/blu_dialect.h"

namespace blu::comp {

void registerToolDialects(mlir::DialectRegistry& registry) {
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::registerAllToLLVMIRTranslations(registry);
  registry.insert<BluDialect>();
}

}  // namespace blu::comp
