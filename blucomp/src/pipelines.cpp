// The blucomp pipelines (fusion front half; the whole blu -> PTX lowering) and the registration
// of passes and pipelines with the mlir-opt command line.
#include "blucomp/passes.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/SCFToGPU/SCFToGPUPass.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVMPass.h"
#include "mlir/Dialect/Bufferization/Transforms/OneShotAnalysis.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/ParallelLoopMapper.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
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
//  3. linalg -> scf.parallel, tiled rows x cols (Note [Thread mapping]), blu-map-parallel-loops +
//     convert-parallel-loops-to-gpu: blocks over (row tiles, column tiles), threads over a tile.
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
namespace {

// Note [Thread mapping]
// A group's iteration space is (rows, cols) (Note [2-D iteration space]), tiled rows x cols with
// rows * cols = threads_per_block: one row of threads_per_block columns when the last dimension
// is at least that wide, else pow2ceil(last dim) columns and as many rows as fill the block (the
// rotary embedding's [B, H, T, 32] halves used 32 of 256 threads, 80 us a launch on the H200 where
// 12 us move their bytes). The tiles are mapped as upstream's gpu-map-parallel-loops would (the
// outer loop's dims to block x, y), but the tile's columns go to thread x and its rows to thread
// y, so consecutive threads read consecutive elements (upstream maps the first dim to x: rows,
// which was harmless only while a tile was one row).
struct MapParallelLoopsPass : PassWrapper<MapParallelLoopsPass, OperationPass<func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(MapParallelLoopsPass)
  StringRef getArgument() const override { return "blu-map-parallel-loops"; }
  StringRef getDescription() const override {
    return "map tiled scf.parallel loops to blocks (outer) and threads (inner: columns to x)";
  }
  void getDependentDialects(DialectRegistry& registry) const override { registry.insert<gpu::GPUDialect>(); }
  void runOnOperation() override {
    MLIRContext* ctx = &getContext();
    AffineMap id = AffineMap::getMultiDimIdentityMap(1, ctx);
    auto map = [&](scf::ParallelOp loop, llvm::ArrayRef<gpu::Processor> order) {
      llvm::SmallVector<gpu::ParallelLoopDimMappingAttr> dims;
      for (unsigned i = 0; i < loop.getNumLoops(); ++i)
        dims.push_back(gpu::ParallelLoopDimMappingAttr::get(
            ctx, i < order.size() ? order[i] : gpu::Processor::Sequential, id, id));
      (void)gpu::setMappingAttr(loop, dims);
    };
    getOperation().walk([&](scf::ParallelOp outer) {
      if (outer->getParentOfType<scf::ParallelOp>()) return;
      map(outer, {gpu::Processor::BlockX, gpu::Processor::BlockY, gpu::Processor::BlockZ});
      for (auto inner : outer.getBody()->getOps<scf::ParallelOp>()) {
        if (inner.getNumLoops() == 2) map(inner, {gpu::Processor::ThreadY, gpu::Processor::ThreadX});
        else map(inner, {gpu::Processor::ThreadX, gpu::Processor::ThreadY, gpu::Processor::ThreadZ});
        inner.walk([&](scf::ParallelOp deeper) {
          if (deeper != inner) map(deeper, {});
        });
      }
    });
  }
};

}  // namespace

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
  // No canonicalization before it: it would fold a one-row group's unit dimension away and leave a
  // 1-D loop the tiling below would tile as rows (review of 893c5e8).
  if (options.vector_width > 1)
    pm.addNestedPass<func::FuncOp>(createBluVectorizeColumns(BluVectorizeColumnsOptions{options.vector_width}));
  const int64_t threads = options.threads_per_block;
  int64_t tile_cols = threads;
  if (options.last_dim > 0 && options.last_dim < threads) {
    tile_cols = 1;
    while (tile_cols < options.last_dim) tile_cols *= 2;
  }
  pm.addNestedPass<func::FuncOp>(
      createParallelLoopTilingPass({threads / tile_cols, tile_cols}, /*noMinMaxBounds=*/true));
  pm.addNestedPass<func::FuncOp>(std::make_unique<MapParallelLoopsPass>());
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
  if (options.vector_width > 1) pm.addNestedPass<gpu::GPUModuleOp>(createConvertVectorToLLVMPass());
  ConvertGpuOpsToNVVMOpsOptions to_nvvm;
  to_nvvm.useBarePtrCallConv = true;
  pm.addNestedPass<gpu::GPUModuleOp>(createConvertGpuOpsToNVVMOps(to_nvvm));
  pm.addNestedPass<gpu::GPUModuleOp>(createCanonicalizerPass());
  pm.addNestedPass<gpu::GPUModuleOp>(createReconcileUnrealizedCastsPass());
  if (options.vector_width > 1) pm.addNestedPass<gpu::GPUModuleOp>(createBluAlignVectorAccess());
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
  Option<int64_t> vector_width{*this, "vector-width",
                               llvm::cl::desc("elements per vector access (0: scalar; Note [Vectorized group kernels])"),
                               llvm::cl::init(0)};
  Option<int64_t> last_dim{*this, "last-dim",
                           llvm::cl::desc("the groups' last dimension (0: unknown; Note [Thread mapping])"),
                           llvm::cl::init(0)};
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
        options.last_dim = cli.last_dim;
        options.vector_width = cli.vector_width;
        buildBluToNvvmPipeline(pm, options);
      });
}

}  // namespace blu::comp
