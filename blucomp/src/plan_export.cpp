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
// A fused kernel's "view_operands" (present when not empty): the operand indices it reads only
// through strided windows (Note [Strided operands]); the runtime binds those buffers from element 0.
#include "blucomp/plan_export.h"

#include <cstdlib>
#include <string>

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include "blucomp/blu_dialect.h"
#include "blucomp/passes.h"
#include "blucomp/ptx.h"
#include "node_provenance.h"

using namespace mlir;
namespace json = llvm::json;

namespace blu::comp {

namespace {

int64_t intAttr(Operation* op, StringRef name) {
  auto a = op->getAttrOfType<IntegerAttr>(name);
  return a ? a.getInt() : -1;
}

}  // namespace

namespace {

// Note [Fused group kernels]: each blu.fused of @step outlined as func @group_<k>(operands...) ->
// result, compiled by blu-to-nvvm with results as out-parameters; after it, the group function
// holds one gpu.launch_func whose kernel operands are that function's arguments (operands, then
// the out-parameters). Per group: PTX module name, kernel name, grid, block, and each kernel
// parameter as an operand index, or -1 - r for result r (-1: the first; multi-output groups more).
struct GroupLaunch {
  std::string module, kernel;
  int64_t grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  std::vector<int64_t> params;
  // Note [Vectorized group kernels]: elements per vector access (0: scalar), and the kernel
  // parameters (positions in params) it reads or writes with such accesses.
  int64_t vector_width = 0;
  std::vector<int64_t> vector_params;
  bool ok = false;
  std::string error;
};

// Note [Vectorized group kernels]: 16 bytes over the group's widest element, when its columns
// divide by that, it reads no strided window and BLU_PLAN_VECTOR is 1 (blu-plan's default: Note
// [blu-plan defaults]); else 0 (scalar).
int64_t groupVectorWidth(FusedOp g, int64_t cols) {
  if (const char* v = std::getenv("BLU_PLAN_VECTOR"); v == nullptr || std::string(v) != "1") return 0;
  if (!g.getBody().front().getOps<ViewOp>().empty()) return 0;
  unsigned widest = 0;
  auto widen = [&](Type t) {
    if (auto r = dyn_cast<RankedTensorType>(t)) widest = std::max(widest, r.getElementType().getIntOrFloatBitWidth() / 8);
  };
  for (Type t : g.getOperandTypes()) widen(t);
  for (Type t : g.getResultTypes()) widen(t);
  if (widest == 0 || 16 % widest != 0) return 0;
  const int64_t width = 16 / widest;
  return cols % width == 0 && cols >= width ? width : 0;
}

int64_t constantOf(Value v) {
  if (auto c = v.getDefiningOp<arith::ConstantIndexOp>()) return c.value();
  if (auto c = v.getDefiningOp<arith::ConstantOp>())
    if (auto i = dyn_cast<IntegerAttr>(c.getValue())) return i.getInt();
  return -1;
}

// One group per module, so a group the GPU pipeline cannot lower (a function without a lowering
// yet, e.g. sqrt: convert-gpu-to-nvvm sends it to libdevice) loses only its own PTX (ok = false,
// `error` says why) and keeps its recorded calls at run time.
// want_width: elements per vector access, -1 for groupVectorWidth's choice (Note [Vectorized group
// kernels]); a group whose loop blu-vectorize-columns declines is compiled again scalar, so its
// thread tiles are sized for the columns it really iterates.
GroupLaunch compileGroup(MLIRContext* ctx, FusedOp g, size_t k, const std::string& ptx_dir, const std::string& chip,
                         const std::string& features, int64_t want_width = -1) {
  GroupLaunch out;
  OpBuilder b(ctx);
  OwningOpRef<ModuleOp> kernels = ModuleOp::create(b.getUnknownLoc());
  b.setInsertionPointToEnd(kernels->getBody());
  const std::string name = "group_" + std::to_string(k);
  // Outlined on the (rows, last dim) view: every value of the result's shape becomes 2-D (the
  // group's ops are elementwise, so only their types change; bias vectors stay 1-D). A rank-3
  // result would otherwise be computed into a 2-D buffer and copied out (expand_shape +
  // memref.copy), which the out-parameter hoisting cannot remove. Same bytes, same pointers.
  auto result_type = cast<RankedTensorType>(g.getResults().front().getType());
  const auto shape = result_type.getShape();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
  auto flat = RankedTensorType::get({rows, shape.empty() ? 1 : shape.back()}, result_type.getElementType());
  const int64_t cols = flat.getShape()[1];
  auto flatten = [&](Type t) -> Type {
    auto r = dyn_cast<RankedTensorType>(t);
    if (!r || shape.size() == 2) return t;
    switch (broadcastKind(r.getShape(), shape)) {  // Note [Broadcast operands]: their 2-D views
      case BroadcastKind::kSame: return RankedTensorType::get(flat.getShape(), r.getElementType());
      case BroadcastKind::kRows: return RankedTensorType::get({rows, 1}, r.getElementType());
      case BroadcastKind::kTrailing:
        return RankedTensorType::get({r.getNumElements() / std::max<int64_t>(cols, 1), cols}, r.getElementType());
      default: return t;
    }
  };
  SmallVector<Type> in_types;
  for (Type t : g.getOperandTypes()) in_types.push_back(flatten(t));
  SmallVector<Type> out_types;
  for (Type t : g.getResultTypes()) out_types.push_back(flatten(t));
  auto fn = b.create<func::FuncOp>(g.getLoc(), name, b.getFunctionType(in_types, out_types));
  Block* entry = fn.addEntryBlock();
  OpBuilder fb = OpBuilder::atBlockEnd(entry);
  IRMapping map;
  for (auto [i, v] : llvm::enumerate(g.getOperands())) map.map(v, entry->getArgument(i));
  Operation* clone = fb.clone(*g.getOperation(), map);
  for (Value r : clone->getResults()) r.setType(flatten(r.getType()));
  clone->walk([&](Operation* op) {
    for (Region& r : op->getRegions())
      for (Block& blk : r)
        for (BlockArgument a : blk.getArguments()) a.setType(flatten(a.getType()));
    // Note [Strided operands]: a view keeps its window; its result is that window's 2-D view.
    if (auto view = dyn_cast<ViewOp>(op); view && !view.getWindow())
      view.setWindowAttr(DenseI64ArrayAttr::get(ctx, view.getResult().getType().getShape()));
    if (op != clone)
      for (Value res : op->getResults()) res.setType(flatten(res.getType()));
  });
  fb.create<func::ReturnOp>(g.getLoc(), clone->getResults());
  PassManager pm(ctx);
  GpuPipelineOptions options;
  options.chip = chip;
  options.features = features;
  options.results_as_out_params = true;
  options.vector_width = want_width >= 0 ? want_width : groupVectorWidth(g, cols);
  options.last_dim = options.vector_width > 1 ? cols / options.vector_width : cols;  // Note [Thread mapping]
  buildBluToNvvmPipeline(pm, options);
  std::string diagnostics;
  {
    ScopedDiagnosticHandler handler(ctx, [&](Diagnostic& d) {
      diagnostics += d.str() + "; ";
      return success();
    });
    if (failed(pm.run(*kernels))) {
      out.error = "the GPU pipeline failed: " + diagnostics;
      return out;
    }
  }
  fn = kernels->lookupSymbol<func::FuncOp>(name);
  int launches = 0;
  bool ok = fn != nullptr;
  if (fn) {
    fn.walk([&](gpu::LaunchFuncOp l) {
      ++launches;
      out.module = l.getKernelModuleName().str();
      out.kernel = l.getKernelName().str();
      const Value grid[3] = {l.getGridSizeX(), l.getGridSizeY(), l.getGridSizeZ()};
      const Value block[3] = {l.getBlockSizeX(), l.getBlockSizeY(), l.getBlockSizeZ()};
      for (int d = 0; d < 3; ++d) {
        out.grid[d] = constantOf(grid[d]);
        out.block[d] = constantOf(block[d]);
        ok = ok && out.grid[d] > 0 && out.block[d] > 0;
      }
      const unsigned inputs = g->getNumOperands();
      for (Value v : l.getKernelOperands()) {
        // The lowering views operands as 2-D (collapse/expand of a contiguous memref: same base
        // pointer): follow such views to the function argument.
        while (Operation* def = v.getDefiningOp()) {
          if (!isa<memref::CollapseShapeOp, memref::ExpandShapeOp, memref::CastOp>(def)) break;
          v = def->getOperand(0);
        }
        auto arg = dyn_cast<BlockArgument>(v);
        if (!arg || arg.getOwner() != &fn.getBody().front()) {
          ok = false;
          break;
        }
        const int64_t n = static_cast<int64_t>(arg.getArgNumber());
        out.params.push_back(n < static_cast<int64_t>(inputs) ? n : -1 - (n - static_cast<int64_t>(inputs)));
      }
    });
  }
  if (!ok || launches != 1) {
    out.error = "the lowered group is not one launch on its arguments";
    return out;
  }
  if (options.vector_width > 1 && !fn->getAttrOfType<IntegerAttr>("blu.vector_width"))
    return compileGroup(ctx, g, k, ptx_dir, chip, features, 0);
  if (auto w = fn->getAttrOfType<IntegerAttr>("blu.vector_width")) {
    out.vector_width = w.getInt();
    // The parameters of the result's last dimension are the vector accesses ([rows, 1] statistics
    // are scalar loads).
    for (size_t i = 0; i < out.params.size(); ++i) {
      const int64_t p = out.params[i];
      Type t = p >= 0 ? in_types[static_cast<size_t>(p)] : out_types[static_cast<size_t>(-1 - p)];
      auto r = dyn_cast<RankedTensorType>(t);
      if (r && r.getRank() >= 1 && r.getShape().back() == cols) out.vector_params.push_back(static_cast<int64_t>(i));
    }
  }
  for (const PtxKernelModule& m : collectPtx(*kernels)) {
    std::error_code ec;
    llvm::raw_fd_ostream f(ptx_dir + "/" + m.name + ".ptx", ec);
    if (ec) {
      out.error = "cannot write " + ptx_dir + "/" + m.name + ".ptx: " + ec.message();
      return out;
    }
    f << m.ptx;
  }
  out.ok = true;
  return out;
}

}  // namespace

std::string exportPlan(ModuleOp module, std::string* error, const std::string& ptx_dir, const std::string& chip,
                       const std::string& features) {
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
  std::vector<FusedOp> groups;
  for (Operation& op : fn.getBody().front())
    if (auto f = dyn_cast<FusedOp>(op)) groups.push_back(f);
  std::vector<GroupLaunch> launches;
  if (!ptx_dir.empty()) {
    for (size_t k = 0; k < groups.size(); ++k)
      launches.push_back(compileGroup(module.getContext(), groups[k], k, ptx_dir, chip, features));
  }
  json::Array kernels;
  size_t group_index = 0;
  for (Operation& op : fn.getBody().front()) {
    auto nodes = op.getAttrOfType<DenseI64ArrayAttr>("blu.nodes");
    if (!nodes || !isa<MatmulEpilogueOp, FusedOp>(op)) continue;
    json::Object k;
    json::Array node_list, operands, results;
    for (int64_t n : nodes.asArrayRef()) node_list.push_back(n);
    for (Value v : op.getOperands()) operands.push_back(bufferOf(v));
    for (Value v : op.getResults()) results.push_back(bufferOf(v));
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
      // Note [Strided operands]: inputs the kernel reads through views, from the buffer's start
      // (also those it reads directly as well: the input is the whole buffer, so element 0 is
      // right for both, where a call's first read might be a window at an offset).
      json::Array view_operands;
      for (BlockArgument arg : cast<FusedOp>(op).getBody().front().getArguments())
        if (readThroughViews(arg, /*only=*/false)) view_operands.push_back(static_cast<int64_t>(arg.getArgNumber()));
      if (!view_operands.empty()) k["view_operands"] = std::move(view_operands);
      if (group_index < launches.size() && !launches[group_index].ok) k["ptx_error"] = launches[group_index].error;
      if (group_index < launches.size() && launches[group_index].ok) {
        const GroupLaunch& l = launches[group_index];
        k["ptx"] = l.module + ".ptx";
        k["kernel"] = l.kernel;
        k["grid"] = json::Array{l.grid[0], l.grid[1], l.grid[2]};
        k["block"] = json::Array{l.block[0], l.block[1], l.block[2]};
        json::Array params;
        for (int64_t p : l.params) params.push_back(p);
        k["params"] = std::move(params);  // kernel parameter -> operand index, -1 - r = result r
        if (l.vector_width > 1) {  // Note [Vectorized group kernels]
          k["vector_width"] = l.vector_width;
          json::Array vp;
          for (int64_t i : l.vector_params) vp.push_back(i);
          k["vector_params"] = std::move(vp);
        }
      }
      ++group_index;
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
