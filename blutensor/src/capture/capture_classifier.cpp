// The classifier of a captured step in row chunks (Note [Chunked classifier]): the pattern in the
// record, the two chunked launches that replace it (Executable::replace with a scratch), and the
// report. Works on whatever backend the record's nodes ran on (the chunks are backend-op calls).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "blutensor/capture.h"
#include "capture/capture_internal.h"
#include "dispatch.h"

namespace blu::capture {

// Note [Chunked classifier]
// The record's classifier (GPT-2's, tied weights) is five calls around two [N, V] buffers:
//   G1 gemm                   logits L [1, N, V] = X [1, N, C] @ W^T ([1, C, V], a transposed view)
//   F  cross_entropy_forward  losses, lse, valid [N] <- L, targets
//   B  cross_entropy_backward dlogits D [N, V] <- dlosses, L, lse, targets
//   G2 gemm                   dX [1, N, C] = D @ W ([1, V, C], row-major)
//   G3 gemm                   dW [1, V, C] = D^T ([1, V, N], a transposed view) @ X' [1, N, C]
// (then dW is copied into the padded wte gradient and summed with the embedding's: outside the
// pattern), and on CUDA one more between G1 and F:
//   A  binary kAdd            L += bias (in place; GPT2::head's padded-vocabulary mask, -inf on
//                             the 47 padding columns, a persistent [V] input broadcast to [1, N, V])
// which the device's first --compile run (2026-11-27, H100) found refusing the pattern ("the
// logits are used by call 173 (binary out)"): the CPU head narrows W instead and has no A.
// L is used by G1, (A,) F and B only, D by B, G2 and G3 only. Two override sets replace them:
// {G1, (A,) F} (runs at F) and {B, G2, G3} (runs at the later GEMM; A is applied again after the
// recomputed chunk GEMM, so the bias must be persistent and unwritten after A); between them the record reduces
// the losses and makes dlosses (the loss's host read is at the step's end, so the forward set
// has to write losses/lse/valid before the reductions read them: two sets, not one). Per chunk
// of R rows [r0, r0 + R), with S the scratch ([R, V], one per launch, placed by the arena at
// the launch's node):
//   forward:  S = X[r0:] @ W^T; cross_entropy_forward(losses[r0:], lse[r0:], valid[r0:], S, ...)
//   backward: S = X[r0:] @ W^T (recomputed: 2 N V C flops more, a third of the classifier's);
//             cross_entropy_backward(S, dlosses[r0:], S, lse[r0:], ...) in place (Note [In-place
//             reuse]: each row is read, then written, by one thread or block);
//             dX[r0:] = S @ W (G2's accumulate); dW (+)= S^T @ X'[r0:] (G3's accumulate for the
//             first chunk, then accumulate)
// so L and D are used only inside override sets and get no bytes (Note [Kernel overrides]).
// What stays exact: a row's logits are one GEMM row over the same K (the per-row losses, lse,
// valid and dX as recorded, up to the GEMM kernel's choice for another M); dW is a sum over
// chunks in another order (fp32 rounding of a sum of N terms). With one chunk (R >= N) every call
// is the recorded one on other bytes: bit for bit.
// The pattern is matched on op names and buffer flow (never positions): exactly one F and one B
// sharing L, lse, targets and ignore_index; L's and D's only users as above, dense, at offset 0;
// X's rows and dX's rows row-major; none of the nodes already replaced (the trainer chunks before
// binding blu-plan's kernels, which then keep theirs); no node between a set's first and last
// call writes what the set reads, or touches what it writes. Anything else: the record stays,
// `why` says what was missing.
// R: BLU_CAPTURE_CLASSIFIER_ROWS, else the rows whose logits fit kClassifierChunkBytes (128 MiB),
// a multiple of 64 when that many fit, at most N. The scratch is the arena's (Executable::replace
// with scratch_bytes: live at the launch's node only, so both launches may share its bytes).
// Buffers only the two sets use get no bytes when no launch views them: L and D. lse ([N] fp32,
// written by the forward launch and read by the backward one) is a declared view, so the arena
// keeps it between the two.
// Measured on the CPU (captured_classifier_test, GPT-2's vocabulary, fp32): tiny B8 T64 (N = 512,
// L = 103 MB), chunks of 64 rows: arena 148.4 -> 70.9 MB (in-place reuse off: 225.3 -> 80.6 MB);
// the peak moves off the classifier. tiny B4 T32 and d12 B1 T64: the arena is unchanged (its peak
// there is the gradients at the end of the backward: Note [Captured step memory]); losses within
// 1e-6 relative of the autograd engine over 8 steps, weights within ~1e-7.
// Prediction for the H100, d12 fp32 B8 T1024 (N = 8192, V = 50257, `--engine captured`): R = 640,
// 13 chunks (12 of 640, one of 512), S = 128.7 MB. Today's arena (in place on, ~6.2 GiB) peaks
// in the classifier's backward at S_act + L (D on L's bytes) + dX + dW's 154.5 MB, S_act the saved
// activations (~4.4 GiB). Chunked: L leaves (-1.54 GiB), S comes (+0.12 GiB); the next live set is
// the first layer's backward (S_act shrunk by the classifier's input, plus the wte gradient sum
// and the layer's GEMM outputs), so the arena lands at ~4.7-4.9 GiB and the line reads "captured
// engine: arena ~4.8 GiB (...); classifier in 13 chunks of 640 rows (of 8192; 0.120 GiB ...;
// 2 x 1.534 GiB, get no bytes)". Allocator peak: ~7.6-7.8 GiB - ~1.4 GiB = ~6.2-6.4 GiB, below
// the fused engine's 7.48 GiB (BLU_CAPTURE_CHUNKED_CLASSIFIER=0 for A/B: ~7.6-7.8 GiB).
// tok/s: the lm head's forward GEMM runs twice (2 N V C = 0.63 TFLOP more per step, ~13 ms at
// cuBLAS-class ~49 TFLOP/s fp32 against a ~240 ms strict-fp32 step at B8: ~-5%); 39 GEMMs of
// M = 640 instead of 3 of M = 8192 (each still ~400 output tiles of 128 x 128 on 132 SMs, so near
// full rate) and 26 cross-entropy launches instead of 2 (same bytes): about -4 to -6% tok/s in
// strict fp32, less in tf32/bf16 where the GEMMs are a smaller share (if those precisions' records
// match the pattern: a cast between the GEMM and the loss refuses it, said in the line).

namespace {

using ChunkInfo = Executable::ClassifierChunks;

bool dense_rows(const TensorRef& t, int64_t rows, int64_t cols) {
  return t.defined() && t.sizes.size() == 3 && t.sizes[0] == 1 && t.sizes[1] == rows &&
         t.sizes[2] == cols && t.strides[2] == 1 && t.strides[1] >= cols;
}

bool vector_of(const TensorRef& t, int64_t n) {
  return t.defined() && t.sizes.size() == 1 && t.sizes[0] == n && t.contiguous();
}

TensorRef rows_of(TensorRef t, int64_t r0,
                  int64_t rows) {  // rows [r0, r0 + rows) of dim -2 (or of a vector)
  const size_t d = t.sizes.size() >= 2 ? t.sizes.size() - 2 : 0;
  t.offset += r0 * t.strides[d];
  t.sizes[d] = rows;
  return t;
}

int64_t chunk_rows_for(int64_t requested, int64_t rows, int64_t vocab, std::size_t element_bytes) {
  int64_t r = requested;
  if (r <= 0) {
    if (const char* v = std::getenv("BLU_CAPTURE_CLASSIFIER_ROWS"); v != nullptr && *v != '\0')
      r = std::strtoll(v, nullptr, 10);
  }
  if (r <= 0) {
    r = static_cast<int64_t>(Executable::kClassifierChunkBytes /
                             (static_cast<std::size_t>(vocab) * element_bytes));
    if (r >= 64) r = r / 64 * 64;
  }
  return std::clamp<int64_t>(r, 1, rows);
}

}  // namespace

std::string Executable::ClassifierChunks::describe() const {
  if (!applied) return "classifier as recorded (" + why + ")";
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "classifier in %lld chunk%s of %lld rows (of %lld; %.3f GiB of chunk logits per "
                "launch; logits and "
                "their gradient, 2 x %.3f GiB, get no bytes)",
                static_cast<long long>(chunks), chunks == 1 ? "" : "s",
                static_cast<long long>(chunk_rows), static_cast<long long>(rows),
                static_cast<double>(scratch_bytes) / (1 << 30),
                static_cast<double>(logits_bytes) / (1 << 30));
  return buf;
}

