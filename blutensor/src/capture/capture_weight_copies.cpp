// capture_weight_copies.cpp: the captured step's bf16 weight copies written by the AdamW update
// instead of cast at the start of every step (Note [Weight copies from the update]).
#include <algorithm>
#include <map>
#include <string>

#include "blutensor/capture.h"
#include "capture/capture_internal.h"
#include "dispatch.h"
#ifndef BLU_TENSOR_NO_CUDA_BACKEND
#include "cuda/cuda_ops.h"
#include "kernel_args.h"
#endif

namespace blu::capture {

// Note [Weight copies from the update]
// A mixed-precision step casts each fp32 master weight to bf16 before its first use (GPT-2 d12
// bf16: the wte copy_, 79 us, and one copy_tensors_ of 12 tensors per block, ~15 us each: ~0.3 ms
// of a 34 ms H100 step, every one on the forward's critical path), and the step's AdamW rewrites
// the weights at its end. The weights change nowhere else, so the cast at the start of step t+1
// reads what the update of step t wrote: blublas's AdamW writes that cast itself in the same pass
// (AdamWTensor::param_bf16, +2 bytes a parameter; the fused engine does the same). The rewrite:
// each cast whose source is a parameter an adamw_step of the step updates (and nothing else
// writes), whose destination is a whole bf16 temporary written only by the cast and read only
// before that update, becomes a persistent buffer of the step, filled once now by the cast (the
// parameters hold what the next run's casts would read) and then by each run's update; the casts
// launch nothing; the update writes the copies. A copy_tensors_ is taken whole or not at all.
// Same bits: the copies are bf16(p) rounded to nearest in both kernels, and an update skipped on
// a non-finite grad_scale writes neither the weights nor the copies. What it assumes: nothing
// outside the step changes the parameters between runs (a checkpoint loaded into the model after
// the Executable was made would leave the copies stale: make a new Executable).
WeightCastFolds find_weight_casts(const Graph& g, const std::vector<int>& override_of, const std::vector<int>& last_use) {
  WeightCastFolds out;
  const size_t nb = g.buffers.size();
  const auto replaced = [&](size_t i) { return detail::replaced_in(override_of, static_cast<int>(i)); };
  std::vector<std::vector<int>> writers(nb);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const Arg& a : g.nodes[i].args) {
      if (!a.write) continue;
      for (const TensorRef& t : a.tensors) {
        if (!t.defined()) continue;
        std::vector<int>& w = writers[static_cast<size_t>(t.buffer)];
        if (w.empty() || w.back() != static_cast<int>(i)) w.push_back(static_cast<int>(i));
      }
    }
  }
  const auto whole = [&](const TensorRef& t, DType dt) {
    return t.defined() && t.dtype == dt && t.offset == 0 && t.contiguous() &&
           static_cast<std::size_t>(t.numel()) * dtype_size(dt) == g.buffers[static_cast<size_t>(t.buffer)].nbytes;
  };
  // The parameters each adamw_step updates (and nothing else writes): buffer -> (node, index).
  std::map<int, std::pair<int, int>> updated;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op != "adamw_step" || !n.device.is_cuda() || replaced(i)) continue;
    const std::vector<TensorRef>& ps = n.arg("params").tensors;
    for (size_t k = 0; k < ps.size(); ++k) {
      if (whole(ps[k], DType::F32) && writers[static_cast<size_t>(ps[k].buffer)] == std::vector<int>{static_cast<int>(i)})
        updated[ps[k].buffer] = {static_cast<int>(i), static_cast<int>(k)};
    }
  }
  std::vector<char> claimed(nb, 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if ((n.op != "copy_" && n.op != "copy_tensors_") || !n.device.is_cuda() || replaced(i)) continue;
    const std::vector<TensorRef>& dsts = n.arg(n.op == "copy_" ? "dst" : "dsts").tensors;
    const std::vector<TensorRef>& srcs = n.arg(n.op == "copy_" ? "src" : "srcs").tensors;
    if (dsts.empty() || dsts.size() != srcs.size()) continue;
    WeightCastFolds::Cast c;
    c.node = static_cast<int>(i);
    bool ok = true;
    for (size_t k = 0; ok && k < dsts.size(); ++k) {
      const TensorRef &d = dsts[k], &s = srcs[k];
      const auto it = s.defined() ? updated.find(s.buffer) : updated.end();
      ok = it != updated.end() && it->second.first > static_cast<int>(i) && whole(s, DType::F32) &&
           whole(d, DType::BF16) && d.numel() == s.numel() && !claimed[static_cast<size_t>(d.buffer)];
      if (!ok) break;
      const Buffer& db = g.buffers[static_cast<size_t>(d.buffer)];
      ok = db.origin == Origin::kInternal && !db.output() &&
           writers[static_cast<size_t>(d.buffer)] == std::vector<int>{static_cast<int>(i)} &&
           last_use[static_cast<size_t>(d.buffer)] < it->second.first;
      if (ok) c.copies.push_back({d, s, it->second.first, it->second.second});
    }
    if (!ok) continue;
    for (const auto& cp : c.copies) claimed[static_cast<size_t>(cp.dst.buffer)] = 1;
    out.casts.push_back(std::move(c));
  }
  return out;
}

