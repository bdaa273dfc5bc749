// capture_host_copies.cpp: the record's copies into host memory that nothing reads again, left out
// of the run (Note [Dead host copies]).
#include "blutensor/capture.h"
#include "capture/capture_internal.h"

namespace blu::capture {

// Note [Dead host copies]
// Tensor::item() records a host_read and then its copy_ of the scalar into a CPU tensor; the
// replaying engine reads the value through run()'s on_host_read (a view of the device buffer) and
// never looks at that CPU tensor. Each such copy_ is still a synchronous device-to-host transfer in
// the step's eager tail: two per step in blutrain (the loss and the gradient norm), each a round
// trip of host latency with the GPU idle before the next step can be launched (H100, session 24
// bf16 profile: four DtoH transfers over ~170 us after the update, the fused engine's one). A
// copy_ whose destination is a CPU buffer internal to the step (not kept after it), that no later
// call touches, is replaced by a launch that does nothing: its destination gets no bytes. What
// the step leaves in every buffer read later is unchanged: the same bits.
int Executable::drop_dead_host_copies() {
  const int n = static_cast<int>(graph_.nodes.size());
  std::vector<int> last_touch(graph_.buffers.size(), -1);
  for (int i = 0; i < n; ++i) {
    for (const Arg& a : graph_.nodes[static_cast<size_t>(i)].args) {
      for (const TensorRef& t : a.tensors) {
        if (t.defined()) last_touch[static_cast<size_t>(t.buffer)] = i;
      }
    }
  }
  int dropped = 0;
  for (int i = 0; i < n; ++i) {
    const Node& node = graph_.nodes[static_cast<size_t>(i)];
    if (node.op != "copy_" || replaced(i)) continue;
    const TensorRef& dst = node.arg("dst").tensors.at(0);
    const TensorRef& src = node.arg("src").tensors.at(0);
    const Buffer& b = graph_.buffers[static_cast<size_t>(dst.buffer)];
    if (!b.device.is_cpu() || b.origin != Origin::kInternal || b.alive || dst.buffer == src.buffer ||
        last_touch[static_cast<size_t>(dst.buffer)] != i)
      continue;
    replace({i}, [](const ViewFn&) {}, {src.buffer});
    ++dropped;
  }
  return dropped;
}

}  // namespace blu::capture
