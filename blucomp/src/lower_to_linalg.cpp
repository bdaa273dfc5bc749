// blu-lower-to-linalg: each blu.fused (and each elementwise blu op left alone by fusion) becomes
// one linalg.generic on a 2-D (rows, last dimension) view, its body built from the ops' scalar
// bodies (Note [Elementwise interface]).
#include "blucomp/passes.h"

#include <functional>

#include "mlir/Dialect/Utils/StructuredOpsUtils.h"
#include "mlir/IR/AffineMap.h"

namespace blu::comp {
#define GEN_PASS_DEF_BLULOWERTOLINALG
#include "blucomp/passes.h.inc"
}  // namespace blu::comp

using namespace mlir;
using namespace blu::comp;

namespace {

// Note [2-D iteration space]
// Every group is iterated as (rows, cols): cols is the result's last dimension, rows the product
// of the others. Inputs of the result's shape are reshaped to that view (collapse_shape for rank
// > 2, expand_shape for rank 1: both free views after bufferization), a rank-1 bias is indexed
// by the column alone. One rank for every group keeps the GPU mapping uniform (tile 1 x
// threads_per_block, blocks over rows and column tiles) whatever the tensor rank was.
// A body gives one scalar per result (a multi-output blu.fused: several, all of one shape).
using ScalarBody = std::function<llvm::SmallVector<Value>(OpBuilder&, Location, ValueRange)>;

llvm::SmallVector<ReassociationIndices> to2dReassociation(int64_t rank) {
  if (rank == 1) return {{0, 1}};
  ReassociationIndices leading;
  for (int64_t d = 0; d + 1 < rank; ++d) leading.push_back(d);
  return {leading, {rank - 1}};
}

Value to2d(OpBuilder& b, Location loc, Value value, RankedTensorType view) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getRank() == 2) return value;
  auto reassociation = to2dReassociation(type.getRank());
  if (type.getRank() == 1) return b.create<tensor::ExpandShapeOp>(loc, view, value, reassociation);
  return b.create<tensor::CollapseShapeOp>(loc, view, value, reassociation);
}

Value from2d(OpBuilder& b, Location loc, Value value, RankedTensorType type) {
  if (type.getRank() == 2) return value;
  auto reassociation = to2dReassociation(type.getRank());
  if (type.getRank() == 1)
    return b.create<tensor::CollapseShapeOp>(loc, type, value, reassociation);
  return b.create<tensor::ExpandShapeOp>(loc, type, value, reassociation);
}

// Note [Strided operands] (fuse_elementwise.cpp): the flat index a blu.view reads at iteration
// (row, col): offset + sum_k strides[k] * i_k, the window's leading indices i_k unravelled from
// the row (floordiv / mod by the window's sizes), the last one the column.
AffineMap viewMap(ViewOp view, MLIRContext* ctx) {
  llvm::SmallVector<int64_t> window(view.getWindow() ? llvm::ArrayRef<int64_t>(*view.getWindow())
                                                     : view.getResult().getType().getShape());
  const llvm::ArrayRef<int64_t> strides = view.getStrides();
  const size_t n = window.size();
  AffineExpr row = getAffineDimExpr(0, ctx), col = getAffineDimExpr(1, ctx);
  AffineExpr flat = getAffineConstantExpr(view.getOffset(), ctx) + col * strides[n - 1];
  int64_t inner = 1;  // product of the window's sizes between dimension k and the last
  for (size_t k = n - 1; k-- > 0;) {
    if (window[k] != 1 && strides[k] != 0) {
      AffineExpr index = inner == 1 ? row : row.floorDiv(inner);
      if (k > 0) index = index % window[k];
      flat = flat + index * strides[k];
    }
    inner *= window[k];
  }
  return AffineMap::get(2, 0, {flat}, ctx);
}

// One input of a generic: a value read through its shape's broadcast kind, or (view set) the
// whole of `value`, flattened, read through the view's strided map.
struct GenericInput {
  Value value;
  ViewOp view;
};

