// profile_kernels.cu: blublas-profiler commands for the memory-bound kernels: layernorm, gelu,
// softmax, xent, embedding, adamw, column_sum. Each takes any size and dtype on the command line,
// times the kernel with CUDA events (median of --reps), prints GB/s over the kernel's minimum byte
// model (each input read once, each output written once; see bench/kernels_bench.cu) and the max
// error against a CPU float64 reference on the first --check_rows rows (all rows by default when
// small). Examples:
//   blublas-profiler layernorm --rows=16384 --cols=768 --dtype=bf16 --op=bwd
//   blublas-profiler xent --rows=16384 --vocab=50304 --dtype=f32
//   blublas-profiler adamw --numel=124475904 --tensors=148
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "blublas/adamw.h"
#include "blublas/cross_entropy.h"
#include "blublas/elementwise.h"
#include "blublas/embedding.h"
#include "blublas/layernorm.h"
#include "blublas/reduce.h"
#include "blublas/softmax.h"
#include "embedding/embedding_variants.h"
#include "layernorm/layernorm_variants.h"
#include "profiler_registry.h"
#include "softmax/row_stream_tuning.h"

namespace {

using blublas::Dtype;
using blublas::profiler::Args;

struct ProfError {
  std::string msg;
};

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw ProfError{std::string(what) + ": " + cudaGetErrorString(e)};
}
void blu_ok(const blublas::Status& s) {
  if (!s.ok()) throw ProfError{s.to_string()};
}

Dtype parse_dtype(const Args& a) {
  const std::string d = a.get("dtype", "f32");
  if (d == "f32") return Dtype::kF32;
  if (d == "bf16") return Dtype::kBF16;
  throw ProfError{"--dtype must be f32 or bf16, got " + d};
}

