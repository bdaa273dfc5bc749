// The `blu` dialect's C++ declarations: the dialect, the elementwise interface and the ops, all
// generated from blu_dialect.td / blu_ops.td by mlir-tblgen.
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "blucomp/blu_dialect.h.inc"
#include "blucomp/blu_interfaces.h.inc"

#define GET_OP_CLASSES
#include "blucomp/blu_ops.h.inc"

namespace blu::comp {
// Inputs blu.ew's function takes (1 or 2), 0 for a name it does not know (Note [Generic elementwise]).
int ewArity(llvm::StringRef fn);
}  // namespace blu::comp
