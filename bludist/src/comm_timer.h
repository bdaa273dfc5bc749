// comm_timer.h (internal): the host time spent issuing or waiting for collectives, which the
// data-parallel wrappers (DDP, ZeRO-1/2, ZeRO-3) report as their communication time.
#pragma once

#include <chrono>
#include <utility>

namespace bludist::detail {

// Runs collective() and adds its host seconds to *seconds.
template <typename F>
void timed(double* seconds, F&& collective) {
  const auto t0 = std::chrono::steady_clock::now();
  std::forward<F>(collective)();
  *seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace bludist::detail
