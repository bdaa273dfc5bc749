// The JSON form of a captured graph (Note [Capture JSON]): what blucomp's blu-import reads.
//
// Note [Capture JSON]
// {"format": "blu-capture", "version": 1, "structure_hash": "<16 hex>", "signature_hash": "<16 hex>"
//  (Graph::structure_hash/signature_hash: what a plan made from this capture is checked against),
//  "buffers": [{"id": 0, "bytes": 512, "device": "cpu", "origin": "input" | "internal",
//               "written": bool, "alive": bool}, ...],
//  "nodes": [{"op": "binary", "device": "cpu", "args": [
//     {"name": "op", "enum": "kAdd", "value": 0},
//     {"name": "out", "read": false, "write": true,
//      "tensor": {"buffer": 3, "dtype": "f32", "offset": 0, "sizes": [4, 8], "strides": [8, 1]}},
//     {"name": "xs", "read": true, "write": false, "tensors": [{...}, ...]},
//     {"name": "alpha", "number": 1.0},   // non-finite numbers as the strings "nan", "inf", "-inf"
//     {"name": "step", "int": 3}, {"name": "seed", "uint": "123"}, {"name": "accumulate", "bool": false}]}]}
// Arguments are in the backend op's parameter order (AdamWParams expanded to hp.lr ... hp.step).
// uint64 values are strings (a JSON number is a double). The input snapshots are not included.
#include <cmath>
#include <cstdlib>

#include "blutensor/capture.h"
#include "blutensor/json.h"

