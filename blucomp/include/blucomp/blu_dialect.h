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

// Note [Broadcast operands]
// How a blu.fused input (or blu.broadcast's operand) of one shape reaches the elements of the
// result's shape, in the 2-D (rows, cols) iteration of Note [2-D iteration space]:
//   kSame      the result's shape                                  (row, col)
//   kColumns   rank 1, the result's last dimension (a bias row)      (col)
//   kRows      the result's shape with last dimension 1 (per row)    (row, 0) on [rows, 1]
//   kTrailing  the result's last k >= 2 dimensions, repeated over    (row mod R, col) on [R, cols],
//              the leading ones (rotary tables over batch, heads)    R = product of its leading dims
//              (and, in the 2-D view of an outlined group, [R, cols] against [rows, cols] with R
//              dividing rows: the same elements)
// blu-import makes blu.broadcast from a recorded operand whose stride-0 dimensions are exactly
// one of these (BLU_PLAN_BROADCAST=1 until measured); the runtime binds the dense source tensor.
enum class BroadcastKind { kNone, kSame, kColumns, kRows, kTrailing };
BroadcastKind broadcastKind(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> out);
// Note [Strided operands]: whether a blu.fused region argument is read through blu.view (only:
// by nothing else, and at least once; otherwise: by at least one view).
bool readThroughViews(mlir::BlockArgument arg, bool only);
}  // namespace blu::comp
