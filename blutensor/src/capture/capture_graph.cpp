// The captured graph (Note [Step capture], blutensor/capture.h): queries, hashes and cache key,
// the byte-level helpers, and replay through the backends (the Executable: capture_executable.cpp).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <tuple>
#include <unordered_map>

#include "blutensor/capture.h"
#include "capture/capture_internal.h"
#include "dispatch.h"

namespace blu::capture {

int64_t TensorRef::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

bool TensorRef::contiguous() const {
  int64_t expect = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] != 1 && strides[i] != expect) return false;
    expect *= sizes[i];
  }
  return true;
}

const Arg& Node::arg(const std::string& name) const {
  for (const Arg& a : args) {
    if (a.name == name) return a;
  }
  BLU_THROW("capture: node '", op, "' has no argument '", name, "'");
}

int Graph::buffer_of(const Tensor& t) const {
  if (!t.defined()) return -1;
  for (size_t i = 0; i < storages.size(); ++i) {
    if (storages[i].lock() == t.storage()) return static_cast<int>(i);
  }
  return -1;
}

std::vector<int> Graph::inputs() const {
  std::vector<int> ids;
  for (const Buffer& b : buffers) {
    if (b.origin == Origin::kInput) ids.push_back(b.id);
  }
  return ids;
}

std::vector<int> Graph::outputs() const {
  std::vector<int> ids;
  for (const Buffer& b : buffers) {
    if (b.output()) ids.push_back(b.id);
  }
  return ids;
}

int Graph::launches() const {
  int n = 0;
  for (const Node& node : nodes) n += node.op != "host_read" ? 1 : 0;
  return n;
}

int Graph::host_reads() const { return static_cast<int>(nodes.size()) - launches(); }

namespace {

struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  }
  void str(const std::string& s) { bytes(s.data(), s.size() + 1); }
  template <typename T>
  void pod(T v) { bytes(&v, sizeof(v)); }
};

}  // namespace

std::string Graph::hash_hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, h);
  return buf;
}

uint64_t Graph::structure_hash() const {
  Fnv f;
  for (const Node& n : nodes) {
    f.str(n.op);
    f.str(n.device.str());
    for (const Arg& a : n.args) {
      f.str(a.name);
      f.pod(a.kind);
      // The learning rate and the step count change every step: a compiled step takes them as
      // arguments, so they are not part of the key.
      if (n.op == "adamw_step" && (a.name == "hp.lr" || a.name == "hp.step")) continue;
      f.pod(a.number);
      f.pod(a.integer);
      f.pod(a.uinteger);
      for (const TensorRef& t : a.tensors) f.pod(t.buffer);
    }
  }
  for (const Buffer& b : buffers) {
    f.pod(b.origin);
    f.pod(b.output());
  }
  return f.h;
}

uint64_t Graph::signature_hash() const {
  Fnv f;
  for (const Buffer& b : buffers) f.pod(static_cast<uint64_t>(b.nbytes));
  for (const Node& n : nodes) {
    for (const Arg& a : n.args) {
      for (const TensorRef& t : a.tensors) {
        f.pod(t.dtype);
        f.pod(t.offset);
        for (int64_t s : t.sizes) f.pod(s);
        f.pod(int64_t{-1});
        for (int64_t s : t.strides) f.pod(s);
        f.pod(int64_t{-2});
      }
    }
  }
  return f.h;
}

std::string Graph::key(const std::string& arch) const {
  return hash_hex(structure_hash()) + "-" + hash_hex(signature_hash()) + "-" + arch;
}

std::string Graph::summary() const {
  std::map<std::string, int> counts;
  for (const Node& n : nodes) {
    std::string k = n.op;
    if (n.op == "unary" || n.op == "binary" || n.op == "reduce") k += ":" + n.arg("op").enum_name;
    ++counts[k];
  }
  size_t temps = 0, temp_bytes = 0, in_bytes = 0;
  for (const Buffer& b : buffers) {
    if (b.origin == Origin::kInput) in_bytes += b.nbytes;
    if (b.origin == Origin::kInternal && !b.alive) ++temps, temp_bytes += b.nbytes;
  }
  std::string s = std::to_string(nodes.size()) + " nodes (" + std::to_string(launches()) + " launches, " +
                  std::to_string(host_reads()) + " host reads), " + std::to_string(buffers.size()) +
                  " buffers: " + std::to_string(inputs().size()) + " inputs (" + std::to_string(in_bytes) +
                  " B), " + std::to_string(outputs().size()) + " outputs, " + std::to_string(temps) +
                  " temporaries (" + std::to_string(temp_bytes) + " B)\n";
  for (const auto& [k, c] : counts) s += "  " + k + " x" + std::to_string(c) + "\n";
  return s;
}

