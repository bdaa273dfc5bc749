// The blucomp pipelines (fusion front half; the whole blu -> PTX lowering) and the registration
// of passes and pipelines with the mlir-opt command line.
#include "blucomp/passes.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/SCFToGPU/SCFToGPUPass.h"
#include "mlir/Dialect/Bufferization/Transforms/OneShotAnalysis.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/SCF/Transforms/Passes.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace blu::comp {

void buildBluFusePipeline(OpPassManager& pm) {
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addNestedPass<func::FuncOp>(createBluFuseElementwise());
}

// Note [GPU pipeline]
// Upstream passes only, in this order:
//  1. blu-lower-to-linalg: one linalg.generic per fused group (Note [2-D iteration space]).
//  2. one-shot-bufferize with function boundaries and identity layouts: function arguments and
//     results become plain memrefs, the reshapes free views; each generic writes a fresh buffer
//     (the memory plan will later replace those memref.allocs with arena offsets).
//  3. linalg -> scf.parallel, tiled 1 x threads_per_block, gpu-map-parallel-loops + convert-
//     parallel-loops-to-gpu: blocks over (rows, column tiles), threads over a column tile.
//     Tiling uses noMinMaxBounds: the inner loop always has threads_per_block iterations and a
//     partial last tile is an scf.if guard in the kernel (with affine.min bounds the launch size
//     is not a constant and convert-parallel-loops-to-gpu leaves the loop on the host).
//  4. gpu-launch-sink-index-computations (constants move into the kernel instead of becoming
//     kernel arguments), gpu-kernel-outlining, blu-expand-math (polynomial tanh) then
//     convert-math-to-llvm (fabs/fma as LLVM intrinsics, not __nv_* calls): no libdevice is
//     needed, none is on the device, and the PTX does not depend on where a CUDA toolkit
//     happens to be; lower-affine (tile offsets) and convert-scf-to-cf (the partial-tile guard),
//     nvvm-attach- target (chip/features), convert-gpu-to-nvvm with the bare-pointer calling
//     convention (a kernel takes one pointer per buffer: what the runtime binds to arena offsets),
//     and gpu-module-to-binary format=isa: PTX text in each gpu.binary, read by collectPtx().
//  The host side (func.func with gpu.launch_func) stays at the memref level: the runtime, not
//  MLIR's CUDA wrappers, launches the kernels.
void buildBluToNvvmPipeline(OpPassManager& pm, const GpuPipelineOptions& options) {
  buildBluFusePipeline(pm);
  pm.addNestedPass<func::FuncOp>(createBluLowerToLinalg());

  bufferization::OneShotBufferizationOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = true;
  bufferize.setFunctionBoundaryTypeConversion(bufferization::LayoutMapOption::IdentityLayoutMap);
  pm.addPass(bufferization::createOneShotBufferizePass(bufferize));
  if (options.results_as_out_params) {
    bufferization::BufferResultsToOutParamsOpts out_params;
    out_params.hoistStaticAllocs = true;
    pm.addPass(bufferization::createBufferResultsToOutParamsPass(out_params));
  }
  pm.addPass(createCanonicalizerPass());

  pm.addNestedPass<func::FuncOp>(createConvertLinalgToParallelLoopsPass());
  pm.addNestedPass<func::FuncOp>(
      createParallelLoopTilingPass({1, static_cast<int64_t>(options.threads_per_block)},
                                   /*noMinMaxBounds=*/true));
  pm.addNestedPass<func::FuncOp>(createGpuMapParallelLoopsPass());
  pm.addNestedPass<func::FuncOp>(createParallelLoopToGpuPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addPass(createGpuLauchSinkIndexComputationsPass());
  pm.addPass(createGpuKernelOutliningPass());

  pm.addNestedPass<gpu::GPUModuleOp>(createBluExpandMath());
  pm.addNestedPass<gpu::GPUModuleOp>(createConvertMathToLLVMPass());
  pm.addNestedPass<gpu::GPUModuleOp>(createLowerAffinePass());
  pm.addNestedPass<gpu::GPUModuleOp>(createConvertSCFToCFPass());
  GpuNVVMAttachTargetOptions target;
  target.chip = options.chip;
  target.features = options.features;
  pm.addPass(createGpuNVVMAttachTarget(target));
  ConvertGpuOpsToNVVMOpsOptions to_nvvm;
  to_nvvm.useBarePtrCallConv = true;
  pm.addNestedPass<gpu::GPUModuleOp>(createConvertGpuOpsToNVVMOps(to_nvvm));
  pm.addNestedPass<gpu::GPUModuleOp>(createCanonicalizerPass());
  pm.addNestedPass<gpu::GPUModuleOp>(createReconcileUnrealizedCastsPass());
  GpuModuleToBinaryPassOptions to_binary;
  to_binary.compilationTarget = "isa";
  pm.addPass(createGpuModuleToBinaryPass(to_binary));
}

namespace {

struct BluToNvvmCliOptions : PassPipelineOptions<BluToNvvmCliOptions> {
  Option<std::string> chip{*this, "chip", llvm::cl::desc("GPU architecture, e.g. sm_90"),
                           llvm::cl::init("sm_90")};
  Option<std::string> features{*this, "features", llvm::cl::desc("PTX features, e.g. +ptx80"),
                               llvm::cl::init("+ptx80")};
  Option<int> threads{*this, "threads-per-block",
                      llvm::cl::desc("threads of a block (the column tile)"), llvm::cl::init(256)};
};

}  // namespace

void registerBluPasses() {
  registerBluCompPasses();
  PassPipelineRegistration<>("blu-fuse-pipeline", "canonicalize, CSE, blu-fuse-elementwise",
                             [](OpPassManager& pm) { buildBluFusePipeline(pm); });
  PassPipelineRegistration<BluToNvvmCliOptions>(
      "blu-to-nvvm", "blu -> fused linalg -> gpu -> NVVM -> PTX (gpu.binary, format=isa)",
      [](OpPassManager& pm, const BluToNvvmCliOptions& cli) {
        GpuPipelineOptions options;
        options.chip = cli.chip;
        options.features = cli.features;
        options.threads_per_block = cli.threads;
        buildBluToNvvmPipeline(pm, options);
      });
}

}  // namespace blu::comp
