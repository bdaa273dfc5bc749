// blutensor/nn.h: Module (named parameters, buffers and children with dotted names, train/eval,
// to(device/dtype), state_dict) and the layers Linear, LayerNorm, Embedding, Dropout.
//
// Note [Module parameters]
// A module keeps its parameters as Tensor handles; layers also keep a member handle to the same
// TensorImpl (e.g. Linear::weight). to(device) and to(dtype) replace the data of each TensorImpl in
// place (set_data), so every handle, including ones an optimizer holds, sees the moved tensor.
// Create the optimizer after moving the model anyway: optimizer state is not moved.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "blutensor/ops.h"
#include "blutensor/tensor.h"

namespace blu::nn {

// Replaces t's data (storage, dtype, sizes, strides) with src's, keeping t's autograd identity
// (requires_grad, hooks); a defined .grad is converted the same way.
void set_data(Tensor& t, const Tensor& src);

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Registration (names must be unique within the module and contain no '.').
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

  // Recursive, in registration order, dotted names ("h.0.attn.c_attn.weight").
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
  int64_t num_parameters() const;

  // Parameters and buffers by dotted name (shares storage: copy before modifying).
  std::map<std::string, Tensor> state_dict() const;
  // Copies values in (dtype converted, device kept). strict: every name must match both ways.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  void to(Device device);
  void to(DType dtype);  // floating parameters and buffers only
  void zero_grad();      // sets every parameter's .grad to undefined

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void collect(const std::string& prefix, bool params, bool recurse,
               std::vector<std::pair<std::string, Tensor>>& out) const;
  void check_new_name(const std::string& name) const;

  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// y = x W^T + b, W [out, in] and b [out] uniform in +-1/sqrt(in) (PyTorch's default init).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, TensorOptions options = {},
         Generator* gen = nullptr);
  Tensor forward(const Tensor& x) const { return linear(x, weight, bias); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  Tensor weight;
  Tensor bias;  // undefined without bias
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5, bool affine = true, TensorOptions options = {});
  Tensor forward(const Tensor& x) const { return layer_norm(x, weight, bias, eps); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  Tensor weight;  // ones
  Tensor bias;    // zeros
  double eps;
};

// Rows N(0, std^2) (std = 1 like PyTorch unless given).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, TensorOptions options = {}, double init_std = 1.0,
            Generator* gen = nullptr);
  Tensor forward(const Tensor& indices) const { return embedding(weight, indices); }
  Tensor operator()(const Tensor& indices) const { return forward(indices); }
  Tensor weight;
};

// Identity in eval mode; in train mode draws its mask from `gen` (default generator if null).
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = nullptr) : p(p), gen_(gen) {}
  Tensor forward(const Tensor& x) const { return dropout(x, p, is_training(), gen_); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  double p;

 private:
  Generator* gen_;
};

}  // namespace blu::nn
