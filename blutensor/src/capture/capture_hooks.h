// blutensor/src/capture/capture_hooks.h: the recording side of Note [Step capture]
// (blutensor/capture.h), called by BLU_DISPATCH (dispatch.h) and the few backend calls made
// outside it. Costs one thread-local load when no Scope is open.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "blutensor/tensor.h"
#include "kernel_args.h"

namespace blu::capture::detail {

struct Recorder;
// The open recorder of this thread; null when none is open or it is paused (its own copies).
Recorder* active();

void begin_node(Recorder* r, const char* op, Device device);
void add(Recorder* r, const Tensor& t);
void add(Recorder* r, const std::vector<Tensor>& ts);
void add(Recorder* r, double v);
void add(Recorder* r, int64_t v);
void add(Recorder* r, uint64_t v);
void add(Recorder* r, bool v);
void add(Recorder* r, UnaryOp v);
void add(Recorder* r, BinaryOp v);
void add(Recorder* r, ReduceOp v);
void add(Recorder* r, const AdamWParams& hp);
void end_node(Recorder* r);

// Records the call `op(args...)` on `device` before it runs (inputs are snapshotted on their
// first touch, before any op can change them). F is the backend function's type
// (decltype(&cpu_ops::op)): each argument is converted to its parameter type first, so a literal
// 0 passed for a double is recorded as a number.
template <typename F>
struct RecordAs;
template <typename R, typename... P>
struct RecordAs<R (*)(P...)> {
  template <typename... A>
  static void run(const char* op, Device device, const A&... args) {
    static_assert(sizeof...(P) == sizeof...(A), "capture: argument count differs from the backend op's");
    if (Recorder* r = active()) {
      begin_node(r, op, device);
      (add(r, static_cast<std::decay_t<P>>(args)), ...);
      end_node(r);
    }
  }
};

// A host read of t's values (item(), to_double_vector()).
void record_host_read(const Tensor& t);

}  // namespace blu::capture::detail
