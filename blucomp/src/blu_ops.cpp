// The blu ops' generated definitions and their verifiers. Note [Verifier messages]: every error
// names the operand and prints the types involved and the type that was expected, so a bad
// trace is found from the message alone (ODS's type constraints already reject dynamic shapes,
// unranked tensors and element types other than f32/bf16).
#include "blucomp/blu_dialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace blu::comp;

#define GET_OP_CLASSES
#include "blucomp/blu_ops.cpp.inc"

namespace {

RankedTensorType rankedType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

// A rank-1 tensor<N x elem> of the last dimension of `like`, with `elem` given.
RankedTensorType lastDimVectorType(RankedTensorType like, Type elem) {
  return RankedTensorType::get({like.getShape().back()}, elem);
}

// The shape of `like` without its last dimension, as a tensor of `elem`.
RankedTensorType rowsType(RankedTensorType like, Type elem) {
  return RankedTensorType::get(like.getShape().drop_back(), elem);
}

}  // namespace

namespace blu::comp {

// Note [Broadcast operands]: how an operand of shape `in` reaches the elements of `out`.
BroadcastKind broadcastKind(ArrayRef<int64_t> in, ArrayRef<int64_t> out) {
  if (in == out) return BroadcastKind::kSame;
  if (out.empty()) return BroadcastKind::kNone;
  if (in.size() == 1 && in[0] == out.back()) return BroadcastKind::kColumns;
  if (in.size() == out.size() && in.back() == 1 && in.drop_back() == out.drop_back()) return BroadcastKind::kRows;
  if (in.size() >= 2 && in.size() < out.size() && in == out.take_back(in.size())) return BroadcastKind::kTrailing;
  // The 2-D form of the same (a fused group outlined on its (rows, cols) view: Note [Fused group
  // kernels]): [R, cols] against [rows, cols], R a proper divisor of rows, repeated down the rows.
  if (in.size() == 2 && out.size() == 2 && in[1] == out[1] && in[0] > 0 && in[0] < out[0] && out[0] % in[0] == 0)
    return BroadcastKind::kTrailing;
  return BroadcastKind::kNone;
}

}  // namespace blu::comp

LogicalResult BroadcastOp::verify() {
  RankedTensorType in = rankedType(getInput()), out = rankedType(getResult());
  if (in.getElementType() != out.getElementType())
    return emitOpError("input element type ") << in.getElementType() << " differs from the result's "
                                              << out.getElementType();
  const BroadcastKind k = broadcastKind(in.getShape(), out.getShape());
  if (k == BroadcastKind::kNone || k == BroadcastKind::kSame)
    return emitOpError("cannot broadcast ") << in << " to " << out
                                            << " (need the result's shape with last dimension 1, or its trailing "
                                               "dimensions)";
  return success();
}

LogicalResult BiasAddOp::verify() {
  RankedTensorType input = rankedType(getInput());
  RankedTensorType bias = rankedType(getBias());
  if (input.getRank() < 1) return emitOpError("input must have rank >= 1, got ") << input;
  if (bias.getElementType() != input.getElementType())
    return emitOpError("bias element type ")
           << bias.getElementType() << " differs from the input's " << input.getElementType();
  RankedTensorType expected = lastDimVectorType(input, input.getElementType());
  if (bias != expected)
    return emitOpError("bias ") << bias << " does not match the last dimension of input " << input
                                << ": expected " << expected;
  return success();
}

LogicalResult LayerNormOp::verify() {
  RankedTensorType input = rankedType(getInput());
  if (input.getRank() < 1) return emitOpError("input must have rank >= 1, got ") << input;
  RankedTensorType param = lastDimVectorType(input, input.getElementType());
  if (rankedType(getWeight()) != param)
    return emitOpError("weight ") << getWeight().getType() << " does not match input " << input
                                  << ": expected " << param;
  if (rankedType(getBias()) != param)
    return emitOpError("bias ") << getBias().getType() << " does not match input " << input
                                << ": expected " << param;
  if (getResult().getType() != input)
    return emitOpError("result ") << getResult().getType() << " must have the input's type "
                                  << input;
  RankedTensorType stats = rowsType(input, Float32Type::get(getContext()));
  if (rankedType(getMean()) != stats || rankedType(getRstd()) != stats)
    return emitOpError("mean ") << getMean().getType() << " and rstd " << getRstd().getType()
                                << " must both be " << stats << " (f32, one per row)";
  if (!(getEpsilon().convertToFloat() > 0.0f))
    return emitOpError("epsilon must be > 0, got ") << getEpsilon().convertToFloat();
  return success();
}

