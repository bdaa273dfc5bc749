// blu-opt: mlir-opt with the blu dialect, blucomp's passes and pipelines, and every upstream
// dialect, pass and LLVM IR translation (gpu-module-to-binary needs the latter).
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

#include "blucomp/blu_dialect.h"
#include "blucomp/passes.h"

int main(int argc, char** argv) {
  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::registerAllToLLVMIRTranslations(registry);
  registry.insert<blu::comp::BluDialect>();
  mlir::registerAllPasses();
  blu::comp::registerBluPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "blu-opt: the blu dialect's optimizer driver\n", registry));
}
