// blucomp's passes and pipelines: registration for blu-opt and constructors for C++ pipelines.
#pragma once

#include <memory>
#include <string>

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include "blucomp/blu_dialect.h"

namespace blu::comp {

#define GEN_PASS_DECL
#include "blucomp/passes.h.inc"

// Options of the blu-to-nvvm pipeline (Note [GPU pipeline] in pipelines.cpp).
struct GpuPipelineOptions {
  std::string chip = "sm_90";
  std::string features = "+ptx80";
  int threads_per_block = 256;  // the threads of a block (Note [Thread mapping] in pipelines.cpp)
  // The groups' last dimension when known (blu-plan knows each group's): one narrower than
  // threads_per_block makes a block cover threads_per_block / pow2ceil(last_dim) rows of it;
  // 0 (unknown, or wide): one row, threads_per_block columns.
  int64_t last_dim = 0;
  // Function results become out-parameters the kernel writes in place (buffer-results-to-out-
  // params with hoist-static-allocs): what a runtime binding every pointer to a buffer needs.
  bool results_as_out_params = false;
  // Elements per vector access in the group loops (Note [Vectorized group kernels] in
  // vectorize_columns.cpp); 0 or 1: scalar. last_dim then counts vectors, not elements.
  int64_t vector_width = 0;
};

// Fills `pm` with: canonicalize, CSE, fusion, blu -> linalg, bufferize, parallel loops -> gpu,
// kernel outlining, NVVM, gpu-module-to-binary (PTX text, format=isa).
void buildBluToNvvmPipeline(mlir::OpPassManager& pm, const GpuPipelineOptions& options);

// The front half only (canonicalize, CSE, fusion): what `blu-opt --blu-fuse-pipeline` runs.
void buildBluFusePipeline(mlir::OpPassManager& pm);

// Registers the passes and the `blu-fuse-pipeline` / `blu-to-nvvm` pipelines with mlir-opt's
// command line.
void registerBluPasses();

#define GEN_PASS_REGISTRATION
#include "blucomp/passes.h.inc"

}  // namespace blu::comp