// A device buffer plus the exact host values it holds (as f32).
struct Dev {
  void* p = nullptr;
  Dtype dt = Dtype::kF32;
  int64_t n = 0;
  std::vector<float> host;
  Dev(int64_t count, Dtype t) : dt(t), n(count) {
    cuda_ok(cudaMalloc(&p, std::max<int64_t>(count, 1) * blublas::dtype_size(t)), "cudaMalloc");
  }
  Dev(const Dev&) = delete;
  ~Dev() { cudaFree(p); }
  void random(float lo, float hi, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    host.resize(n);
    for (auto& x : host) x = d(rng);
    upload();
  }
  void upload() {
    if (dt == Dtype::kF32) {
      cuda_ok(cudaMemcpy(p, host.data(), n * 4, cudaMemcpyHostToDevice), "upload");
    } else {
      std::vector<__nv_bfloat16> b(n);
      for (int64_t i = 0; i < n; ++i) {
        b[i] = __float2bfloat16_rn(host[i]);
        host[i] = __bfloat162float(b[i]);
      }
      cuda_ok(cudaMemcpy(p, b.data(), n * 2, cudaMemcpyHostToDevice), "upload");
    }
  }
  std::vector<float> download(int64_t count = -1) const {
    const int64_t c = count < 0 ? n : count;
    std::vector<float> v(c);
    if (dt == Dtype::kF32) {
      cuda_ok(cudaMemcpy(v.data(), p, c * 4, cudaMemcpyDeviceToHost), "download");
    } else {
      std::vector<__nv_bfloat16> b(c);
      cuda_ok(cudaMemcpy(b.data(), p, c * 2, cudaMemcpyDeviceToHost), "download");
      for (int64_t i = 0; i < c; ++i) v[i] = __bfloat162float(b[i]);
    }
    return v;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

double time_ms(const std::function<void()>& fn, int reps) {
  for (int i = 0; i < 3; ++i) fn();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a);
    fn();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cuda_ok(cudaGetLastError(), "kernel");
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double max_err(const std::vector<float>& got, const std::vector<double>& ref) {
  double e = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(got[i] - ref[i]);
    e = std::isfinite(got[i]) ? std::max(e, d) : INFINITY;
  }
  return e;
}

int report(const Args& a, const std::string& cmd, const std::string& shape, double bytes,
           double ms, double err) {
  const double gbs = bytes / ms / 1e6;
  if (a.has("json")) {
    std::printf("{\"command\": \"%s\", \"shape\": \"%s\", \"bytes\": %.0f, \"time_us\": %.2f, "
                "\"GBs\": %.1f, \"max_abs_err\": %.3g}\n",
                cmd.c_str(), shape.c_str(), bytes, ms * 1e3, gbs, err);
  } else {
    std::printf("%s %s: %.1f MB in %.1f us = %.1f GB/s; max |err| vs f64 CPU reference %.3g\n",
                cmd.c_str(), shape.c_str(), bytes / 1e6, ms * 1e3, gbs, err);
  }
  return std::isfinite(err) ? 0 : 1;
}

template <typename F>
int guarded(const char* cmd, F&& f) {
  try {
    return f();
  } catch (const ProfError& e) {
    std::fprintf(stderr, "%s: %s\n", cmd, e.msg.c_str());
    return 1;
  }
}

int64_t check_rows(const Args& a, int64_t rows) {
  return std::min<int64_t>(rows, a.get_int("check_rows", 64));
}

// Median of `reps` calls enqueued back to back (events between calls, one sync at the end), as
// bench/bench_common.h times them: the host's launch cost is hidden behind the queue, so short
// kernels are timed on the GPU alone (time_ms above syncs per call).
double time_ms_queued(const std::function<void()>& fn, int reps) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<cudaEvent_t> ev(reps + 1);
  for (auto& e : ev) cudaEventCreate(&e);
  cudaEventRecord(ev[0]);
  for (int i = 0; i < reps; ++i) {
    fn();
    cudaEventRecord(ev[i + 1]);
  }
  cudaEventSynchronize(ev[reps]);
  std::vector<double> ms(reps);
  for (int i = 0; i < reps; ++i) {
    float t = 0;
    cudaEventElapsedTime(&t, ev[i], ev[i + 1]);
    ms[i] = t;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  cuda_ok(cudaGetLastError(), "kernel");
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// --variant=N picks a kernel variant (layernorm/layernorm_variants.h; 0 = the default), --op=copy
// times cudaMemcpyAsync of the same row bytes (the ceiling at this size: launch, ramp-up and
// tail included). Two buffer sets rotate (like bench/kernels_bench.cu) so no call starts from L2.
int run_layernorm(const Args& a) {
  return guarded("layernorm", [&] {
    const int64_t R = a.get_int("rows", 16384), C = a.get_int("cols", 768);
    const Dtype dt = parse_dtype(a);
    const std::string op = a.get("op", "fwd");
    const bool bwd = op == "bwd";
    const int variant = static_cast<int>(a.get_int("variant", 0));
    const int reps = static_cast<int>(a.get_int("reps", 20));
    const size_t es = blublas::dtype_size(dt);
    Dev x(R * C, dt), w(C, dt), b(C, dt), y(R * C, dt), mean(R, Dtype::kF32), rstd(R, Dtype::kF32);
    Dev x2(R * C, dt), y2(R * C, dt);
    x.random(-2, 2, 1);
    x2.random(-2, 2, 11);
    w.random(0.5f, 1.5f, 2);
    b.random(-0.5f, 0.5f, 3);
    const std::string shape = std::to_string(R) + "x" + std::to_string(C) + " " +
                              blublas::dtype_name(dt) + " " + op + " v" + std::to_string(variant);
    if (op == "copy") {
      int it = 0;
      const double ms = time_ms_queued([&] {
        const bool odd = (it++ & 1) != 0;
        cuda_ok(cudaMemcpyAsync(odd ? y2.p : y.p, odd ? x2.p : x.p, R * C * es,
                                cudaMemcpyDeviceToDevice, nullptr),
                "cudaMemcpyAsync");
      }, reps);
      return report(a, "layernorm", shape, 2.0 * R * C * es, ms, 0.0);
    }
    int fit = 0;
    auto fwd = [&] {
      const bool odd = (fit++ & 1) != 0;
      blu_ok(blublas::detail::layernorm_forward_variant(
          variant, odd ? y2.p : y.p, mean.as<float>(), rstd.as<float>(), nullptr,
          odd ? x2.p : x.p, nullptr, w.p, b.p, R, C, 1e-5f, dt, nullptr));
    };
    fwd();  // x, y: checked below
    cuda_ok(cudaDeviceSynchronize(), "layernorm_forward");
    const int64_t cr = check_rows(a, R);
    std::vector<double> mu(cr), rs(cr), ref;
    for (int64_t r = 0; r < cr; ++r) {
      double s = 0, q = 0;
      for (int64_t j = 0; j < C; ++j) s += x.host[r * C + j];
      mu[r] = s / C;
      for (int64_t j = 0; j < C; ++j) q += (x.host[r * C + j] - mu[r]) * (x.host[r * C + j] - mu[r]);
      rs[r] = 1.0 / std::sqrt(q / C + 1e-5);
    }
    if (!bwd) {
      for (int64_t r = 0; r < cr; ++r)
        for (int64_t j = 0; j < C; ++j)
          ref.push_back((x.host[r * C + j] - mu[r]) * rs[r] * w.host[j] + b.host[j]);
      const double err = max_err(y.download(cr * C), ref);
      return report(a, "layernorm", shape, (2.0 * R * C + 2.0 * C) * es + 8.0 * R,
                    time_ms_queued(fwd, reps), err);
    }
    // Backward on x (mean / rstd of x, as saved by the forward above).
    Dev dy(R * C, dt), dx(R * C, dt), dw(C, Dtype::kF32), db(C, Dtype::kF32);
    Dev dy2(R * C, dt), dx2(R * C, dt);
    dy.random(-1, 1, 4);
    dy2.random(-1, 1, 14);
    size_t ws_bytes = 0;
    blu_ok(blublas::layernorm_backward_workspace_size(R, C, &ws_bytes));
    Dev ws(static_cast<int64_t>(ws_bytes / 4 + 4), Dtype::kF32);
    int bit = 0;
    auto run = [&] {
      const bool odd = (bit++ & 1) != 0;
      blu_ok(blublas::detail::layernorm_backward_variant(
          variant, odd ? dx2.p : dx.p, nullptr, dw.as<float>(), db.as<float>(), Dtype::kF32,
          odd ? dy2.p : dy.p, x.p, mean.as<float>(), rstd.as<float>(), w.p, R, C, dt, false, ws.p,
          ws_bytes, nullptr));
    };
    run();  // dx from dy: checked below
    cuda_ok(cudaDeviceSynchronize(), "layernorm_backward");
    const std::vector<float> dw_first = dw.download();
    for (int64_t r = 0; r < cr; ++r) {
      double s1 = 0, s2 = 0;
      for (int64_t j = 0; j < C; ++j) {
        const double xh = (x.host[r * C + j] - mu[r]) * rs[r], g = dy.host[r * C + j] * w.host[j];
        s1 += g;
        s2 += g * xh;
      }
      for (int64_t j = 0; j < C; ++j) {
        const double xh = (x.host[r * C + j] - mu[r]) * rs[r], g = dy.host[r * C + j] * w.host[j];
        ref.push_back(rs[r] * (g - s1 / C - xh * s2 / C));
      }
    }
    double err = max_err(dx.download(cr * C), ref);
    // dweight over all rows (f64 from the device's mean / rstd would be closer; the f64 stats
    // of the first rows suffice to catch a wrong partial): only when all rows were checked.
    if (cr == R) {
      std::vector<double> rdw(C, 0.0);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t j = 0; j < C; ++j)
          rdw[j] += dy.host[r * C + j] * (x.host[r * C + j] - mu[r]) * rs[r];
      err = std::max(err, max_err(dw_first, rdw) / std::max<double>(1.0, std::sqrt(R)));
    }
    const double ms = time_ms_queued(run, reps);
    bit = 0;
    run();
    cuda_ok(cudaDeviceSynchronize(), "layernorm_backward");
    const std::vector<float> dw_again = dw.download();
    const bool same = std::equal(dw_first.begin(), dw_first.end(), dw_again.begin(),
                                 [](float p, float q) { return std::memcmp(&p, &q, 4) == 0; });
    if (!same) std::printf("layernorm: dweight NOT bitwise reproducible (variant %d)\n", variant);
    return report(a, "layernorm", shape, (3.0 * R * C + C) * es + 8.0 * R + 8.0 * C, ms,
                  same ? err : INFINITY);
  });
}

double gelu_ref(double u) {
  return 0.5 * u * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u)));
}

