// kernel_trace.h: a CUPTI kernel tracer for one training step: every kernel (including those
// launched from CUDA graphs), memcpy and memset between start() and stop(), grouped by kernel
// family (gemm, attention, layernorm, gelu, softmax/xent, adamw, elementwise/copy, other) with
// per-family time and launch count, the host gap and the top-20 kernels, as JSON.
//
// Note [Kernel trace]
// CUPTI's Activity API (CONCURRENT_KERNEL, MEMCPY, MEMSET) records GPU start/end timestamps (ns)
// for each operation, graph-launched kernels included, at no cost to the kernels themselves (the
// records are written into host buffers CUPTI asks for). One tracer is active per process (CUPTI's
// buffer callbacks are global). The family classifier (Note [Kernel families] in
// bench/e2e/kernel_families.py) is the same table on both sides, so blutrain's breakdown and
// PyTorch's (torch.profiler) compare family by family. Without CUPTI at configure time
// (BLU_HAVE_CUPTI undefined) available() is false, start()/stop() do nothing and to_json() reports
// the (empty) breakdown with "available": false.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace blu::train {

struct KernelRecord {
  std::string name;   // demangled kernel name, or "[memcpy HtoD]", "[memset]", ...
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t stream = 0;
  uint32_t grid[3] = {0, 0, 0};  // kernels: the launch grid (0 for copies and memsets)
};

// "void ns::foo_kernel<int, 4>(float*, int)" -> "foo_kernel".
std::string kernel_base_name(std::string_view name);
// One of kKernelFamilies (Note [Kernel families]).
const char* kernel_family(std::string_view name);
// The families in report order ("other" last).
const std::vector<std::string>& kernel_families();
// The breakdown of `records` (any order) as JSON: launches, kernel_sum_ms, busy_ms (union of the
// intervals), span_ms (first start to last end), host_gap_ms = span - busy, families
// {name: {ms, count}}, top (the `top` kernels by total time: name, family, ms, count),
// top_launches (the `top` (kernel, grid) pairs by total time: kernel (base name), grid [x, y, z],
// name (full), family, ms, count, avg_us: which GEMM shape is slow, Note [Launch shapes]), and
// step_wall_ms / wall_minus_busy_ms when step_wall_ms >= 0.
std::string kernel_breakdown_json(const std::vector<KernelRecord>& records, double step_wall_ms = -1.0,
                                  int top = 20);

class KernelTrace {
 public:
  KernelTrace() = default;
  ~KernelTrace();
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;

  // True when built with CUPTI (the library may still fail to start: start() then throws).
  static bool available();
  // Clears the records and starts recording (throws blu::Error when CUPTI refuses, or when another
  // KernelTrace is recording). start() and stop() synchronise the device: call them outside a
  // stream capture, around the graph launch (graph-launched kernels are recorded).
  void start();
  // Waits for the device, flushes CUPTI's buffers and stops recording.
  void stop();
  // The optional wall time of the traced region (host clock), reported next to the GPU numbers.
  void set_wall_ms(double ms) { wall_ms_ = ms; }
  const std::vector<KernelRecord>& records() const { return records_; }
  // kernel_breakdown_json(records()) plus "available" and "dropped_records".
  std::string to_json() const;

  // Internal: the CUPTI buffer callback appends here.
  void add(KernelRecord r) { records_.push_back(std::move(r)); }
  void add_dropped(size_t n) { dropped_ += n; }

 private:
  std::vector<KernelRecord> records_;
  double wall_ms_ = -1.0;
  size_t dropped_ = 0;
  bool running_ = false;
};

}  // namespace blu::train
