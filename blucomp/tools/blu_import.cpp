// blu-import: a captured training step (blutensor's capture JSON, e.g. `blutrain capture`'s
// step.json) -> blu IR on stdout or -o FILE (Note [Capture import] in src/import_capture.cpp).
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"

#include "blucomp/blu_dialect.h"
#include "blucomp/import_capture.h"

namespace cl = llvm::cl;

int main(int argc, char** argv) {
  llvm::InitLLVM init(argc, argv);
  cl::opt<std::string> input(cl::Positional, cl::desc("<capture .json>"), cl::init("-"));
  cl::opt<std::string> output("o", cl::desc("output .mlir"), cl::init("-"));
  cl::ParseCommandLineOptions(argc, argv, "blu-import: captured step JSON -> blu MLIR\n");

  std::string error;
  auto file = mlir::openInputFile(input, &error);
  if (!file) {
    llvm::errs() << "blu-import: " << error << "\n";
    return 1;
  }
  mlir::MLIRContext context;
  context.loadDialect<blu::comp::BluDialect, mlir::func::FuncDialect>();
  mlir::OwningOpRef<mlir::ModuleOp> module = blu::comp::importCapture(file->getBuffer(), &context, &error);
  if (!module) {
    llvm::errs() << "blu-import: " << input << ": " << error << "\n";
    return 1;
  }
  auto out = mlir::openOutputFile(output, &error);
  if (!out) {
    llvm::errs() << "blu-import: " << error << "\n";
    return 1;
  }
  module->print(out->os());
  out->os() << "\n";
  out->keep();
  return 0;
}
