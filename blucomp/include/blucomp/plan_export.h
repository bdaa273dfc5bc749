// blucomp/plan_export.h: the compiled step's plan for the runtime (Note [Step plan]).
#pragma once

#include <string>

#include "mlir/IR/BuiltinOps.h"

namespace blu::comp {

// `module`: blu-import's output (func @step). Runs blu-fuse-epilogue and the fusion pipeline on it
// (in place), plans the arena, and returns the plan JSON; on failure "" and *error says why.
std::string exportPlan(mlir::ModuleOp module, std::string* error);

}  // namespace blu::comp
