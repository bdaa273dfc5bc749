// blu-ptx: the compiler driver of this slice. Reads blu-level MLIR, runs the blu-to-nvvm
// pipeline and writes one <kernel module>.ptx per outlined kernel into --out-dir (printing the
// file names), the way the runtime will get its PTX.
#include <cstdio>

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"

#include "blucomp/blu_dialect.h"
#include "tool_registry.h"
#include "blucomp/passes.h"
#include "blucomp/ptx.h"

namespace cl = llvm::cl;

int main(int argc, char** argv) {
  llvm::InitLLVM init(argc, argv);
  cl::opt<std::string> input(cl::Positional, cl::desc("<input .mlir>"), cl::init("-"));
  cl::opt<std::string> out_dir("out-dir", cl::desc("directory for the .ptx files"), cl::Required);
  cl::opt<std::string> chip("chip", cl::desc("GPU architecture"), cl::init("sm_90"));
  cl::opt<std::string> features("features", cl::desc("PTX features"), cl::init("+ptx80"));
  cl::opt<int> threads("threads-per-block", cl::desc("column tile"), cl::init(256));
  cl::ParseCommandLineOptions(argc, argv, "blu-ptx: blu MLIR -> PTX files\n");

  mlir::DialectRegistry registry;
  blu::comp::registerToolDialects(registry);
  mlir::MLIRContext context(registry);

  std::string error;
  auto file = mlir::openInputFile(input, &error);
  if (!file) {
    llvm::errs() << "blu-ptx: " << error << "\n";
    return 1;
  }
  llvm::SourceMgr sources;
  sources.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  mlir::SourceMgrDiagnosticHandler diagnostics(sources, &context);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sources, &context);
  if (!module) return 1;

  mlir::PassManager pm(&context);
  blu::comp::GpuPipelineOptions options;
  options.chip = chip;
  options.features = features;
  options.threads_per_block = threads;
  blu::comp::buildBluToNvvmPipeline(pm, options);
  if (mlir::failed(pm.run(*module))) {
    llvm::errs() << "blu-ptx: the blu-to-nvvm pipeline failed\n";
    return 1;
  }

  std::vector<blu::comp::PtxKernelModule> kernels = blu::comp::collectPtx(*module);
  if (kernels.empty()) {
    llvm::errs() << "blu-ptx: no kernels were produced\n";
    return 1;
  }
  if (std::error_code ec = llvm::sys::fs::create_directories(out_dir)) {
    llvm::errs() << "blu-ptx: cannot create " << out_dir << ": " << ec.message() << "\n";
    return 1;
  }
  for (const auto& kernel : kernels) {
    llvm::SmallString<256> path(out_dir);
    llvm::sys::path::append(path, kernel.name + ".ptx");
    auto out = mlir::openOutputFile(path, &error);
    if (!out) {
      llvm::errs() << "blu-ptx: " << error << "\n";
      return 1;
    }
    out->os() << kernel.ptx;
    out->keep();
    llvm::outs() << path << "\n";
  }
  return 0;
}
