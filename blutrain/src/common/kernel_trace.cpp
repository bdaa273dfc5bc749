// kernel_trace.cpp: the kernel-family classifier and breakdown (host code, always built) and the
// CUPTI Activity API recorder (with BLU_HAVE_CUPTI; otherwise a stub). Note [Kernel trace].
#include "common/kernel_trace.h"

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "blutensor/error.h"
#include "blutensor/json.h"

#ifdef BLU_HAVE_CUPTI
#include <cuda_runtime.h>
#include <cupti.h>
#endif

namespace blu::train {
namespace {

// Note [Kernel families] (bench/e2e/kernel_families.py FAMILIES: keep the two tables identical).
// First match wins: the specific families on the base name, then on the full name, then
// elementwise/copy on the full name, else "other".
struct Family {
  const char* name;
  std::vector<const char*> substrings;  // lower case
};

const std::vector<Family>& family_table() {
  static const std::vector<Family> table = {
      {"attention", {"flash_attn", "flash_fwd", "flash_bwd", "fmha", "attention", "simt_attn", "attn_", "_attn", "sdpa",
                     "mem_eff"}},
      {"layernorm", {"layer_norm", "layernorm", "ln_fwd", "ln_bwd", "gammabeta", "rms_norm"}},
      {"gelu", {"gelu"}},
      {"softmax/xent", {"softmax", "xent", "cross_entropy", "nll_loss", "logsumexp", "classifier"}},
      {"adamw", {"adam", "lpnorm", "grad_norm", "grad_sumsq", "clip", "optimizer"}},
      {"gemm", {"gemm", "gemv", "nvjet", "xmma", "cutlass", "cublas", "simt_f32", "simt_generic", "split_reduce",
                "splitk", "triton_tem", "matmul", "wgmma", "bias_grad", "dot_kernel"}},
      {"elementwise/copy", {"elementwise", "memcpy", "memset", "copy", "fill", "cast", "convert", "embedding", "index",
                            "add", "mul", "scale", "reduce", "triton_poi", "triton_red", "triton_per", "cat",
                            "transpose", "repack", "column_sum"}},
  };
  return table;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool matches(const std::string& text, const Family& f) {
  for (const char* sub : f.substrings) {
    if (text.find(sub) != std::string::npos) return true;
  }
  return false;
}

double length_of_union(std::vector<std::pair<uint64_t, uint64_t>> iv) {
  std::sort(iv.begin(), iv.end());
  uint64_t total = 0;
  bool open = false;
  uint64_t s = 0, e = 0;
  for (const auto& [a, b] : iv) {
    if (!open || a > e) {
      if (open) total += e - s;
      s = a;
      e = b;
      open = true;
    } else {
      e = std::max(e, b);
    }
  }
  if (open) total += e - s;
  return static_cast<double>(total);
}

std::string num(double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

}  // namespace

std::string kernel_base_name(std::string_view name) {
  std::string out;
  int depth = 0;
  for (char c : name) {
    if (c == '<' || c == '(') {
      ++depth;
    } else if (c == '>' || c == ')') {
      depth = std::max(0, depth - 1);
    } else if (depth == 0) {
      out.push_back(c);
    }
  }
  // Trim, drop the return type ("void "), then the namespaces.
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (size_t sp = out.rfind(' '); sp != std::string::npos) out = out.substr(sp + 1);
  if (size_t ns = out.rfind("::"); ns != std::string::npos) out = out.substr(ns + 2);
  return out;
}

const char* kernel_family(std::string_view name) {
  const auto& table = family_table();
  const std::string full = lower(name);
  const std::string base = lower(kernel_base_name(name));
  for (const std::string* text : {&base, &full}) {
    for (size_t i = 0; i + 1 < table.size(); ++i) {
      if (matches(*text, table[i])) return table[i].name;
    }
  }
  if (matches(full, table.back())) return table.back().name;
  return "other";
}

const std::vector<std::string>& kernel_families() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Family& f : family_table()) v.emplace_back(f.name);
    v.emplace_back("other");
    return v;
  }();
  return names;
}

