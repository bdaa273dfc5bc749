// blu-import's core: a captured step (blutensor's JSON) -> blu IR (Note [Capture import]).
//
// Note [Capture import]
// The capture is a list of backend calls on buffers (storages), each tensor argument a strided
// view; blu IR is values. The importer keeps, per buffer, the SSA value of its whole current
// contents (row-major over all its elements, in the buffer's one dtype):
//   - an input buffer starts as a function argument tensor<N x dtype>;
//   - a read of the whole buffer, contiguous, is that value (blu.reshape to the view's shape when it
//     differs: an alias, no kernel); any other read is blu.view (offset and strides into the
//     flattened value, a copy);
//   - a write of the whole buffer, contiguous, makes the written value the buffer's; any other write
//     is blu.insert_view into the current value (in place at run time), into a tensor.empty when
//     an internal buffer has no value yet (blutensor's Note [Fresh buffers]);
//   - output buffers (alive after the step and written) are returned in buffer-id order.
// Calls become blu ops where the dialect has one with the same meaning, else blu.kernel "<op>":
//   unary kGelu -> blu.gelu_tanh; binary kAdd (alpha 1) -> blu.add, or blu.bias_add when b is a
//   row vector broadcast (all strides 0 but the last, 1); kMul -> blu.mul; kGeluBackward ->
//   blu.gelu_tanh_grad; a kSum over all but the last dimension -> blu.kernel "column_sum" (a bias
//   gradient, for the "bias_grad" epilogue); gemm with batch 1 -> blu.matmul (a transposed operand read untransposed
//   with transpose_lhs/rhs; accumulate = blu.add of the old output); layer_norm_forward with weight
//   and bias -> blu.layernorm; host_read -> blu.host_read. Only f32/bf16 take the named ops (the
//   dialect's arithmetic types). blu.kernel keeps everything needed to call the backend op again:
//   its operands are the read tensors and its results the written ones, in argument order
//   ("blu.reads"/"blu.writes": the argument names, list elements as name[i]); scalars in
//   "blu.args" (enums by name, uint64 as ui64). Results that land in a persistent buffer (an input
//   or an output of the step: weights, moments, gradients kept across steps) are listed in
//   "blu.persistent_results": blu-plan-memory gives them no arena bytes. Every op names the node it
//   was made for (`blu.node`, Note [Node provenance] in node_provenance.h).
#include "blucomp/import_capture.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "llvm/Support/JSON.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Verifier.h"

#include "blucomp/blu_dialect.h"

using namespace mlir;
namespace json = llvm::json;

