// blucomp/step_runtime.h: the compiled step's runtime (Note [Step runtime]): binds a step plan
// (blu-plan's JSON) to a capture::Executable. No MLIR at run time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "blutensor/capture.h"

namespace blu::comp {

struct BindReport {
  int bound = 0;                     // plan kernels now running in place of their calls
  int kept = 0;                      // left as their recorded calls
  std::vector<std::string> reasons;  // one per kept kernel: which and why
  // blu-plan's arena over the imported step's values (Note [Arena plan]; -1 when the plan has
  // none). Reported beside the Executable's own arena over the capture's buffers (Note [Step
  // arena]), which is what runs: a capture buffer keeps one address for the whole step, where
  // blu-plan may place each SSA value written into it (in-place updates, insert_views) apart.
  int64_t plan_arena_bytes = -1;
  int64_t plan_arena_lower_bound_bytes = -1;
};

// Note [Step runtime]
// For each kernel of the plan (Note [Step plan]) that it can bind, exe.replace(nodes, launch):
//   matmul_epilogue -> one blublas::gemm with the epilogue (bias, bias + residual as beta = 1 on
//   C, bias + GELU writing the pre-activation to the bias add's output buffer, GELU gradient
//   reading it, the dW GEMM with its bias gradient), operands and outputs the recorded calls'
//   own tensors (the GEMM call's a/bm/out, the bias add's broadcast row, ...), on the current
//   stream of the graph's device, with the recorded matmul precision.
//   fused -> its PTX (Note [Fused group kernels]) loaded once (cudaLibraryLoadData: the runtime
//   API's door to the driver, so nothing links libcuda) and launched with cudaLaunchKernel on
//   the current stream, each pointer parameter the operand's or
//   the result's buffer as the recorded calls addressed it (dense 2-D views of them).
// What it cannot bind (a CPU graph, a fused group without PTX, a batched or
// accumulating GEMM, dtypes other than f32/bf16, an operand no buffer holds) keeps its recorded
// calls: the step stays correct, the report says what was left and why. The epilogue adds the
// bias to the fp32 accumulator before the one rounding, so results differ from the recorded
// GEMM + add by at most an ulp per element (not bitwise).
// ptx_dir: where blu-plan --ptx-dir wrote the fused groups' PTX ("" = fused groups stay recorded).
BindReport bind_plan(capture::Executable& exe, const std::string& plan_json, const std::string& ptx_dir = "");

}  // namespace blu::comp