namespace {

// Note [Stream overlap]
// Session 21: the compiled bf16 step ran 0.57 ms more kernel time than the fused engine but was
// 2.3 ms longer busy: the two differ in how much of their side stream's work runs beside the
// main stream's, which per-family sums cannot show. The breakdown therefore also gives, per CUDA
// stream, its launches, kernel time and busy time (union of its intervals), the time during which
// kernels of two or more streams run at once (overlap_ms; busy_ms + overlap_ms <= kernel_sum_ms,
// equal when no stream overlaps itself), and the step's timeline: one [start_us, duration_us,
// stream, family, base name] per record, start relative to the first record, in start order
// (scripts/step_overlap.py reads it: the main stream's idle gaps and what ran in them).
double length_with_two_streams(const std::vector<KernelRecord>& records) {
  // Sweep the starts and ends; count running records per stream; sum the time with >= 2 streams.
  std::vector<std::pair<uint64_t, std::pair<int, uint32_t>>> ev;  // (time, (+1 start / -1 end, stream))
  ev.reserve(records.size() * 2);
  for (const KernelRecord& r : records) {
    ev.push_back({r.start_ns, {+1, r.stream}});
    ev.push_back({std::max(r.end_ns, r.start_ns), {-1, r.stream}});
  }
  std::sort(ev.begin(), ev.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second.first < b.second.first;  // ends first
  });
  std::map<uint32_t, int> running;
  int streams = 0;
  uint64_t total = 0, prev = 0;
  for (const auto& [t, e] : ev) {
    if (streams >= 2) total += t - prev;
    prev = t;
    int& n = running[e.second];
    if (e.first > 0 && n++ == 0) ++streams;
    if (e.first < 0 && --n == 0) --streams;
  }
  return static_cast<double>(total);
}

std::string stream_overlap_json(const std::vector<KernelRecord>& records) {
  struct PerStream {
    int64_t launches = 0;
    double ns = 0;
    std::vector<std::pair<uint64_t, uint64_t>> iv;
  };
  std::map<uint32_t, PerStream> per;
  uint64_t first = UINT64_MAX;
  for (const KernelRecord& r : records) {
    PerStream& p = per[r.stream];
    const uint64_t end = std::max(r.end_ns, r.start_ns);
    p.launches += 1;
    p.ns += static_cast<double>(end - r.start_ns);
    p.iv.emplace_back(r.start_ns, end);
    first = std::min(first, r.start_ns);
  }
  std::vector<std::pair<uint32_t, PerStream*>> order;
  for (auto& [id, p] : per) order.emplace_back(id, &p);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second->ns > b.second->ns; });
  std::string js = ", \"overlap_ms\": " + num(length_with_two_streams(records) * 1e-6) + ", \"streams\": [";
  bool comma = false;
  for (auto& [id, p] : order) {
    js += std::string(comma ? ", " : "") + "{\"stream\": " + std::to_string(id) + ", \"launches\": " +
          std::to_string(p->launches) + ", \"kernel_ms\": " + num(p->ns * 1e-6) + ", \"busy_ms\": " +
          num(length_of_union(std::move(p->iv)) * 1e-6) + "}";
    comma = true;
  }
  js += "], \"timeline\": [";
  std::vector<const KernelRecord*> sorted;
  sorted.reserve(records.size());
  for (const KernelRecord& r : records) sorted.push_back(&r);
  std::stable_sort(sorted.begin(), sorted.end(), [](const KernelRecord* a, const KernelRecord* b) { return a->start_ns < b->start_ns; });
  comma = false;
  char buf[64];
  for (const KernelRecord* r : sorted) {
    const uint64_t end = std::max(r->end_ns, r->start_ns);
    std::snprintf(buf, sizeof buf, "[%.3f, %.3f, ", static_cast<double>(r->start_ns - first) * 1e-3,
                  static_cast<double>(end - r->start_ns) * 1e-3);
    js += std::string(comma ? ", " : "") + buf + std::to_string(r->stream) + ", " + json::quote(kernel_family(r->name)) +
          ", " + json::quote(kernel_base_name(r->name)) + "]";
    comma = true;
  }
  return js + "]";
}

}  // namespace