namespace blu::comp {

namespace {

struct Ref {
  int buffer = -1;
  std::string dtype;
  int64_t offset = 0;
  SmallVector<int64_t> sizes, strides;
  bool defined() const { return buffer >= 0; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  bool contiguous() const {
    int64_t expect = 1;
    for (size_t i = sizes.size(); i-- > 0;) {
      if (sizes[i] != 1 && strides[i] != expect) return false;
      expect *= sizes[i];
    }
    return true;
  }
};

struct JArg {
  std::string name;
  enum class Kind { kTensor, kTensorList, kNumber, kInt, kUInt, kBool, kEnum } kind = Kind::kNumber;
  bool read = false, write = false;
  std::vector<Ref> tensors;
  double number = 0;
  int64_t integer = 0;
  uint64_t uinteger = 0;
  std::string enum_name;
  bool is_tensor() const { return kind == Kind::kTensor || kind == Kind::kTensorList; }
};

struct JNode {
  std::string op, device;
  std::vector<JArg> args;
  const JArg* arg(StringRef name) const {
    for (const JArg& a : args)
      if (a.name == name) return &a;
    return nullptr;
  }
};

struct JBuffer {
  int64_t bytes = 0;
  bool input = false, written = false, alive = false;
  std::string dtype;  // of the first tensor that names it
};

struct ParseError {
  std::string message;
};

const json::Object& object(const json::Value* v, const std::string& what) {
  if (v == nullptr || v->getAsObject() == nullptr) throw ParseError{what + " is not an object"};
  return *v->getAsObject();
}
const json::Array& array(const json::Object& o, StringRef key, const std::string& what) {
  const json::Array* a = o.getArray(key);
  if (a == nullptr) throw ParseError{what + " has no array \"" + key.str() + "\""};
  return *a;
}
int64_t integer(const json::Object& o, StringRef key, const std::string& what) {
  std::optional<int64_t> i = o.getInteger(key);
  if (!i) throw ParseError{what + " has no integer \"" + key.str() + "\""};
  return *i;
}
std::string str(const json::Object& o, StringRef key, const std::string& what) {
  std::optional<StringRef> s = o.getString(key);
  if (!s) throw ParseError{what + " has no string \"" + key.str() + "\""};
  return s->str();
}
bool boolean(const json::Object& o, StringRef key, const std::string& what) {
  std::optional<bool> b = o.getBoolean(key);
  if (!b) throw ParseError{what + " has no boolean \"" + key.str() + "\""};
  return *b;
}
SmallVector<int64_t> ints(const json::Object& o, StringRef key, const std::string& what) {
  SmallVector<int64_t> out;
  for (const json::Value& v : array(o, key, what)) {
    std::optional<int64_t> i = v.getAsInteger();
    if (!i) throw ParseError{what + ": \"" + key.str() + "\" holds a non-integer"};
    out.push_back(*i);
  }
  return out;
}

Ref parseRef(const json::Value& v, size_t buffers, const std::string& what) {
  Ref r;
  if (v.kind() == json::Value::Null) return r;
  const json::Object& o = object(&v, what);
  r.buffer = static_cast<int>(integer(o, "buffer", what));
  if (r.buffer < 0 || static_cast<size_t>(r.buffer) >= buffers)
    throw ParseError{what + " names buffer " + std::to_string(r.buffer) + " of " + std::to_string(buffers)};
  r.dtype = str(o, "dtype", what);
  r.offset = integer(o, "offset", what);
  r.sizes = ints(o, "sizes", what);
  r.strides = ints(o, "strides", what);
  if (r.sizes.size() != r.strides.size()) throw ParseError{what + " has sizes and strides of different ranks"};
  return r;
}

double numberOf(const json::Value& v) {
  if (std::optional<StringRef> s = v.getAsString()) {
    if (*s == "nan") return std::nan("");
    if (*s == "inf") return INFINITY;
    if (*s == "-inf") return -INFINITY;
  }
  if (std::optional<double> d = v.getAsNumber()) return *d;
  throw ParseError{"a number argument holds neither a number nor nan/inf/-inf"};
}

struct Capture {
  std::vector<JBuffer> buffers;
  std::vector<JNode> nodes;
  std::string structure_hash, signature_hash;  // "" when the document has none
};

Capture parseCapture(StringRef text) {
  llvm::Expected<json::Value> root = json::parse(text);
  if (!root) throw ParseError{"not JSON: " + llvm::toString(root.takeError())};
  const json::Object& doc = object(&*root, "the document");
  if (doc.getString("format") != StringRef("blu-capture")) throw ParseError{"not a blu-capture document"};
  if (doc.getInteger("version") != 1) throw ParseError{"blu-capture version other than 1"};
  Capture c;
  if (std::optional<StringRef> h = doc.getString("structure_hash")) c.structure_hash = h->str();
  if (std::optional<StringRef> h = doc.getString("signature_hash")) c.signature_hash = h->str();
  for (const json::Value& bv : array(doc, "buffers", "the document")) {
    const json::Object& b = object(&bv, "a buffer");
    if (integer(b, "id", "a buffer") != static_cast<int64_t>(c.buffers.size()))
      throw ParseError{"buffer ids must be 0, 1, ... in order"};
    JBuffer buf;
    buf.bytes = integer(b, "bytes", "a buffer");
    buf.input = str(b, "origin", "a buffer") == "input";
    buf.written = boolean(b, "written", "a buffer");
    buf.alive = boolean(b, "alive", "a buffer");
    c.buffers.push_back(buf);
  }
  size_t index = 0;
  for (const json::Value& nv : array(doc, "nodes", "the document")) {
    const std::string what = "node " + std::to_string(index++);
    const json::Object& n = object(&nv, what);
    JNode node;
    node.op = str(n, "op", what);
    node.device = str(n, "device", what);
    for (const json::Value& av : array(n, "args", what)) {
      const json::Object& a = object(&av, what + " argument");
      JArg arg;
      arg.name = str(a, "name", what + " argument");
      const std::string wa = what + " (" + node.op + ") argument '" + arg.name + "'";
      if (const json::Value* t = a.get("tensor")) {
        arg.kind = JArg::Kind::kTensor;
        arg.tensors.push_back(parseRef(*t, c.buffers.size(), wa));
      } else if (const json::Array* ts = a.getArray("tensors")) {
        arg.kind = JArg::Kind::kTensorList;
        for (const json::Value& t : *ts) arg.tensors.push_back(parseRef(t, c.buffers.size(), wa));
      } else if (const json::Value* x = a.get("number")) {
        arg.kind = JArg::Kind::kNumber;
        arg.number = numberOf(*x);
      } else if (std::optional<int64_t> i = a.getInteger("int")) {
        arg.kind = JArg::Kind::kInt;
        arg.integer = *i;
      } else if (std::optional<StringRef> u = a.getString("uint")) {
        arg.kind = JArg::Kind::kUInt;
        if (u->getAsInteger(10, arg.uinteger)) throw ParseError{wa + ": uint '" + u->str() + "'"};
      } else if (std::optional<bool> b = a.getBoolean("bool")) {
        arg.kind = JArg::Kind::kBool;
        arg.integer = *b ? 1 : 0;
      } else if (std::optional<StringRef> e = a.getString("enum")) {
        arg.kind = JArg::Kind::kEnum;
        arg.enum_name = e->str();
        arg.integer = integer(a, "value", wa);
      } else {
        throw ParseError{wa + " has no value"};
      }
      if (arg.is_tensor()) {
        arg.read = boolean(a, "read", wa);
        arg.write = boolean(a, "write", wa);
      }
      node.args.push_back(std::move(arg));
    }
    c.nodes.push_back(std::move(node));
  }
  return c;
}

class Importer {
 public:
  Importer(MLIRContext* ctx, Capture capture) : ctx_(ctx), b_(ctx), c_(std::move(capture)) {
    ctx_->getOrLoadDialect<tensor::TensorDialect>();  // tensor.empty: freshValue
  }

