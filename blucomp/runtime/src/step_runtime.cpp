// The step runtime (blucomp/step_runtime.h, Note [Step runtime]).
#include "blucomp/step_runtime.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "blutensor/cuda_stream.h"
#include "blutensor/json.h"
#include "blutensor/tensor.h"

#if BLU_WITH_CUDA
#include <blublas/gemm.h>
#include <cuda_runtime.h>
#endif

namespace blu::comp {

namespace {

using capture::Arg;
using capture::Node;
using capture::TensorRef;

struct PlanKernel {
  std::string kind, epilogue;
  std::string ptx, kernel;  // fused, when blu-plan compiled it
  int64_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  std::vector<int64_t> params;
  bool transpose_lhs = false, transpose_rhs = false;
  std::vector<int> nodes;
  std::vector<int64_t> operands, results;
  std::vector<int64_t> view_operands;  // fused: read through strided windows (Note [Strided operands])
  // fused: elements per vector access and the parameters accessed so (blucomp Note [Vectorized
  // group kernels]); 0: a scalar kernel.
  int64_t vector_width = 0;
  std::vector<int64_t> vector_params;
};

std::vector<int64_t> ints(const json::Value& v) {
  std::vector<int64_t> out;
  for (const json::Value& x : v.as_array()) out.push_back(x.as_integer());
  return out;
}

std::vector<PlanKernel> parse_plan(const json::Value& root) {
  BLU_CHECK(root.is_object() && root.find("format") && root.find("format")->as_string() == "blu-plan",
            "bind_plan: not a blu-plan document");
  std::vector<PlanKernel> out;
  const json::Value* ks = root.find("kernels");
  BLU_CHECK(ks && ks->is_array(), "bind_plan: the plan has no kernels array");
  for (const json::Value& k : ks->as_array()) {
    PlanKernel p;
    p.kind = k.find("kind")->as_string();
    if (const json::Value* e = k.find("epilogue")) p.epilogue = e->as_string();
    if (const json::Value* t = k.find("transpose_lhs")) p.transpose_lhs = t->as_bool();
    if (const json::Value* t = k.find("transpose_rhs")) p.transpose_rhs = t->as_bool();
    for (int64_t n : ints(*k.find("nodes"))) p.nodes.push_back(static_cast<int>(n));
    p.operands = ints(*k.find("operands"));
    if (const json::Value* v = k.find("ptx")) p.ptx = v->as_string();
    if (const json::Value* v = k.find("kernel")) p.kernel = v->as_string();
    if (const json::Value* v = k.find("params")) p.params = ints(*v);
    if (const json::Value* v = k.find("grid")) {
      const std::vector<int64_t> g = ints(*v);
      for (size_t d = 0; d < 3 && d < g.size(); ++d) p.grid[d] = g[d];
    }
    if (const json::Value* v = k.find("block")) {
      const std::vector<int64_t> b = ints(*v);
      for (size_t d = 0; d < 3 && d < b.size(); ++d) p.block[d] = b[d];
    }
    p.results = ints(*k.find("results"));
    if (const json::Value* v = k.find("view_operands")) p.view_operands = ints(*v);
    if (const json::Value* v = k.find("vector_width")) p.vector_width = v->as_integer();
    if (const json::Value* v = k.find("vector_params")) p.vector_params = ints(*v);
    out.push_back(std::move(p));
  }
  return out;
}

#if BLU_WITH_CUDA
// The last write of `buffer` among `nodes` (the value the kernel must leave there), or null.
const TensorRef* last_write(const capture::Graph& g, const std::vector<int>& nodes, int64_t buffer) {
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    for (const Arg& a : g.nodes[static_cast<size_t>(*it)].args) {
      if (!a.write) continue;
      for (const TensorRef& t : a.tensors)
        if (t.buffer == buffer) return &t;
    }
  }
  return nullptr;
}

// The first read of `buffer` among `nodes` (how the calls addressed that operand), or null.
const TensorRef* first_read(const capture::Graph& g, const std::vector<int>& nodes, int64_t buffer) {
  for (int n : nodes) {
    for (const Arg& a : g.nodes[static_cast<size_t>(n)].args) {
      if (!a.read) continue;
      for (const TensorRef& t : a.tensors)
        if (t.buffer == buffer) return &t;
    }
  }
  return nullptr;
}

// The whole of `buffer` as a dense 1-D tensor from element 0 in the dtype the graph uses it as:
// how a kernel addresses an operand no call of its group reads (blucomp Note [Rematerialization]:
// a recomputed value's input, e.g. the gate a SwiGLU backward recomputes silu from). Undefined
// (buffer -1) when no call names the buffer.
TensorRef whole_buffer(const capture::Graph& g, int64_t buffer) {
  TensorRef r;
  for (const Node& n : g.nodes)
    for (const Arg& a : n.args)
      for (const TensorRef& t : a.tensors)
        if (t.buffer == buffer && r.buffer < 0) {
          r.buffer = t.buffer;
          r.dtype = t.dtype;
        }
  if (r.buffer < 0 || static_cast<size_t>(buffer) >= g.buffers.size()) return TensorRef{};
  r.sizes = {static_cast<int64_t>(g.buffers[static_cast<size_t>(buffer)].nbytes / dtype_size(r.dtype))};
  r.strides = {1};
  return r;
}

// A [1, R, C] operand as blublas's (op, ld): row-major (last stride 1) or a transposed view.
bool operand(const TensorRef& r, blublas::Op* op, int64_t* ld) {
  if (r.sizes.size() != 3 || r.sizes[0] != 1) return false;
  if (r.strides[2] == 1 || r.sizes[2] == 1) {
    *op = blublas::Op::kN;
    *ld = r.sizes[1] == 1 ? r.sizes[2] : r.strides[1];
    return true;
  }
  if (r.strides[1] == 1 || r.sizes[1] == 1) {
    *op = blublas::Op::kT;
    *ld = r.sizes[2] == 1 ? r.sizes[1] : r.strides[2];
    return true;
  }
  return false;
}

// One GEMM workspace per stream for every bound epilogue of a step: the launches on one stream
// run one after another, so they can share it (one per kernel held 85 workspaces, +4 GiB on
// GPT-2 124M fp32 B8, session 13); the Executable's side stream (Note [Side stream] in blutensor)
// runs bound dW epilogues beside the main stream's, so it gets its own. Grown at bind time to the
// largest request, allocated at a stream's first launch.
struct SharedWorkspace {
  std::size_t bytes = 0;
  std::map<cudaStream_t, Tensor> by_stream;
  void* get(const Device& device) {
    if (bytes == 0) return nullptr;
    Tensor& t = by_stream[cuda::current_stream(device.index)];
    if (!t.defined() || static_cast<std::size_t>(t.numel()) * 4 < bytes)
      t = empty({static_cast<int64_t>((bytes + 3) / 4 + 1)}, TensorOptions(kInt32).device(device));
    return t.data_ptr();
  }
};

// The launch takes the place of the set's last call. Another call between the first and the last
// breaks that when it writes a buffer the kernel reads after a member of the set read it (the
// kernel would read the newer contents), or reads or writes a buffer the kernel writes after a
// member wrote it (it would see the old contents, or its write would be lost). A write that only
// comes before every member reading the buffer is what the kernel should read (a GEMM between a
// group's calls producing one of its later inputs). "" when no call does.
std::string touched_between(const capture::Graph& g, const std::vector<int>& nodes, const std::vector<int64_t>& reads,
                            const std::vector<int64_t>& writes) {
  const auto member = [&](int n) { return std::find(nodes.begin(), nodes.end(), n) != nodes.end(); };
  // The first member call that reads (writes) buffer b; INT_MAX when none.
  const auto first_member = [&](int64_t b, bool want_write) {
    for (int n : nodes)
      for (const Arg& arg : g.nodes[static_cast<size_t>(n)].args)
        if (want_write ? arg.write : arg.read)
          for (const TensorRef& t : arg.tensors)
            if (t.buffer == b) return n;
    return std::numeric_limits<int>::max();
  };
  for (int n = nodes.front() + 1; n < nodes.back(); ++n) {
    if (member(n)) continue;
    for (const Arg& arg : g.nodes[static_cast<size_t>(n)].args)
      for (const TensorRef& t : arg.tensors) {
        const bool read_by_kernel = std::find(reads.begin(), reads.end(), t.buffer) != reads.end();
        const bool written_by_kernel = std::find(writes.begin(), writes.end(), t.buffer) != writes.end();
        if (arg.write && read_by_kernel && first_member(t.buffer, false) < n)
          return "call " + std::to_string(n) + " rewrites an operand of the kernel between its calls";
        if ((arg.write || arg.read) && written_by_kernel && first_member(t.buffer, true) < n)
          return "call " + std::to_string(n) + (arg.write ? " rewrites" : " reads") +
                 " a result of the kernel between its calls";
      }
  }
  return "";
}

std::string bind_epilogue(capture::Executable& exe, const PlanKernel& k,
                          const std::shared_ptr<SharedWorkspace>& workspace) {
  const capture::Graph& g = exe.graph();
  const Node* gemm = nullptr;
  for (int n : k.nodes) {
    if (g.nodes[static_cast<size_t>(n)].op == "gemm") {
      if (gemm != nullptr) return "two GEMM calls";
      gemm = &g.nodes[static_cast<size_t>(n)];
    }
  }
  if (gemm == nullptr) return "no GEMM call";
  if (!gemm->device.is_cuda()) return "not a CUDA graph";
  if (gemm->arg("accumulate").integer != 0) return "an accumulating GEMM";
  const TensorRef a = gemm->arg("a").tensors.at(0), b = gemm->arg("bm").tensors.at(0);
  if (a.dtype != DType::F32 && a.dtype != DType::BF16) return "dtype other than f32/bf16";
  if (b.dtype != a.dtype) return "mixed dtypes";
  blublas::GemmDesc d;
  int64_t lda = 0, ldb = 0;
  if (!operand(a, &d.op_a, &lda) || !operand(b, &d.op_b, &ldb)) return "an operand neither row-major nor transposed";
  for (int64_t id : k.results)
    if (id < 0) return "a result no buffer holds";
  const TensorRef* out = last_write(g, k.nodes, k.results.at(0));
  if (out == nullptr || !out->contiguous() || out->numel() != a.sizes[1] * b.sizes[2]) return "the output is not a dense M x N";
  d.m = static_cast<int>(a.sizes[1]);
  d.n = static_cast<int>(b.sizes[2]);
  d.k = static_cast<int>(a.sizes[2]);
  d.ab_type = d.cd_type = a.dtype == DType::F32 ? blublas::Dtype::kF32 : blublas::Dtype::kBF16;
  if (a.dtype == DType::F32)
    d.compute = matmul_precision() == MatmulPrecision::kHighest ? blublas::ComputeMode::kStrictF32
                                                                : blublas::ComputeMode::kTF32;
  d.lda = lda;
  d.ldb = ldb;
  d.ldd = d.n;
  // Extra operands, by epilogue (the plan's operands: lhs, rhs, then these).
  struct Extra {
    const TensorRef* bias = nullptr;
    const TensorRef* c = nullptr;
    const TensorRef* aux = nullptr;
    const TensorRef* bias_grad = nullptr;
  } x;
  auto operand_ref = [&](size_t i) { return i < k.operands.size() ? first_read(g, k.nodes, k.operands[i]) : nullptr; };
  if (k.epilogue == "bias" || k.epilogue == "bias_gelu" || k.epilogue == "bias_residual") {
    x.bias = operand_ref(2);
    if (x.bias == nullptr) return "no bias operand";
    d.epilogue = k.epilogue == "bias_gelu" ? blublas::Epilogue::kBiasGelu : blublas::Epilogue::kBias;
    if (k.epilogue == "bias_residual") {
      x.c = operand_ref(3);
      if (x.c == nullptr || !x.c->contiguous()) return "no dense residual";
      d.beta = 1.0f;
      d.ldc = d.n;
    }
    if (k.epilogue == "bias_gelu") {
      // The pre-activation goes where the bias add wrote it (a result when the backward reads it).
      x.aux = k.results.size() > 1 ? last_write(g, k.nodes, k.results[1]) : nullptr;
      if (x.aux == nullptr) {
        for (int n : k.nodes)
          if (g.nodes[static_cast<size_t>(n)].op == "binary") x.aux = &g.nodes[static_cast<size_t>(n)].arg("out").tensors.at(0);
      }
      if (x.aux == nullptr || !x.aux->contiguous()) return "no dense pre-activation buffer";
      d.ld_aux = d.n;
    }
  } else if (k.epilogue == "gelu_grad") {
    x.aux = operand_ref(2);
    if (x.aux == nullptr || !x.aux->contiguous()) return "no dense pre-activation operand";
    d.epilogue = blublas::Epilogue::kGeluGrad;
    d.ld_aux = d.n;
  } else if (k.epilogue == "bias_grad") {
    if (k.results.size() != 2) return "bias_grad without its second result";
    x.bias_grad = last_write(g, k.nodes, k.results[1]);
    // Note [16-bit bias gradients]: a bf16 / f16 step records its bias gradients as 16-bit column
    // sums; blublas's kBiasGradA writes f32, so the bound kernel sums into an f32 scratch and one
    // cast writes the recorded buffer (the sums in f32 either way, rounded once to 16 bits).
    if (x.bias_grad == nullptr || !x.bias_grad->contiguous() ||
        (x.bias_grad->dtype != DType::F32 && x.bias_grad->dtype != DType::BF16 && x.bias_grad->dtype != DType::F16))
      return "no dense f32 / bf16 / f16 bias-gradient buffer";
    d.epilogue = blublas::Epilogue::kBiasGradA;
  } else {
    return "epilogue '" + k.epilogue + "'";
  }
  std::vector<int64_t> read_buffers{a.buffer, b.buffer};
  for (const TensorRef* r : {x.bias, x.c, x.aux})
    if (r != nullptr && (r != x.aux || k.epilogue == "gelu_grad")) read_buffers.push_back(r->buffer);
  if (std::string why = touched_between(g, k.nodes, read_buffers, {}); !why.empty()) return why;
  // blublas validates pointers (non-null, aligned, aux not aliasing D, ...) before it sizes the
  // workspace, but the buffers are only known at launch: the query gets stand-ins, one disjoint
  // 64 GiB range per buffer (so distinct buffers never alias, as on the device) with the view's
  // alignment (a buffer's base is at least 256-byte aligned, so a view's alignment is its
  // offset's). Session 13: one shared base for every buffer made aux and D "alias" and kept the
  // 24 bias_gelu / gelu_grad epilogues unbound.
  {
    auto stand_in = [](const TensorRef& r) {
      return reinterpret_cast<void*>((static_cast<std::uintptr_t>(r.buffer) + 1) << 36 |
                                     static_cast<std::uintptr_t>(r.offset * static_cast<int64_t>(dtype_size(r.dtype))));
    };
    d.a = stand_in(a);
    d.b = stand_in(b);
    d.d = stand_in(*out);
    if (x.bias) d.bias = stand_in(*x.bias);
    if (x.c) d.c = stand_in(*x.c);
    if (x.aux) d.aux = stand_in(*x.aux);
    if (x.bias_grad)  // a 16-bit one is summed into an f32 scratch: a buffer of its own
      d.bias_grad = x.bias_grad->dtype == DType::F32
                        ? static_cast<float*>(stand_in(*x.bias_grad))
                        : reinterpret_cast<float*>(static_cast<std::uintptr_t>(g.buffers.size() + 1) << 36);
  }
  std::size_t ws_bytes = 0;
  if (const blublas::Status q = blublas::gemm_workspace_size(d, &ws_bytes); !q.ok())
    return "blublas refuses the problem: " + q.message();
  const Device device = gemm->device;
  workspace->bytes = std::max(workspace->bytes, ws_bytes);
  const TensorRef ra = a, rb = b, rout = *out;
  const std::optional<TensorRef> rbias = x.bias ? std::optional<TensorRef>(*x.bias) : std::nullopt,
                                 rc = x.c ? std::optional<TensorRef>(*x.c) : std::nullopt,
                                 raux = x.aux ? std::optional<TensorRef>(*x.aux) : std::nullopt,
                                 rbg = x.bias_grad ? std::optional<TensorRef>(*x.bias_grad) : std::nullopt;
  // Note [Kernel overrides]: the buffers the launch views (a value another launch hands over
  // keeps its bytes; inner values of the set that no launch views get none).
  std::vector<int> views{ra.buffer, rb.buffer, rout.buffer};
  for (const std::optional<TensorRef>* r : {&rbias, &rc, &raux, &rbg})
    if (r->has_value()) views.push_back((*r)->buffer);
  // Note [16-bit bias gradients]: the f32 sums of a 16-bit bias gradient (allocated once, here).
  Tensor bg_scratch;
  if (rbg && rbg->dtype != DType::F32) {
    DeviceGuard guard(device);
    bg_scratch = empty({rbg->numel()}, TensorOptions(DType::F32).device(device));
  }
  exe.replace(k.nodes, [d, ws_bytes, workspace, device, ra, rb, rout, rbias, rc, raux, rbg,
                        bg_scratch](const capture::Executable::ViewFn& view) mutable {
    d.a = view(ra).data_ptr();
    d.b = view(rb).data_ptr();
    d.d = view(rout).data_ptr();
    if (rbias) d.bias = view(*rbias).data_ptr();
    if (rc) d.c = view(*rc).data_ptr();
    if (raux) d.aux = view(*raux).data_ptr();
    if (rbg) d.bias_grad = static_cast<float*>(bg_scratch.defined() ? bg_scratch.data_ptr() : view(*rbg).data_ptr());
    d.max_ctas = blu::cuda::gemm_cta_budget();  // Note [GEMM CTA budget] (a side-stream launch)
    DeviceGuard guard(device);
    const blublas::Status s = blublas::gemm(d, workspace->get(device), workspace->bytes, cuda::current_stream(device.index));
    BLU_CHECK(s.ok(), "compiled GEMM epilogue ", blublas::epilogue_name(d.epilogue), " (", d.m, "x", d.n, "x", d.k,
              "): ", s.message());
    if (bg_scratch.defined()) {
      Tensor out16 = view(*rbg);
      out16.copy_(bg_scratch.view(out16.sizes()));  // f32 -> bf16 / f16, round to nearest even
    }
  }, views);
  return "";
}

// Note [Step runtime], fused: the group's PTX through the driver API.
std::string bind_fused(capture::Executable& exe, const PlanKernel& k, const std::string& ptx_dir) {
  const capture::Graph& g = exe.graph();
  if (k.ptx.empty() || k.kernel.empty() || k.params.empty()) return "no PTX in the plan (blu-plan --ptx-dir)";
  if (ptx_dir.empty()) return "no PTX folder given";
  const Node& first = g.nodes[static_cast<size_t>(k.nodes.front())];
  if (!first.device.is_cuda()) return "not a CUDA graph";
  for (int d = 0; d < 3; ++d)
    if (k.grid[d] <= 0 || k.block[d] <= 0) return "no launch dimensions";
  // Each parameter's tensor as the recorded calls addressed it: an operand's first read, the
  // result's last write; both must be dense (the kernel indexes them as [rows, last dim]).
  std::vector<TensorRef> refs;
  std::vector<int64_t> reads, writes;  // the kernel's operand and result buffers
  for (int64_t p : k.params) {
    // p >= 0: operand p; p < 0: result -1 - p (multi-output groups write several).
    const size_t result = p < 0 ? static_cast<size_t>(-1 - p) : 0;
    const int64_t buffer = p >= 0 ? (static_cast<size_t>(p) < k.operands.size() ? k.operands[static_cast<size_t>(p)] : -1)
                                  : (result < k.results.size() ? k.results[result] : -1);
    if (buffer < 0) return "a parameter no buffer holds";
    (p >= 0 ? reads : writes).push_back(buffer);
    // blucomp Note [Strided operands]: an operand the kernel reads through windows is the whole
    // buffer from element 0 (the windows' offsets and strides are in the kernel).
    const bool viewed = p >= 0 && std::find(k.view_operands.begin(), k.view_operands.end(), p) != k.view_operands.end();
    const TensorRef* r = viewed ? nullptr : p >= 0 ? first_read(g, k.nodes, buffer) : last_write(g, k.nodes, buffer);
    const TensorRef whole = r == nullptr && p >= 0 ? whole_buffer(g, buffer) : TensorRef{};
    if (r == nullptr && whole.defined()) r = &whole;  // a viewed operand, or a recomputed value's input
    if (r == nullptr) return "a parameter no call of the group reads or writes";
    // blucomp Note [Broadcast operands]: an operand the calls read broadcast (stride-0
    // dimensions) is the kernel's dense source tensor: those dimensions as 1.
    TensorRef dense = *r;
    for (size_t d = 0; d < dense.sizes.size(); ++d)
      if (dense.strides[d] == 0) dense.sizes[d] = 1;
    if (!dense.contiguous()) return "a parameter is not a dense view of its buffer";
    refs.push_back(dense);
  }
  if (std::string why = touched_between(g, k.nodes, reads, writes); !why.empty()) return why;
  // blucomp Note [Vectorized group kernels]: each vector parameter must start on a whole vector
  // (its buffer's base is 256-byte aligned); the pointers are checked again at every launch.
  std::vector<std::size_t> vector_align(refs.size(), 0);  // bytes, per parameter (0: none)
  for (int64_t i : k.vector_params) {
    if (k.vector_width < 2 || i < 0 || static_cast<size_t>(i) >= refs.size()) return "bad vector_params in the plan";
    const TensorRef& r = refs[static_cast<size_t>(i)];
    if (r.offset % k.vector_width != 0)
      return "a parameter is not aligned for the kernel's " + std::to_string(k.vector_width) + "-wide accesses";
    vector_align[static_cast<size_t>(i)] = static_cast<std::size_t>(k.vector_width) * dtype_size(r.dtype);
  }
  std::string text;
  {
    std::FILE* f = std::fopen((ptx_dir + "/" + k.ptx).c_str(), "rb");
    if (f == nullptr) return "cannot read " + ptx_dir + "/" + k.ptx;
    char buf[65536];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, n);
    std::fclose(f);
  }
  const Device device = first.device;
  DeviceGuard guard(device);
  // The runtime API's library calls (CUDA 12+): the driver is reached through cudart, so blutrain
  // does not link libcuda and still starts on machines without a driver.
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
  if (cudaLibraryLoadData(&library, text.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0) != cudaSuccess)
    return "the driver refused " + k.ptx + " (" + cudaGetErrorString(cudaGetLastError()) + ")";
  if (cudaLibraryGetKernel(&kernel, library, k.kernel.c_str()) != cudaSuccess)
    return "no kernel " + k.kernel + " in " + k.ptx + " (" + cudaGetErrorString(cudaGetLastError()) + ")";
  const dim3 grid(static_cast<unsigned>(k.grid[0]), static_cast<unsigned>(k.grid[1]), static_cast<unsigned>(k.grid[2]));
  const dim3 block(static_cast<unsigned>(k.block[0]), static_cast<unsigned>(k.block[1]), static_cast<unsigned>(k.block[2]));
  const std::string name = k.kernel;
  std::vector<int> views;
  for (const TensorRef& r : refs) views.push_back(r.buffer);
  exe.replace(k.nodes, [kernel, grid, block, refs, vector_align, device, name](const capture::Executable::ViewFn& view) {
    std::vector<void*> ptrs;
    for (const TensorRef& r : refs) ptrs.push_back(view(r).data_ptr());
    for (size_t i = 0; i < ptrs.size(); ++i)
      BLU_CHECK(vector_align[i] == 0 || reinterpret_cast<std::uintptr_t>(ptrs[i]) % vector_align[i] == 0,
                "compiled kernel ", name, ": parameter ", i, " is not ", vector_align[i],
                "-byte aligned for its vector accesses");
    std::vector<void*> args;
    for (void*& p : ptrs) args.push_back(&p);
    DeviceGuard guard(device);
    const cudaError_t rc = cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, args.data(), 0,
                                            cuda::current_stream(device.index));
    BLU_CHECK(rc == cudaSuccess, "compiled kernel ", name, ": cudaLaunchKernel failed: ", cudaGetErrorString(rc));
  }, views);
  return "";
}
#endif

}  // namespace