int run_gelu(const Args& a) {
  return guarded("gelu", [&] {
    const int64_t R = a.get_int("rows", 16384), C = a.get_int("cols", 3072);
    const Dtype dt = parse_dtype(a);
    const bool bwd = a.get("op", "fwd") == "bwd";
    const int reps = static_cast<int>(a.get_int("reps", 20));
    const size_t es = blublas::dtype_size(dt);
    Dev x(R * C, dt), bias(C, dt), y(R * C, dt), dy(R * C, dt);
    x.random(-4, 4, 1);
    bias.random(-1, 1, 2);
    dy.random(-1, 1, 3);
    auto run = [&] {
      if (bwd) {
        blu_ok(blublas::gelu_backward(y.p, dy.p, x.p, bias.p, R, C, dt, nullptr));
      } else {
        blu_ok(blublas::gelu_forward(y.p, x.p, bias.p, R, C, dt, nullptr));
      }
    };
    run();
    cuda_ok(cudaDeviceSynchronize(), "gelu");
    const int64_t cr = check_rows(a, R);
    std::vector<double> ref;
    for (int64_t i = 0; i < cr * C; ++i) {
      const double u = static_cast<double>(x.host[i]) + bias.host[i % C];
      const double h = 1e-4;  // central difference of the f64 formula for the derivative
      ref.push_back(bwd ? dy.host[i] * (gelu_ref(u + h) - gelu_ref(u - h)) / (2 * h) : gelu_ref(u));
    }
    const double err = max_err(y.download(cr * C), ref);
    const std::string shape =
        std::to_string(R) + "x" + std::to_string(C) + " " + blublas::dtype_name(dt) + (bwd ? " bwd" : " fwd");
    return report(a, "gelu", shape, ((bwd ? 3.0 : 2.0) * R * C + C) * es, time_ms(run, reps), err);
  });
}

