// bench_common.h: what every benchmark binary shares: CUDA-event timing (warm-up, median of
// many reps), rotation counts that push working sets past L2, and the JSON/markdown output that
// scripts/device-check.sh merges into bench/results/<gpu>/summary.json.
//
// Output contract: a benchmark binary run with --blu_out=<dir> writes <dir>/<name>.json:
//   {"name": "...", "metrics": {"gemm.bf16.geomean_ratio_vs_cublas": 1.02, ...},
//    "rows": [{...one object per measured case...}]}
// and prints a short markdown table on stdout. Metric names follow ARCHITECTURE.md.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace blu::bench {

#define BLU_BENCH_CUDA(expr)                                                              \
  do {                                                                                    \
    cudaError_t e_ = (expr);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(2);                                                                       \
    }                                                                                     \
  } while (0)

// Removes --blu_out=<dir> (and --blu_quick) from argv before Google Benchmark parses it.
struct Options {
  std::string out_dir;  // empty: no JSON written
  bool quick = false;   // fewer shapes and reps (device --quick runs)
};
inline Options parse_options(int* argc, char** argv) {
  Options o;
  int w = 1;
  for (int r = 1; r < *argc; ++r) {
    if (std::strncmp(argv[r], "--blu_out=", 10) == 0) {
      o.out_dir = argv[r] + 10;
    } else if (std::strcmp(argv[r], "--blu_quick") == 0) {
      o.quick = true;
    } else {
      argv[w++] = argv[r];
    }
  }
  *argc = w;
  return o;
}

// Median time in milliseconds of fn() on `stream`, each rep timed by its own event pair.
// fn(rep) receives the rep index so callers rotate through buffer sets larger than L2.
inline double median_ms(const std::function<void(int)>& fn, cudaStream_t stream, int warmup,
                        int reps) {
  for (int i = 0; i < warmup; ++i) fn(i);
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto& e : ev) BLU_BENCH_CUDA(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    BLU_BENCH_CUDA(cudaEventRecord(ev[2 * i], stream));
    fn(warmup + i);
    BLU_BENCH_CUDA(cudaEventRecord(ev[2 * i + 1], stream));
  }
  BLU_BENCH_CUDA(cudaStreamSynchronize(stream));
  BLU_BENCH_CUDA(cudaGetLastError());
  std::vector<double> ms(reps);
  for (int i = 0; i < reps; ++i) {
    float t = 0;
    BLU_BENCH_CUDA(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]));
    ms[i] = t;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

// Note [Interleaved timing]
// The H200 runs at its power limit under dense GEMMs: its clock falls over the first few hundred
// milliseconds of a case and recovers between cases. Timing cuBLAS first and ours after it (the
// order until session 2) handed cuBLAS the cool GPU: blublas-profiler, which times ours first,
// saw fc fwd at 0.98 of cuBLAS where gemm_bench saw 0.78 (run1-0010 vs run11). So every timed
// function of a case (cublasGemmEx, cublasLt, each blublas path) runs in kRounds rounds, the
// order rotated and reversed from round to round, and each keeps the median of all its reps:
// both sides see the same thermal history. budget_ms: the time each function gets in all.
inline std::vector<double> time_interleaved(const std::vector<std::function<void(int)>>& fns,
                                            cudaStream_t stream, double budget_ms) {
  constexpr int kRounds = 4;
  const int n = static_cast<int>(fns.size());
  std::vector<int> reps(n);
  std::vector<std::vector<float>> samples(n);
  for (int f = 0; f < n; ++f) {
    const double one = median_ms(fns[f], stream, 0, 1);
    const double est = one > budget_ms ? one : median_ms(fns[f], stream, 1, 3);
    reps[f] = static_cast<int>(std::clamp(budget_ms / std::max(est, 1e-3), 1.0 * kRounds, 200.0));
    if (one > budget_ms) reps[f] = kRounds;  // strict fp32 lm head: one rep per round
  }
  int counter = 0;
  for (int round = 0; round < kRounds; ++round) {
    for (int j = 0; j < n; ++j) {
      const int f = round % 2 == 0 ? (j + round / 2) % n : (n - 1 - j + round / 2) % n;
      const int per_round = std::max(1, reps[f] / kRounds);
      fns[f](counter++);  // warm-up of this function in this round
      std::vector<cudaEvent_t> evs(2 * per_round);
      for (auto& e : evs) BLU_BENCH_CUDA(cudaEventCreate(&e));
      for (int i = 0; i < per_round; ++i) {
        BLU_BENCH_CUDA(cudaEventRecord(evs[2 * i], stream));
        fns[f](counter++);
        BLU_BENCH_CUDA(cudaEventRecord(evs[2 * i + 1], stream));
      }
      BLU_BENCH_CUDA(cudaStreamSynchronize(stream));
      for (int i = 0; i < per_round; ++i) {
        float t = 0;
        BLU_BENCH_CUDA(cudaEventElapsedTime(&t, evs[2 * i], evs[2 * i + 1]));
        samples[f].push_back(t);
      }
      for (auto& e : evs) cudaEventDestroy(e);
    }
  }
  std::vector<double> med(n, NAN);
  for (int f = 0; f < n; ++f) {
    std::sort(samples[f].begin(), samples[f].end());
    if (!samples[f].empty()) med[f] = samples[f][samples[f].size() / 2];
  }
  return med;
}