  OwningOpRef<ModuleOp> run() {
    assignDtypes();
    Location loc = NameLoc::get(b_.getStringAttr("captured step"));
    OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
    SmallVector<Type> inputs;
    SmallVector<int> input_ids;
    for (size_t id = 0; id < c_.buffers.size(); ++id) {
      if (!c_.buffers[id].input) continue;
      inputs.push_back(flatType(static_cast<int>(id)));
      input_ids.push_back(static_cast<int>(id));
    }
    b_.setInsertionPointToEnd(module->getBody());
    auto fn = b_.create<func::FuncOp>(loc, "step", b_.getFunctionType(inputs, {}));
    Block* entry = fn.addEntryBlock();
    cur_.assign(c_.buffers.size(), Value());
    for (auto [i, id] : llvm::enumerate(input_ids)) cur_[static_cast<size_t>(id)] = entry->getArgument(i);
    arg_buffer_.assign(input_ids.begin(), input_ids.end());
    b_.setInsertionPointToEnd(entry);
    for (size_t i = 0; i < c_.nodes.size(); ++i) {
      loc_ = NameLoc::get(b_.getStringAttr("node " + std::to_string(i) + ": " + c_.nodes[i].op));
      what_ = "node " + std::to_string(i) + " (" + c_.nodes[i].op + ")";
      Operation* before = entry->empty() ? nullptr : &entry->back();
      importNode(c_.nodes[i]);
      // Note [Node provenance]: every op made for this node names it.
      for (Operation* op = before ? before->getNextNode() : (entry->empty() ? nullptr : &entry->front()); op;
           op = op->getNextNode())
        op->setAttr("blu.node", b_.getI64IntegerAttr(static_cast<int64_t>(i)));
    }
    SmallVector<Value> results;
    SmallVector<Attribute> result_ids;
    for (size_t id = 0; id < c_.buffers.size(); ++id) {
      const JBuffer& buf = c_.buffers[id];
      if (!(buf.alive && buf.written)) continue;
      results.push_back(cur_[id]);
      result_ids.push_back(b_.getI64IntegerAttr(static_cast<int64_t>(id)));
    }
    b_.create<func::ReturnOp>(loc, results);
    fn.setType(b_.getFunctionType(inputs, ValueRange(results).getTypes()));
    SmallVector<Attribute> arg_ids;
    for (int id : input_ids) arg_ids.push_back(b_.getI64IntegerAttr(id));
    fn->setAttr("blu.input_buffers", b_.getArrayAttr(arg_ids));
    if (!c_.structure_hash.empty()) {
      (*module)->setAttr("blu.capture_structure_hash", b_.getStringAttr(c_.structure_hash));
      (*module)->setAttr("blu.capture_signature_hash", b_.getStringAttr(c_.signature_hash));
    }
    fn->setAttr("blu.output_buffers", b_.getArrayAttr(result_ids));
    return module;
  }

 private:
  [[noreturn]] void fail(const std::string& message) { throw ParseError{what_ + ": " + message}; }

  Type elementType(const std::string& dtype) {
    if (dtype == "f32") return b_.getF32Type();
    if (dtype == "bf16") return b_.getBF16Type();
    if (dtype == "f16") return b_.getF16Type();
    if (dtype == "f64") return b_.getF64Type();
    if (dtype == "i32") return b_.getI32Type();
    if (dtype == "i64") return b_.getI64Type();
    if (dtype == "u16") return b_.getIntegerType(16, /*isSigned=*/false);
    fail("unknown dtype '" + dtype + "'");
  }
  static int64_t dtypeBytes(const std::string& dtype) {
    if (dtype == "f64" || dtype == "i64") return 8;
    if (dtype == "f32" || dtype == "i32") return 4;
    return 2;
  }

