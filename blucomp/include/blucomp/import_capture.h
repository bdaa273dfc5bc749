// blucomp/import_capture.h: a captured training step (blutensor's capture JSON, Note [Capture JSON]
// in blutensor/src/capture/capture_json.cpp) as blu IR. Note [Capture import] in
// src/import_capture.cpp.
#pragma once

#include <string>

#include "llvm/ADT/StringRef.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

namespace blu::comp {

// A module with one `func.func @step`: one argument per input buffer, one result per output
// buffer (ascending buffer ids). Null on failure, with the reason (naming the node) in *error.
// The context must have the blu and func dialects loaded.
mlir::OwningOpRef<mlir::ModuleOp> importCapture(llvm::StringRef json, mlir::MLIRContext* context,
                                                std::string* error);

}  // namespace blu::comp
