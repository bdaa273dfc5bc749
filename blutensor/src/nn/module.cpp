// nn::Module bookkeeping (dotted names, state_dict, train/eval, to) and the basic layers.
#include <cmath>

#include "blutensor/autograd.h"
#include "blutensor/nn.h"
#include "blutensor/random.h"

namespace blu::nn {

void set_data(Tensor& t, const Tensor& src) {
  BLU_CHECK(t.defined() && src.defined(), "set_data: undefined tensor");
  TensorImpl* impl = t.impl();
  Tensor converted_grad;
  if (t.grad().defined()) {
    NoGradGuard ng;
    converted_grad = t.grad().to(src.device()).to(src.dtype());
  }
  impl->storage = src.storage();
  impl->dtype = src.dtype();
  impl->sizes = src.sizes();
  impl->strides = src.strides();
  impl->storage_offset = src.storage_offset();
  if (converted_grad.defined()) t.set_grad(converted_grad);
}

void Module::check_new_name(const std::string& name) const {
  BLU_CHECK(!name.empty() && name.find('.') == std::string::npos, "Module: bad name '", name,
            "' (non-empty, no '.')");
  for (const auto& p : params_) BLU_CHECK(p.first != name, "Module: duplicate name '", name, "'");
  for (const auto& p : buffers_) BLU_CHECK(p.first != name, "Module: duplicate name '", name, "'");
  for (const auto& p : children_) BLU_CHECK(p.first != name, "Module: duplicate name '", name, "'");
}

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_new_name(name);
  BLU_CHECK(t.defined(), "register_parameter: '", name, "' is undefined");
  if (!t.is_leaf()) t = t.detach();
  if (requires_grad) t.requires_grad_(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name);
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_new_name(name);
  BLU_CHECK(m != nullptr, "register_module: '", name, "' is null");
  children_.emplace_back(name, std::move(m));
}

void Module::collect(const std::string& prefix, bool params, bool recurse,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [name, t] : params ? params_ : buffers_) {
    if (t.defined()) out.emplace_back(prefix + name, t);
  }
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", params, true, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> all, out;
  collect("", true, recurse, all);
  // A tensor registered twice (weight tying) is listed once, under its first name.
  for (auto& p : all) {
    bool seen = false;
    for (auto& q : out) seen = seen || q.second.impl() == p.second.impl();
    if (!seen) out.push_back(p);
  }
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& p : named_parameters(recurse)) out.push_back(p.second);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", false, recurse, out);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& p : named_parameters()) n += p.second.numel();
  return n;
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> out;
  std::vector<std::pair<std::string, Tensor>> params;
  collect("", true, true, params);  // every name, tied tensors included
  for (auto& p : params) out[p.first] = p.second.detach();
  for (auto& p : named_buffers()) out[p.first] = p.second.detach();
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  NoGradGuard ng;
  std::vector<std::pair<std::string, Tensor>> mine;
  collect("", true, true, mine);
  for (auto& b : named_buffers()) mine.push_back(b);
  std::size_t used = 0;
  for (auto& [name, t] : mine) {
    auto it = state.find(name);
    if (it == state.end()) {
      BLU_CHECK(!strict, "load_state_dict: missing key '", name, "' (", t.describe(), ")");
      continue;
    }
    BLU_CHECK(it->second.sizes() == t.sizes(), "load_state_dict: '", name, "' has shape ",
              it->second.shape_str(), ", the module expects ", t.describe());
    Tensor dst = t.detach();
    dst.copy_(it->second);
    ++used;
  }
  if (strict && used != state.size()) {
    for (auto& [name, t] : state) {
      bool known = false;
      for (auto& m : mine) known = known || m.first == name;
      BLU_CHECK(known, "load_state_dict: unexpected key '", name, "' (", t.describe(), ")");
    }
  }
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->train(on);
}

void Module::to(Device device) {
  NoGradGuard ng;
  for (auto* list : {&params_, &buffers_}) {
    for (auto& [name, t] : *list) {
      if (t.defined() && t.device() != device) set_data(t, t.detach().to(device));
    }
  }
  for (auto& c : children_) c.second->to(device);
}

void Module::to(DType dtype) {
  NoGradGuard ng;
  for (auto* list : {&params_, &buffers_}) {
    for (auto& [name, t] : *list) {
      if (t.defined() && is_floating(t.dtype()) && t.dtype() != dtype) set_data(t, t.detach().to(dtype));
    }
  }
  for (auto& c : children_) c.second->to(dtype);
}

void Module::zero_grad() {
  for (auto& p : named_parameters()) p.second.set_grad(Tensor());
}

// ---------------------------------------------------------------- layers
Linear::Linear(int64_t in, int64_t out, bool with_bias, TensorOptions o, Generator* gen) {
  BLU_CHECK(in > 0 && out > 0, "Linear: sizes must be positive, got in=", in, " out=", out);
  double bound = 1.0 / std::sqrt(static_cast<double>(in));
  TensorOptions po = o.requires_grad(false);
  Tensor w = empty({out, in}, po);
  w.uniform_(-bound, bound, gen);
  weight = register_parameter("weight", w);
  if (with_bias) {
    Tensor b = empty({out}, po);
    b.uniform_(-bound, bound, gen);
    bias = register_parameter("bias", b);
  }
}

LayerNorm::LayerNorm(int64_t n, double eps_in, bool affine, TensorOptions o) : eps(eps_in) {
  BLU_CHECK(n > 0, "LayerNorm: size must be positive, got ", n);
  if (affine) {
    weight = register_parameter("weight", ones({n}, o.requires_grad(false)));
    bias = register_parameter("bias", zeros({n}, o.requires_grad(false)));
  }
}

Embedding::Embedding(int64_t num, int64_t dim, TensorOptions o, double init_std, Generator* gen) {
  BLU_CHECK(num > 0 && dim > 0, "Embedding: sizes must be positive, got ", num, " x ", dim);
  Tensor w = empty({num, dim}, o.requires_grad(false));
  w.normal_(0.0, init_std, gen);
  weight = register_parameter("weight", w);
}

}  // namespace blu::nn