  void assignDtypes() {
    for (size_t i = 0; i < c_.nodes.size(); ++i) {
      what_ = "node " + std::to_string(i) + " (" + c_.nodes[i].op + ")";
      for (const JArg& a : c_.nodes[i].args) {
        for (const Ref& r : a.tensors) {
          if (!r.defined()) continue;
          JBuffer& buf = c_.buffers[static_cast<size_t>(r.buffer)];
          if (buf.dtype.empty()) buf.dtype = r.dtype;
          if (buf.dtype != r.dtype)
            fail("buffer " + std::to_string(r.buffer) + " is used as " + buf.dtype + " and as " + r.dtype);
        }
      }
    }
  }

  RankedTensorType flatType(int id) {
    const JBuffer& buf = c_.buffers[static_cast<size_t>(id)];
    if (buf.dtype.empty()) fail("buffer " + std::to_string(id) + " is never named by a tensor");
    if (buf.bytes % dtypeBytes(buf.dtype) != 0)
      fail("buffer " + std::to_string(id) + " of " + std::to_string(buf.bytes) + " bytes is not whole " + buf.dtype +
           " elements");
    return RankedTensorType::get({buf.bytes / dtypeBytes(buf.dtype)}, elementType(buf.dtype));
  }

  int64_t bufferElements(int id) { return flatType(id).getNumElements(); }
  bool whole(const Ref& r) { return r.contiguous() && r.offset == 0 && r.numel() == bufferElements(r.buffer); }
  RankedTensorType typeOf(const Ref& r) { return RankedTensorType::get(r.sizes, elementType(r.dtype)); }
  bool persistent(const Ref& r) {
    const JBuffer& buf = c_.buffers[static_cast<size_t>(r.buffer)];
    return buf.input || buf.alive;
  }

  // Note [Value buffers]: an op result that holds a whole buffer's contents (written whole, an
  // insert_view into it, a reshape of such a value) lists that buffer in blu.result_buffers
  // (-1: a window or a value no buffer holds), so a plan can bind kernel operands to buffers.
  void markBuffer(Value v, int buffer) {
    auto result = dyn_cast<OpResult>(v);
    if (!result) return;
    Operation* op = result.getOwner();
    SmallVector<int64_t> ids(op->getNumResults(), -1);
    if (auto old = op->getAttrOfType<DenseI64ArrayAttr>("blu.result_buffers")) ids.assign(old.asArrayRef().begin(), old.asArrayRef().end());
    ids[result.getResultNumber()] = buffer;
    op->setAttr("blu.result_buffers", b_.getDenseI64ArrayAttr(ids));
  }

  Value reshape(Value v, ArrayRef<int64_t> shape) {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getShape() == shape) return v;
    // One reshape per (value, shape): the ops carry their node (blu.node), so CSE would not merge
    // two, and a dW GEMM and its bias-gradient sum must read one value to fuse.
    auto key = std::make_pair(v.getAsOpaquePointer(), std::vector<int64_t>(shape.begin(), shape.end()));
    if (auto it = reshapes_.find(key); it != reshapes_.end()) return it->second;
    Value r = b_.create<ReshapeOp>(loc_, RankedTensorType::get(shape, t.getElementType()), v);
    reshapes_[key] = r;
    if (auto ids = v.getDefiningOp() ? v.getDefiningOp()->getAttrOfType<DenseI64ArrayAttr>("blu.result_buffers") : nullptr)
      markBuffer(r, static_cast<int>(ids[cast<OpResult>(v).getResultNumber()]));
    else if (auto arg = dyn_cast<BlockArgument>(v))
      markBuffer(r, static_cast<int>(arg_buffer_[arg.getArgNumber()]));
    return r;
  }

  Value read(const Ref& r) {
    Value v = cur_[static_cast<size_t>(r.buffer)];
    if (!v) fail("reads buffer " + std::to_string(r.buffer) + " before anything wrote it");
    if (whole(r)) return reshape(v, r.sizes);
    return b_.create<ViewOp>(loc_, typeOf(r), v, b_.getI64IntegerAttr(r.offset), b_.getDenseI64ArrayAttr(r.strides),
                                /*window=*/DenseI64ArrayAttr());
  }

  void write(const Ref& r, Value v) {
    if (persistent(r)) markPersistent(v);
    if (whole(r)) {
      cur_[static_cast<size_t>(r.buffer)] = v;
      markBuffer(v, r.buffer);
      return;
    }
    Value dest = cur_[static_cast<size_t>(r.buffer)];
    if (!dest && c_.buffers[static_cast<size_t>(r.buffer)].input)
      fail("writes part of input buffer " + std::to_string(r.buffer) + " before it has a value");
    if (!dest) dest = freshValue(r.buffer);
    Value whole_value = b_.create<InsertViewOp>(loc_, reshape(v, r.sizes), dest, b_.getI64IntegerAttr(r.offset),
                                                b_.getDenseI64ArrayAttr(r.strides));
    cur_[static_cast<size_t>(r.buffer)] = whole_value;
    markBuffer(whole_value, r.buffer);
  }