int Executable::fold_weight_casts() {
#ifdef BLU_TENSOR_NO_CUDA_BACKEND
  return 0;
#else
  const WeightCastFolds f = find_weight_casts(graph_, override_of_, last_use_);
  if (f.casts.empty()) return 0;
  // The update now writes the copies, which the side stream's calls (a dX GEMM, a LayerNorm
  // backward) may read: every side group must be joined before the first update (the side plan
  // sees the graph's arguments, not the copies the launch writes).
  int first_update = static_cast<int>(graph_.nodes.size());
  for (const WeightCastFolds::Cast& c : f.casts) {
    for (const WeightCastFolds::Copy& cp : c.copies) first_update = std::min(first_update, cp.update);
  }
  if (use_side_stream_) {
    const SidePlan side = side_stream_plan(graph_, override_of_, side_in_flight_);
    for (const int j : side.join_before) {
      if (j > first_update) return 0;
    }
  }
  // Per updating node: the copy of each of its parameters (undefined: none).
  std::map<int, std::vector<TensorRef>> copies_of;
  int folded = 0;
  for (const WeightCastFolds::Cast& c : f.casts) {
    for (const WeightCastFolds::Copy& cp : c.copies) {
      const Node& a = graph_.nodes[static_cast<size_t>(cp.update)];
      std::vector<TensorRef>& v = copies_of[cp.update];
      v.resize(a.arg("params").tensors.size());
      v[static_cast<size_t>(cp.index)] = cp.dst;
      // Persistent from now on, filled with what this cast would give at the next run's start.
      const size_t id = static_cast<size_t>(cp.dst.buffer);
      const Buffer& b = graph_.buffers[id];
      live_[id] = std::make_shared<Storage>(b.nbytes, b.device);
      ++persistent_;
      BLU_DISPATCH(b.device, copy_, detail::view_of(live_[id], cp.dst),
                   detail::view_of(live_[static_cast<size_t>(cp.src.buffer)], cp.src));
      ++folded;
    }
    replace({c.node}, [](const ViewFn&) {});  // the update writes the copies
  }
  for (const auto& [node, copies] : copies_of) {
    const Node* n = &graph_.nodes[static_cast<size_t>(node)];  // its hp.lr / hp.step set per run
    const Device dev = n->device;
    replace({node}, [n, copies, dev](const ViewFn& view) {
      cuda::DeviceGuard guard(dev.index);
      const auto list = [&](const char* name) {
        std::vector<Tensor> v;
        for (const TensorRef& t : n->arg(name).tensors) v.push_back(view(t));
        return v;
      };
      std::vector<Tensor> cs;
      for (const TensorRef& t : copies) cs.push_back(t.defined() ? view(t) : Tensor());
      AdamWParams hp;
      hp.lr = n->arg("hp.lr").number;
      hp.beta1 = n->arg("hp.beta1").number;
      hp.beta2 = n->arg("hp.beta2").number;
      hp.eps = n->arg("hp.eps").number;
      hp.weight_decay = n->arg("hp.weight_decay").number;
      hp.step = n->arg("hp.step").integer;
      const std::vector<TensorRef>& gsl = n->arg("grad_scale").tensors;
      const TensorRef gs = gsl.empty() ? TensorRef() : gsl.front();
      BLU_CHECK(cuda_ops::adamw_step_bf16_copies(list("params"), list("grads"), list("exp_avgs"), list("exp_avg_sqs"),
                                                 gs.defined() ? view(gs) : Tensor(), hp, cs),
                "capture: AdamW with the bf16 weight copies refused its tensors");
    });
  }
  return folded;
#endif
}

}  // namespace blu::capture
