// blucomp/plan_export.h: the compiled step's plan for the runtime (Note [Step plan]).
#pragma once

#include <string>

#include "mlir/IR/BuiltinOps.h"

namespace blu::comp {

// `module`: blu-import's output (func @step). Runs blu-fuse-epilogue and the fusion pipeline on it
// (in place), plans the arena, and returns the plan JSON; on failure "" and *error says why.
// ptx_dir non-empty: each fused group is also outlined and compiled (blu-to-nvvm, results as
// out-parameters) into <ptx_dir>/<kernel module>.ptx, and its plan entry says how to launch it.
std::string exportPlan(mlir::ModuleOp module, std::string* error, const std::string& ptx_dir = "",
                       const std::string& chip = "sm_90", const std::string& features = "+ptx80");

}  // namespace blu::comp