  // An internal buffer first written in part (blutensor's Note [Fresh buffers]: allocated in the
  // step, then filled by writes into its windows) starts as tensor.empty: its bytes before the
  // first write are undefined and nothing reads them. blu.buffer names the buffer, so CSE never
  // merges two such values (the insert_views into each are in place: two buffers on one value
  // would share arena bytes); no kernel (blu-count-kernels counts blu ops only); blu-plan-memory
  // gives it the buffer's arena bytes, which the insert_views into it alias.
  Value freshValue(int buffer) {
    auto empty = b_.create<tensor::EmptyOp>(loc_, flatType(buffer).getShape(), flatType(buffer).getElementType());
    empty->setAttr("blu.buffer", b_.getI64IntegerAttr(buffer));
    if (c_.buffers[static_cast<size_t>(buffer)].alive) markPersistent(empty.getResult());
    markBuffer(empty.getResult(), buffer);
    return empty.getResult();
  }

  // v (an op's result) lands in a persistent buffer: its op lists it in blu.persistent_results.
  void markPersistent(Value v) {
    auto result = dyn_cast<OpResult>(v);
    if (!result) return;
    Operation* op = result.getOwner();
    SmallVector<int64_t> list;
    if (auto old = op->getAttrOfType<DenseI64ArrayAttr>("blu.persistent_results")) list.assign(old.asArrayRef().begin(), old.asArrayRef().end());
    if (llvm::is_contained(list, static_cast<int64_t>(result.getResultNumber()))) return;
    list.push_back(result.getResultNumber());
    op->setAttr("blu.persistent_results", b_.getDenseI64ArrayAttr(list));
  }

  static bool arithmetic(const std::string& dtype) { return dtype == "f32" || dtype == "bf16"; }

  const Ref& tensor(const JNode& n, StringRef name) {
    const JArg* a = n.arg(name);
    if (a == nullptr || a->kind != JArg::Kind::kTensor) fail("has no tensor argument '" + name.str() + "'");
    return a->tensors[0];
  }

  void importNode(const JNode& n) {
    if (n.op == "host_read") {
      b_.create<HostReadOp>(loc_, read(tensor(n, "src")));
      return;
    }
    if ((n.op == "reduce" && importColumnSum(n)) || (n.op == "unary" && importUnary(n)) || (n.op == "binary" && importBinary(n)) ||
        (n.op == "gemm" && importGemm(n)) || (n.op == "layer_norm_forward" && importLayerNorm(n)))
      return;
    importKernel(n);
  }

  // Elementwise operands in one shape: the buffers' current shapes when every operand and the
  // output are whole buffers of equal current shapes (no blu.reshape between a GEMM and its bias
  // or GELU, so blu-fuse-epilogue and blu-fuse-elementwise see them adjacent), else the refs'.
  // When the whole buffers' current shapes differ (a GEMM's [B*T, C] output and the residual
  // stream's [B, T, C]), the operands take the shape of the most recently produced one (a free
  // blu.reshape of the others), so the GEMM, its bias and the residual add stay adjacent.
  SmallVector<Value> elementwiseOperands(const Ref& out, ArrayRef<const Ref*> in) {
    bool natural = whole(out);
    SmallVector<Value> values;
    for (const Ref* r : in) {
      natural = natural && whole(*r);
      if (natural) values.push_back(cur_[static_cast<size_t>(r->buffer)]);
    }
    if (natural && !llvm::all_of(values, [&](Value v) { return v.getType() == values[0].getType(); })) {
      Value latest = values[0];
      for (Value v : values) {
        Operation* d = v.getDefiningOp();
        Operation* l = latest.getDefiningOp();
        if (d && (!l || l->isBeforeInBlock(d))) latest = v;
      }
      const auto shape = cast<RankedTensorType>(latest.getType()).getShape();
      for (Value& v : values) v = reshape(v, shape);
    }
    if (natural) return values;
    values.clear();
    for (const Ref* r : in) values.push_back(read(*r));
    return values;
  }

  // blutensor's enumerator -> blu.ew's function (Note [Generic elementwise]); "" when none.
  static std::string ewName(const std::string& enumerator) {
    static const std::map<std::string, std::string> names{
        {"kNeg", "neg"}, {"kExp", "exp"}, {"kLog", "log"}, {"kSqrt", "sqrt"}, {"kTanh", "tanh"}, {"kRelu", "relu"},
        {"kAddScalar", "add_scalar"}, {"kMulScalar", "mul_scalar"}, {"kPowScalar", "pow_scalar"},
        {"kRSubScalar", "rsub_scalar"}, {"kRDivScalar", "rdiv_scalar"}, {"kClampMax", "clamp_max"},
        {"kAdd", "add"}, {"kSub", "sub"}, {"kMul", "mul"}, {"kDiv", "div"}, {"kReluBackward", "relu_backward"},
        {"kTanhBackward", "tanh_backward"}, {"kEqMask", "eq_mask"}};
    auto it = names.find(enumerator);
    return it == names.end() ? "" : it->second;
  }