// One linalg.generic computing `body` elementwise over `inputs`, one result per `result_types`
// entry (all of the first one's shape).
llvm::SmallVector<Value> buildGeneric(OpBuilder& b, Location loc, llvm::ArrayRef<RankedTensorType> result_types,
                                      llvm::ArrayRef<GenericInput> inputs, const ScalarBody& body) {
  RankedTensorType result_type = result_types.front();
  MLIRContext* ctx = b.getContext();
  const int64_t cols = result_type.getShape().back();
  const int64_t rows = result_type.getNumElements() / std::max<int64_t>(cols, 1);
  AffineMap identity = AffineMap::getMultiDimIdentityMap(2, ctx);
  AffineMap by_column = AffineMap::get(2, 0, {getAffineDimExpr(1, ctx)}, ctx);

  llvm::SmallVector<Value> views;
  llvm::SmallVector<AffineMap> maps;
  for (const GenericInput& in : inputs) {
    Value input = in.value;
    auto type = cast<RankedTensorType>(input.getType());
    if (in.view) {  // Note [Strided operands]
      Value flat = input;
      if (type.getRank() != 1) {
        ReassociationIndices all;
        for (int64_t d = 0; d < type.getRank(); ++d) all.push_back(d);
        flat = b.create<tensor::CollapseShapeOp>(
            loc, RankedTensorType::get({type.getNumElements()}, type.getElementType()), input,
            llvm::SmallVector<ReassociationIndices>{all});
      }
      views.push_back(flat);
      maps.push_back(viewMap(in.view, ctx));
      continue;
    }
    switch (broadcastKind(type.getShape(), result_type.getShape())) {
      case BroadcastKind::kColumns:  // a bias: rank 1, the last dimension
        views.push_back(input);
        maps.push_back(by_column);
        break;
      case BroadcastKind::kRows:  // one value per row: [rows, 1], (row, 0)
        views.push_back(to2d(b, loc, input, RankedTensorType::get({rows, 1}, type.getElementType())));
        maps.push_back(AffineMap::get(2, 0, {getAffineDimExpr(0, ctx), getAffineConstantExpr(0, ctx)}, ctx));
        break;
      case BroadcastKind::kTrailing: {  // the trailing dims repeated: [R, cols], (row mod R, col)
        const int64_t r = type.getNumElements() / std::max<int64_t>(cols, 1);
        views.push_back(to2d(b, loc, input, RankedTensorType::get({r, cols}, type.getElementType())));
        maps.push_back(AffineMap::get(2, 0, {getAffineDimExpr(0, ctx) % r, getAffineDimExpr(1, ctx)}, ctx));
        break;
      }
      default:  // the result's shape (blu.fused's verifier allows nothing else)
        views.push_back(
            to2d(b, loc, input, RankedTensorType::get({rows, cols}, type.getElementType())));
        maps.push_back(identity);
    }
  }
  llvm::SmallVector<Value> inits;
  llvm::SmallVector<Type> init_types;
  for (RankedTensorType t : result_types) {
    maps.push_back(identity);
    inits.push_back(b.create<tensor::EmptyOp>(loc, llvm::ArrayRef<int64_t>{rows, cols}, t.getElementType()));
    init_types.push_back(inits.back().getType());
  }
  const size_t outs = result_types.size();
  llvm::SmallVector<utils::IteratorType> iterators(2, utils::IteratorType::parallel);
  auto generic = b.create<linalg::GenericOp>(
      loc, init_types, views, inits, maps, iterators,
      [&](OpBuilder& nb, Location nloc, ValueRange args) {
        // Note [bf16 compute]: the body runs in f32; bf16 is widened on load, narrowed on store.
        Type f32 = nb.getF32Type();
        llvm::SmallVector<Value> scalars;
        for (Value arg : args.drop_back(outs))
          scalars.push_back(arg.getType() == f32 ? arg : nb.create<arith::ExtFOp>(nloc, f32, arg));
        llvm::SmallVector<Value> results = body(nb, nloc, scalars);
        for (size_t i = 0; i < results.size(); ++i) {
          Type elem = result_types[i].getElementType();
          if (elem != f32) results[i] = nb.create<arith::TruncFOp>(nloc, elem, results[i]);
        }
        nb.create<linalg::YieldOp>(nloc, results);
      });
  llvm::SmallVector<Value> lowered;
  for (auto [r, t] : llvm::zip(generic.getResults(), result_types)) lowered.push_back(from2d(b, loc, r, t));
  return lowered;
}

