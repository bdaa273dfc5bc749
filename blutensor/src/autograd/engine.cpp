// The autograd engine: grad mode, saved tensors, FunctionNode, AccumulateGrad, record() and the
// dependency-ordered backward pass (Note [Graph], Note [Saved tensors] in autograd.h).
#include <atomic>
#include <map>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "blutensor/autograd.h"
#include "blutensor/ops.h"
#include "ops/op_helpers.h"

namespace blu {

namespace {
thread_local bool tls_grad_enabled = true;
std::atomic<uint64_t> g_next_sequence_nr{0};
}  // namespace

bool GradMode::is_enabled() { return tls_grad_enabled; }
void GradMode::set_enabled(bool enabled) { tls_grad_enabled = enabled; }

// ---------------------------------------------------------------- saved tensors
SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  tensor_ = t.detach();
  version_ = t.version();
}

Tensor SavedTensor::unpack(const std::string& op) const {
  if (!tensor_.defined()) return tensor_;
  BLU_CHECK(tensor_.version() == version_, "a tensor saved for backward was modified in place: ", op,
            " saved ", tensor_.describe(), " at version ", version_, ", it is now at version ",
            tensor_.version(), " (an in-place op such as add_/mul_/copy_/zero_ changed it after the "
            "forward; clone() it before modifying)");
  return tensor_;
}

// ---------------------------------------------------------------- nodes
Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1)) {}
Node::~Node() = default;

FunctionNode::FunctionNode(std::string name, std::vector<SavedTensor> saved,
                           std::vector<bool> needs_input_grad, MultiBackwardFn fn, std::size_t num_outputs)
    : name_(std::move(name)), saved_(std::move(saved)),
      needs_input_grad_(std::move(needs_input_grad)), fn_(std::move(fn)), num_outputs_(num_outputs) {}

std::vector<Tensor> FunctionNode::apply(const std::vector<Tensor>& grad_outputs) {
  BLU_CHECK(!released_, "Trying to backward through the graph a second time (", name_,
            "'s saved tensors were freed after the first backward); pass retain_graph=true to the "
            "first backward() if you need to backward twice");
  BackwardContext ctx;
  ctx.saved.reserve(saved_.size());
  for (const SavedTensor& s : saved_) ctx.saved.push_back(s.unpack(name_));
  ctx.needs_input_grad = needs_input_grad_;
  return fn_(grad_outputs, ctx);
}

void FunctionNode::release() {
  saved_.clear();
  fn_ = nullptr;
  released_ = true;
}

namespace {

// Adds into the leaf's .grad, then runs its grad-ready hooks (the gradient is final: every node
// that feeds it has run, because the engine orders by dependencies).
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : leaf_(leaf) {}
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    std::shared_ptr<TensorImpl> impl = leaf_.lock();
    if (!impl) return {};
    Tensor leaf(impl);
    BLU_CHECK(g.sizes() == leaf.sizes() && g.dtype() == leaf.dtype() && g.device() == leaf.device(),
              "backward: gradient ", g.describe(), " does not match the leaf ", leaf.describe());
    AutogradMeta& meta = *impl->autograd;
    if (!meta.grad.defined()) {
      // Steal the incoming buffer when nothing else can see it, else copy (it may alias a
      // tensor the user holds, which a later accumulation would modify).
      bool unique = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && g.is_contiguous();
      meta.grad = unique ? g.detach() : g.clone();
    } else {
      meta.grad.add_(g);
    }
    // Hooks may be added/removed while running: iterate over a copy.
    auto hooks = meta.grad_ready_hooks;
    for (auto& [id, hook] : hooks) hook(leaf);
    return {};
  }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

}  // namespace

namespace autograd {

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  AutogradMeta& meta = *leaf.impl()->autograd;
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(leaf.impl_ptr());
    meta.grad_accumulator = acc;
  }
  return acc;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

namespace {
std::shared_ptr<FunctionNode> make_node(const std::string& op, const std::vector<Tensor>& inputs,
                                        const std::vector<Tensor>& saved, MultiBackwardFn backward,
                                        std::size_t num_outputs) {
  std::vector<SavedTensor> saved_tensors;
  saved_tensors.reserve(saved.size());
  for (const Tensor& s : saved) saved_tensors.emplace_back(s);
  std::vector<bool> needs(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) needs[i] = inputs[i].defined() && inputs[i].requires_grad();
  auto node = std::make_shared<FunctionNode>(op, std::move(saved_tensors), needs, std::move(backward), num_outputs);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!needs[i]) {
      node->next_edges().push_back(Edge{});
    } else if (inputs[i].is_leaf()) {
      node->next_edges().push_back(Edge{grad_accumulator(inputs[i]), 0});
    } else {
      node->next_edges().push_back(Edge{inputs[i].grad_fn(), inputs[i].impl()->autograd->output_nr});
    }
  }
  return node;
}