// The product op(lhs) op(rhs) -> result of blu.matmul and blu.matmul_epilogue: ranks, one
// element type, the contraction sizes and the result shape; sets *n to the result's columns.
static LogicalResult verifyProduct(Operation* op, Value lhs_v, Value rhs_v, Value result_v, bool tl,
                                   bool tr, int64_t* n_out = nullptr) {
  RankedTensorType lhs = rankedType(lhs_v);
  RankedTensorType rhs = rankedType(rhs_v);
  RankedTensorType result = rankedType(result_v);
  if (lhs.getRank() != 2 || rhs.getRank() != 2 || result.getRank() != 2)
    return op->emitOpError("operands and result must be rank 2, got ")
           << lhs << ", " << rhs << " -> " << result;
  if (lhs.getElementType() != rhs.getElementType())
    return op->emitOpError("lhs ") << lhs << " and rhs " << rhs << " must have one element type";
  const int64_t m = tl ? lhs.getDimSize(1) : lhs.getDimSize(0);
  const int64_t k_lhs = tl ? lhs.getDimSize(0) : lhs.getDimSize(1);
  const int64_t k_rhs = tr ? rhs.getDimSize(1) : rhs.getDimSize(0);
  const int64_t n = tr ? rhs.getDimSize(0) : rhs.getDimSize(1);
  if (k_lhs != k_rhs)
    return op->emitOpError("contraction sizes differ: lhs ")
           << lhs << (tl ? " (transposed)" : "") << " has K = " << k_lhs << ", rhs " << rhs
           << (tr ? " (transposed)" : "") << " has K = " << k_rhs;
  if (result.getDimSize(0) != m || result.getDimSize(1) != n)
    return op->emitOpError("result ") << result << " must be " << m << "x" << n;
  if (n_out) *n_out = n;
  return success();
}

LogicalResult MatmulOp::verify() {
  return verifyProduct(getOperation(), getLhs(), getRhs(), getResult(), getTransposeLhs(),
                       getTransposeRhs());
}

LogicalResult MatmulEpilogueOp::verify() {
  const llvm::StringRef e = getEpilogue();
  if (e != "bias" && e != "bias_residual" && e != "bias_gelu" && e != "gelu_grad" &&
      e != "bias_grad")
    return emitOpError("unknown epilogue '")
           << e << "' (bias, bias_residual, bias_gelu, gelu_grad, bias_grad)";
  const size_t want_operands = e == "bias_residual" ? 4 : e == "bias_grad" ? 2 : 3;
  if (getOperands().size() != want_operands)
    return emitOpError("epilogue '") << e << "' takes " << want_operands << " operands, got "
                                     << getOperands().size();
  const size_t results = getResults().size();
  const bool results_ok = e == "bias_gelu" ? (results == 1 || results == 2)
                          : e == "bias_grad" ? results == 2
                                             : results == 1;
  if (!results_ok)
    return emitOpError("epilogue '")
           << e << "' has " << (e == "bias_gelu" ? "1 or 2" : e == "bias_grad" ? "2" : "1")
           << " results, got " << results;
  int64_t n = 0;
  if (failed(verifyProduct(getOperation(), getOperands()[0], getOperands()[1], getResults()[0],
                           getTransposeLhs(), getTransposeRhs(), &n)))
    return failure();
  RankedTensorType out = rankedType(getResults()[0]);
  if (e == "bias_grad") {  // the row sums of op(lhs): one per row of the result
    RankedTensorType g = rankedType(getResults()[1]);
    if (g.getRank() != 1 || g.getDimSize(0) != out.getDimSize(0))
      return emitOpError("bias gradient ") << g << " must be a vector of " << out.getDimSize(0);
  }
  // Operand 2 is the bias (a vector of the result's columns) for the bias kinds, the
  // pre-activation (the result's shape) for gelu_grad; operand 3, the residual, the result's shape.
  for (auto [index, extra] : llvm::enumerate(getOperands().drop_front(2))) {
    RankedTensorType t = rankedType(extra);
    const bool want_vector = index == 0 && e != "gelu_grad";
    if (want_vector && !(t.getRank() == 1 && t.getDimSize(0) == n))
      return emitOpError("operand #") << index + 2 << " (the bias) " << t << " must be a vector of "
                                      << n;
    if (!want_vector && t.getShape() != out.getShape())
      return emitOpError("operand #") << index + 2 << " " << t << " must have the result's shape "
                                      << out;
  }
  return success();
}

