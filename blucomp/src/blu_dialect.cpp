// The `blu` dialect's registration: the generated dialect and interface definitions, and the op
// list. Op verifiers live in blu_ops.cpp, per-element semantics in scalar_bodies.cpp.
#include "blucomp/blu_dialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"

using namespace mlir;
using namespace blu::comp;

#include "blucomp/blu_dialect.cpp.inc"
#include "blucomp/blu_interfaces.cpp.inc"

void BluDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "blucomp/blu_ops.cpp.inc"
      >();
}