void attach(const std::string& op, Tensor& output, const std::shared_ptr<Node>& node, uint32_t output_nr) {
  BLU_CHECK(output.impl()->autograd == nullptr || output.is_leaf(), op, ": record() needs a fresh output tensor");
  if (!output.impl()->autograd) output.impl()->autograd = std::make_unique<AutogradMeta>();
  output.impl()->autograd->grad_fn = node;
  output.impl()->autograd->output_nr = output_nr;
}
}  // namespace

Tensor record(const std::string& op, Tensor output, const std::vector<Tensor>& inputs,
              const std::vector<Tensor>& saved, BackwardFn backward) {
  if (!any_requires_grad(inputs) || !is_floating(output.dtype())) return output;
  MultiBackwardFn fn = [b = std::move(backward)](const std::vector<Tensor>& grads, const BackwardContext& ctx) {
    return b(grads[0], ctx);
  };
  auto node = make_node(op, inputs, saved, std::move(fn), 1);
  attach(op, output, node, 0);
  return output;
}

std::vector<Tensor> record_multi(const std::string& op, std::vector<Tensor> outputs, const std::vector<Tensor>& inputs,
                                 const std::vector<Tensor>& saved, MultiBackwardFn backward) {
  if (!any_requires_grad(inputs) || outputs.empty() || !is_floating(outputs[0].dtype())) return outputs;
  auto node = make_node(op, inputs, saved, std::move(backward), outputs.size());
  for (std::size_t i = 0; i < outputs.size(); ++i) attach(op, outputs[i], node, static_cast<uint32_t>(i));
  return outputs;
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  BLU_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " roots but ", grads.size(),
            " gradients");
  // Gradient buffers: one per output slot of each node.
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  auto accumulate = [&buffers](Node* node, uint32_t slot, const Tensor& g) {
    std::vector<Tensor>& b = buffers[node];
    if (b.empty()) b.resize(node->num_outputs());
    b[slot] = b[slot].defined() ? b[slot] + g : g;
  };
  std::vector<std::shared_ptr<Node>> root_nodes;
  for (std::size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    BLU_CHECK(r.defined(), "backward: undefined root tensor");
    BLU_CHECK(r.requires_grad(), "backward: ", r.describe(),
              " does not require grad and has no grad_fn (was it computed under no_grad, or from "
              "tensors without requires_grad?)");
    Tensor g = grads[i];
    if (!g.defined()) {
      BLU_CHECK(r.numel() == 1, "backward: grad can be implicitly created only for scalar outputs, got ",
                r.describe(), "; pass a gradient");
      g = ones(r.sizes(), TensorOptions(r.dtype()).device(r.device()));
    } else {
      BLU_CHECK(g.sizes() == r.sizes() && g.dtype() == r.dtype() && g.device() == r.device(),
                "backward: gradient ", g.describe(), " does not match the root ", r.describe());
    }
    std::shared_ptr<Node> node = r.is_leaf() ? grad_accumulator(r) : r.grad_fn();
    accumulate(node.get(), r.is_leaf() ? 0 : r.impl()->autograd->output_nr, g);
    root_nodes.push_back(node);
  }
  NoGradGuard no_grad;
  // Dependencies: how many edges point to each node within the reachable graph.
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep;
  std::vector<Node*> stack;
  for (auto& n : root_nodes) {
    if (keep.emplace(n.get(), n).second) stack.push_back(n.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (Edge& e : n->next_edges()) {
      if (!e.node) continue;
      ++deps[e.node.get()];
      if (keep.emplace(e.node.get(), e.node).second) stack.push_back(e.node.get());
    }
  }
  // Ready queue: newest node first (reverse creation order, like PyTorch).
  auto older = [](Node* a, Node* b) { return a->sequence_nr() < b->sequence_nr(); };
  std::priority_queue<Node*, std::vector<Node*>, decltype(older)> ready(older);
  for (auto& n : root_nodes) {
    if (deps[n.get()] == 0) {
      deps[n.get()] = -1;  // queued
      ready.push(n.get());
    }
  }
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    std::vector<Tensor> g;
    auto it = buffers.find(n);
    if (it != buffers.end()) {
      g = std::move(it->second);
      buffers.erase(it);
    }
    bool any = false;
    for (const Tensor& t : g) any = any || t.defined();
    std::vector<Tensor> in_grads;
    if (any) in_grads = n->apply(g);
    if (!retain_graph) n->release();
    auto& edges = n->next_edges();
    for (std::size_t i = 0; i < edges.size(); ++i) {
      Node* next = edges[i].node.get();
      if (!next) continue;
      if (i < in_grads.size() && in_grads[i].defined()) accumulate(next, edges[i].output_nr, in_grads[i]);
      if (--deps[next] == 0) ready.push(next);
    }
  }
}

}  // namespace autograd
}  // namespace blu