// The generic's inputs for a blu.fused: each region argument read directly, then one per blu.view
// of an argument (Note [Strided operands]); `keys` the value each input's scalar stands for.
llvm::SmallVector<GenericInput> fusedInputs(FusedOp fused, llvm::SmallVector<Value>& keys) {
  Block& block = fused.getBody().front();
  llvm::SmallVector<GenericInput> inputs;
  for (auto [arg, input] : llvm::zip(block.getArguments(), fused.getInputs())) {
    if (readThroughViews(arg, /*only=*/true)) continue;
    inputs.push_back({input, nullptr});
    keys.push_back(arg);
  }
  for (auto view : block.getOps<ViewOp>()) {
    inputs.push_back({fused.getInputs()[cast<BlockArgument>(view.getInput()).getArgNumber()], view});
    keys.push_back(view.getResult());
  }
  return inputs;
}

// The scalar bodies of a blu.fused region's results: its ops' scalar bodies chained in order
// (`keys`: the region value each of `scalars` stands for, fusedInputs()).
llvm::SmallVector<Value> fusedScalarBody(FusedOp fused, llvm::ArrayRef<Value> keys, OpBuilder& b, Location loc,
                                         ValueRange scalars) {
  Block& block = fused.getBody().front();
  IRMapping scalar_of;
  for (auto [key, scalar] : llvm::zip(keys, scalars)) scalar_of.map(key, scalar);
  for (Operation& op : block.without_terminator()) {
    if (isa<ViewOp>(op)) continue;  // its scalar is an input's
    llvm::SmallVector<Value> operands;
    for (Value operand : op.getOperands()) operands.push_back(scalar_of.lookup(operand));
    Value result = cast<ElementwiseOpInterface>(&op).buildScalar(b, op.getLoc(), operands);
    scalar_of.map(op.getResult(0), result);
  }
  llvm::SmallVector<Value> out;
  for (Value v : cast<YieldOp>(block.getTerminator()).getValues()) out.push_back(scalar_of.lookup(v));
  return out;
}

struct LowerToLinalgPass : blu::comp::impl::BluLowerToLinalgBase<LowerToLinalgPass> {
  void runOnOperation() override {
    llvm::SmallVector<Operation*> work;
    bool unsupported = false;
    getOperation().walk<WalkOrder::PreOrder>([&](Operation* op) {
      if (isa<FusedOp>(op)) {
        work.push_back(op);
        return WalkResult::skip();  // its body is lowered with it
      }
      if (isa<ElementwiseOpInterface>(op)) work.push_back(op);
      if (isa<MatmulOp, MatmulEpilogueOp, LayerNormOp>(op)) {
        op->emitOpError(
            "has no lowering to linalg yet (blu.matmul becomes a blublas call in "
            "the runtime; blu.layernorm a reduction kernel: blucomp/README.md)");
        unsupported = true;
      }
      return WalkResult::advance();
    });
    if (unsupported) return signalPassFailure();

    for (Operation* op : work) {
      OpBuilder b(op);
      llvm::SmallVector<RankedTensorType> result_types;
      for (Value r : op->getResults()) result_types.push_back(cast<RankedTensorType>(r.getType()));
      llvm::SmallVector<Value> lowered;
      if (auto fused = dyn_cast<FusedOp>(op)) {
        llvm::SmallVector<Value> keys;
        const llvm::SmallVector<GenericInput> inputs = fusedInputs(fused, keys);
        lowered = buildGeneric(b, op->getLoc(), result_types, inputs,
                               [fused, &keys](OpBuilder& nb, Location loc, ValueRange scalars) {
                                 return fusedScalarBody(fused, keys, nb, loc, scalars);
                               });
      } else {
        auto elementwise = cast<ElementwiseOpInterface>(op);
        llvm::SmallVector<GenericInput> inputs;
        for (Value v : op->getOperands()) inputs.push_back({v, nullptr});
        lowered = buildGeneric(b, op->getLoc(), result_types, inputs,
                               [elementwise](OpBuilder& nb, Location loc, ValueRange scalars) mutable {
                                 return llvm::SmallVector<Value>{elementwise.buildScalar(nb, loc, scalars)};
                               });
      }
      op->replaceAllUsesWith(lowered);
      op->erase();
    }
  }
};

}  // namespace
