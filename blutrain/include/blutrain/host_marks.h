// blutrain/host_marks.h: when an engine's step launched its work and began waiting for it, on the
// host's clock (Note [Host issue time]).
#pragma once

#include <chrono>

namespace blu::train {

// Note [Host issue time]
// A step starts with the GPU idle (the trainer synchronises before it), so every microsecond the
// host spends before the step's CUDA graph is launched is a microsecond the GPU waits; what the host
// issues after the launch hides behind the graph until it waits for the step's result. Each engine
// with a graph marks both points; the trainer reports their medians from the step's start (its
// `t0`), so two engines whose GPU work is equal can be told apart by their host time alone
// (session 25: the compiled bf16 step was busy 0.16 ms less than the fused engine's yet 0.45 ms a
// step slower).
struct HostMarks {
  std::chrono::steady_clock::time_point launching{};  // the step's (first) graph launch call began
  std::chrono::steady_clock::time_point launched{};   // and returned
  std::chrono::steady_clock::time_point waiting{};    // the host began waiting for the step's result
  bool valid() const {
    return launching != std::chrono::steady_clock::time_point{} && launched >= launching && waiting >= launched;
  }
};

}  // namespace blu::train