std::string kernel_breakdown_json(const std::vector<KernelRecord>& records, double step_wall_ms, int top) {
  struct Agg {
    double ns = 0;
    int64_t count = 0;
    const char* family = "other";
  };
  std::map<std::string, Agg> per_family, per_kernel;
  // Note [Launch shapes]: one kernel template serves every GEMM of the step, so per-name totals
  // cannot say which problem is slow; its grid (tiles x splits) can. Keyed by base name + grid.
  struct Shape {
    std::string kernel;  // base name (the short label)
    std::string name;    // full demangled name: instantiations sharing a base name stay apart
    uint32_t grid[3];
  };
  std::map<std::string, std::pair<Shape, Agg>> per_shape;
  for (const std::string& f : kernel_families()) per_family[f] = Agg{};
  std::vector<std::pair<uint64_t, uint64_t>> iv;
  iv.reserve(records.size());
  uint64_t first = UINT64_MAX, last = 0;
  double sum_ns = 0;
  for (const KernelRecord& r : records) {
    const uint64_t end = std::max(r.end_ns, r.start_ns);
    const double d = static_cast<double>(end - r.start_ns);
    const char* fam = kernel_family(r.name);
    per_family[fam].ns += d;
    per_family[fam].count += 1;
    Agg& k = per_kernel[r.name];
    k.ns += d;
    k.count += 1;
    k.family = fam;
    if (r.grid[0] != 0) {
      const std::string key = r.name + "|" + std::to_string(r.grid[0]) + "," + std::to_string(r.grid[1]) + "," +
                              std::to_string(r.grid[2]);
      auto [it, fresh] = per_shape.try_emplace(key);
      auto& [shape, agg] = it->second;
      if (fresh) shape = Shape{kernel_base_name(r.name), r.name, {r.grid[0], r.grid[1], r.grid[2]}};
      agg.ns += d;
      agg.count += 1;
      agg.family = fam;
    }
    sum_ns += d;
    iv.emplace_back(r.start_ns, end);
    first = std::min(first, r.start_ns);
    last = std::max(last, end);
  }
  const double busy_ms = length_of_union(std::move(iv)) * 1e-6;
  const double span_ms = records.empty() ? 0.0 : static_cast<double>(last - first) * 1e-6;
  std::string js = "{\"launches\": " + std::to_string(records.size()) + ", \"kernel_sum_ms\": " + num(sum_ns * 1e-6) +
                   ", \"busy_ms\": " + num(busy_ms) + ", \"span_ms\": " + num(span_ms) +
                   ", \"host_gap_ms\": " + num(span_ms - busy_ms);
  if (step_wall_ms >= 0) {
    js += ", \"step_wall_ms\": " + num(step_wall_ms) + ", \"wall_minus_busy_ms\": " + num(step_wall_ms - busy_ms);
  }
  js += stream_overlap_json(records);
  js += ", \"families\": {";
  bool comma = false;
  for (const std::string& f : kernel_families()) {
    const Agg& a = per_family[f];
    js += (comma ? ", " : "") + json::quote(f) + ": {\"ms\": " + num(a.ns * 1e-6) +
          ", \"count\": " + std::to_string(a.count) + "}";
    comma = true;
  }
  js += "}, \"top\": [";
  std::vector<std::pair<std::string, Agg>> ks(per_kernel.begin(), per_kernel.end());
  std::stable_sort(ks.begin(), ks.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  if (static_cast<int>(ks.size()) > top) ks.resize(static_cast<size_t>(std::max(0, top)));
  comma = false;
  for (const auto& [name, a] : ks) {
    js += std::string(comma ? ", " : "") + "{\"name\": " + json::quote(name) + ", \"family\": " +
          json::quote(a.family) + ", \"ms\": " + num(a.ns * 1e-6) + ", \"count\": " + std::to_string(a.count) + "}";
    comma = true;
  }
  js += "], \"top_launches\": [";
  std::vector<std::pair<Shape, Agg>> ss;
  for (const auto& [key, v] : per_shape) ss.push_back(v);
  std::stable_sort(ss.begin(), ss.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  if (static_cast<int>(ss.size()) > top) ss.resize(static_cast<size_t>(std::max(0, top)));
  comma = false;
  for (const auto& [shape, a] : ss) {
    js += std::string(comma ? ", " : "") + "{\"kernel\": " + json::quote(shape.kernel) + ", \"grid\": [" +
          std::to_string(shape.grid[0]) + ", " + std::to_string(shape.grid[1]) + ", " + std::to_string(shape.grid[2]) +
          "], \"name\": " + json::quote(shape.name) + ", \"family\": " + json::quote(a.family) + ", \"ms\": " + num(a.ns * 1e-6) + ", \"count\": " +
          std::to_string(a.count) + ", \"avg_us\": " + num(a.ns * 1e-3 / static_cast<double>(a.count)) + "}";
    comma = true;
  }
  js += "]}";
  return js;
}

std::string KernelTrace::to_json() const {
  std::string js = kernel_breakdown_json(records_, wall_ms_);
  js.pop_back();  // the closing brace
  js += std::string(", \"available\": ") + (available() ? "true" : "false") +
        ", \"source\": \"cupti\", \"dropped_records\": " + std::to_string(dropped_) + "}";
  return js;
}

#ifdef BLU_HAVE_CUPTI

namespace {

std::mutex g_mu;
KernelTrace* g_active = nullptr;  // the recording tracer (CUPTI's callbacks are process-wide)
bool g_callbacks_registered = false;
constexpr size_t kBufferBytes = size_t{8} << 20;

void check_cupti(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  BLU_THROW("KernelTrace: ", what, " failed: ", msg ? msg : "unknown CUPTI error", " (", static_cast<int>(r), ")");
}

std::string demangle(const char* name) {
  if (name == nullptr) return "?";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

const char* copy_kind(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "[memcpy HtoD]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "[memcpy DtoH]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "[memcpy DtoD]";
    default: return "[memcpy]";
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t /*size*/, size_t valid) {
  std::lock_guard<std::mutex> lock(g_mu);
  CUpti_Activity* rec = nullptr;
  while (g_active != nullptr && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        g_active->add({demangle(k->name), k->start, k->end, k->streamId,
                       {static_cast<uint32_t>(k->gridX), static_cast<uint32_t>(k->gridY),
                        static_cast<uint32_t>(k->gridZ)}});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        g_active->add({copy_kind(m->copyKind), m->start, m->end, m->streamId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        g_active->add({"[memset]", m->start, m->end, m->streamId});
        break;
      }
      default:
        break;
    }
  }
  size_t dropped = 0;
  if (g_active != nullptr && cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) {
    g_active->add_dropped(dropped);
  }
  std::free(buffer);
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET};

}  // namespace

bool KernelTrace::available() { return true; }

void KernelTrace::start() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    BLU_CHECK(g_active == nullptr || g_active == this, "KernelTrace::start: another trace is recording");
    records_.clear();
    dropped_ = 0;
    g_active = this;
  }
  if (!g_callbacks_registered) {
    check_cupti(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
    g_callbacks_registered = true;
  }
  // Work queued before start() is not part of the trace.
  (void)cudaDeviceSynchronize();
  for (CUpti_ActivityKind k : kKinds) check_cupti(cuptiActivityEnable(k), "cuptiActivityEnable");
  running_ = true;
}

void KernelTrace::stop() {
  if (!running_) return;
  (void)cudaDeviceSynchronize();
  for (CUpti_ActivityKind k : kKinds) (void)cuptiActivityDisable(k);
  check_cupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_active == this) g_active = nullptr;
  running_ = false;
}

KernelTrace::~KernelTrace() {
  try {
    stop();
  } catch (...) {
  }
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_active == this) g_active = nullptr;
}

#else  // !BLU_HAVE_CUPTI

bool KernelTrace::available() { return false; }
void KernelTrace::start() { records_.clear(); }
void KernelTrace::stop() {}
KernelTrace::~KernelTrace() = default;

#endif

}  // namespace blu::train
