// blutensor/src/capture/capture_internal.h: byte-level tensors over storages, shared by the
// recorder (input snapshots), replay and the Executable (Note [Step capture]); running one node.
#pragma once

#include <memory>
#include <vector>

#include "blutensor/capture.h"

namespace blu::capture::detail {

// A 1-D tensor over a storage's first nbytes: i32 elements, or u16 when nbytes % 4 != 0 (an odd
// byte count is an error: no backend dtype has one-byte elements).
Tensor byte_view(const std::shared_ptr<Storage>& s, std::size_t nbytes);
// byte_view of a new storage of nbytes on device.
Tensor byte_tensor(std::size_t nbytes, Device device);
// The strided view r of storage s.
Tensor view_of(const std::shared_ptr<Storage>& s, const TensorRef& r);

// A run's state: one storage per buffer (null: not allocated).
struct Ctx {
  std::vector<std::shared_ptr<Storage>> storages;
  Tensor view(const TensorRef& r) const {
    return r.defined() ? view_of(storages[static_cast<size_t>(r.buffer)], r) : Tensor();
  }
};

// The pattern helpers of the capture rewrites (capture_ln_residual.cpp, capture_classifier_grad.cpp,
// capture_weight_copies.cpp): the same view (buffer, dtype, offset, sizes, strides); per buffer,
// how many tensor arguments of g's calls name it; whether call i is in a replace()d set
// (override_of may be shorter than the node list).
inline bool same_view(const TensorRef& a, const TensorRef& b) {
  return a.buffer == b.buffer && a.dtype == b.dtype && a.offset == b.offset && a.sizes == b.sizes &&
         a.strides == b.strides;
}
inline std::vector<int> use_counts(const Graph& g) {
  std::vector<int> uses(g.buffers.size(), 0);
  for (const Node& n : g.nodes) {
    for (const Arg& a : n.args) {
      for (const TensorRef& t : a.tensors) {
        if (t.defined()) ++uses[static_cast<size_t>(t.buffer)];
      }
    }
  }
  return uses;
}
inline bool replaced_in(const std::vector<int>& override_of, int i) {
  return i >= 0 && static_cast<size_t>(i) < override_of.size() && override_of[static_cast<size_t>(i)] >= 0;
}

// Runs node n (index: for the error message) through its backend on ctx's storages.
void run_node(const Node& n, size_t index, const Ctx& ctx);
// Copies the snapshot `value` into storage s (byte views, same size as buffer b).
void fill_from(const std::shared_ptr<Storage>& s, const Buffer& b, const Tensor& value);

// The in-place pairs of g (Note [In-place reuse], capture_inplace.cpp), in node order: per buffer
// its first and last node, whether it is a temporary (placed by the arena), and per node the
// override that replaced it (-1: none; may be shorter than the node list).
std::vector<InplacePair> inplace_pairs(const Graph& g, const std::vector<int>& first,
                                       const std::vector<int>& last,
                                       const std::vector<char>& temporary,
                                       const std::vector<int>& override_of);

}  // namespace blu::capture::detail
