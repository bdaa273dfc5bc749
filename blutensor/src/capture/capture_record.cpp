// Recording (Note [Step capture], blutensor/capture.h): the thread's Recorder, buffer identities,
// the argument names and read/write roles of every backend op, input snapshots.
#include <cstring>
#include <memory>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "blutensor/capture.h"
#include "capture/capture_fresh.h"
#include "capture/capture_internal.h"
#include "dispatch.h"

namespace blu::capture {

namespace {

// Parameter names of every backend op, from backend_ops.def's own text.
struct OpSig {
  std::vector<std::string> params;
  std::set<std::string> writes;  // tensors the op writes
  std::set<std::string> rmw;     // ... of which it also reads the old value
};

std::vector<std::string> parse_param_names(std::string_view text) {
  // "(const Tensor& dst, const std::vector<Tensor>& xs, double v)": the last identifier of each
  // top-level comma-separated piece.
  std::vector<std::string> names;
  int depth = 0;
  std::string piece;
  auto flush = [&] {
    size_t end = piece.find_last_not_of(" \t\n");
    if (end == std::string::npos) return;
    size_t begin = end;
    while (begin > 0 && (std::isalnum(static_cast<unsigned char>(piece[begin - 1])) || piece[begin - 1] == '_')) --begin;
    names.push_back(piece.substr(begin, end - begin + 1));
    piece.clear();
  };
  for (char c : text.substr(1, text.size() - 2)) {
    if (c == '<' || c == '(') ++depth;
    if (c == '>' || c == ')') --depth;
    if (c == ',' && depth == 0) {
      flush();
    } else {
      piece += c;
    }
  }
  flush();
  return names;
}

const std::unordered_map<std::string, OpSig>& signatures() {
  static const std::unordered_map<std::string, OpSig> table = [] {
    std::unordered_map<std::string, OpSig> t;
#define BLU_BACKEND_OP(ret, name, plist) t[#name].params = parse_param_names(#plist);
#include "backend_ops.def"
    t["attention_forward"].params = {"o", "lse", "q", "k", "v", "is_causal", "scale"};
    t["attention_backward"].params = {"dq", "dk", "dv", "dout", "q", "k", "v", "o", "lse", "is_causal", "scale"};
    t["host_read"].params = {"src"};
    // What each op writes (everything else it takes is read). Keep in step with backend_ops.def:
    // capture_test checks that every op there has an entry.
    const std::pair<const char*, std::vector<const char*>> writes[] = {
        {"copy_", {"dst"}}, {"fill_", {"dst"}}, {"unary", {"out"}}, {"binary", {"out"}},
        {"reduce", {"out"}}, {"gemm", {"out"}}, {"softmax_forward", {"y"}},
        {"softmax_backward", {"dx"}}, {"layer_norm_forward", {"y", "mean", "rstd"}},
        {"layer_norm_backward", {"dx", "dweight", "dbias"}}, {"embedding_forward", {"out"}},
        {"embedding_backward", {"dweight"}}, {"cross_entropy_forward", {"losses", "lse", "valid"}},
        {"cross_entropy_backward", {"dlogits"}},
        {"cross_entropy_forward_backward", {"losses", "lse", "valid", "dlogits"}}, {"causal_fill", {"out"}},
        {"dropout", {"out"}},
        {"random_uniform", {"out"}}, {"random_normal", {"out"}},
        {"adamw_step", {"params", "exp_avgs", "exp_avg_sqs"}}, {"global_norm", {"norm", "clip_coef"}},
        {"scale_tensors_", {"tensors"}}, {"copy_tensors_", {"dsts"}}, {"attention_forward", {"o", "lse"}},
        {"attention_backward", {"dq", "dk", "dv"}}, {"host_read", {}},
    };
    for (const auto& [op, names] : writes) {
      BLU_CHECK(t.count(op), "capture: the write table names an unknown op '", op, "'");
      for (const char* n : names) t[op].writes.insert(n);
    }
    t["adamw_step"].rmw = {"params", "exp_avgs", "exp_avg_sqs"};
    t["scale_tensors_"].rmw = {"tensors"};
    // gemm's out is also read when accumulate is set (handled in end_node).
    for (const auto& [op, sig] : t) {
      for (const std::string& w : sig.writes) {
        bool found = false;
        for (const std::string& p : sig.params) found = found || p == w;
        BLU_CHECK(found, "capture: op '", op, "' has no parameter '", w, "' (backend_ops.def changed?)");
      }
    }
    return t;
  }();
  return table;
}

const char* enum_name(UnaryOp v) {
  static const char* names[] = {"kNeg", "kExp", "kLog", "kSqrt", "kTanh", "kRelu", "kGelu",
                                "kAddScalar", "kMulScalar", "kPowScalar", "kRSubScalar",
                                "kRDivScalar", "kClampMax"};
  const int i = static_cast<int>(v);
  return i >= 0 && i < static_cast<int>(std::size(names)) ? names[i] : "?";
}
const char* enum_name(BinaryOp v) {
  static const char* names[] = {"kAdd", "kSub", "kMul", "kDiv", "kReluBackward",
                                "kGeluBackward", "kTanhBackward", "kPowBackward", "kEqMask"};
  const int i = static_cast<int>(v);
  return i >= 0 && i < static_cast<int>(std::size(names)) ? names[i] : "?";
}
const char* enum_name(ReduceOp v) { return v == ReduceOp::kSum ? "kSum" : "kMax"; }

thread_local detail::Recorder* t_recorder = nullptr;

}  // namespace

namespace detail {

struct Recorder {
  Graph graph;
  bool snapshot_inputs = false;
  bool paused = false;
  std::unordered_map<const Storage*, int> ids;
  std::vector<std::weak_ptr<Storage>> storages;  // by buffer id
  std::vector<bool> touched;
  std::vector<bool> fresh_buffer;                // by buffer id: allocated during the capture
  std::unordered_set<const Storage*> fresh;      // storages allocated during the capture
  Node node;
  const OpSig* sig = nullptr;
  size_t param = 0;