std::vector<double> softmax_ref(const std::vector<float>& x, int64_t rows, int64_t C) {
  std::vector<double> y(rows * C);
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < C; ++j) m = std::max(m, static_cast<double>(x[r * C + j]));
    for (int64_t j = 0; j < C; ++j) s += std::exp(x[r * C + j] - m);
    for (int64_t j = 0; j < C; ++j) y[r * C + j] = std::exp(x[r * C + j] - m) / s;
  }
  return y;
}

// Row-stream variants for softmax / xent (Note [Row streaming through a shared-memory ring]):
// --variants=SPEC[,SPEC...] times each in one process; SPEC is "off" (the cluster-resident and
// online kernels) or "c<cluster>k<chunk bytes>w<warps>[h<store hint>]" with cluster 0 = auto,
// e.g. "c0k8192w16,c1k8192w16,c2k4096w8,off"; "x1" = copy-only diagnostic (softmax fwd: y = x
// through the same pipeline, its ceiling); "e0" = exp recomputed in pass 2 (default e1: kept);
// "r0" = no register-held chunk (default r1). Without --variants: the library default.
std::vector<std::pair<std::string, blublas::fused::RowStreamTuning>> row_variants(const Args& a) {
  std::vector<std::pair<std::string, blublas::fused::RowStreamTuning>> out;
  const std::string list = a.get("variants", "");
  if (list.empty()) {
    out.emplace_back("default", blublas::fused::RowStreamTuning{});
    return out;
  }
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t end = std::min(list.find(',', pos), list.size());
    const std::string spec = list.substr(pos, end - pos);
    pos = end + 1;
    if (spec.empty()) continue;
    blublas::fused::RowStreamTuning t;
    if (spec == "off") {
      t.mode = 0;
    } else {
      size_t i = 0;
      while (i < spec.size()) {
        const char key = spec[i++];
        size_t used = 0;
        const long long v = std::stoll(spec.substr(i), &used);
        i += used;
        switch (key) {
          case 'c': t.cluster = static_cast<int>(v); break;
          case 'k': t.chunk_bytes = static_cast<int>(v); break;
          case 'w': t.consumer_warps = static_cast<int>(v); break;
          case 'h': t.store_hint = static_cast<int>(v); break;
          case 'm': t.min_row_bytes = v; break;
          case 'x': t.copy_only = static_cast<int>(v); break;
          case 'e': t.keep_exp = static_cast<int>(v); break;
          case 'r': t.reg_chunk = static_cast<int>(v); break;
          default: throw ProfError{"--variants: unknown key in " + spec};
        }
      }
    }
    out.emplace_back(spec, t);
  }
  return out;
}