const Executable::ClassifierChunks& Executable::chunk_classifier(int64_t chunk_rows) {
  if (classifier_tried_) return classifier_;
  classifier_tried_ = true;
  ChunkInfo& info = classifier_;
  const auto refuse = [&](std::string why) -> const ChunkInfo& {
    info = ChunkInfo();
    info.why = std::move(why);
    return info;
  };
  const Graph& g = graph_;
  const int count = static_cast<int>(g.nodes.size());
  int f = -1, b = -1, fs = 0, bs = 0, fbs = 0;
  for (int i = 0; i < count; ++i) {
    if (g.nodes[static_cast<size_t>(i)].op == "cross_entropy_forward") f = i, ++fs;
    if (g.nodes[static_cast<size_t>(i)].op == "cross_entropy_backward") b = i, ++bs;
    if (g.nodes[static_cast<size_t>(i)].op == "cross_entropy_forward_backward") ++fbs;
  }
  // linear_cross_entropy (Note [Linear cross-entropy]) chunks it already: one forward_backward a
  // chunk (or a forward and a backward each, as it did before Note [Cross-entropy in one pass]).
  if (fbs > 0 || (fs > 1 && bs == fs))
    return refuse("the loss is already in " + std::to_string(fbs > 0 ? fbs : fs) +
                  " row chunks: no [N, V] logits to chunk");
  if (fs != 1 || bs != 1)
    return refuse(std::to_string(fs) + " cross_entropy_forward and " + std::to_string(bs) +
                  " cross_entropy_backward calls, not one each");
  const Node& nf = g.nodes[static_cast<size_t>(f)];
  const Node& nb = g.nodes[static_cast<size_t>(b)];
  const TensorRef& logits = nf.arg("logits").tensors.at(0);
  const TensorRef& targets = nf.arg("targets").tensors.at(0);
  const TensorRef& dlogits = nb.arg("dlogits").tensors.at(0);
  if (!logits.defined() || logits.sizes.size() != 2 || !logits.contiguous() || logits.offset != 0)
    return refuse("the logits are not a dense [N, V] buffer");
  const int64_t n = logits.sizes[0], v = logits.sizes[1];
  const int l = logits.buffer, d = dlogits.buffer;
  const auto esize = dtype_size(logits.dtype);
  const auto whole = [&](const TensorRef& t) {
    return t.defined() && live_[static_cast<size_t>(t.buffer)] == nullptr &&
           g.buffers[static_cast<size_t>(t.buffer)].nbytes ==
               static_cast<std::size_t>(n * v) * esize;
  };
  if (!whole(logits) || !whole(dlogits) || l == d)
    return refuse("the logits or their gradient are not temporaries of N x V");
  const TensorRef& b_logits = nb.arg("logits").tensors.at(0);
  if (b_logits.buffer != l || b_logits.sizes != logits.sizes || b_logits.offset != 0 ||
      nb.arg("lse").tensors.at(0).buffer != nf.arg("lse").tensors.at(0).buffer ||
      nb.arg("targets").tensors.at(0).buffer != targets.buffer ||
      nb.arg("ignore_index").integer != nf.arg("ignore_index").integer || b < f)
    return refuse("the cross-entropy backward does not read the forward's logits, lse and targets");
  if (dlogits.sizes != logits.sizes || !dlogits.contiguous() || dlogits.offset != 0 ||
      dlogits.dtype != logits.dtype)
    return refuse("the logits' gradient is not a dense [N, V] buffer");
  for (const char* name : {"losses", "lse", "valid"}) {
    if (!vector_of(nf.arg(name).tensors.at(0), n))
      return refuse(std::string("the forward's ") + name + " is not [N]");
  }
  if (!vector_of(targets, n) || !vector_of(nb.arg("dlosses").tensors.at(0), n) ||
      !vector_of(nb.arg("lse").tensors.at(0), n) || !vector_of(nb.arg("targets").tensors.at(0), n))
    return refuse("the backward's dlosses, lse or targets are not [N]");
  // Every use of L and D.
  std::vector<std::pair<int, const Arg*>> uses_l, uses_d;
  for (int i = 0; i < count; ++i) {
    for (const Arg& a : g.nodes[static_cast<size_t>(i)].args) {
      for (const TensorRef& t : a.tensors) {
        if (t.buffer == l) uses_l.emplace_back(i, &a);
        if (t.buffer == d) uses_d.emplace_back(i, &a);
      }
    }
  }
  // L: G1's out, F's logits, B's logits, and the optional bias add A's out and a.
  int g1 = -1, ab = -1;
  for (const auto& [i, a] : uses_l) {
    if (i == f && a->name == "logits") continue;
    if (i == b && a->name == "logits") continue;
    const Node& nu = g.nodes[static_cast<size_t>(i)];
    if (g1 < 0 && nu.op == "gemm" && a->name == "out") {
      g1 = i;
      continue;
    }
    if (nu.op == "binary" && nu.arg("op").enum_name == "kAdd" && (a->name == "out" || a->name == "a") &&
        (ab < 0 || ab == i)) {
      ab = i;
      continue;
    }
    return refuse("the logits are used by call " + std::to_string(i) + " (" + nu.op + " " + a->name +
                  ")");
  }
  if (g1 < 0 || g1 > f || uses_l.size() != (ab < 0 ? 3u : 5u))
    return refuse("no lm-head GEMM writes the logits before the loss");
  const Node& n1 = g.nodes[static_cast<size_t>(g1)];
  const TensorRef &x = n1.arg("a").tensors.at(0), &wt = n1.arg("bm").tensors.at(0),
                  &l3 = n1.arg("out").tensors.at(0);
  if (n1.arg("accumulate").integer != 0 || l3.offset != 0 || l3.sizes != Shape{1, n, v} ||
      !l3.contiguous())
    return refuse("the lm-head GEMM does not overwrite the logits as [1, N, V]");
  TensorRef bias;  // A: L += alpha * bias, in place, between G1 and F (GPT2::head's vocabulary mask)
  double bias_alpha = 1.0;
  if (ab >= 0) {
    const Node& na = g.nodes[static_cast<size_t>(ab)];
    const TensorRef &ao = na.arg("out").tensors.at(0), &aa = na.arg("a").tensors.at(0);
    bias = na.arg("b").tensors.at(0);
    bias_alpha = na.arg("alpha").number;
    if (ab < g1 || ab > f || ao.sizes != l3.sizes || ao.strides != l3.strides || ao.offset != 0 ||
        aa.sizes != l3.sizes || aa.strides != l3.strides || aa.offset != 0 || !bias.defined() ||
        bias.sizes != l3.sizes || bias.buffer == l || bias.buffer == d || bias.dtype != logits.dtype)
      return refuse("the add into the logits is not logits += bias [1, N, V] in place");
    // The backward launch adds it again: it must keep its bytes (a persistent buffer that no
    // call after A writes).
    if (live_[static_cast<size_t>(bias.buffer)] == nullptr)
      return refuse("the bias added to the logits is a temporary of the step");
    for (int i = ab + 1; i < count; ++i) {
      for (const Arg& a : g.nodes[static_cast<size_t>(i)].args) {
        for (const TensorRef& t : a.tensors) {
          if (a.write && t.buffer == bias.buffer)
            return refuse("call " + std::to_string(i) + " writes the bias added to the logits");
        }
      }
    }
  }
  if (x.buffer == l || wt.buffer == l || x.sizes.size() != 3 || x.sizes[0] != 1 ||
      x.sizes[1] != n || x.strides[2] != 1 || wt.sizes.size() != 3 || wt.sizes[0] != 1 ||
      wt.sizes[2] != v)
    return refuse("the lm-head GEMM's operands are not X [1, N, C] (row-major) and W^T [1, C, V]");
  const int64_t c = x.sizes[2];
  if (wt.sizes[1] != c) return refuse("the lm-head GEMM's K differs");
  // D: B's dlogits, G2's a (row-major), G3's a (transposed).
  int g2 = -1, g3 = -1;
  for (const auto& [i, a] : uses_d) {
    if (i == b && a->name == "dlogits") continue;
    const Node& nd = g.nodes[static_cast<size_t>(i)];
    const TensorRef& t = a->tensors.at(0);
    if (nd.op == "gemm" && a->name == "a" && i > b && t.offset == 0 && t.sizes == Shape{1, n, v} &&
        t.strides[1] == v && t.strides[2] == 1 && g2 < 0) {
      g2 = i;
      continue;
    }
    if (nd.op == "gemm" && a->name == "a" && i > b && t.offset == 0 && t.sizes == Shape{1, v, n} &&
        t.strides[1] == 1 && t.strides[2] == v && g3 < 0) {
      g3 = i;
      continue;
    }
    return refuse("the logits' gradient is used by call " + std::to_string(i) + " (" + nd.op + " " +
                  a->name + ")");
  }
  if (g2 < 0 || g3 < 0 || uses_d.size() != 3)
    return refuse("no dX and dW GEMMs read the logits' gradient");
  const Node &n2 = g.nodes[static_cast<size_t>(g2)], &n3 = g.nodes[static_cast<size_t>(g3)];
  const TensorRef &w = n2.arg("bm").tensors.at(0), &dx = n2.arg("out").tensors.at(0);
  const TensorRef &x3 = n3.arg("bm").tensors.at(0), &dw = n3.arg("out").tensors.at(0);
  if (w.sizes != Shape{1, v, c} || w.strides[2] != 1 || !dense_rows(dx, n, c) || !dx.contiguous())
    return refuse("the dX GEMM is not dX [1, N, C] = dlogits @ W [1, V, C]");
  if (!dense_rows(x3, n, c) || dw.sizes != Shape{1, v, c} || !dw.contiguous())
    return refuse("the dW GEMM is not dW [1, V, C] = dlogits^T @ X [1, N, C]");
  for (const TensorRef* t : {&x, &wt, &w, &x3, &dx, &dw}) {
    if (t->dtype != logits.dtype || t->buffer == l || t->buffer == d)
      return refuse("the GEMMs' operands differ in dtype or alias the logits");
  }
  std::vector<int> fwd{g1, f}, bwd{b, g2, g3};
  if (ab >= 0) fwd.insert(fwd.begin() + 1, ab);
  std::sort(bwd.begin(), bwd.end());
  for (int i : {g1, ab, f, b, g2, g3}) {  // ab is -1 without the bias add: never replaced
    if (replaced(i))
      return refuse("call " + std::to_string(i) + " (" + g.nodes[static_cast<size_t>(i)].op +
                    ") is already replaced by another launch");
  }
  // Hazards: between a set's first and last call, no other call writes what the set reads or
  // touches what it writes (the launch reads and writes everything at the set's last call).
  for (const std::vector<int>* set : {&fwd, &bwd}) {
    std::vector<int> reads, writes;
    for (int i : *set) {
      for (const Arg& a : g.nodes[static_cast<size_t>(i)].args) {
        for (const TensorRef& t : a.tensors) {
          if (!t.defined()) continue;
          if (a.read) reads.push_back(t.buffer);
          if (a.write) writes.push_back(t.buffer);
        }
      }
    }
    for (int i = set->front() + 1; i < set->back(); ++i) {
      if (std::find(set->begin(), set->end(), i) != set->end()) continue;
      for (const Arg& a : g.nodes[static_cast<size_t>(i)].args) {
        for (const TensorRef& t : a.tensors) {
          const bool touches_write =
              std::find(writes.begin(), writes.end(), t.buffer) != writes.end();
          const bool writes_read =
              a.write && std::find(reads.begin(), reads.end(), t.buffer) != reads.end();
          if (t.defined() && (touches_write || writes_read))
            return refuse("call " + std::to_string(i) + " (" + g.nodes[static_cast<size_t>(i)].op +
                          ") between the classifier's calls uses their buffers");
        }
      }
    }
  }
  // The launches.
  const int64_t rows = chunk_rows_for(chunk_rows, n, v, esize);
  const std::size_t scratch = (static_cast<std::size_t>(rows * v) * esize + 255) / 256 * 256;
  const Device device = nf.device;
  const DType dt = logits.dtype;
  // The scratch's first r rows: [r, V] (form 0), [1, r, V] (1) or its transpose [1, V, r] (2).
  const auto chunk_logits = [dt, v](const Tensor& s, int64_t r, int form) {
    TensorRef ref;
    ref.buffer = 0;
    ref.dtype = dt;
    ref.sizes = form == 0 ? Shape{r, v} : form == 1 ? Shape{1, r, v} : Shape{1, v, r};
    ref.strides = form == 0 ? Shape{v, 1} : form == 1 ? Shape{r * v, v, 1} : Shape{r * v, 1, v};
    return detail::view_of(s.storage(), ref);
  };
  const TensorRef losses = nf.arg("losses").tensors.at(0), lse = nf.arg("lse").tensors.at(0),
                  valid = nf.arg("valid").tensors.at(0), dlosses = nb.arg("dlosses").tensors.at(0),
                  b_lse = nb.arg("lse").tensors.at(0), b_targets = nb.arg("targets").tensors.at(0);
  const TensorRef xr = x, wtr = wt, wr = w, x3r = x3, dxr = dx, dwr = dw, tr = targets, br = bias;
  const int64_t ignore = nf.arg("ignore_index").integer;
  const bool acc2 = n2.arg("accumulate").integer != 0, acc3 = n3.arg("accumulate").integer != 0;
  // What the launches view (L and D are not among them: they get no bytes); lse is handed from
  // the forward launch to the backward one.
  std::vector<int> fwd_views{xr.buffer, wtr.buffer, losses.buffer, lse.buffer, valid.buffer, tr.buffer};
  std::vector<int> bwd_views{xr.buffer,      wtr.buffer,   wr.buffer, x3r.buffer, dxr.buffer,
                             dwr.buffer,     dlosses.buffer, b_lse.buffer, b_targets.buffer};
  if (br.defined()) {
    fwd_views.push_back(br.buffer);
    bwd_views.push_back(br.buffer);
  }
  replace(fwd, scratch, [=](const ViewFn& view, const Tensor& s) {
    const Tensor wt_t = view(wtr);
    for (int64_t r0 = 0; r0 < n; r0 += rows) {
      const int64_t r = std::min(rows, n - r0);
      const Tensor s3 = chunk_logits(s, r, 1);
      BLU_DISPATCH(device, gemm, s3, view(rows_of(xr, r0, r)), wt_t, false);
      if (br.defined())
        BLU_DISPATCH(device, binary, BinaryOp::kAdd, s3, s3, view(rows_of(br, r0, r)), bias_alpha);
      BLU_DISPATCH(device, cross_entropy_forward, view(rows_of(losses, r0, r)),
                   view(rows_of(lse, r0, r)), view(rows_of(valid, r0, r)), chunk_logits(s, r, 0),
                   view(rows_of(tr, r0, r)), ignore);
    }
  }, fwd_views);
  replace(bwd, scratch, [=](const ViewFn& view, const Tensor& s) {
    const Tensor wt_t = view(wtr), w_t = view(wr), dw_t = view(dwr);
    for (int64_t r0 = 0; r0 < n; r0 += rows) {
      const int64_t r = std::min(rows, n - r0);
      const Tensor s3 = chunk_logits(s, r, 1), s2 = chunk_logits(s, r, 0),
                   st = chunk_logits(s, r, 2);
      BLU_DISPATCH(device, gemm, s3, view(rows_of(xr, r0, r)), wt_t, false);
      if (br.defined())
        BLU_DISPATCH(device, binary, BinaryOp::kAdd, s3, s3, view(rows_of(br, r0, r)), bias_alpha);
      BLU_DISPATCH(device, cross_entropy_backward, s2, view(rows_of(dlosses, r0, r)), s2,
                   view(rows_of(b_lse, r0, r)), view(rows_of(b_targets, r0, r)), ignore);
      BLU_DISPATCH(device, gemm, view(rows_of(dxr, r0, r)), s3, w_t, acc2);
      BLU_DISPATCH(device, gemm, dw_t, st, view(rows_of(x3r, r0, r)), r0 == 0 ? acc3 : true);
    }
  }, bwd_views);
  info.applied = true;
  info.rows = n;
  info.vocab = v;
  info.chunk_rows = rows;
  info.chunks = (n + rows - 1) / rows;
  info.logits_bytes = static_cast<std::size_t>(n * v) * esize;
  info.scratch_bytes = scratch;
  info.forward_nodes = fwd;
  info.backward_nodes = bwd;
  return info;
}

}  // namespace blu::capture