  const std::string& next_name() {
    BLU_CHECK(param < sig->params.size(), "capture: op '", node.op, "' called with more arguments (",
              param + 1, ") than backend_ops.def declares (", sig->params.size(), ")");
    return sig->params[param++];
  }

  TensorRef ref(const Tensor& t) {
    TensorRef r;
    if (!t.defined()) return r;
    const std::shared_ptr<Storage>& s = t.storage();
    auto it = ids.find(s.get());
    if (it == ids.end() || storages[static_cast<size_t>(it->second)].expired()) {
      Buffer b;
      b.id = static_cast<int>(graph.buffers.size());
      b.nbytes = s->nbytes();
      b.device = s->device();
      graph.buffers.push_back(b);
      storages.push_back(s);
      touched.push_back(false);
      fresh_buffer.push_back(fresh.count(s.get()) > 0);
      ids[s.get()] = b.id;
      r.buffer = b.id;
    } else {
      r.buffer = it->second;
    }
    r.dtype = t.dtype();
    r.offset = t.storage_offset();
    r.sizes = t.sizes();
    r.strides = t.strides();
    return r;
  }

  // First touch of a buffer: by a read, or by a write that leaves some of it as it was (an input
  // unless the storage is fresh: Note [Fresh buffers]).
  void touch(const TensorRef& r, bool write, bool full_write) {
    if (!r.defined()) return;
    const size_t id = static_cast<size_t>(r.buffer);
    if (touched[id]) return;
    touched[id] = true;
    Buffer& b = graph.buffers[id];
    b.origin = full_write || (write && fresh_buffer[id]) ? Origin::kInternal : Origin::kInput;
    if (b.origin == Origin::kInput && snapshot_inputs) {
      std::shared_ptr<Storage> s = storages[id].lock();
      // Note [Input snapshots on the host]
      graph.initial[b.id] = copy_bytes(s, b.nbytes, fresh_buffer[id] ? b.device : Device::cpu());
    }
  }