// Note [Opaque kernels]
// blu.kernel stands for a blublas launcher the compiler never fuses or lowers: attention, the
// fused classifier, embedding and its backward, AdamW. The names are the launchers' (the runtime's
// dispatch table keys); an unknown name is an error here rather than at run time, so a traced step
// that needs a launcher the runtime lacks fails when it is compiled.
LogicalResult KernelOp::verify() {
  // The blublas launchers named by hand-written IR, then blutensor's backend ops as a captured
  // step names them (Note [Capture import]; blutensor/src/backend_ops.def).
  static constexpr llvm::StringLiteral kKnown[] = {
      "attention_forward", "attention_backward", "cross_entropy", "embedding_forward",
      "embedding_backward", "softmax_forward", "softmax_backward", "layernorm_backward",
      "column_sum", "adamw_step",
      "copy_", "fill_", "unary", "binary", "reduce", "gemm", "layer_norm_forward",
      "layer_norm_backward", "cross_entropy_forward", "cross_entropy_backward",
      "cross_entropy_forward_backward", "causal_fill",
      "dropout", "random_uniform", "random_normal", "global_norm", "scale_tensors_", "copy_tensors_"};
  for (llvm::StringRef name : kKnown)
    if (getCallee() == name) return success();
  std::string known;
  for (llvm::StringRef name : kKnown) known += (known.empty() ? "" : ", ") + name.str();
  return emitOpError("unknown callee '") << getCallee() << "' (known: " << known << ")";
}

bool blu::comp::readThroughViews(BlockArgument arg, bool only) {
  const auto view = [](Operation* u) { return isa<ViewOp>(u); };
  return only ? !arg.use_empty() && llvm::all_of(arg.getUsers(), view) : llvm::any_of(arg.getUsers(), view);
}

LogicalResult FusedOp::verify() {
  if (getResults().empty()) return emitOpError("has no result");
  RankedTensorType result = rankedType(getResults().front());
  for (auto [index, r] : llvm::enumerate(getResults()))
    if (rankedType(r).getShape() != result.getShape())
      return emitOpError("result #") << index << " " << r.getType() << " does not have the first result's shape "
                                     << result;
  Block* body = getBody().empty() ? nullptr : &getBody().front();
  for (auto [index, input] : llvm::enumerate(getInputs())) {
    RankedTensorType type = rankedType(input);
    // Note [Strided operands]: an input read only through blu.view inside may have any shape.
    if (body != nullptr && index < body->getNumArguments() && readThroughViews(body->getArgument(index), true))
      continue;
    if (broadcastKind(type.getShape(), result.getShape()) == BroadcastKind::kNone)
      return emitOpError("input #") << index << " " << type << " is neither of the result's shape "
                                    << result << " nor a rank-1 tensor of its last dimension, nor (Note "
                                       "[Broadcast operands]) its shape with last dimension 1 or its trailing dimensions";
  }
  return success();
}

LogicalResult FusedOp::verifyRegions() {
  Block& body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError("region has ")
           << body.getNumArguments() << " arguments for " << getInputs().size() << " inputs";
  for (auto [index, pair] : llvm::enumerate(llvm::zip(body.getArguments(), getInputs()))) {
    auto [arg, input] = pair;
    if (arg.getType() != input.getType())
      return emitOpError("region argument #")
             << index << " " << arg.getType() << " differs from input " << input.getType();
  }
  for (Operation& op : body.without_terminator()) {
    if (auto view = dyn_cast<ViewOp>(&op)) {  // Note [Strided operands]: a view of an input
      if (!isa<BlockArgument>(view.getInput()) || rankedType(view.getResult()).getShape() !=
                                                     rankedType(getResults().front()).getShape())
        return op.emitOpError("inside blu.fused must view a region argument in the result's shape");
      continue;
    }
    if (!isa<ElementwiseOpInterface>(&op))
      return op.emitOpError("is not elementwise and may not be inside blu.fused");
  }
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield) return emitOpError("region must end with blu.yield");
  if (yield.getValues().size() != getResults().size())
    return emitOpError("yields ") << yield.getValues().size() << " values for " << getResults().size() << " results";
  for (auto [index, pair] : llvm::enumerate(llvm::zip(yield.getValues(), getResults()))) {
    auto [v, r] = pair;
    if (v.getType() != r.getType())
      return emitOpError("yields ") << v.getType() << " as value #" << index << " but result #" << index << " is "
                                    << r.getType();
  }
  return success();
}