int run_softmax(const Args& a) {
  return guarded("softmax", [&] {
    const int64_t R = a.get_int("rows", 16384), C = a.get_int("cols", 50304);
    const Dtype dt = parse_dtype(a);
    const bool bwd = a.get("op", "fwd") == "bwd";
    const int reps = static_cast<int>(a.get_int("reps", 10));
    const size_t es = blublas::dtype_size(dt);
    Dev x(R * C, dt), y(R * C, dt);
    x.random(-8, 8, 1);
    const int64_t cr = check_rows(a, R);
    const std::vector<double> yref = softmax_ref(x.host, cr, C);
    std::unique_ptr<Dev> dy, dx;
    if (bwd) {
      dy = std::make_unique<Dev>(R * C, dt);
      dx = std::make_unique<Dev>(R * C, dt);
      dy->random(-1, 1, 2);
    }
    int rc = 0;
    for (const auto& [name, tu] : row_variants(a)) {
      const std::string path = blublas::fused::row_path_name(R, C, bwd ? 2 : 1, dt, tu);
      const std::string shape = std::to_string(R) + "x" + std::to_string(C) + " " +
                                blublas::dtype_name(dt) + (bwd ? " bwd" : " fwd") + " [" + name +
                                ": " + path + "]";
      cuda_ok(cudaMemset(y.p, 0xFF, R * C * es), "memset");
      blu_ok(blublas::fused::softmax_forward_tuned(y.p, x.p, R, C, dt, nullptr, tu));
      cuda_ok(cudaDeviceSynchronize(), "softmax_forward");
      if (!bwd) {
        const double err = max_err(y.download(cr * C), yref);
        rc |= report(a, "softmax", shape, 2.0 * R * C * es, time_ms([&] {
          blu_ok(blublas::fused::softmax_forward_tuned(y.p, x.p, R, C, dt, nullptr, tu));
        }, reps), err);
        continue;
      }
      auto run = [&] {
        blu_ok(blublas::fused::softmax_backward_tuned(dx->p, dy->p, y.p, R, C, dt, nullptr, tu));
      };
      cuda_ok(cudaMemset(dx->p, 0xFF, R * C * es), "memset");
      run();
      cuda_ok(cudaDeviceSynchronize(), "softmax_backward");
      const std::vector<float> yv = y.download(cr * C);
      std::vector<double> ref(cr * C);
      for (int64_t r = 0; r < cr; ++r) {
        double dot = 0;
        for (int64_t j = 0; j < C; ++j) dot += static_cast<double>(yv[r * C + j]) * dy->host[r * C + j];
        for (int64_t j = 0; j < C; ++j) ref[r * C + j] = yv[r * C + j] * (dy->host[r * C + j] - dot);
      }
      const double err = max_err(dx->download(cr * C), ref);
      rc |= report(a, "softmax", shape, 3.0 * R * C * es, time_ms(run, reps), err);
    }
    return rc;
  });
}