namespace detail {

Tensor byte_view(const std::shared_ptr<Storage>& s, std::size_t nbytes) {
  BLU_CHECK(nbytes % 2 == 0, "capture: a buffer of ", nbytes, " bytes (odd) cannot be copied as elements");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = s;
  impl->dtype = nbytes % 4 == 0 ? DType::I32 : DType::U16;
  impl->sizes = {static_cast<int64_t>(nbytes / dtype_size(impl->dtype))};
  impl->strides = {1};
  return Tensor(impl);
}

Tensor byte_tensor(std::size_t nbytes, Device device) {
  return byte_view(std::make_shared<Storage>(nbytes, device), nbytes);
}

Tensor view_of(const std::shared_ptr<Storage>& s, const TensorRef& r) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = s;
  impl->dtype = r.dtype;
  impl->sizes = r.sizes;
  impl->strides = r.strides;
  impl->storage_offset = r.offset;
  return Tensor(impl);
}

}  // namespace detail

Tensor bytes_of(const Tensor& t) {
  BLU_CHECK(t.defined(), "capture::bytes_of: undefined tensor");
  return detail::byte_view(t.storage(), t.storage()->nbytes());
}

namespace {

using detail::Ctx;

struct Cursor {
  const Node& node;
  const Ctx& ctx;
  size_t i = 0;
  const Arg& next() {
    BLU_CHECK(i < node.args.size(), "capture::replay: node '", node.op, "' has too few arguments");
    return node.args[i++];
  }
};

template <typename T>
T take(Cursor& c);
template <>
Tensor take<Tensor>(Cursor& c) {
  const Arg& a = c.next();
  BLU_CHECK(a.kind == Arg::Kind::kTensor && a.tensors.size() == 1, "capture::replay: '", c.node.op, "' argument '",
            a.name, "' is not a tensor");
  return c.ctx.view(a.tensors[0]);
}
template <>
std::vector<Tensor> take<std::vector<Tensor>>(Cursor& c) {
  const Arg& a = c.next();
  BLU_CHECK(a.kind == Arg::Kind::kTensorList, "capture::replay: '", c.node.op, "' argument '", a.name,
            "' is not a tensor list");
  std::vector<Tensor> ts;
  for (const TensorRef& r : a.tensors) ts.push_back(c.ctx.view(r));
  return ts;
}
template <>
double take<double>(Cursor& c) { return c.next().number; }
template <>
int64_t take<int64_t>(Cursor& c) { return c.next().integer; }
template <>
uint64_t take<uint64_t>(Cursor& c) { return c.next().uinteger; }
template <>
bool take<bool>(Cursor& c) { return c.next().integer != 0; }
template <>
UnaryOp take<UnaryOp>(Cursor& c) { return static_cast<UnaryOp>(c.next().integer); }
template <>
BinaryOp take<BinaryOp>(Cursor& c) { return static_cast<BinaryOp>(c.next().integer); }
template <>
ReduceOp take<ReduceOp>(Cursor& c) { return static_cast<ReduceOp>(c.next().integer); }
template <>
AdamWParams take<AdamWParams>(Cursor& c) {
  AdamWParams hp;
  hp.lr = c.next().number;
  hp.beta1 = c.next().number;
  hp.beta2 = c.next().number;
  hp.eps = c.next().number;
  hp.weight_decay = c.next().number;
  hp.step = c.next().integer;
  return hp;
}

// Calls fn with the node's arguments converted to its parameter types, in order (a braced list
// evaluates left to right).
template <typename R, typename... P>
R invoke(R (*fn)(P...), const Node& n, const Ctx& ctx) {
  Cursor c{n, ctx};
  std::tuple<std::decay_t<P>...> args{take<std::decay_t<P>>(c)...};
  BLU_CHECK(c.i == n.args.size(), "capture::replay: node '", n.op, "' has ", n.args.size(),
            " arguments, the backend takes ", c.i);
  return std::apply(fn, args);
}

using Runner = std::function<void(const Node&, const Ctx&)>;

const std::unordered_map<std::string, Runner>& runners() {
  static const std::unordered_map<std::string, Runner> table = [] {
    std::unordered_map<std::string, Runner> t;
#if BLU_HAVE_CUDA_OPS
#define BLU_CAPTURE_CUDA_CALL(name)                \
  if (n.device.is_cuda()) {                        \
    DeviceGuard guard(n.device);                   \
    invoke(&cuda_ops::name, n, ctx);               \
    return;                                        \
  }
#else
#define BLU_CAPTURE_CUDA_CALL(name) \
  BLU_CHECK(!n.device.is_cuda(), "capture::replay: a CUDA node in a build without CUDA ops");
#endif
#define BLU_BACKEND_OP(ret, name, params)             \
  t[#name] = [](const Node& n, const Ctx& ctx) {      \
    BLU_CAPTURE_CUDA_CALL(name)                       \
    invoke(&cpu_ops::name, n, ctx);                   \
  };
#include "backend_ops.def"
#if BLU_HAVE_CUDA_OPS
    t["attention_forward"] = [](const Node& n, const Ctx& ctx) {
      DeviceGuard guard(n.device);
      BLU_CHECK(invoke(&cuda_ops::attention_forward, n, ctx), "capture::replay: attention_forward refused");
    };
    t["attention_backward"] = [](const Node& n, const Ctx& ctx) {
      DeviceGuard guard(n.device);
      BLU_CHECK(invoke(&cuda_ops::attention_backward, n, ctx), "capture::replay: attention_backward refused");
    };
#endif
#undef BLU_CAPTURE_CUDA_CALL
    t["host_read"] = [](const Node&, const Ctx&) {};
    return t;
  }();
  return table;
}

}  // namespace

