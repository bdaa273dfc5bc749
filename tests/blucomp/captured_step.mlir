// The tiny GPT-2's training step captured by blutensor (`blutrain capture`: forward, autograd
// backward, clipping, AdamW; Note [Step capture]) and imported as blu IR (blu-import, Note
// [Capture import]): the imported function verifies; its launch count before fusion is the eager
// step's (240: the clip coefficient applied inside AdamW, Note [Clip coefficient in the update], guarded on the
// device by the loss and the norm, blutrain Note [Update without a host read]; the views are how kernels address
// operands, not launches; the loss is linear_cross_entropy, Note [Linear cross-entropy], its chunk loss and gradient
// one call); the GEMM epilogues and elementwise fusion take it to 188; the arena plan excludes the persistent weights and moments.
// This file is not MLIR input: the RUN lines make their own.
// RUN: blutrain capture --model tiny --device cpu --batch-size 2 --seq-len 32 --out-dir %t/cap | FileCheck %s --check-prefix=CAPTURE
// RUN: blu-import %t/cap/step.json -o %t/step.mlir
// RUN: blu-opt %t/step.mlir | FileCheck %s --check-prefix=IMPORT
// RUN: blu-opt %t/step.mlir --blu-count-kernels | FileCheck %s --check-prefix=BEFORE
// RUN: blu-opt %t/step.mlir --blu-fuse-epilogue --blu-fuse-pipeline --blu-count-kernels | FileCheck %s --check-prefix=AFTER
// RUN: blu-opt %t/step.mlir --blu-fuse-epilogue --blu-fuse-pipeline --blu-plan-memory | FileCheck %s --check-prefix=PLAN
// RUN: blu-opt %t/step.mlir --blu-fuse-epilogue --blu-fuse-pipeline | FileCheck %s --check-prefix=NODES
// RUN: blu-plan %t/cap/step.json -o %t/plan.json && FileCheck %s --check-prefix=STEPPLAN < %t/plan.json
// RUN: not grep -q -- '-1' %t/plan.json
// RUN: blutrain train --model tiny --device cpu --data synthetic --batch-size 2 --seq-len 32 --max-steps 3 --val-every -1 --final-val-batches 0 --sample-tokens 0 --no-save --no-plot --engine captured --out-dir %t/run1 > /dev/null
// RUN: blu-plan %t/run1/captured_step.json -o %t/run1/plan.json
// RUN: blutrain train --model tiny --device cpu --data synthetic --batch-size 2 --seq-len 32 --max-steps 3 --val-every -1 --final-val-batches 0 --sample-tokens 0 --no-save --no-plot --engine captured --plan %t/run1/plan.json --out-dir %t/run2 | FileCheck %s --check-prefix=BIND
// RUN: not blutrain train --model tiny --device cpu --data synthetic --batch-size 2 --seq-len 48 --max-steps 3 --val-every -1 --final-val-batches 0 --sample-tokens 0 --no-save --no-plot --engine captured --plan %t/run1/plan.json --out-dir %t/run3 2>&1 | FileCheck %s --check-prefix=OTHER
// RUN: not blu-import %s 2>&1 | FileCheck %s --check-prefix=NOTJSON
// RUN: echo '{"format": "blu-capture", "version": 1, "buffers": [], "nodes": [{"op": "fill_", "device": "cpu", "args": [{"name": "dst", "read": false, "write": true, "tensor": {"buffer": 0, "dtype": "f32", "offset": 0, "sizes": [1], "strides": [1]}}]}]}' > %t/bad.json
// RUN: not blu-import %t/bad.json 2>&1 | FileCheck %s --check-prefix=BADBUFFER

// CAPTURE: (240 launches, 4 host reads)
// CAPTURE: replay: 156/156 weights and moments bitwise equal to the eager step

// IMPORT: func.func @step({{.*}}attributes {blu.input_buffers = [{{.*}}], blu.output_buffers = [
// IMPORT-DAG: blu.layernorm
// IMPORT-DAG: blu.matmul {{.*}}transpose_rhs = true}
// IMPORT-DAG: blu.bias_add
// IMPORT-DAG: blu.gelu_tanh_grad
// IMPORT-DAG: blu.kernel "cross_entropy_forward_backward"
// IMPORT-DAG: blu.kernel "global_norm"
// IMPORT-DAG: blu.kernel "adamw_step"{{.*}}blu.persistent_results = array<i64: 0,
// IMPORT-DAG: blu.host_read
// IMPORT: return

// BEFORE: blu.kernels = 240
// AFTER: blu.kernels = 188
// PLAN: blu.arena_bytes = {{[0-9]+}}
// PLAN-SAME: blu.arena_lower_bound_bytes

// Note [Node provenance]: a fused op names every captured call it stands for.
// NODES-DAG: blu.matmul_epilogue "bias_gelu"{{.*}}blu.nodes = array<i64: [[#]], [[#]], [[#]]>
// NODES-DAG: blu.kernel "adamw_step"{{.*}}blu.node = [[#]] : i64

// Note [Step plan]: every GEMM epilogue bound to the capture's buffers (no -1 anywhere).
// STEPPLAN: "arena_bytes": {{[0-9]+}}
// STEPPLAN: "epilogue": "bias_gelu",
// STEPPLAN-NEXT: "kind": "matmul_epilogue",
// STEPPLAN-NEXT: "nodes": [
// STEPPLAN: "launches_after": 187,
// STEPPLAN-NEXT: "launches_before": 240

// Note [Step runtime]: the plan of a run's own record binds on a CUDA graph; on the CPU every
// kernel stays its recorded calls, with the reason; a plan of another configuration is refused.
// BIND: plan: 0 kernels bound, 39 left as recorded calls
// BIND: kept: matmul_epilogue bias over nodes {{[0-9]+}}..: not a CUDA graph
// BIND: step 3/3 | loss
// OTHER: bind_plan: the plan was made for another capture

// NOTJSON: blu-import: {{.*}}captured_step.mlir: not JSON
// BADBUFFER: blu-import: {{.*}}bad.json: node 0 (fill_) argument 'dst' names buffer 0 of 0