int run_xent(const Args& a) {
  return guarded("xent", [&] {
    const int64_t R = a.get_int("rows", 16384), V = a.get_int("vocab", 50304);
    const Dtype dt = parse_dtype(a);
    const int reps = static_cast<int>(a.get_int("reps", 10));
    const size_t es = blublas::dtype_size(dt);
    Dev logits(R * V, dt), grad(R * V, dt), losses(R, Dtype::kF32), mean(1, Dtype::kF32);
    logits.random(-8, 8, 1);
    std::vector<int32_t> t(R);
    std::mt19937 rng(3);
    for (auto& v : t) v = static_cast<int32_t>(rng() % V);
    int32_t* dt_targets = nullptr;
    int* flag = nullptr;
    cuda_ok(cudaMalloc(&dt_targets, R * 4), "cudaMalloc");
    cuda_ok(cudaMalloc(&flag, 4), "cudaMalloc");
    cuda_ok(cudaMemcpy(dt_targets, t.data(), R * 4, cudaMemcpyHostToDevice), "upload");
    cuda_ok(cudaMemset(flag, 0, 4), "memset");
    size_t ws_bytes = 0;
    blu_ok(blublas::cross_entropy_workspace_size(R, &ws_bytes));
    Dev ws(static_cast<int64_t>(ws_bytes / 4 + 4), Dtype::kF32);
    const int64_t cr = check_rows(a, R);
    const std::vector<double> p = softmax_ref(logits.host, cr, V);
    std::vector<double> ref(cr * V), lref(cr);
    for (int64_t r = 0; r < cr; ++r) {
      lref[r] = -std::log(p[r * V + t[r]]);
      for (int64_t j = 0; j < V; ++j) ref[r * V + j] = (p[r * V + j] - (j == t[r])) / R;
    }
    int rc = 0;
    for (const auto& [name, tu] : row_variants(a)) {
      auto run = [&] {
        blu_ok(blublas::fused::cross_entropy_fused_tuned(
            losses.as<float>(), mean.as<float>(), grad.p, logits.p, dt_targets, R, V, -100, 1.0f,
            flag, dt, ws.p, ws_bytes, nullptr, tu));
      };
      cuda_ok(cudaMemset(grad.p, 0xFF, R * V * es), "memset");
      cuda_ok(cudaMemset(losses.p, 0xFF, R * 4), "memset");
      run();
      cuda_ok(cudaDeviceSynchronize(), "cross_entropy_fused");
      const double err = std::max(max_err(grad.download(cr * V), ref) * R,
                                  max_err(losses.download(cr), lref));
      const double ms = time_ms(run, reps);
      const std::string shape = std::to_string(R) + "x" + std::to_string(V) + " " +
                                blublas::dtype_name(dt) + " [" + name + ": " +
                                blublas::fused::row_path_name(R, V, 1, dt, tu) + "]";
      rc |= report(a, "xent", shape + " (err: loss, dlogits*rows)", 2.0 * R * V * es + 8.0 * R,
                   ms, err);
    }
    cudaFree(dt_targets);
    cudaFree(flag);
    return rc;
  });
}