  static bool noBroadcast(const Ref& r) {
    for (auto [s, st] : llvm::zip(r.sizes, r.strides))
      if (st == 0 && s != 1) return false;
    return true;
  }

  // A sum over every dimension but the last (a bias gradient) -> blu.kernel "column_sum" on the
  // [rows, C] view of its input, the form blu-fuse-epilogue folds into the dW GEMM ("bias_grad").
  // f32 or bf16 input, the sums in its type or in f32 (a bf16 step's bias gradients are bf16:
  // the runtime's Note [16-bit bias gradients]).
  bool importColumnSum(const JNode& n) {
    const Ref &out = tensor(n, "out"), &a = tensor(n, "a");
    const bool dtypes = arithmetic(a.dtype) && (out.dtype == a.dtype || out.dtype == "f32");
    if (n.arg("op")->enum_name != "kSum" || !dtypes || a.sizes.empty() ||
        !whole(a) || out.sizes.size() != a.sizes.size() || out.sizes.back() != a.sizes.back())
      return false;
    for (size_t i = 0; i + 1 < out.sizes.size(); ++i)
      if (out.sizes[i] != 1) return false;
    const int64_t c = a.sizes.back(), rows = a.numel() / std::max<int64_t>(c, 1);
    Value in = reshape(cur_[static_cast<size_t>(a.buffer)], {rows, c});
    auto k = b_.create<KernelOp>(loc_, TypeRange{RankedTensorType::get({c}, elementType(out.dtype))},
                                 b_.getStringAttr("column_sum"), ValueRange{in});
    k->setAttr("blu.reads", b_.getArrayAttr({b_.getStringAttr("a")}));
    k->setAttr("blu.writes", b_.getArrayAttr({b_.getStringAttr("out")}));
    write(out, k->getResult(0));
    return true;
  }

  bool importUnary(const JNode& n) {
    const Ref &out = tensor(n, "out"), &a = tensor(n, "a");
    const std::string& op = n.arg("op")->enum_name;
    if (!arithmetic(out.dtype) || a.sizes != out.sizes || !noBroadcast(a)) return false;
    if (op == "kGelu") {
      write(out, b_.create<GeluTanhOp>(loc_, elementwiseOperands(out, {&a})[0]));
      return true;
    }
    const std::string fn = ewName(op);
    const double alpha = n.arg("alpha")->number;
    if (fn.empty() || (fn == "pow_scalar" && alpha != 2.0 && alpha != 0.5 && alpha != -0.5 && alpha != -1.0)) return false;
    Value x = elementwiseOperands(out, {&a})[0];
    write(out, b_.create<EwOp>(loc_, x.getType(), b_.getStringAttr(fn), ValueRange{x}, b_.getF64FloatAttr(alpha)));
    return true;
  }

  // b broadcast along every dimension but the last (a bias row): its [C] vector.
  std::optional<Ref> biasRow(const Ref& b, const Ref& out) {
    if (out.sizes.empty() || b.sizes != out.sizes || b.strides.back() != 1) return std::nullopt;
    for (size_t i = 0; i + 1 < b.strides.size(); ++i)
      if (b.strides[i] != 0 && b.sizes[i] != 1) return std::nullopt;
    Ref row = b;
    row.sizes = {out.sizes.back()};
    row.strides = {1};
    return row;
  }

  // Note [Broadcast operands] (blu_dialect.h): the dense tensor an operand broadcast over `out`
  // reads, when its stride-0 dimensions are the last one alone (per-row values: that dimension
  // becomes 1) or a leading run (repeated trailing dimensions: those are dropped); else nothing.
  std::optional<Ref> broadcastSource(const Ref& r, const Ref& out) {
    if (r.sizes != out.sizes || r.sizes.empty() || noBroadcast(r)) return std::nullopt;
    const size_t n = r.sizes.size();
    Ref src = r;
    if (r.strides[n - 1] == 0) {  // per row: only the last dimension broadcast
      for (size_t i = 0; i + 1 < n; ++i)
        if (r.strides[i] == 0 && r.sizes[i] != 1) return std::nullopt;
      src.sizes.back() = 1;
      src.strides.back() = 1;
    } else {  // a leading run of broadcast dimensions, then dense trailing ones
      size_t lead = 0;
      while (lead < n && (r.strides[lead] == 0 || r.sizes[lead] == 1)) ++lead;
      for (size_t i = lead; i < n; ++i)
        if (r.strides[i] == 0 && r.sizes[i] != 1) return std::nullopt;
      if (lead == 0 || lead == n) return std::nullopt;
      src.sizes.assign(r.sizes.begin() + static_cast<std::ptrdiff_t>(lead), r.sizes.end());
      src.strides.assign(r.strides.begin() + static_cast<std::ptrdiff_t>(lead), r.strides.end());
    }
    const BroadcastKind kind = broadcastKind(src.sizes, out.sizes);
    if (!src.contiguous() || kind == BroadcastKind::kNone || kind == BroadcastKind::kSame) return std::nullopt;
    return src;
  }