// How many copies of a working set of `bytes` make the rotation at least 3x the L2 size.
inline int rotation_count(size_t bytes) {
  int dev = 0, l2 = 0;
  BLU_BENCH_CUDA(cudaGetDevice(&dev));
  BLU_BENCH_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  size_t want = 3 * static_cast<size_t>(l2);
  return static_cast<int>(std::max<size_t>(1, (want + bytes - 1) / std::max<size_t>(bytes, 1)));
}

inline double geomean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double s = 0;
  for (double x : v) s += std::log(x);
  return std::exp(s / static_cast<double>(v.size()));
}

// One JSON row: ordered key -> already-formatted JSON value.
class Row {
 public:
  Row& str(const std::string& k, const std::string& v) {
    kv_.emplace_back(k, "\"" + v + "\"");
    return *this;
  }
  Row& num(const std::string& k, double v) {
    std::ostringstream os;
    if (std::isfinite(v)) os << v; else os << "null";
    kv_.emplace_back(k, os.str());
    return *this;
  }
  std::string json() const {
    std::string s = "{";
    for (size_t i = 0; i < kv_.size(); ++i)
      s += (i ? ", \"" : "\"") + kv_[i].first + "\": " + kv_[i].second;
    return s + "}";
  }

 private:
  std::vector<std::pair<std::string, std::string>> kv_;
};

class Report {
 public:
  explicit Report(std::string name) : name_(std::move(name)) {}
  void metric(const std::string& k, double v) { metrics_[k] = v; }
  void row(const Row& r) { rows_.push_back(r.json()); }
  // Writes <dir>/<name>.json when dir is not empty.
  void write(const std::string& dir) const {
    if (dir.empty()) return;
    std::string path = dir + "/" + name_ + ".json";
    std::ofstream f(path);
    if (!f) throw std::runtime_error("cannot write " + path);
    f << "{\"name\": \"" << name_ << "\",\n \"metrics\": {";
    size_t i = 0;
    for (auto& [k, v] : metrics_) {
      f << (i++ ? ",\n  \"" : "\n  \"") << k << "\": ";
      if (std::isfinite(v)) f << v; else f << "null";
    }
    f << "},\n \"rows\": [";
    for (size_t j = 0; j < rows_.size(); ++j) f << (j ? ",\n  " : "\n  ") << rows_[j];
    f << "]}\n";
  }

 private:
  std::string name_;
  std::map<std::string, double> metrics_;
  std::vector<std::string> rows_;
};

}  // namespace blu::bench