int run_embedding(const Args& a) {
  return guarded("embedding", [&] {
    const int64_t B = a.get_int("B", 16), T = a.get_int("T", 1024), C = a.get_int("C", 768),
                  V = a.get_int("V", 50304);
    const Dtype dt = parse_dtype(a);
    const int reps = static_cast<int>(a.get_int("reps", 20));
    const int variant = static_cast<int>(a.get_int("variant", 0));
    const int64_t N = B * T;
    Dev dout(N * C, dt), dwte(V * C, Dtype::kF32), dwpe(T * C, Dtype::kF32);
    dout.random(-1, 1, 1);
    cuda_ok(cudaMemset(dwte.p, 0, V * C * 4), "memset");
    cuda_ok(cudaMemset(dwpe.p, 0, T * C * 4), "memset");
    std::vector<int32_t> t(N);
    std::mt19937 rng(5);
    // --skew=1: a heavy-headed distribution like text (id = V * u^3: the most frequent ids get
    // a few percent of the positions each, so there are big buckets), else uniform ids.
    const bool skew = a.get_int("skew", 0) != 0;
    std::uniform_real_distribution<double> unif(0.0, 1.0);
    for (auto& v : t) {
      v = skew ? static_cast<int32_t>(std::min<double>(V - 1, V * std::pow(unif(rng), 3.0)))
               : static_cast<int32_t>(rng() % V);
    }
    int32_t* tokens = nullptr;
    int* flag = nullptr;
    cuda_ok(cudaMalloc(&tokens, N * 4), "cudaMalloc");
    cuda_ok(cudaMalloc(&flag, 4), "cudaMalloc");
    cuda_ok(cudaMemcpy(tokens, t.data(), N * 4, cudaMemcpyHostToDevice), "upload");
    cuda_ok(cudaMemset(flag, 0, 4), "memset");
    size_t ws_bytes = 0;
    blu_ok(blublas::embedding_backward_workspace_size(B, T, V, &ws_bytes));
    Dev ws(static_cast<int64_t>(ws_bytes / 4 + 4), Dtype::kF32);
    auto run = [&] {
      blu_ok(blublas::detail::embedding_backward_variant(variant, dwte.as<float>(),
                                                         dwpe.as<float>(), dout.p, tokens, B, T,
                                                         C, V, flag, dt, ws.p, ws_bytes, nullptr));
    };
    run();
    cuda_ok(cudaDeviceSynchronize(), "embedding_backward");
    std::vector<double> rwte(V * C, 0.0), rwpe(T * C, 0.0);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < C; ++j) {
        rwte[t[i] * C + j] += dout.host[i * C + j];
        rwpe[(i % T) * C + j] += dout.host[i * C + j];
      }
    const double err = std::max(max_err(dwte.download(), rwte), max_err(dwpe.download(), rwpe));
    std::vector<int32_t> u(t);
    std::sort(u.begin(), u.end());
    const double unique = static_cast<double>(std::unique(u.begin(), u.end()) - u.begin());
    const double ms = time_ms_queued(run, reps);
    // Bitwise reproducibility: the same call from the same starting gradients, twice.
    std::vector<std::vector<float>> again;
    for (int rep = 0; rep < 2; ++rep) {
      cuda_ok(cudaMemset(dwte.p, 0, V * C * 4), "memset");
      cuda_ok(cudaMemset(dwpe.p, 0, T * C * 4), "memset");
      run();
      cuda_ok(cudaDeviceSynchronize(), "embedding_backward");
      again.push_back(dwte.download());
    }
    const bool same = std::memcmp(again[0].data(), again[1].data(), again[0].size() * 4) == 0;
    if (!same) std::printf("embedding: dwte NOT bitwise reproducible (variant %d)\n", variant);
    cudaFree(tokens);
    cudaFree(flag);
    char shape[128];
    std::snprintf(shape, sizeof(shape), "B%lldT%lldC%lldV%lld %s bwd v%d%s",
                  static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(C),
                  static_cast<long long>(V), blublas::dtype_name(dt), variant,
                  skew ? " skewed ids" : "");
    return report(a, "embedding", shape,
                  N * C * blublas::dtype_size(dt) + 4.0 * N + 8.0 * T * C + 8.0 * unique * C, ms,
                  same ? err : INFINITY);
  });
}

int run_adamw(const Args& a) {
  return guarded("adamw", [&] {
    const int64_t total = a.get_int("numel", 124475904);
    const int count = static_cast<int>(a.get_int("tensors", 148));
    const Dtype gdt = parse_dtype(a);
    const int reps = static_cast<int>(a.get_int("reps", 10));
    Dev p(total, Dtype::kF32), g(total, gdt), m(total, Dtype::kF32), v(total, Dtype::kF32);
    p.random(-1, 1, 1);
    g.random(-0.01f, 0.01f, 2);
    m.random(-1e-3f, 1e-3f, 3);
    v.random(0, 1e-5f, 4);
    std::vector<blublas::AdamWTensor> list(count);
    int64_t off = 0;
    for (int i = 0; i < count; ++i) {
      const int64_t n = i + 1 == count ? total - off : total / count;
      list[i].param = p.as<float>() + off;
      list[i].grad = static_cast<char*>(g.p) + off * blublas::dtype_size(gdt);
      list[i].m = m.as<float>() + off;
      list[i].v = v.as<float>() + off;
      list[i].numel = n;
      list[i].weight_decay = 0.1f;
      off += n;
    }
    blublas::AdamWHyper h;
    blu_ok(blublas::adamw_update(list.data(), count, gdt, h, nullptr, nullptr));
    cuda_ok(cudaDeviceSynchronize(), "adamw_update");
    const int64_t cn = std::min<int64_t>(total, a.get_int("check_elems", 1 << 20));
    std::vector<double> ref(cn);
    const double bc1 = 1 - h.beta1, bc2 = 1 - h.beta2;  // step 1
    for (int64_t i = 0; i < cn; ++i) {
      const double gg = g.host[i];
      const double mm = h.beta1 * m.host[i] + (1 - h.beta1) * gg;
      const double vv = h.beta2 * v.host[i] + (1 - h.beta2) * gg * gg;
      ref[i] = p.host[i] * (1 - h.lr * 0.1) - (h.lr / bc1) * mm / (std::sqrt(vv) / std::sqrt(bc2) + h.eps);
    }
    const double err = max_err(p.download(cn), ref);
    const double ms = time_ms([&] {
      blu_ok(blublas::adamw_update(list.data(), count, gdt, h, nullptr, nullptr));
    }, reps);
    return report(a, "adamw", std::to_string(total) + " params / " + std::to_string(count) +
                  " tensors, grads " + blublas::dtype_name(gdt),
                  (24.0 + blublas::dtype_size(gdt)) * total, ms, err);
  });
}