BindReport bind_plan(capture::Executable& exe, const std::string& plan_json, const std::string& ptx_dir) {
  BindReport r;
  const json::Value root = json::parse(plan_json);
  for (const char* key : {"structure_hash", "signature_hash"}) {
    const json::Value* h = root.is_object() ? root.find(key) : nullptr;
    BLU_CHECK(h != nullptr && h->is_string(), "bind_plan: the plan has no ", key,
              " (made by blu-plan from a capture JSON that carries its hashes)");
    const std::string mine = capture::Graph::hash_hex(
        std::string(key) == "structure_hash" ? exe.graph().structure_hash() : exe.graph().signature_hash());
    BLU_CHECK(h->as_string() == mine, "bind_plan: the plan was made for another capture (", key, " ", h->as_string(),
              ", this step's ", mine, "): capture this configuration again and rerun blu-plan");
  }
  if (const json::Value* a = root.find("arena_bytes"); a != nullptr && a->is_integer()) r.plan_arena_bytes = a->as_integer();
  if (const json::Value* a = root.find("arena_lower_bound_bytes"); a != nullptr && a->is_integer())
    r.plan_arena_lower_bound_bytes = a->as_integer();
#if BLU_WITH_CUDA
  const auto workspace = std::make_shared<SharedWorkspace>();
#endif
  for (const PlanKernel& k : parse_plan(root)) {
    std::string why;
    for (int n : k.nodes) {
      // A call an earlier override took (the chunked classifier: Note [Chunked classifier]).
      if (why.empty() && exe.replaced(n)) why = "call " + std::to_string(n) + " is already replaced";
    }
#if BLU_WITH_CUDA
    if (why.empty())
      why = k.kind == "matmul_epilogue" ? bind_epilogue(exe, k, workspace) : bind_fused(exe, k, ptx_dir);
#else
    (void)ptx_dir;
    if (why.empty()) why = "this build has no CUDA";
#endif
    if (why.empty()) {
      ++r.bound;
    } else {
      ++r.kept;
      r.reasons.push_back(k.kind + (k.epilogue.empty() ? "" : " " + k.epilogue) + " over nodes " +
                          std::to_string(k.nodes.front()) + "..: " + why);
    }
  }
  return r;
}

}  // namespace blu::comp
