// The step plan (Note [Step plan]): what the runtime needs to run a captured step with blucomp's
// kernels in place of the recorded calls they cover.
//
// Note [Step plan]
// {"format": "blu-plan", "version": 1, "structure_hash": ..., "signature_hash": ... (the
//  capture's, when its JSON had them), "launches_before": N, "launches_after": M,
//  "arena_bytes": A, "arena_lower_bound_bytes": L,
//  "kernels": [{"kind": "matmul_epilogue", "epilogue": "bias_gelu", "transpose_lhs": false,
//               "transpose_rhs": true, "nodes": [6, 7, 8], "operands": [12, 40, 3],
//               "results": [57, 56]},
//              {"kind": "fused", "nodes": [...], "operands": [...], "results": [...],
//               "body": ["blu.ew \"neg\"", ...]}, ...]}
// `nodes`: the capture's calls the kernel replaces (Note [Node provenance]); `operands`/`results`:
// the capture buffer holding each operand / result value whole (Note [Value buffers]), -1 where
// no buffer holds it (a strided window): such a kernel cannot be bound yet and the runtime keeps
// its recorded calls. A capture::Executable::replace per bound kernel is the runtime's job
// (blublas's GEMM epilogues for matmul_epilogue; the PTX of the outlined group for fused: next).
#include "blucomp/plan_export.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include "blucomp/blu_dialect.h"
#include "blucomp/passes.h"

using namespace mlir;
namespace json = llvm::json;

namespace blu::comp {

namespace {

int64_t bufferOf(Value v, func::FuncOp fn) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto ids = fn->getAttrOfType<ArrayAttr>("blu.input_buffers");
    if (!ids || arg.getArgNumber() >= ids.size()) return -1;
    return cast<IntegerAttr>(ids[arg.getArgNumber()]).getInt();
  }
  auto result = cast<OpResult>(v);
  auto ids = result.getOwner()->getAttrOfType<DenseI64ArrayAttr>("blu.result_buffers");
  if (!ids || result.getResultNumber() >= ids.size()) return -1;
  return ids[result.getResultNumber()];
}

int64_t intAttr(Operation* op, StringRef name) {
  auto a = op->getAttrOfType<IntegerAttr>(name);
  return a ? a.getInt() : -1;
}

}  // namespace

std::string exportPlan(ModuleOp module, std::string* error) {
  func::FuncOp fn = module.lookupSymbol<func::FuncOp>("step");
  if (!fn) {
    *error = "no func.func @step (blu-import's output expected)";
    return "";
  }
  PassManager count_before(module.getContext());
  count_before.addNestedPass<func::FuncOp>(createBluCountKernels());
  if (failed(count_before.run(module))) {
    *error = "blu-count-kernels failed";
    return "";
  }
  const int64_t before = intAttr(fn, "blu.kernels");
  PassManager pm(module.getContext());
  pm.addNestedPass<func::FuncOp>(createCSEPass());  // one value per (reshape of a) buffer before matching
  pm.addNestedPass<func::FuncOp>(createBluFuseEpilogue());
  buildBluFusePipeline(pm);
  pm.addNestedPass<func::FuncOp>(createBluCountKernels());
  pm.addNestedPass<func::FuncOp>(createBluPlanMemory());
  if (failed(pm.run(module))) {
    *error = "the fusion pipeline failed (diagnostics above)";
    return "";
  }
  json::Array kernels;
  for (Operation& op : fn.getBody().front()) {
    auto nodes = op.getAttrOfType<DenseI64ArrayAttr>("blu.nodes");
    if (!nodes || !isa<MatmulEpilogueOp, FusedOp>(op)) continue;
    json::Object k;
    json::Array node_list, operands, results;
    for (int64_t n : nodes.asArrayRef()) node_list.push_back(n);
    for (Value v : op.getOperands()) operands.push_back(bufferOf(v, fn));
    for (Value v : op.getResults()) results.push_back(bufferOf(v, fn));
    if (auto mm = dyn_cast<MatmulEpilogueOp>(op)) {
      k["kind"] = "matmul_epilogue";
      k["epilogue"] = mm.getEpilogue().str();
      k["transpose_lhs"] = mm.getTransposeLhs();
      k["transpose_rhs"] = mm.getTransposeRhs();
    } else {
      k["kind"] = "fused";
      json::Array body;
      for (Operation& inner : cast<FusedOp>(op).getBody().front().without_terminator()) {
        std::string name = inner.getName().getStringRef().str();
        if (auto ew = dyn_cast<EwOp>(inner)) name += " \"" + ew.getFn().str() + "\"";
        body.push_back(name);
      }
      k["body"] = std::move(body);
    }
    k["nodes"] = std::move(node_list);
    k["operands"] = std::move(operands);
    k["results"] = std::move(results);
    kernels.push_back(std::move(k));
  }
  json::Object plan{{"format", "blu-plan"},
                    {"version", 1},
                    {"launches_before", before},
                    {"launches_after", intAttr(fn, "blu.kernels")},
                    {"arena_bytes", intAttr(fn, "blu.arena_bytes")},
                    {"arena_lower_bound_bytes", intAttr(fn, "blu.arena_lower_bound_bytes")},
                    {"kernels", std::move(kernels)}};
  for (const char* key : {"structure_hash", "signature_hash"}) {
    if (auto h = module->getAttrOfType<StringAttr>(std::string("blu.capture_") + key)) plan[key] = h.getValue().str();
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:1}", json::Value(std::move(plan)));
  return text;
}

}  // namespace blu::comp