  // src's first nbytes into a new storage on `to` (the host or src's own device).
  Tensor copy_bytes(const std::shared_ptr<Storage>& src, std::size_t nbytes, Device to) {
    paused = true;
    Tensor out = byte_tensor(nbytes, to);
    Tensor in = byte_view(src, nbytes);
    out.copy_(in);  // to the host: after the work already queued on the stream
    paused = false;
    return out;
  }
};

// Note [Input snapshots on the host]
// Scope(true) keeps each input buffer's bytes at its first touch, but an Executable needs only
// the snapshots of inputs nobody references after the step (constants made inside it: their
// storages were allocated after the Scope opened) and drops the rest: a live input is read where
// it lives. Kept on the device, the rest still raised the recording step's peak by every
// parameter, gradient and optimizer moment the step reads: GPT-2 d12 bf16 B16 on the H100, 448
// inputs, 1.39 GiB, the compiled step's 7.99 GiB peak against 6.60 GiB in use afterwards
// (session 22). So a storage that existed before the Scope is copied to host memory (one
// synchronous device-to-host copy per buffer, once), a fresh one stays on its device; replay()
// and the Executable copy a host snapshot back where they need it (an Executable moves the ones
// it refills every run onto the device once).

// Note [Fresh buffers]
// A buffer is an input when the step depends on its value at capture start: its first touch
// reads it, or writes only part of it. But a storage allocated after the Scope opened has no
// value from before: whatever it held is garbage that no correct step reads. Such a buffer
// first written in parts (an uninitialised gradient assembled by copies into its slices, the
// select backward of GPT-2's qkv; CUDA attention's output and dq/dk/dv, written whole through
// permuted [B, T, H, D] views, which the contiguity test reads as partial) is internal: a
// temporary of the step, not an input to snapshot, keep alive and refill on every run. (On an
// H100 at d12 B8 T1024 these were 60 buffers, 2.11 GB, each held twice by the Executable, as the
// constant storage and as its snapshot: Note [Captured step memory] in capture_arena.h.) Storage's
// allocating constructor reports itself to the open recorder of its thread; a storage from
// another thread, or wrapping outside memory, is treated as before. Addresses are safe keys: a
// storage alive at capture start cannot share its address with one allocated while it lives,
// and every later storage at a freed address is itself fresh. A fresh buffer first touched by a
// read (garbage read) stays an input, as before.
void note_storage_allocated(const Storage* s) {
  if (Recorder* r = t_recorder) r->fresh.insert(s);
}

Recorder* active() {
  Recorder* r = t_recorder;
  return r != nullptr && !r->paused ? r : nullptr;
}

void begin_node(Recorder* r, const char* op, Device device) {
  auto it = signatures().find(op);
  BLU_CHECK(it != signatures().end(), "capture: op '", op, "' has no signature (capture_record.cpp)");
  r->node = Node{};
  r->node.op = op;
  r->node.device = device;
  r->sig = &it->second;
  r->param = 0;
}

namespace {
Arg& push(Recorder* r, Arg::Kind kind) {
  Arg a;
  a.name = r->next_name();
  a.kind = kind;
  r->node.args.push_back(std::move(a));
  return r->node.args.back();
}
}  // namespace

void add(Recorder* r, const Tensor& t) { push(r, Arg::Kind::kTensor).tensors.push_back(r->ref(t)); }
void add(Recorder* r, const std::vector<Tensor>& ts) {
  Arg& a = push(r, Arg::Kind::kTensorList);
  for (const Tensor& t : ts) a.tensors.push_back(r->ref(t));
}
void add(Recorder* r, double v) { push(r, Arg::Kind::kNumber).number = v; }
void add(Recorder* r, int64_t v) { push(r, Arg::Kind::kInt).integer = v; }
void add(Recorder* r, uint64_t v) { push(r, Arg::Kind::kUInt).uinteger = v; }
void add(Recorder* r, bool v) { push(r, Arg::Kind::kBool).integer = v ? 1 : 0; }
namespace {
template <typename E>
void add_enum(Recorder* r, E v) {
  Arg& a = push(r, Arg::Kind::kEnum);
  a.integer = static_cast<int64_t>(v);
  a.enum_name = enum_name(v);
}
}  // namespace
void add(Recorder* r, UnaryOp v) { add_enum(r, v); }
void add(Recorder* r, BinaryOp v) { add_enum(r, v); }
void add(Recorder* r, ReduceOp v) { add_enum(r, v); }
void add(Recorder* r, const AdamWParams& hp) {
  const std::string base = r->next_name();
  const std::pair<const char*, double> fields[] = {{"lr", hp.lr}, {"beta1", hp.beta1}, {"beta2", hp.beta2},
                                                    {"eps", hp.eps}, {"weight_decay", hp.weight_decay}};
  for (const auto& [n, v] : fields) {
    Arg a;
    a.name = base + "." + n;
    a.number = v;
    r->node.args.push_back(a);
  }
  Arg s;
  s.name = base + ".step";
  s.kind = Arg::Kind::kInt;
  s.integer = hp.step;
  r->node.args.push_back(s);
}

void end_node(Recorder* r) {
  BLU_CHECK(r->param == r->sig->params.size(), "capture: op '", r->node.op, "' recorded ", r->param,
            " arguments, backend_ops.def declares ", r->sig->params.size());
  bool accumulate = false;
  if (r->node.op == "gemm") accumulate = r->node.arg("accumulate").integer != 0;
  for (Arg& a : r->node.args) {
    if (a.kind != Arg::Kind::kTensor && a.kind != Arg::Kind::kTensorList) continue;
    a.write = r->sig->writes.count(a.name) > 0;
    a.read = !a.write || r->sig->rmw.count(a.name) > 0 || (accumulate && a.name == "out");
  }
  // Reads first: an in-place op's buffer is an input when the op is its first touch.
  for (const Arg& a : r->node.args) {
    if (!a.read) continue;
    for (const TensorRef& t : a.tensors) r->touch(t, false, false);
  }
  for (const Arg& a : r->node.args) {
    if (!a.write) continue;
    for (const TensorRef& t : a.tensors) {
      if (!t.defined()) continue;
      const Buffer& b = r->graph.buffers[static_cast<size_t>(t.buffer)];
      const bool full = t.contiguous() && t.offset == 0 &&
                        static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype) == b.nbytes;
      r->touch(t, true, full);
      r->graph.buffers[static_cast<size_t>(t.buffer)].written = true;
    }
  }
  r->graph.nodes.push_back(std::move(r->node));
  r->node = Node{};
}

void record_host_read(const Tensor& t) {
  if (Recorder* r = active()) {
    begin_node(r, "host_read", t.device());
    add(r, t);
    end_node(r);
  }
}

}  // namespace detail

Scope::Scope(bool snapshot_inputs) {
  BLU_CHECK(t_recorder == nullptr, "capture::Scope: a capture is already open on this thread (one at a time)");
  t_recorder = new detail::Recorder();
  t_recorder->snapshot_inputs = snapshot_inputs;
}

Scope::~Scope() {
  if (open_) {
    delete t_recorder;
    t_recorder = nullptr;
  }
}

Graph Scope::finish() {
  BLU_CHECK(open_, "capture::Scope::finish: called twice");
  open_ = false;
  std::unique_ptr<detail::Recorder> r(t_recorder);
  t_recorder = nullptr;
  for (size_t i = 0; i < r->graph.buffers.size(); ++i) r->graph.buffers[i].alive = !r->storages[i].expired();
  r->graph.storages = r->storages;
  return std::move(r->graph);
}

bool recording() { return t_recorder != nullptr; }

}  // namespace blu::capture