namespace blu::capture {

namespace {

using json::Value;

Value number(double d) {
  if (std::isnan(d)) return Value::string("nan");
  if (std::isinf(d)) return Value::string(d > 0 ? "inf" : "-inf");
  return Value::number(d);
}

double number_of(const Value& v) {
  if (v.is_string()) {
    const std::string& s = v.as_string();
    if (s == "nan") return std::nan("");
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    BLU_THROW("capture JSON: number string '", s, "' (expected nan, inf or -inf)");
  }
  return v.as_number();
}

Value ints(const Shape& s) {
  std::vector<Value> v;
  for (int64_t x : s) v.push_back(Value::integer(x));
  return Value::array(std::move(v));
}

Shape ints_of(const Value& v) {
  Shape s;
  for (const Value& x : v.as_array()) s.push_back(x.as_integer());
  return s;
}

Value tensor_json(const TensorRef& t) {
  if (!t.defined()) return Value::null();
  return Value::object({{"buffer", Value::integer(t.buffer)},
                        {"dtype", Value::string(dtype_name(t.dtype))},
                        {"offset", Value::integer(t.offset)},
                        {"sizes", ints(t.sizes)},
                        {"strides", ints(t.strides)}});
}

const Value& member(const Value& obj, const std::string& key, const char* what) {
  const Value* v = obj.find(key);
  BLU_CHECK(v != nullptr, "capture JSON: ", what, " has no \"", key, "\"");
  return *v;
}

DType dtype_of_name(const std::string& s) {
  for (DType d : {DType::F64, DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U16}) {
    if (s == dtype_name(d)) return d;
  }
  BLU_THROW("capture JSON: unknown dtype '", s, "'");
}

TensorRef tensor_of(const Value& v, size_t buffers) {
  TensorRef t;
  if (v.is_null()) return t;
  t.buffer = static_cast<int>(member(v, "buffer", "a tensor").as_integer());
  BLU_CHECK(t.buffer >= 0 && static_cast<size_t>(t.buffer) < buffers, "capture JSON: tensor of buffer ", t.buffer,
            " (", buffers, " buffers)");
  t.dtype = dtype_of_name(member(v, "dtype", "a tensor").as_string());
  t.offset = member(v, "offset", "a tensor").as_integer();
  t.sizes = ints_of(member(v, "sizes", "a tensor"));
  t.strides = ints_of(member(v, "strides", "a tensor"));
  BLU_CHECK(t.sizes.size() == t.strides.size(), "capture JSON: a tensor with ", t.sizes.size(), " sizes and ",
            t.strides.size(), " strides");
  return t;
}

}  // namespace

std::string Graph::to_json() const {
  std::vector<Value> bufs;
  for (const Buffer& b : buffers) {
    bufs.push_back(Value::object({{"id", Value::integer(b.id)},
                                  {"bytes", Value::integer(static_cast<int64_t>(b.nbytes))},
                                  {"device", Value::string(b.device.str())},
                                  {"origin", Value::string(b.origin == Origin::kInput ? "input" : "internal")},
                                  {"written", Value::boolean(b.written)},
                                  {"alive", Value::boolean(b.alive)}}));
  }
  std::vector<Value> ns;
  for (const Node& n : nodes) {
    std::vector<Value> args;
    for (const Arg& a : n.args) {
      std::map<std::string, Value> m{{"name", Value::string(a.name)}};
      switch (a.kind) {
        case Arg::Kind::kTensor:
          m["tensor"] = tensor_json(a.tensors.at(0));
          break;
        case Arg::Kind::kTensorList: {
          std::vector<Value> ts;
          for (const TensorRef& t : a.tensors) ts.push_back(tensor_json(t));
          m["tensors"] = Value::array(std::move(ts));
          break;
        }
        case Arg::Kind::kNumber: m["number"] = number(a.number); break;
        case Arg::Kind::kInt: m["int"] = Value::integer(a.integer); break;
        case Arg::Kind::kUInt: m["uint"] = Value::string(std::to_string(a.uinteger)); break;
        case Arg::Kind::kBool: m["bool"] = Value::boolean(a.integer != 0); break;
        case Arg::Kind::kEnum:
          m["enum"] = Value::string(a.enum_name);
          m["value"] = Value::integer(a.integer);
          break;
      }
      if (a.kind == Arg::Kind::kTensor || a.kind == Arg::Kind::kTensorList) {
        m["read"] = Value::boolean(a.read);
        m["write"] = Value::boolean(a.write);
      }
      args.push_back(Value::object(std::move(m)));
    }
    ns.push_back(Value::object({{"op", Value::string(n.op)},
                                {"device", Value::string(n.device.str())},
                                {"args", Value::array(std::move(args))}}));
  }
  return Value::object({{"format", Value::string("blu-capture")},
                        {"version", Value::integer(1)},
                        {"structure_hash", Value::string(hash_hex(structure_hash()))},
                        {"signature_hash", Value::string(hash_hex(signature_hash()))},
                        {"buffers", Value::array(std::move(bufs))},
                        {"nodes", Value::array(std::move(ns))}})
      .dump();
}

Graph Graph::from_json(const std::string& text) {
  const Value root = json::parse(text);
  BLU_CHECK(root.is_object() && root.find("format") && root.find("format")->is_string() &&
                root.find("format")->as_string() == "blu-capture",
            "capture JSON: not a blu-capture document");
  BLU_CHECK(member(root, "version", "the document").as_integer() == 1, "capture JSON: version ",
            member(root, "version", "the document").dump(), " (this build reads 1)");
  Graph g;
  for (const Value& b : member(root, "buffers", "the document").as_array()) {
    Buffer buf;
    buf.id = static_cast<int>(member(b, "id", "a buffer").as_integer());
    BLU_CHECK(buf.id == static_cast<int>(g.buffers.size()), "capture JSON: buffer ids must be 0, 1, ... in order");
    const int64_t bytes = member(b, "bytes", "a buffer").as_integer();
    BLU_CHECK(bytes >= 0, "capture JSON: buffer ", buf.id, " has ", bytes, " bytes");
    buf.nbytes = static_cast<std::size_t>(bytes);
    buf.device = Device(member(b, "device", "a buffer").as_string());
    const std::string& origin = member(b, "origin", "a buffer").as_string();
    BLU_CHECK(origin == "input" || origin == "internal", "capture JSON: buffer origin '", origin, "'");
    buf.origin = origin == "input" ? Origin::kInput : Origin::kInternal;
    buf.written = member(b, "written", "a buffer").as_bool();
    buf.alive = member(b, "alive", "a buffer").as_bool();
    g.buffers.push_back(buf);
  }
  for (const Value& nv : member(root, "nodes", "the document").as_array()) {
    Node n;
    n.op = member(nv, "op", "a node").as_string();
    n.device = Device(member(nv, "device", "a node").as_string());
    for (const Value& av : member(nv, "args", "a node").as_array()) {
      Arg a;
      a.name = member(av, "name", "an argument").as_string();
      if (const Value* t = av.find("tensor")) {
        a.kind = Arg::Kind::kTensor;
        a.tensors.push_back(tensor_of(*t, g.buffers.size()));
      } else if (const Value* ts = av.find("tensors")) {
        a.kind = Arg::Kind::kTensorList;
        for (const Value& t : ts->as_array()) a.tensors.push_back(tensor_of(t, g.buffers.size()));
      } else if (const Value* x = av.find("number")) {
        a.kind = Arg::Kind::kNumber;
        a.number = number_of(*x);
      } else if (const Value* i = av.find("int")) {
        a.kind = Arg::Kind::kInt;
        a.integer = i->as_integer();
      } else if (const Value* u = av.find("uint")) {
        a.kind = Arg::Kind::kUInt;
        a.uinteger = std::strtoull(u->as_string().c_str(), nullptr, 10);
      } else if (const Value* bo = av.find("bool")) {
        a.kind = Arg::Kind::kBool;
        a.integer = bo->as_bool() ? 1 : 0;
      } else if (const Value* e = av.find("enum")) {
        a.kind = Arg::Kind::kEnum;
        a.enum_name = e->as_string();
        a.integer = member(av, "value", "an enum argument").as_integer();
      } else {
        BLU_THROW("capture JSON: argument '", a.name, "' of node '", n.op, "' has no value");
      }
      if (a.kind == Arg::Kind::kTensor || a.kind == Arg::Kind::kTensorList) {
        a.read = member(av, "read", "a tensor argument").as_bool();
        a.write = member(av, "write", "a tensor argument").as_bool();
      }
      n.args.push_back(std::move(a));
    }
    g.nodes.push_back(std::move(n));
  }
  return g;
}

}  // namespace blu::capture