  // Note [Broadcast operands]: made only with BLU_PLAN_BROADCAST=1 until measured on a GPU.
  static bool broadcastOn() {
    static const bool on = [] {
      const char* v = std::getenv("BLU_PLAN_BROADCAST");
      return v != nullptr && std::string(v) == "1";
    }();
    return on;
  }

  bool importBinary(const JNode& n) {
    const Ref &out = tensor(n, "out"), &a = tensor(n, "a"), &bt = tensor(n, "b");
    const std::string& op = n.arg("op")->enum_name;
    const JArg* alpha = n.arg("alpha");
    if (!arithmetic(out.dtype) || a.sizes != out.sizes || bt.sizes != out.sizes) return false;
    const bool add = op == "kAdd" && alpha && alpha->number == 1.0;
    // A bias-row add: blu.bias_add (the GEMM epilogue fusion looks for it).
    if (add && noBroadcast(a) && !noBroadcast(bt)) {
      if (std::optional<Ref> row = biasRow(bt, out)) {
        Value input = elementwiseOperands(out, {&a})[0];
        if (cast<RankedTensorType>(input.getType()).getShape().back() != out.sizes.back()) input = read(a);
        write(out, b_.create<BiasAddOp>(loc_, input, read(*row)));
        return true;
      }
    }
    const std::string fn = add || op == "kMul" || op == "kGeluBackward" ? "" : ewName(op);
    if (!add && op != "kMul" && op != "kGeluBackward" && fn.empty()) return false;
    // The operands at the result's shape: as recorded, or a broadcast one as blu.broadcast of its
    // dense source (checked for both before anything is created).
    SmallVector<Value> v;
    if (noBroadcast(a) && noBroadcast(bt)) {
      v = elementwiseOperands(out, {&a, &bt});
    } else {
      const auto expressible = [&](const Ref& r) {
        return noBroadcast(r) || (broadcastOn() && broadcastSource(r, out).has_value());
      };
      if (!expressible(a) || !expressible(bt)) return false;
      for (const Ref* r : {&a, &bt})
        v.push_back(noBroadcast(*r) ? read(*r) : b_.create<BroadcastOp>(loc_, typeOf(out), read(*broadcastSource(*r, out))));
    }
    if (add) {
      write(out, b_.create<AddOp>(loc_, v[0], v[1]));
    } else if (op == "kMul") {
      write(out, b_.create<MulOp>(loc_, v[0], v[1]));
    } else if (op == "kGeluBackward") {
      write(out, b_.create<GeluTanhGradOp>(loc_, v[0], v[1]));
    } else {
      write(out, b_.create<EwOp>(loc_, v[0].getType(), b_.getStringAttr(fn), ValueRange{v[0], v[1]},
                                 b_.getF64FloatAttr(alpha ? alpha->number : 1.0)));
    }
    return true;
  }

  // A [1, R, C] GEMM operand as a rank-2 matrix read untransposed, and whether it was transposed.
  std::optional<std::pair<Ref, bool>> matrix(const Ref& m) {
    if (m.sizes.size() != 3 || m.sizes[0] != 1) return std::nullopt;
    const int64_t rows = m.sizes[1], cols = m.sizes[2];
    Ref r = m;
    if (m.strides[2] == 1 || cols == 1) {
      r.sizes = {rows, cols};
      r.strides = {rows == 1 ? cols : m.strides[1], 1};
      return std::make_pair(r, false);
    }
    if (m.strides[1] == 1 || rows == 1) {
      r.sizes = {cols, rows};
      r.strides = {cols == 1 ? rows : m.strides[2], 1};
      return std::make_pair(r, true);
    }
    return std::nullopt;
  }

