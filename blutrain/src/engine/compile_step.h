// compile_step.h: `blutrain train --compile` (Note [blutrain --compile]): blucomp's blu-plan run
// on the captured engine's record of step 2, its plan bound for the steps after.
#pragma once

#include <string>

namespace blu::train {

// Note [blutrain --compile]
// --compile runs the captured engine (Note [Captured engine]) and, as soon as step 2 is recorded
// (<out-dir>/captured_step.json), runs blucomp's blu-plan on the record as a child process:
// the plan to <out-dir>/compiled_plan.json, the fused groups' PTX to <out-dir>/compiled_ptx, its
// report to <out-dir>/compiled_plan.log. The captured engine binds the plan (blucomp Note [Step
// runtime]) for every later step. blu-plan is found as $BLU_PLAN, else beside blutrain
// (../blucomp/blu-plan in a build tree, or blu-plan in blutrain's folder), else on PATH; the device
// machines, which have no MLIR, take the static blu-plan of scripts/blucomp-static.sh this way.
// Missing or failing, it costs nothing but the fusion: the step runs as recorded (the autograd
// engine's calls, the same losses) and the progress output says why ("compile: ..."). The same
// when the plan does not bind (then the record is rebuilt from step 2's graph).
//
// The blu-plan program --compile runs (see the Note), or "" with *searched listing the places.
std::string find_blu_plan(std::string* searched);
// Runs blu-plan on graph_path into out_dir; on success the plan's JSON text and its PTX folder.
bool compile_recorded_step(const std::string& graph_path, const std::string& out_dir, std::string* plan_json,
                           std::string* ptx_dir, std::string* why);

}  // namespace blu::train
