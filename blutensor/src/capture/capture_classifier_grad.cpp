// capture_classifier_grad.cpp: the captured step's scaling of the classifier's gradients and the
// tied embedding's gradient sum, each as one launch (Note [Classifier gradient scaling]).
#include <algorithm>
#include <initializer_list>
#include <string>

#include "blutensor/capture.h"
#include "blutensor/env_switch.h"
#include "capture/capture_internal.h"
#include "dispatch.h"
#ifndef BLU_TENSOR_NO_CUDA_BACKEND
#include "cuda/cuda_ops.h"
#endif

namespace blu::capture {

// Note [Classifier gradient scaling]
// linear_cross_entropy (Note [Linear cross-entropy]) leaves its backward two scalings by the
// device scalar s = G / count, and GPT-2's tied embedding adds the classifier's weight gradient to
// the embedding's. In a bf16 record (GPT-2 d12 B16, H100, session 23 profile) that is
//   dX:  A = f32(dX_u); B = A * s; dX = bf16(B)                  three passes, 89 us
//   dW:  W = dW_u * s (f32); H = bf16(W)                           two passes, 195 us
//   ...  (the backward through the 12 layers)
//   E = embedding_backward(dout) (bf16: memset, sums, a cast)      ~170 us
//   S = H + E (bf16); G = f32(S)                                   two passes, 183 us
// against ~75 us for all of it in the fused engine (the GEMMs' alpha and an embedding backward
// that adds into the weight gradient). Two rewrites, each the pattern exactly or nothing:
//  - dX (any copy_ / kMul / copy_ run: widen a 16-bit tensor, multiply by a 0-d f32 tensor
//    broadcast, narrow back to the same dtype, the two f32 temporaries used by nothing else): one
//    launch that copies the 16-bit input to the output and scales it in place (scale_tensors_:
//    the product in f32, rounded once), the same bits as the three calls.
//  - the embedding gradient (W = dW_u * s by kMul, optionally narrowed by copy_ to H; E written by
//    embedding_backward and read only by S = H + E, kAdd alpha 1; optionally G = f32(S); [V, C]
//    everywhere, contiguous, the intermediates used by nothing else): one launch at the chain's end
//    writes G = dW_u * s (the kMul, into G) and adds the embedding backward into it (blublas's
//    deterministic sums, each token's sum added once: Note [Deterministic embedding backward]).
//    In fp32 that is the record's arithmetic but for the sign of zero sums (E = +0 added to W
//    versus W kept). In 16-bit it is not the same bits: the record rounds W, the embedding sums
//    and their sum to bf16 before widening to the fp32 gradient; here nothing is rounded below
//    fp32 (the fused engine's arithmetic, more accurate). So it is the compiled step's (blutrain
//    --compile) rewrite, not the captured step's, which keeps autograd's bits. dW_u lives until the
//    chain's end (fp32 [V, C]) where H (16-bit) did: +77 MB at GPT-2 in bf16.
// Both leave calls another override took (blu-plan's kernels) as they are.
//
// Note [Early classifier scaling]
// The embedding rewrite's two kernels, G = dW_u * s and the embedding backward added into G, ran
// as one launch at the chain's end: 105 us of fp32 [V, C] traffic (read dW_u, write G) on the
// tail's critical path, between the first layer's backward and the update, where the fused engine
// has nothing (H100, session 24, bf16 B16 profile: that stretch 2.38 ms against 2.07), and dW_u
// (154 MB) alive through the whole backward. They are two launches now: the scaling where the
// record scaled (its kMul, and the narrowing copy_ if any: G is touched by no call before the
// chain's end, checked above, and dW_u and s are written by none after the kMul), the sum at the
// end. The scaling's result is next used hundreds of calls later, so Note [Side stream] makes it a
// side call: it overlaps the backward, and dW_u dies there. The same kernels on the same values
// in the same order: the same bits. BLU_CAPTURE_EARLY_CLASSIFIER_SCALE=0: one launch at the end.
namespace {

using detail::same_view;

// The same bytes as one dense block (views of other shapes: [1, V, C] and [V, C]).
bool same_dense(const TensorRef& a, const TensorRef& b) {
  return a.buffer == b.buffer && a.dtype == b.dtype && a.offset == b.offset && a.contiguous() && b.contiguous() &&
         a.numel() == b.numel();
}

bool is_16bit(DType d) { return d == DType::BF16 || d == DType::F16; }

// A 0-d f32 scalar, possibly broadcast (every stride 0) over some shape.
bool is_scalar(const Graph& g, const TensorRef& t) {
  if (!t.defined() || t.dtype != DType::F32 || g.buffers[static_cast<size_t>(t.buffer)].nbytes < 4) return false;
  return std::all_of(t.strides.begin(), t.strides.end(), [](int64_t s) { return s == 0; });
}

// [[maybe_unused]]: the fold that uses these two is compiled out without the CUDA backend.
[[maybe_unused]] TensorRef scalar_ref(const TensorRef& t) {
  TensorRef r = t;
  r.sizes.clear();
  r.strides.clear();
  return r;
}

// t with `shape`'s sizes and strides (contiguous views of equal numel).
[[maybe_unused]] TensorRef reshaped(const TensorRef& t, const TensorRef& shape) {
  TensorRef r = t;
  r.sizes = shape.sizes;
  r.strides = shape.strides;
  return r;
}

const TensorRef& one(const Node& n, const char* name) { return n.arg(name).tensors.at(0); }

}  // namespace

ClassifierGradChains find_classifier_grad_chains(const Graph& g, const std::vector<int>& override_of) {
  ClassifierGradChains out;
  const int n = static_cast<int>(g.nodes.size());
  const std::vector<int> use_count = detail::use_counts(g);
  const auto uses = [&](const TensorRef& t) { return use_count[static_cast<size_t>(t.buffer)]; };
  const auto replaced = [&](int i) { return detail::replaced_in(override_of, i); };
  const auto internal = [&](const TensorRef& t) {
    const Buffer& b = g.buffers[static_cast<size_t>(t.buffer)];
    return b.origin == Origin::kInternal && !b.output();
  };
  const auto node = [&](int i) -> const Node& { return g.nodes[static_cast<size_t>(i)]; };
  const auto is_mul_by_scalar = [&](const Node& m, const TensorRef& operand, TensorRef* scalar) {
    if (m.op != "binary" || m.arg("op").enum_name != "kMul" || m.arg("alpha").number != 1.0) return false;
    const TensorRef &a = one(m, "a"), &b = one(m, "b");
    if (same_view(a, operand) && is_scalar(g, b)) return *scalar = b, true;
    if (same_view(b, operand) && is_scalar(g, a)) return *scalar = a, true;
    return false;
  };
  // dX: copy_ (widen), kMul by a scalar, copy_ (narrow), consecutive.
  for (int i = 0; i + 2 < n; ++i) {
    const Node &w = node(i), &m = node(i + 1), &c = node(i + 2);
    if (w.op != "copy_" || m.op != "binary" || c.op != "copy_" || !w.device.is_cuda() || replaced(i) ||
        replaced(i + 1) || replaced(i + 2))
      continue;
    const TensorRef &a = one(w, "dst"), &x = one(w, "src");
    TensorRef s;
    if (!is_mul_by_scalar(m, a, &s)) continue;
    const TensorRef& b = one(m, "out");
    const TensorRef &d = one(c, "dst"), &bsrc = one(c, "src");
    if (!same_view(bsrc, b) || !is_16bit(x.dtype) || d.dtype != x.dtype || a.dtype != DType::F32 ||
        b.dtype != DType::F32)
      continue;
    bool ok = uses(a) == 2 && uses(b) == 2 && internal(a) && internal(b) && a.buffer != b.buffer;
    for (const TensorRef* t : std::initializer_list<const TensorRef*>{&a, &x, &b, &d}) ok = ok && t->contiguous() && t->numel() == x.numel();
    ok = ok && d.buffer != x.buffer && d.buffer != s.buffer;
    if (ok) out.dx.push_back({i, i + 1, i + 2});
  }
  // The embedding gradient: [kMul W = dW_u * s] [copy_ H = W] ... embedding_backward E, kAdd S = H + E,
  // [copy_ G = S].
  for (int e = 0; e + 1 < n; ++e) {
    const Node& emb = node(e);
    if (emb.op != "embedding_backward" || !emb.device.is_cuda() || replaced(e)) continue;
    const TensorRef& E = one(emb, "dweight");
    if (E.sizes.size() != 2 || !E.contiguous() || uses(E) != 2 || !internal(E)) {
      out.why_embedding = "embedding_backward " + std::to_string(e) + ": its dweight is not a [V, C] temporary read once";
      continue;
    }
    const Node& add = node(e + 1);
    if (add.op != "binary" || add.arg("op").enum_name != "kAdd" || add.arg("alpha").number != 1.0 || replaced(e + 1)) {
      out.why_embedding = "embedding_backward " + std::to_string(e) + ": not followed by its add";
      continue;
    }
    const TensorRef &aa = one(add, "a"), &ab = one(add, "b"), &S = one(add, "out");
    const bool e_is_b = same_view(ab, E) && !same_view(aa, E);
    const bool e_is_a = same_view(aa, E) && !same_view(ab, E);
    if (!e_is_a && !e_is_b) continue;
    const TensorRef& H = e_is_b ? aa : ab;
    const int64_t numel = E.numel();
    // G: S itself (fp32) or the next call's widening copy of S.
    TensorRef G = S;
    if (S.dtype != DType::F32) {
      if (e + 2 >= n || node(e + 2).op != "copy_" || replaced(e + 2) || !same_view(one(node(e + 2), "src"), S) ||
          uses(S) != 2 || !internal(S))
        continue;
      G = one(node(e + 2), "dst");
      if (G.dtype != DType::F32) continue;
    }
    // H's producer: a narrowing copy_ of W (16-bit), or W itself (fp32); W's: the kMul by the scalar.
    const auto last_writer = [&](const TensorRef& t, int before) {
      for (int k = before - 1; k >= 0; --k) {
        for (const Arg& a : node(k).args) {
          if (!a.write) continue;
          for (const TensorRef& u : a.tensors) {
            if (u.defined() && u.buffer == t.buffer) return k;
          }
        }
      }
      return -1;
    };
    int cast = -1;
    TensorRef W = H;
    if (H.dtype != DType::F32) {
      cast = last_writer(H, e);
      if (cast < 0 || node(cast).op != "copy_" || !same_dense(one(node(cast), "dst"), H)) continue;
      W = one(node(cast), "src");
    }
    const int mul = last_writer(W, cast >= 0 ? cast : e);
    if (mul < 0 || replaced(mul) || (cast >= 0 && replaced(cast)) || node(mul).op != "binary" ||
        !same_dense(one(node(mul), "out"), W)) {
      out.why_embedding = "embedding_backward " + std::to_string(e) +
                          ": the classifier's scaled gradient is not a kMul (or a blu-plan kernel took it)";
      continue;
    }
    const Node& m = node(mul);
    const TensorRef dwu = is_scalar(g, one(m, "b")) ? one(m, "a") : one(m, "b");
    TensorRef s;
    if (!is_mul_by_scalar(m, dwu, &s) || dwu.dtype != DType::F32 || W.dtype != DType::F32) continue;
    const int end_node = S.dtype != DType::F32 ? e + 2 : e + 1;
    bool ok = uses(W) == 2 && uses(H) == 2 && internal(W) && internal(H);
    for (const TensorRef* t : std::initializer_list<const TensorRef*>{&E, &H, &S, &G, &W, &dwu}) ok = ok && t->contiguous() && t->numel() == numel;
    ok = ok && G.buffer != dwu.buffer && G.buffer != one(emb, "dout").buffer && G.buffer != s.buffer;
    // dW_u and the scalar are read at the chain's end now: nothing may write them after the kMul;
    // G gets its value there: nothing may use it before.
    for (int k = 0; ok && k < end_node; ++k) {
      for (const Arg& a : node(k).args) {
        for (const TensorRef& t : a.tensors) {
          if (!t.defined()) continue;
          if (k > mul && a.write && (t.buffer == dwu.buffer || t.buffer == s.buffer)) ok = false;
          if (t.buffer == G.buffer) ok = false;
        }
      }
    }
    if (!ok) {
      out.why_embedding = "embedding_backward " + std::to_string(e) + ": a tensor of the chain is used elsewhere or not [V, C]";
      continue;
    }
    out.embedding = {mul};
    if (cast >= 0) out.embedding.push_back(cast);
    out.embedding_split = out.embedding.size();
    out.embedding.push_back(e);
    out.embedding.push_back(e + 1);
    if (S.dtype != DType::F32) out.embedding.push_back(e + 2);
    out.why_embedding.clear();
    break;
  }
  return out;
}

std::string Executable::fold_classifier_grads(bool embedding_in_f32) {
#ifdef BLU_TENSOR_NO_CUDA_BACKEND
  (void)embedding_in_f32;
  return "classifier gradients as recorded (no CUDA backend)";
#else
  const ClassifierGradChains c = find_classifier_grad_chains(graph_, override_of_);
  for (const std::vector<int>& chain : c.dx) {
    const Node &w = graph_.nodes[static_cast<size_t>(chain[0])], &m = graph_.nodes[static_cast<size_t>(chain[1])],
               &nc = graph_.nodes[static_cast<size_t>(chain[2])];
    const TensorRef x = one(w, "src"), d = one(nc, "dst");
    const TensorRef s = scalar_ref(is_scalar(graph_, one(m, "b")) ? one(m, "b") : one(m, "a"));
    const Device dev = w.device;
    replace(chain,
            [=](const ViewFn& view) {
              cuda::DeviceGuard guard(dev.index);
              const Tensor dst = view(d);
              BLU_DISPATCH(dev, copy_, dst, view(reshaped(x, d)));
              BLU_DISPATCH(dev, scale_tensors_, std::vector<Tensor>{dst}, view(s));
            },
            {x.buffer, d.buffer, s.buffer});
  }
  std::string report = std::to_string(c.dx.size()) + " scaled input gradient(s) in one launch";
  if (!embedding_in_f32) return report;
  if (c.embedding.empty()) return report + "; embedding gradient as recorded" + (c.why_embedding.empty() ? "" : " (" + c.why_embedding + ")");
  const std::vector<int>& ch = c.embedding;
  const Node& m = graph_.nodes[static_cast<size_t>(ch.front())];
  const bool b_scalar = is_scalar(graph_, one(m, "b"));
  const TensorRef dwu = b_scalar ? one(m, "a") : one(m, "b"), sb = b_scalar ? one(m, "b") : one(m, "a");
  const auto emb_at = ch.begin() + static_cast<std::ptrdiff_t>(c.embedding_split);
  const Node& emb = graph_.nodes[static_cast<size_t>(*emb_at)];
  const Node& last = graph_.nodes[static_cast<size_t>(ch.back())];
  const TensorRef G = last.op == "copy_" ? one(last, "dst") : one(last, "out");
  const TensorRef dout = one(emb, "dout"), idx = one(emb, "indices");
  const TensorRef g_as_dwu = reshaped(G, dwu);
  TensorRef s_as = sb;  // the scalar broadcast over dW_u's shape
  s_as.sizes = dwu.sizes;
  s_as.strides.assign(dwu.sizes.size(), 0);
  const TensorRef g2 = reshaped(G, one(emb, "dweight"));
  const Device dev = emb.device;
  const auto scale = [=](const ViewFn& view) {
    cuda::DeviceGuard guard(dev.index);
    BLU_DISPATCH(dev, binary, BinaryOp::kMul, view(g_as_dwu), view(dwu), view(s_as), 1.0);
  };
  const auto accumulate = [=](const ViewFn& view) {
    cuda::DeviceGuard guard(dev.index);
    BLU_CHECK(cuda_ops::embedding_backward_accumulate_f32(view(g2), view(dout), view(idx)),
              "capture: the embedding backward refused to accumulate into the classifier's gradient");
  };
  const std::string calls = " (calls " + std::to_string(ch.front()) + ".." + std::to_string(ch.back()) + ")";
  // Note [Early classifier scaling]: the same two kernels, the scaling where the record scaled.
  if (env_switch_on("BLU_CAPTURE_EARLY_CLASSIFIER_SCALE")) {
    replace(std::vector<int>(ch.begin(), emb_at), scale, {dwu.buffer, sb.buffer, G.buffer});
    replace(std::vector<int>(emb_at, ch.end()), accumulate, {G.buffer, dout.buffer, idx.buffer});
    return report + "; the classifier's gradient scaled into fp32 at call " + std::to_string(*(emb_at - 1)) +
           ", the embedding gradient added into it at the end" + calls;
  }
  replace(ch,
          [=](const ViewFn& view) {
            scale(view);
            accumulate(view);
          },
          {dwu.buffer, sb.buffer, G.buffer, dout.buffer, idx.buffer});
  return report + "; the embedding gradient added into the classifier's in fp32" + calls;
#endif
}

}  // namespace blu::capture
