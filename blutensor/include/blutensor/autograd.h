// blutensor/autograd.h: reverse-mode autograd: graph nodes, saved tensors with version checks,
// the backward engine, grad mode (no_grad) and the record() helper that ops use to join the graph.
//
// Note [Graph]
// Every op output that requires grad holds a Node (grad_fn) and its output slot. A Node has one or
// more outputs (split has several) and one edge per input (null where that input needs no gradient); leaves get an AccumulateGrad node, shared by all
// uses of the leaf, that adds into .grad and then calls the leaf's grad-ready hooks. The engine
// counts dependencies from the roots, then runs nodes in dependency order (a node runs once all of
// its consumers have run, newest first), so a leaf's hooks fire exactly when its gradient is final.
//
// Note [Saved tensors]
// Nodes save detached aliases (same storage, no grad_fn: no reference cycles) plus the version at
// save time. Backward throws if the version moved; without retain_graph a node frees its saved
// tensors after running, and a second backward through it throws.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "blutensor/tensor.h"

namespace blu {

// Grad mode: when disabled, ops record no graph (like torch.no_grad). Thread-local.
struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// RAII: disables grad mode in its scope.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  // Throws blu::Error naming `op` when the tensor was modified in place since it was saved.
  Tensor unpack(const std::string& op) const;

 private:
  Tensor tensor_;
  uint64_t version_ = 0;
};

// Where a gradient goes: output slot `output_nr` of `node` (null node: nowhere).
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t output_nr = 0;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node();
  virtual std::string name() const = 0;
  virtual std::size_t num_outputs() const { return 1; }
  // Gradients w.r.t. the inputs, one per next edge (undefined where the edge is null), from the
  // gradients of the outputs (undefined for an output no gradient reached; never all undefined).
  virtual std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) = 0;
  // Frees saved state (after a backward without retain_graph).
  virtual void release() {}

  std::vector<Edge>& next_edges() { return next_; }
  uint64_t sequence_nr() const { return sequence_nr_; }

 protected:
  std::vector<Edge> next_;
  uint64_t sequence_nr_;
};

// Backward of a recorded op: gradient of the output and the unpacked saved tensors in; one
// gradient per input out (undefined for inputs that need none; needs_input_grad says which).
struct BackwardContext {
  std::vector<Tensor> saved;           // unpacked (version-checked) saved tensors
  std::vector<bool> needs_input_grad;  // per input
};
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output,
                                                     const BackwardContext& ctx)>;
// Several outputs (split): one gradient per output, undefined where none arrived.
using MultiBackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs,
                                                          const BackwardContext& ctx)>;

// The node of an op recorded through record() / record_multi().
class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, std::vector<SavedTensor> saved, std::vector<bool> needs_input_grad,
               MultiBackwardFn fn, std::size_t num_outputs);
  std::string name() const override { return name_; }
  std::size_t num_outputs() const override { return num_outputs_; }
  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override;
  void release() override;

 private:
  std::string name_;
  std::vector<SavedTensor> saved_;
  std::vector<bool> needs_input_grad_;
  MultiBackwardFn fn_;
  std::size_t num_outputs_;
  bool released_ = false;
};

namespace autograd {

// True when grad mode is on and any input requires grad.
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Attaches a FunctionNode named `op` to `output` (which must be freshly made by the op) when
// grad mode is on and an input requires grad; `saved` are version-checked at backward. Returns
// output. This is how every op (and code above blutensor) defines a differentiable operation:
//   Tensor y = ...forward without autograd...;
//   return autograd::record("my_op", y, {a, b}, {a, b}, [](const Tensor& gy, const BackwardContext& c) {
//     return std::vector<Tensor>{gy * c.saved[1], gy * c.saved[0]}; });
Tensor record(const std::string& op, Tensor output, const std::vector<Tensor>& inputs,
              const std::vector<Tensor>& saved, BackwardFn backward);
// Several fresh outputs sharing one node (output i gets output_nr i).
std::vector<Tensor> record_multi(const std::string& op, std::vector<Tensor> outputs,
                                 const std::vector<Tensor>& inputs, const std::vector<Tensor>& saved,
                                 MultiBackwardFn backward);

// Backward from several roots with their gradients (undefined = ones for a numel-1 root).
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph = false);

// The AccumulateGrad node of a leaf that requires grad (created on first use).
std::shared_ptr<Node> grad_accumulator(const Tensor& leaf);

}  // namespace autograd

// Per-tensor autograd state (TensorImpl::autograd).
struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;                // non-leaf: the op that made it
  uint32_t output_nr = 0;                       // non-leaf: which output of grad_fn
  std::weak_ptr<Node> grad_accumulator;         // leaf: shared by all graph uses
  std::vector<std::pair<int, GradReadyHook>> grad_ready_hooks;
  int next_hook_id = 0;
};

}  // namespace blu
