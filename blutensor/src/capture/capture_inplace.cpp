// Which results of a captured step may take the bytes of an operand that dies at the same node
// (Note [In-place reuse]): the op kinds whose kernels are in-place safe, and the layout check.
#include <algorithm>
#include <cstring>

#include "capture/capture_internal.h"

namespace blu::capture::detail {

// Note [In-place reuse]
// Closed live ranges (Note [Step arena]) keep a node's results off its operands' bytes. For the
// ops below, a result may take the bytes of an operand whose live range ends at that node: every
// kernel that runs the op, on either backend, computes element i of the result from element i of
// that operand (or from a whole row it has already read) and reads it before it writes it, in the
// same thread, and no thread reads an element another thread writes. The pair must also line up
// element for element: both contiguous, the same number of elements and squeezed shape, the same
// element size, the same byte offset into their buffers; the operand appears in the node only so
// (never broadcast, never at another offset, never written), the result only as the op's output.
// The op kinds (Node::op, as in backend_ops.def and blucomp's blu-import) and the evidence:
//   unary (out <- a), every UnaryOp; binary (out <- a, out <- b), every BinaryOp:
//     backend_ops.def:14-16 already allow out to be exactly an input (a.add_(b)); CPU
//     cpu/elementwise.cpp:89-104 (unary_loop) and :107-128 (binary_loop): o[i] = f(x[i], y[i]),
//     threads on disjoint index ranges (cpu/cpu_loops.h:103-134); CUDA
//     cuda/elementwise_engine.cuh:31-55 (map_contiguous_kernel: a thread loads its vector of
//     every input, then stores the same vector index of out) and :57-74 (strided: out[off[0]] =
//     f(in[off[1]]) for one index per thread); blublas GELU fast paths (cuda_elementwise.cu:
//     179-204): blublas/elementwise.h:17,22 "out may alias x", "dx may alias dout or x";
//     gelu_residual.cu:71-117 loads a thread's packs before it stores them. (out is __restrict__
//     in map_contiguous_kernel: with exact aliasing no element is read after it is written, as
//     in the eager in-place ops that already take this path.)
//   causal_fill (out <- x): backend_ops.def:84-85 "out may be x"; CPU nn_kernels.cpp:272-286
//     o[c] = c > limit ? v : xr[c]; CUDA cuda_softmax.cu:72-80, 110-119 (CausalFillFn: out[i]
//     from x[i], one index per thread).
//   dropout (out <- x): CPU nn_kernels.cpp:288-303, CUDA cuda_random.cu:34-43: out[i] from x[i].
//   softmax_forward (y <- x), softmax_backward (dx <- dy): row kernels that read the whole row
//     before writing it. CPU nn_kernels.cpp:24-47 / :50-69 (a row per thread, the max/sum/dot pass
//     first); CUDA generic cuda_softmax.cu:18-62 (one block per row, the block reduction's barrier
//     between the reads and the writes); blublas softmax.h:23,27 "y may alias x", "dx may alias
//     dy": resident kernels (softmax.cu:210-295) hold their slice of the row in registers across
//     the cluster reduction and write only that slice; streamed kernels (softmax.cu:26-203) read
//     the slice into the shared-memory ring before the row combine and write only the row's own
//     elements (store_pack, row_stream.cuh:293-304; neighbour elements a misaligned window loads
//     are masked out); generic kernels (softmax.cu:296-352) one block per row, reduce then write.
//   cross_entropy_backward (dlogits <- logits): given the forward's lse, element i of a row of
//     the gradient is g * exp(logits[i] - lse) (- g at the target). CPU nn_kernels.cpp:242-269:
//     a row per thread, row_scaled_softmax_f32 (cpu_math.cpp:15-18) o[i] = g * exp(x[i] - lse),
//     then o[t] -= g from o itself; ignored rows are written without reading. CUDA
//     cuda_cross_entropy.cu:54-73: one block per row, each thread reads xr[i] and writes o[i].
//     This is the op the captured step runs; blublas's streamed cross_entropy_fused (the fused
//     engine's, logits_inout) is not in the record.
// Not taken: copy_ (a same-dtype copy is a memcpy / cudaMemcpyAsync, undefined on one range;
// a cast changes the element size), layer_norm_* (the input is saved for the backward anyway),
// gemm, reductions, embedding, attention, AdamW (their outputs are not elementwise in an
// operand), and every node a kernel override replaced (its kernel is not the recorded op).
namespace {

struct Rule {
  const char* op;
  const char* result;
  std::vector<const char*> operands;
};

const std::vector<Rule>& rules() {
  static const std::vector<Rule> r = {
      {"unary", "out", {"a"}},
      {"binary", "out", {"a", "b"}},
      {"causal_fill", "out", {"x"}},
      {"dropout", "out", {"x"}},
      {"softmax_forward", "y", {"x"}},
      {"softmax_backward", "dx", {"dy"}},
      {"cross_entropy_backward", "dlogits", {"logits"}},
      {"cross_entropy_forward_backward", "dlogits", {"logits"}},
  };
  return r;
}

Shape squeezed(const Shape& s) {
  Shape out;
  for (int64_t d : s) {
    if (d != 1) out.push_back(d);
  }
  return out;
}

// o lines up with r element for element (Note [In-place reuse]).
bool aligned(const TensorRef& o, const TensorRef& r) {
  return o.contiguous() && r.contiguous() && o.numel() == r.numel() && o.numel() > 0 &&
         dtype_size(o.dtype) == dtype_size(r.dtype) &&
         o.offset * static_cast<int64_t>(dtype_size(o.dtype)) ==
             r.offset * static_cast<int64_t>(dtype_size(r.dtype)) &&
         squeezed(o.sizes) == squeezed(r.sizes);
}

}  // namespace

std::vector<InplacePair> inplace_pairs(const Graph& g, const std::vector<int>& first,
                                       const std::vector<int>& last,
                                       const std::vector<char>& temporary,
                                       const std::vector<int>& override_of) {
  std::vector<InplacePair> pairs;
  std::vector<char> taken(g.buffers.size(), 0);  // an operand gives its bytes once
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    if (n < override_of.size() && override_of[n] >= 0) continue;
    const Node& node = g.nodes[n];
    const auto rule = std::find_if(rules().begin(), rules().end(),
                                   [&](const Rule& r) { return node.op == r.op; });
    if (rule == rules().end()) continue;
    const Arg* result = nullptr;
    for (const Arg& a : node.args) {
      if (a.name == rule->result) result = &a;
    }
    if (result == nullptr || result->tensors.size() != 1 || !result->tensors[0].defined()) continue;
    const TensorRef& r = result->tensors[0];
    const auto rid = static_cast<size_t>(r.buffer);
    if (!temporary[rid] || first[rid] != static_cast<int>(n)) continue;
    // The result's buffer appears nowhere else in the node.
    int result_refs = 0;
    for (const Arg& a : node.args) {
      for (const TensorRef& t : a.tensors) result_refs += t.buffer == r.buffer ? 1 : 0;
    }
    if (result_refs != 1) continue;
    for (const char* name : rule->operands) {
      const Arg* operand = nullptr;
      for (const Arg& a : node.args) {
        if (a.name == name) operand = &a;
      }
      if (operand == nullptr || operand->tensors.size() != 1 || !operand->tensors[0].defined())
        continue;
      const int oid = operand->tensors[0].buffer;
      const auto o = static_cast<size_t>(oid);
      if (taken[o] || !temporary[o] || last[o] != static_cast<int>(n) ||
          g.buffers[o].device != g.buffers[rid].device)
        continue;
      // Every use of the operand's buffer in the node is a read by an allowed operand argument
      // that lines up with the result.
      bool ok = true;
      for (const Arg& a : node.args) {
        for (const TensorRef& t : a.tensors) {
          if (t.buffer != oid) continue;
          const bool allowed = std::any_of(rule->operands.begin(), rule->operands.end(),
                                           [&](const char* op_name) { return a.name == op_name; });
          ok = ok && allowed && a.read && !a.write && aligned(t, r);
        }
      }
      if (!ok) continue;
      taken[o] = 1;
      pairs.push_back({static_cast<int>(n), oid, r.buffer});
      break;
    }
  }
  return pairs;
}

}  // namespace blu::capture::detail