namespace {

// The largest flattened index a strided window reads or writes, or -1 for a negative stride.
int64_t lastIndex(int64_t offset, llvm::ArrayRef<int64_t> sizes, llvm::ArrayRef<int64_t> strides) {
  int64_t last = offset;
  for (auto [size, stride] : llvm::zip(sizes, strides)) {
    if (stride < 0) return -1;
    if (size == 0) return offset;
    last += (size - 1) * stride;
  }
  return last;
}

LogicalResult verifyWindow(Operation* op, RankedTensorType window, RankedTensorType whole, int64_t offset,
                           llvm::ArrayRef<int64_t> strides) {
  if (window.getElementType() != whole.getElementType())
    return op->emitOpError("element type ") << window.getElementType() << " differs from "
                                            << whole.getElementType();
  if (static_cast<int64_t>(strides.size()) != window.getRank())
    return op->emitOpError("has ") << strides.size() << " strides for the window " << window << " of rank "
                                   << window.getRank();
  if (offset < 0) return op->emitOpError("offset ") << offset << " is negative";
  const int64_t last = lastIndex(offset, window.getShape(), strides);
  if (last < 0) return op->emitOpError("has a negative stride");
  if (window.getNumElements() > 0 && last >= whole.getNumElements())
    return op->emitOpError("window ") << window << " at offset " << offset << " reaches element " << last
                                      << " of " << whole << " (" << whole.getNumElements() << " elements)";
  return success();
}

}  // namespace

LogicalResult ReshapeOp::verify() {
  RankedTensorType in = rankedType(getInput()), out = rankedType(getResult());
  if (in.getElementType() != out.getElementType())
    return emitOpError("element type ") << out.getElementType() << " differs from the input's "
                                        << in.getElementType();
  if (in.getNumElements() != out.getNumElements())
    return emitOpError("input ") << in << " has " << in.getNumElements() << " elements, result " << out << " has "
                                 << out.getNumElements();
  return success();
}

LogicalResult ViewOp::verify() {
  RankedTensorType result = rankedType(getResult());
  if (auto window = getWindow()) {  // Note [Strided operands]: a window read as its 2-D flattening
    RankedTensorType shaped = RankedTensorType::get(*window, result.getElementType());
    if (shaped.getNumElements() != result.getNumElements() || window->empty() ||
        window->back() != result.getShape().back())
      return emitOpError("window ") << shaped << " does not flatten to the result " << result;
    return verifyWindow(*this, shaped, rankedType(getInput()), getOffset(), getStrides());
  }
  return verifyWindow(*this, result, rankedType(getInput()), getOffset(), getStrides());
}

LogicalResult InsertViewOp::verify() {
  if (getResult().getType() != getDest().getType())
    return emitOpError("result ") << getResult().getType() << " must have the dest's type " << getDest().getType();
  return verifyWindow(*this, rankedType(getSource()), rankedType(getDest()), getOffset(), getStrides());
}

// Note [Generic elementwise]: the names blu.ew takes, with their arity (scalar_bodies.cpp has the
// semantics; blu-import maps blutensor's UnaryOp/BinaryOp enumerators onto them).
int blu::comp::ewArity(llvm::StringRef fn) {
  static constexpr llvm::StringLiteral kUnary[] = {"neg", "exp", "log", "sqrt", "tanh", "relu", "add_scalar",
                                                   "mul_scalar", "pow_scalar", "rsub_scalar", "rdiv_scalar",
                                                   "clamp_max"};
  static constexpr llvm::StringLiteral kBinary[] = {"add", "sub", "mul", "div", "relu_backward", "tanh_backward",
                                                    "eq_mask"};
  for (llvm::StringRef n : kUnary)
    if (n == fn) return 1;
  for (llvm::StringRef n : kBinary)
    if (n == fn) return 2;
  return 0;
}

LogicalResult EwOp::verify() {
  const int arity = ewArity(getFn());
  if (arity == 0) return emitOpError("unknown function '") << getFn() << "'";
  if (static_cast<int>(getInputs().size()) != arity)
    return emitOpError("'") << getFn() << "' takes " << arity << " input(s), got " << getInputs().size();
  if (getFn() == "pow_scalar") {
    const double e = getAlpha().convertToDouble();
    if (e != 2.0 && e != 0.5 && e != -0.5 && e != -1.0)
      return emitOpError("pow_scalar exponent ") << e << " (2, 0.5, -0.5 or -1 only: no powf in the PTX)";
  }
  return success();
}