int run_column_sum(const Args& a) {
  return guarded("column_sum", [&] {
    const int64_t R = a.get_int("rows", 16384), C = a.get_int("cols", 3072);
    const Dtype dt = parse_dtype(a);
    const int reps = static_cast<int>(a.get_int("reps", 20));
    Dev in(R * C, dt), out(C, Dtype::kF32);
    in.random(-1, 1, 1);
    size_t ws_bytes = 0;
    blu_ok(blublas::column_sum_workspace_size(R, C, &ws_bytes));
    Dev ws(static_cast<int64_t>(ws_bytes / 4 + 4), Dtype::kF32);
    auto run = [&] {
      blu_ok(blublas::column_sum(out.as<float>(), in.p, R, C, dt, false, ws.p, ws_bytes, nullptr));
    };
    run();
    cuda_ok(cudaDeviceSynchronize(), "column_sum");
    std::vector<double> ref(C, 0.0);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < C; ++j) ref[j] += in.host[r * C + j];
    const double err = max_err(out.download(), ref);
    return report(a, "column_sum", std::to_string(R) + "x" + std::to_string(C) + " " + blublas::dtype_name(dt),
                  R * C * blublas::dtype_size(dt) + 4.0 * C, time_ms(run, reps), err);
  });
}

}  // namespace

BLUBLAS_PROFILER_COMMAND("layernorm", "LayerNorm forward/backward GB/s and error",
                         "--rows=16384 --cols=768 --dtype=f32|bf16 --op=fwd|bwd|copy --variant=0 "
                         "--reps=20 --check_rows=64 --json",
                         run_layernorm);
BLUBLAS_PROFILER_COMMAND("gelu", "GELU(tanh)+bias forward/backward GB/s and error",
                         "--rows=16384 --cols=3072 --dtype=f32|bf16 --op=fwd|bwd --reps=20 "
                         "--check_rows=64 --json",
                         run_gelu);
BLUBLAS_PROFILER_COMMAND("softmax", "row softmax forward/backward GB/s and error",
                         "--rows=16384 --cols=50304 --dtype=f32|bf16 --op=fwd|bwd --reps=10 "
                         "--check_rows=64 --json --variants=off,c0k8192w16,c2k4096w8h0,...",
                         run_softmax);
BLUBLAS_PROFILER_COMMAND("xent", "fused classifier (loss + dlogits) GB/s and error",
                         "--rows=16384 --vocab=50304 --dtype=f32|bf16 --reps=10 --check_rows=64 "
                         "--json --variants=off,c0k8192w16,...",
                         run_xent);
BLUBLAS_PROFILER_COMMAND("embedding", "embedding backward (dwte, dwpe) GB/s and error",
                         "--B=16 --T=1024 --C=768 --V=50304 --dtype=f32|bf16 --variant=0 --skew=0|1 "
                         "--reps=20 --json",
                         run_embedding);
BLUBLAS_PROFILER_COMMAND("adamw", "multi-tensor AdamW GB/s and error",
                         "--numel=124475904 --tensors=148 --dtype=f32|bf16 (grads) --reps=10 "
                         "--check_elems=1048576 --json",
                         run_adamw);
BLUBLAS_PROFILER_COMMAND("column_sum", "column sums (bias gradients) GB/s and error",
                         "--rows=16384 --cols=3072 --dtype=f32|bf16 --reps=20 --json",
                         run_column_sum);
