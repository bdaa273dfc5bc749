// format_bytes: "1.50 GiB"-style byte counts for the allocator's messages and stats.
#pragma once

#include <cstdint>
#include <string>

namespace blu::cuda {

// Binary units (KiB, MiB, GiB) with two decimals; plain bytes below 1 KiB. Negative values keep
// their sign (stats deltas).
std::string format_bytes(std::int64_t bytes);
inline std::string format_bytes(std::size_t bytes) {
  return format_bytes(static_cast<std::int64_t>(bytes));
}

}  // namespace blu::cuda
