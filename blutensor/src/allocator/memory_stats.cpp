// MemoryStats printing: the human-readable table of the out-of-memory message and the JSON
// object of snapshot_json, plus format_bytes.
#include <cstdio>
#include <sstream>

#include "allocator/format_bytes.h"
#include "blutensor/cuda_allocator.h"

namespace blu::cuda {

std::string format_bytes(std::int64_t bytes) {
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  std::int64_t mag = bytes < 0 ? -bytes : bytes;
  char buf[64];
  if (mag < 1024) {
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
    return buf;
  }
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  while ((v >= 1024.0 || v <= -1024.0) && u < 3) {
    v /= 1024.0;
    ++u;
  }
  std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

std::string MemoryStats::to_string() const {
  std::ostringstream os;
  auto line = [&](const char* name, std::int64_t bytes) {
    os << "  " << name << ": " << format_bytes(bytes) << " (" << bytes << " bytes)\n";
  };
  line("allocated", allocated_bytes);
  line("requested", requested_bytes);
  line("reserved", reserved_bytes);
  line("cached free", cached_free_bytes);
  line("pending free (record_stream)", pending_free_bytes);
  line("largest free block", largest_free_block_bytes);
  line("peak allocated", peak_allocated_bytes);
  line("peak reserved", peak_reserved_bytes);
  char frag[32];
  std::snprintf(frag, sizeof frag, "%.4f", fragmentation);
  os << "  fragmentation: " << frag << "\n";
  os << "  segments: " << segments << ", active allocations: " << active_allocations
     << ", private pools: " << private_pools << "\n";
  os << "  allocations: " << num_allocations << ", frees: " << num_frees
     << ", device allocs: " << num_device_allocs << ", device frees: " << num_device_frees
     << ", retries: " << num_alloc_retries << ", OOMs: " << num_ooms << "\n";
  return os.str();
}

std::string MemoryStats::to_json() const {
  std::ostringstream os;
  char frag[32];
  std::snprintf(frag, sizeof frag, "%.6f", fragmentation);
  os << "{\"allocated_bytes\":" << allocated_bytes << ",\"requested_bytes\":" << requested_bytes
     << ",\"reserved_bytes\":" << reserved_bytes
     << ",\"peak_allocated_bytes\":" << peak_allocated_bytes
     << ",\"peak_reserved_bytes\":" << peak_reserved_bytes
     << ",\"peak_requested_bytes\":" << peak_requested_bytes
     << ",\"cached_free_bytes\":" << cached_free_bytes
     << ",\"pending_free_bytes\":" << pending_free_bytes
     << ",\"largest_free_block_bytes\":" << largest_free_block_bytes
     << ",\"segments\":" << segments << ",\"active_allocations\":" << active_allocations
     << ",\"num_allocations\":" << num_allocations << ",\"num_frees\":" << num_frees
     << ",\"num_device_allocs\":" << num_device_allocs
     << ",\"num_device_frees\":" << num_device_frees
     << ",\"num_alloc_retries\":" << num_alloc_retries << ",\"num_ooms\":" << num_ooms
     << ",\"private_pools\":" << private_pools << ",\"fragmentation\":" << frag << "}";
  return os.str();
}

}  // namespace blu::cuda
