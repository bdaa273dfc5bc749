// blu-plan: a captured step (blutensor's capture JSON) -> the step plan JSON (Note [Step plan] in
// src/plan_export.cpp): which recorded calls each fused kernel / GEMM epilogue replaces and the
// buffers it binds; launches before and after; the planned arena. -o for the fused IR too.
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"

#include "blucomp/blu_dialect.h"
#include "tool_registry.h"
#include "blucomp/import_capture.h"
#include "blucomp/passes.h"
#include "blucomp/plan_export.h"

namespace cl = llvm::cl;

int main(int argc, char** argv) {
  llvm::InitLLVM init(argc, argv);
  cl::opt<std::string> input(cl::Positional, cl::desc("<capture .json>"), cl::init("-"));
  cl::opt<std::string> output("o", cl::desc("plan .json"), cl::init("-"));
  cl::opt<std::string> ir("ir", cl::desc("also write the fused IR here"), cl::init(""));
  cl::opt<std::string> ptx_dir("ptx-dir", cl::desc("compile the fused groups into PTX files here"), cl::init(""));
  cl::opt<std::string> chip("chip", cl::desc("GPU architecture"), cl::init("sm_90"));
  cl::opt<std::string> features("features", cl::desc("PTX features"), cl::init("+ptx80"));
  cl::ParseCommandLineOptions(argc, argv, "blu-plan: captured step JSON -> step plan JSON\n");

  std::string error;
  auto file = mlir::openInputFile(input, &error);
  if (!file) {
    llvm::errs() << "blu-plan: " << error << "\n";
    return 1;
  }
  mlir::DialectRegistry registry;
  blu::comp::registerToolDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadDialect<blu::comp::BluDialect, mlir::func::FuncDialect>();
  mlir::OwningOpRef<mlir::ModuleOp> module = blu::comp::importCapture(file->getBuffer(), &context, &error);
  if (!module) {
    llvm::errs() << "blu-plan: " << input << ": " << error << "\n";
    return 1;
  }
  const std::string plan = blu::comp::exportPlan(*module, &error, ptx_dir, chip, features);
  if (plan.empty()) {
    llvm::errs() << "blu-plan: " << error << "\n";
    return 1;
  }
  auto out = mlir::openOutputFile(output, &error);
  if (!out) {
    llvm::errs() << "blu-plan: " << error << "\n";
    return 1;
  }
  out->os() << plan << "\n";
  out->keep();
  if (!ir.empty()) {
    auto ir_out = mlir::openOutputFile(ir, &error);
    if (!ir_out) {
      llvm::errs() << "blu-plan: " << error << "\n";
      return 1;
    }
    module->print(ir_out->os());
    ir_out->keep();
  }
  return 0;
}
