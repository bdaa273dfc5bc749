// blu-vectorize-columns: a fused group's (rows, cols) loop with W columns per iteration, its
// loads and stores W-wide vector accesses, its arithmetic unrolled per lane (Note [Vectorized
// group kernels]); blu-align-vector-access: those accesses' alignment after the NVVM lowering.
#include "blucomp/passes.h"

#include "llvm/ADT/DenseSet.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/IRMapping.h"

namespace blu::comp {
#define GEN_PASS_DEF_BLUVECTORIZECOLUMNS
#define GEN_PASS_DEF_BLUALIGNVECTORACCESS
#include "blucomp/passes.h.inc"
}  // namespace blu::comp

using namespace mlir;

namespace {

// Note [Vectorized group kernels]
// A group kernel (Note [2-D iteration space]) read and wrote one element per thread: scalar
// ld/st of 4 (f32) or 2 (bf16) bytes, at 1-2.9 TB/s on the H200 (session 27), where blublas's
// hand-written elementwise kernels move 16 bytes per access. This pass rewrites the group's loop,
// after convert-linalg-to-parallel-loops and before the tiling, from
//   scf.parallel (i, j) in [0, R) x [0, C)      to      scf.parallel (i, jv) in [0, R) x [0, C / W)
// with j = jv * W: every load or store whose last index is j becomes one vector.load / vector.store
// of W elements at column j (operands of the result's shape, a bias, the trailing-dims broadcast),
// a load that does not depend on j (a per-row statistic, [rows, 1]) stays one scalar load shared by
// the lanes, and every op in between is cloned once per lane on the lane's scalars (vector.extract):
// the body's arithmetic stays scalar f32 (the GPU has no f32 SIMD: this is what the NVPTX backend
// would do to vector arithmetic anyway), so blu-expand-math and the rest of the pipeline see the
// ops they always saw. Same operations in the same order per element: the same bits as the scalar
// kernel.
// When: C % W == 0 (static), the loop's bounds constant from 0 with step 1, j used only as the last
// index of loads and stores into memrefs whose last dimension is contiguous and whose other strides
// and offset are multiples of W (so every access is W-aligned relative to the base), no op with
// regions. Anything else (a strided view's flattened index, Note [Strided operands]) leaves the
// loop scalar; the function then carries no blu.vector_width attribute. W: the pass option; blu-plan
// takes 16 bytes over the group's widest element (4 with any f32, 8 when every buffer is 16-bit).
// Alignment: vector.load lowers to an llvm.load aligned to the element (MLIR 19), which the NVPTX
// backend splits into scalar loads; blu-align-vector-access (after convert-gpu-to-nvvm) sets each
// vector access's alignment to its size. That holds when every buffer the kernel reads or writes
// with vectors starts W-element aligned: the plan says which parameters (vector_params) and the
// runtime binds the kernel only when their offsets are multiples of W (base pointers are 256-byte
// aligned arena or allocator blocks), and checks each pointer at launch.
// What the rewrite does with each op of the loop body.
enum class Access { kUniform, kLane, kVectorLoad, kVectorStore };

bool strideOk(MemRefType type, int64_t width) {
  int64_t offset = 0;
  llvm::SmallVector<int64_t> strides;
  if (failed(getStridesAndOffset(type, strides, offset)) || strides.empty() || strides.back() != 1) return false;
  if (ShapedType::isDynamic(offset) || offset % width != 0) return false;
  for (size_t d = 0; d + 1 < strides.size(); ++d)
    if (ShapedType::isDynamic(strides[d]) || strides[d] % width != 0) return false;
  return true;
}

std::optional<int64_t> constantIndex(Value v) {
  if (auto c = v.getDefiningOp<arith::ConstantIndexOp>()) return c.value();
  return std::nullopt;
}

// The loop's plan: each body op's kind, or failure (the loop stays scalar).
LogicalResult classify(scf::ParallelOp loop, int64_t width, llvm::DenseMap<Operation*, Access>& kinds) {
  if (loop.getNumLoops() != 2 || !loop.getInitVals().empty()) return failure();
  for (int d = 0; d < 2; ++d) {
    auto lb = constantIndex(loop.getLowerBound()[d]), step = constantIndex(loop.getStep()[d]);
    if (!lb || *lb != 0 || !step || *step != 1) return failure();
  }
  auto cols = constantIndex(loop.getUpperBound()[1]);
  if (!cols || *cols % width != 0 || *cols < width) return failure();
  if (!constantIndex(loop.getUpperBound()[0])) return failure();
  Value j = loop.getInductionVars()[1];
  llvm::DenseSet<Value> varying;
  auto isVarying = [&](Value v) { return varying.contains(v); };
  // An access at [uniform..., j] into a memref whose rows keep W alignment.
  auto vectorAccess = [&](Value memref, ValueRange indices) -> std::optional<bool> {
    if (isVarying(memref)) return std::nullopt;
    bool any = false;
    for (Value idx : indices.drop_back()) any |= idx == j || isVarying(idx);
    if (any) return std::nullopt;  // j (or a lane value) outside the last index: not this pattern
    if (indices.empty() || indices.back() != j) {
      if (!indices.empty() && isVarying(indices.back())) return std::nullopt;
      return false;  // uniform access
    }
    // A vector access is a buffer of the loop's columns (what the plan's vector_params list).
    auto type = cast<MemRefType>(memref.getType());
    if (type.getRank() < 1 || type.getShape().back() != *cols || !strideOk(type, width)) return std::nullopt;
    return true;
  };
  for (Operation& op : loop.getBody()->without_terminator()) {
    if (op.getNumRegions() != 0) return failure();
    if (auto load = dyn_cast<memref::LoadOp>(op)) {
      auto v = vectorAccess(load.getMemRef(), load.getIndices());
      if (!v) return failure();
      kinds[&op] = *v ? Access::kVectorLoad : Access::kUniform;
      if (*v) varying.insert(load.getResult());
      continue;
    }
    if (auto store = dyn_cast<memref::StoreOp>(op)) {
      if (store.getValueToStore() == j) return failure();  // the column as a value
      auto v = vectorAccess(store.getMemRef(), store.getIndices());
      if (!v || !*v) return failure();  // a store must cover every column once
      kinds[&op] = Access::kVectorStore;
      continue;
    }
    // Memory effects other than the loads and stores above: not this pattern.
    if (!isMemoryEffectFree(&op)) return failure();
    bool lane = false;
    for (Value operand : op.getOperands()) {
      if (operand == j) return failure();  // the column as a value (a view's flat index)
      lane |= isVarying(operand);
    }
    kinds[&op] = lane ? Access::kLane : Access::kUniform;
    if (lane)
      for (Value r : op.getResults()) varying.insert(r);
  }
  return success();
}

void vectorize(scf::ParallelOp loop, int64_t width, const llvm::DenseMap<Operation*, Access>& kinds) {
  OpBuilder b(loop);
  Location loc = loop.getLoc();
  Value c0 = b.create<arith::ConstantIndexOp>(loc, 0), c1 = b.create<arith::ConstantIndexOp>(loc, 1);
  const int64_t cols = *constantIndex(loop.getUpperBound()[1]);
  Value col_groups = b.create<arith::ConstantIndexOp>(loc, cols / width);
  Value rows = loop.getUpperBound()[0];
  Value old_i = loop.getInductionVars()[0], old_j = loop.getInductionVars()[1];
  b.create<scf::ParallelOp>(
      loc, ValueRange{c0, c0}, ValueRange{rows, col_groups}, ValueRange{c1, c1},
      [&](OpBuilder& nb, Location nloc, ValueRange ivs) {
        Value j0 = nb.create<arith::MulIOp>(nloc, ivs[1], nb.create<arith::ConstantIndexOp>(nloc, width));
        IRMapping base;
        base.map(old_i, ivs[0]);
        base.map(old_j, j0);  // only ever the last index of a vector access
        llvm::SmallVector<IRMapping> lanes(static_cast<size_t>(width), base);
        for (Operation& op : loop.getBody()->without_terminator()) {
          const Access kind = kinds.lookup(&op);
          if (kind == Access::kUniform) {
            Operation* c = nb.clone(op, base);
            for (auto [o, n] : llvm::zip(op.getResults(), c->getResults()))
              for (IRMapping& m : lanes) m.map(o, n);
          } else if (kind == Access::kVectorLoad) {
            auto load = cast<memref::LoadOp>(op);
            llvm::SmallVector<Value> indices;
            for (Value idx : load.getIndices()) indices.push_back(base.lookupOrDefault(idx));
            auto type = VectorType::get({width}, load.getType());
            Value v = nb.create<vector::LoadOp>(op.getLoc(), type, base.lookupOrDefault(load.getMemRef()), indices);
            for (int64_t l = 0; l < width; ++l)
              lanes[static_cast<size_t>(l)].map(load.getResult(),
                                                nb.create<vector::ExtractOp>(op.getLoc(), v, llvm::ArrayRef<int64_t>{l}));
          } else if (kind == Access::kVectorStore) {
            auto store = cast<memref::StoreOp>(op);
            auto type = VectorType::get({width}, store.getValueToStore().getType());
            Value v = nb.create<vector::BroadcastOp>(op.getLoc(), type, lanes[0].lookupOrDefault(store.getValueToStore()));
            for (int64_t l = 1; l < width; ++l)
              v = nb.create<vector::InsertOp>(op.getLoc(), lanes[static_cast<size_t>(l)].lookupOrDefault(store.getValueToStore()), v,
                                              llvm::ArrayRef<int64_t>{l});
            llvm::SmallVector<Value> indices;
            for (Value idx : store.getIndices()) indices.push_back(base.lookupOrDefault(idx));
            nb.create<vector::StoreOp>(op.getLoc(), v, base.lookupOrDefault(store.getMemRef()), indices);
          } else {  // a lane op: once per lane, on that lane's scalars
            for (IRMapping& m : lanes) nb.clone(op, m);
          }
        }
      });
  loop.erase();
}

struct VectorizeColumnsPass : blu::comp::impl::BluVectorizeColumnsBase<VectorizeColumnsPass> {
  using BluVectorizeColumnsBase::BluVectorizeColumnsBase;
  void runOnOperation() override {
    if (width < 2) return;
    func::FuncOp fn = getOperation();
    llvm::SmallVector<scf::ParallelOp> loops;
    fn.walk([&](scf::ParallelOp loop) {
      if (!loop->getParentOfType<scf::ParallelOp>()) loops.push_back(loop);
    });
    int vectorized = 0;
    for (scf::ParallelOp loop : loops) {
      llvm::DenseMap<Operation*, Access> kinds;
      if (failed(classify(loop, width, kinds))) continue;
      vectorize(loop, width, kinds);
      ++vectorized;
    }
    if (vectorized > 0 && vectorized == static_cast<int>(loops.size()))
      fn->setAttr("blu.vector_width", IntegerAttr::get(IntegerType::get(&getContext(), 64), width));
  }
};

// Sets each LLVM vector load / store's alignment to its size (up to 16 bytes): Note [Vectorized
// group kernels] says why that is true of the accesses blu-vectorize-columns made.
struct AlignVectorAccessPass : blu::comp::impl::BluAlignVectorAccessBase<AlignVectorAccessPass> {
  void runOnOperation() override {
    auto bytesOf = [](Type t) -> int64_t {
      auto v = dyn_cast<VectorType>(t);
      if (!v || v.getRank() != 1 || v.isScalable() || !v.getElementType().isIntOrFloat()) return 0;
      const unsigned bits = v.getElementType().getIntOrFloatBitWidth();
      const int64_t bytes = v.getNumElements() * bits / 8;
      return bytes <= 16 && (bytes & (bytes - 1)) == 0 ? bytes : 0;
    };
    getOperation()->walk([&](Operation* op) {
      if (auto load = dyn_cast<LLVM::LoadOp>(op)) {
        if (int64_t n = bytesOf(load.getType())) load.setAlignment(static_cast<uint64_t>(n));
      } else if (auto store = dyn_cast<LLVM::StoreOp>(op)) {
        if (int64_t n = bytesOf(store.getValue().getType())) store.setAlignment(static_cast<uint64_t>(n));
      }
    });
  }
};

}  // namespace
