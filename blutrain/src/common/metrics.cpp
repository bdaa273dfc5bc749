// metrics.cpp: MFU arithmetic, the progress line and the JSONL metrics log.
#include "blutrain/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "blutensor/error.h"
#include "blutensor/json.h"

namespace blu::train {

double flops_per_token(int64_t num_params, int num_layers, int channels, int seq_len) {
  return 6.0 * static_cast<double>(num_params) +
         12.0 * static_cast<double>(num_layers) * channels * seq_len;
}

double dense_peak_flops(const std::string& gpu_name, const std::string& precision) {
  struct Peak {
    const char* name_part;
    const char* not_part;  // excluded substring ("" = none)
    double fp32, tf32, bf16;  // TFLOP/s, dense
  };
  // SXM numbers unless the name says PCIe/NVL. Order matters: specific before general.
  static const Peak kPeaks[] = {
      {"H200", "", 67, 495, 989},         {"H100 PCIe", "", 51, 378, 756},
      {"H100 NVL", "", 60, 418, 835},     {"H100", "", 67, 495, 989},
      {"H800", "PCIe", 67, 495, 989},     {"GH200", "", 67, 495, 989},
      {"A100", "", 19.5, 156, 312},       {"A800", "", 19.5, 156, 312},
      {"L40S", "", 91.6, 183, 362},       {"RTX 4090", "", 82.6, 82.6, 165},
  };
  for (const Peak& p : kPeaks) {
    if (gpu_name.find(p.name_part) == std::string::npos) continue;
    if (*p.not_part != '\0' && gpu_name.find(p.not_part) != std::string::npos) continue;
    double tflops = precision == "bf16" ? p.bf16 : precision == "tf32" ? p.tf32 : p.fp32;
    return tflops * 1e12;
  }
  return 0.0;
}

std::string format_progress_line(const ProgressInfo& p) {
  char buf[512];
  int digits = 1;
  for (int64_t m = p.max_steps; m >= 10; m /= 10) ++digits;
  double tps = p.tokens_per_s;
  const char* unit = "";
  if (tps >= 1e6) {
    tps /= 1e6;
    unit = "M";
  } else if (tps >= 1e3) {
    tps /= 1e3;
    unit = "K";
  }
  int n = std::snprintf(buf, sizeof(buf), "step %*lld/%lld | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.1f%s tok/s",
                        digits, static_cast<long long>(p.step), static_cast<long long>(p.max_steps), p.loss,
                        p.lr, p.grad_norm, p.step_ms, tps, unit);
  std::string line(buf, static_cast<size_t>(n));
  if (p.mfu >= 0) {
    std::snprintf(buf, sizeof(buf), " | MFU %.1f%%", 100.0 * p.mfu);
    line += buf;
  }
  if (p.mem_allocated_gib >= 0) {
    std::snprintf(buf, sizeof(buf), " | mem %.2f/%.2f GiB (peak %.2f)", p.mem_allocated_gib,
                  p.mem_reserved_gib, p.mem_peak_gib);
    line += buf;
  }
  if (p.device_used_gib >= 0) {
    std::snprintf(buf, sizeof(buf), " | dev %.2f GiB", p.device_used_gib);
    line += buf;
  }
  if (p.dp_ranks > 1) {
    std::snprintf(buf, sizeof(buf), " | dp %d: rank mem %.2f GiB", p.dp_ranks, p.rank_mem_gib);
    line += buf;
  }
  if (p.tp_ranks > 1) line += " | tp " + std::to_string(p.tp_ranks);
  if (p.cp_ranks > 1) line += " | cp " + std::to_string(p.cp_ranks);
  if (p.comm_ms >= 0) {  // "comm 12.3 ms (exposed 4.1 ms, 67% hidden)"
    std::snprintf(buf, sizeof(buf), ", comm %.1f ms", p.comm_ms);
    line += buf;
    if (p.comm_exposed_ms >= 0 && p.comm_ms > 0) {
      std::snprintf(buf, sizeof(buf), " (exposed %.1f ms, %.0f%% hidden)", p.comm_exposed_ms,
                    100.0 * (1.0 - p.comm_exposed_ms / p.comm_ms));
      line += buf;
    }
  }
  return line;
}

MetricsLog::MetricsLog(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  file_ = std::fopen(path.c_str(), "a");
  BLU_CHECK(file_ != nullptr, "metrics log: cannot open '", path, "': ", std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsLog::write(const std::string& event, const std::vector<std::pair<std::string, double>>& values,
                       const std::vector<std::pair<std::string, std::string>>& strings) {
  if (file_ == nullptr) return;
  std::string line = "{\"event\":";
  line += json::quote(event);
  char num[64];
  for (const auto& [key, v] : values) {
    if (std::isfinite(v)) {
      std::snprintf(num, sizeof(num), "%.9g", v);
    } else {
      std::snprintf(num, sizeof(num), "null");
    }
    line += ',';
    line += json::quote(key);
    line += ':';
    line += num;
  }
  for (const auto& [key, text] : strings) {
    line += ',';
    line += json::quote(key);
    line += ':';
    line += json::quote(text);
  }
  line += "}\n";
  std::fputs(line.c_str(), file_);
  std::fflush(file_);
}

}  // namespace blu::train