  bool importGemm(const JNode& n) {
    const Ref &out = tensor(n, "out"), &a = tensor(n, "a"), &bm = tensor(n, "bm");
    if (!arithmetic(out.dtype) || out.sizes.size() != 3 || out.sizes[0] != 1) return false;
    // bf16 inputs into an f32 output (linear_cross_entropy's weight gradient): an opaque kernel.
    if (a.dtype != out.dtype || bm.dtype != out.dtype) return false;
    std::optional<std::pair<Ref, bool>> lhs = matrix(a), rhs = matrix(bm);
    if (!lhs || !rhs) return false;
    auto product_type = RankedTensorType::get({out.sizes[1], out.sizes[2]}, elementType(out.dtype));
    Value product = b_.create<MatmulOp>(loc_, product_type, read(lhs->first), read(rhs->first),
                                        b_.getBoolAttr(lhs->second), b_.getBoolAttr(rhs->second));
    if (n.arg("accumulate")->integer != 0) product = b_.create<AddOp>(loc_, reshape(read(out), product_type.getShape()), product);
    write(out, product);
    return true;
  }

  bool importLayerNorm(const JNode& n) {
    const Ref &y = tensor(n, "y"), &mean = tensor(n, "mean"), &rstd = tensor(n, "rstd"), &x = tensor(n, "x"),
              &w = tensor(n, "weight"), &bias = tensor(n, "bias");
    if (!w.defined() || !bias.defined() || !arithmetic(x.dtype) || w.dtype != x.dtype || bias.dtype != x.dtype ||
        mean.dtype != "f32" || rstd.dtype != "f32" || x.sizes.empty() || w.sizes.size() != 1 || bias.sizes.size() != 1)
      return false;
    Value xv = read(x);
    auto xt = cast<RankedTensorType>(xv.getType());
    auto stats = RankedTensorType::get(xt.getShape().drop_back(), b_.getF32Type());
    auto ln = b_.create<LayerNormOp>(loc_, TypeRange{xt, stats, stats}, xv, read(w), read(bias),
                                     b_.getF32FloatAttr(static_cast<float>(n.arg("eps")->number)));
    write(y, ln.getResult());
    write(mean, ln.getMean());
    write(rstd, ln.getRstd());
    return true;
  }

  void importKernel(const JNode& n) {
    SmallVector<Value> operands;
    SmallVector<Type> result_types;
    SmallVector<Attribute> reads, writes;
    SmallVector<const Ref*> written;
    SmallVector<NamedAttribute> scalars;
    for (const JArg& a : n.args) {
      if (!a.is_tensor()) {
        Attribute v;
        switch (a.kind) {
          case JArg::Kind::kNumber: v = b_.getF64FloatAttr(a.number); break;
          case JArg::Kind::kInt: v = b_.getI64IntegerAttr(a.integer); break;
          case JArg::Kind::kUInt: v = b_.getIntegerAttr(b_.getIntegerType(64, false), APInt(64, a.uinteger)); break;
          case JArg::Kind::kBool: v = b_.getBoolAttr(a.integer != 0); break;
          case JArg::Kind::kEnum: v = b_.getStringAttr(a.enum_name); break;
          default: break;
        }
        scalars.push_back(b_.getNamedAttr(a.name, v));
        continue;
      }
      for (size_t i = 0; i < a.tensors.size(); ++i) {
        const Ref& r = a.tensors[i];
        if (!r.defined()) continue;
        const std::string name = a.kind == JArg::Kind::kTensorList ? a.name + "[" + std::to_string(i) + "]" : a.name;
        if (a.read) {
          operands.push_back(read(r));
          reads.push_back(b_.getStringAttr(name));
        }
        if (a.write) {
          result_types.push_back(typeOf(r));
          writes.push_back(b_.getStringAttr(name));
          written.push_back(&r);
        }
      }
    }
    auto k = b_.create<KernelOp>(loc_, result_types, b_.getStringAttr(n.op), operands);
    k->setAttr("blu.args", b_.getDictionaryAttr(scalars));
    k->setAttr("blu.reads", b_.getArrayAttr(reads));
    k->setAttr("blu.writes", b_.getArrayAttr(writes));
    for (size_t i = 0; i < written.size(); ++i) write(*written[i], k->getResult(static_cast<unsigned>(i)));
  }

  MLIRContext* ctx_;
  OpBuilder b_;
  Capture c_;
  std::vector<Value> cur_;
  std::vector<int64_t> arg_buffer_;  // function argument -> input buffer id
  std::map<std::pair<const void*, std::vector<int64_t>>, Value> reshapes_;
  Location loc_ = UnknownLoc::get(ctx_);
  std::string what_;
};

}  // namespace

OwningOpRef<ModuleOp> importCapture(StringRef json, MLIRContext* context, std::string* error) {
  try {
    Importer importer(context, parseCapture(json));
    OwningOpRef<ModuleOp> module = importer.run();
    if (failed(verify(*module))) {
      *error = "the imported IR does not verify (diagnostics above)";
      return nullptr;
    }
    return module;
  } catch (const ParseError& e) {
    *error = e.message;
    return nullptr;
  }
}

}  // namespace blu::comp