namespace detail {

void run_node(const Node& n, size_t index, const Ctx& ctx) {
  auto it = runners().find(n.op);
  BLU_CHECK(it != runners().end(), "capture: node ", index, " op '", n.op, "' cannot be run here");
  try {
    it->second(n, ctx);
  } catch (const Error& e) {
    BLU_THROW("capture: node ", index, " (", n.op, ") failed: ", e.what());
  }
}

// Copies the snapshot `value` into storage s (byte views, same size).
void fill_from(const std::shared_ptr<Storage>& s, const Buffer& b, const Tensor& value) {
  BLU_CHECK(value.numel() * static_cast<int64_t>(value.element_size()) == static_cast<int64_t>(b.nbytes),
            "capture: the initial value of buffer ", b.id, " is ", value.describe(), ", expected ", b.nbytes, " bytes");
  Tensor dst = detail::byte_view(s, b.nbytes);
  dst.copy_(value);  // also from a host snapshot (Note [Input snapshots on the host])
}

}  // namespace detail

std::map<int, Tensor> replay(const Graph& g) {
  using detail::fill_from;
  using detail::run_node;
  BLU_CHECK(!recording(), "capture::replay: not inside a capture Scope");
  Ctx ctx;
  for (const Buffer& b : g.buffers) {
    ctx.storages.push_back(std::make_shared<Storage>(b.nbytes, b.device));
    if (b.origin != Origin::kInput) continue;
    auto it = g.initial.find(b.id);
    BLU_CHECK(it != g.initial.end(), "capture::replay: input buffer ", b.id, " (", b.nbytes, " bytes on ",
              b.device.str(), ") has no initial value: capture with Scope(true)");
    fill_from(ctx.storages.back(), b, it->second);
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) run_node(g.nodes[i], i, ctx);
  std::map<int, Tensor> out;
  for (int id : g.outputs()) {
    out[id] = detail::byte_view(ctx.storages[static_cast<size_t>(id)], g.buffers[static_cast<size_t>(id)].nbytes);
  }
  return out;
}

}  // namespace blu::capture
