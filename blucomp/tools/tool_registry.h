// tool_registry.h: the dialect registry blu-opt, blu-ptx and blu-plan share: every upstream dialect
// and extension, the LLVM IR translations (gpu-module-to-binary needs them) and the blu dialect.
// Defined once in tool_registry.cpp: mlir/InitAllDialects.h is most of each tool's compile time
// (~50 s of a ~75 s object on the 2-core machine), so the three tools no longer compile it each.
#pragma once

#include "mlir/IR/DialectRegistry.h"

namespace blu::comp {

void registerToolDialects(mlir::DialectRegistry& registry);

}  // namespace blu::comp
