// blu-opt: mlir-opt with the blu dialect, blucomp's passes and pipelines, and every upstream
// dialect, pass and LLVM IR translation (gpu-module-to-binary needs the latter).
#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

#include "blucomp/blu_dialect.h"
#include "tool_registry.h"
#include "blucomp/passes.h"

int main(int argc, char** argv) {
  mlir::DialectRegistry registry;
  blu::comp::registerToolDialects(registry);
  mlir::registerAllPasses();
  blu::comp::registerBluPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "blu-opt: the blu dialect's optimizer driver\n", registry));
}
