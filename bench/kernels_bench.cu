// kernels_bench.cu: the memory-bound blublas kernels at GPT-2 124M sizes (B16 T1024 C768,
// V50304), each as GB/s over its minimum byte model and as a fraction of the device-to-device
// copy bandwidth measured in the same run (cudaMemcpyAsync of ~1 GiB; bytes = read + written).
//
// Byte models (each input read once, each output written once; workspaces not counted):
//   layernorm_fwd  x, w, b read; out, mean, rstd written          (N*C + 2C) + (N*C + 2N) elems
//   layernorm_bwd  dout, x, mean, rstd, w read; dx, dw, db written (2NC + 2N + C) + (NC + 2C)
//   gelu_fwd       x, bias read; out written                       2*N*C + C
//   gelu_bwd       x, dout, bias read; dx written                  3*N*C + C
//   softmax_fwd    x read; y written                               2*N*V
//   softmax_bwd    y, dy read; dx written                          3*N*V
//   xent_fused     logits, targets read; dlogits, losses written   2*N*V (+ 8 B per row)
//   adamw          param, grad, m, v read; param, m, v written     28 B per f32 parameter
//   embedding_bwd  dout, tokens read; dwpe read+written; the dwte rows of the tokens present
//                  read+written (U unique ids)                    N*C + 2*T*C + 2*U*C (+ 4N B)
// The PyTorch equivalents at the same sizes are bench/torch_kernels.py (same byte models).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <type_traits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bench_common.h"
#include "blublas/adamw.h"
#include "blublas/cross_entropy.h"
#include "blublas/elementwise.h"
#include "blublas/embedding.h"
#include "blublas/layernorm.h"
#include "blublas/reduce.h"
#include "blublas/softmax.h"

namespace {

using blu::bench::median_ms;
using blublas::Dtype;

#define BENCH_OK(expr)                                                                 \
  do {                                                                                 \
    const ::blublas::Status st_ = (expr);                                              \
    if (!st_.ok()) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr,                \
                   st_.to_string().c_str());                                           \
      std::exit(3);                                                                    \
    }                                                                                  \
  } while (0)

// Deterministic pseudo-random fill on the device: lo + (hi - lo) * hash(i) / 2^32.
template <typename T>
__global__ void fill_kernel(T* p, int64_t n, float lo, float hi, uint32_t seed) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float u = static_cast<float>(h) * (1.0f / 4294967296.0f);
    if constexpr (std::is_same_v<T, float>) {
      p[i] = lo + (hi - lo) * u;
    } else {
      p[i] = __float2bfloat16_rn(lo + (hi - lo) * u);
    }
  }
}

struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t b) : bytes(b) { BLU_BENCH_CUDA(cudaMalloc(&p, b)); }
  Buf(const Buf&) = delete;
  ~Buf() { cudaFree(p); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

void fill(void* p, int64_t n, Dtype dt, float lo, float hi, uint32_t seed) {
  if (dt == Dtype::kF32) {
    fill_kernel<float><<<4096, 256>>>(static_cast<float*>(p), n, lo, hi, seed);
  } else {
    fill_kernel<__nv_bfloat16><<<4096, 256>>>(static_cast<__nv_bfloat16*>(p), n, lo, hi, seed);
  }
  BLU_BENCH_CUDA(cudaGetLastError());
}

struct Result {
  std::string name, dtype, shape;
  double bytes, ms;
};

struct Ctx {
  cudaStream_t stream;
  int warmup, reps;
  std::vector<Result> results;
  double time(const std::function<void(int)>& fn) { return median_ms(fn, stream, warmup, reps); }
  void add(const std::string& name, Dtype dt, const std::string& shape, double bytes, double ms) {
    results.push_back({name, blublas::dtype_name(dt), shape, bytes, ms});
    std::printf("  %-14s %-5s %-22s %9.1f MB %9.1f us %8.1f GB/s\n", name.c_str(),
                blublas::dtype_name(dt), shape.c_str(), bytes / 1e6, ms * 1e3, bytes / ms / 1e6);
    std::fflush(stdout);
  }
};

double copy_bandwidth(Ctx& c, size_t bytes) {
  Buf a(bytes), b(bytes);
  BLU_BENCH_CUDA(cudaMemset(a.p, 1, bytes));
  const double ms = c.time([&](int i) {
    if (i % 2 == 0) {
      BLU_BENCH_CUDA(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, c.stream));
    } else {
      BLU_BENCH_CUDA(cudaMemcpyAsync(a.p, b.p, bytes, cudaMemcpyDeviceToDevice, c.stream));
    }
  });
  return 2.0 * static_cast<double>(bytes) / ms / 1e6;  // GB/s
}

void bench_layernorm(Ctx& c, Dtype dt, int64_t N, int64_t C) {
  const size_t es = blublas::dtype_size(dt);
  const std::string shape = std::to_string(N) + "x" + std::to_string(C);
  const int rot = 2;  // 2 sets of ~100 MB (f32) rotate past L2
  std::vector<std::unique_ptr<Buf>> x, y, dy, dx;
  for (int r = 0; r < rot; ++r) {
    x.push_back(std::make_unique<Buf>(N * C * es));
    y.push_back(std::make_unique<Buf>(N * C * es));
    dy.push_back(std::make_unique<Buf>(N * C * es));
    dx.push_back(std::make_unique<Buf>(N * C * es));
    fill(x[r]->p, N * C, dt, -2, 2, 1 + r);
    fill(dy[r]->p, N * C, dt, -1, 1, 11 + r);
  }
  Buf w(C * es), b(C * es), mean(N * 4), rstd(N * 4), dw(C * 4), db(C * 4);
  fill(w.p, C, dt, 0.5f, 1.5f, 3);
  fill(b.p, C, dt, -0.5f, 0.5f, 4);
  size_t ws_bytes = 0;
  BENCH_OK(blublas::layernorm_backward_workspace_size(N, C, &ws_bytes));
  Buf ws(ws_bytes + 16);
  const double fwd_ms = c.time([&](int i) {
    BENCH_OK(blublas::layernorm_forward(y[i % rot]->p, mean.as<float>(), rstd.as<float>(), nullptr,
                                        x[i % rot]->p, nullptr, w.p, b.p, N, C, 1e-5f, dt,
                                        c.stream));
  });
  c.add("layernorm_fwd", dt, shape, (2.0 * N * C + 2.0 * C) * es + 8.0 * N, fwd_ms);
  const double bwd_ms = c.time([&](int i) {
    BENCH_OK(blublas::layernorm_backward(dx[i % rot]->p, dw.as<float>(), db.as<float>(),
                                         dy[i % rot]->p, x[i % rot]->p, mean.as<float>(),
                                         rstd.as<float>(), w.p, N, C, dt, false, false, ws.p,
                                         ws_bytes, c.stream));
  });
  c.add("layernorm_bwd", dt, shape, (3.0 * N * C + C) * es + 8.0 * N + 8.0 * C, bwd_ms);
}

void bench_gelu(Ctx& c, Dtype dt, int64_t N, int64_t C) {
  const size_t es = blublas::dtype_size(dt);
  const std::string shape = std::to_string(N) + "x" + std::to_string(C);
  Buf x(N * C * es), y(N * C * es), dy(N * C * es), bias(C * es);
  fill(x.p, N * C, dt, -4, 4, 21);
  fill(dy.p, N * C, dt, -1, 1, 22);
  fill(bias.p, C, dt, -1, 1, 23);
  const double fwd_ms = c.time([&](int) {
    BENCH_OK(blublas::gelu_forward(y.p, x.p, bias.p, N, C, dt, c.stream));
  });
  c.add("gelu_fwd", dt, shape, (2.0 * N * C + C) * es, fwd_ms);
  const double bwd_ms = c.time([&](int) {
    BENCH_OK(blublas::gelu_backward(y.p, dy.p, x.p, bias.p, N, C, dt, c.stream));
  });
  c.add("gelu_bwd", dt, shape, (3.0 * N * C + C) * es, bwd_ms);
}

void bench_softmax(Ctx& c, Dtype dt, int64_t N, int64_t V) {
  const size_t es = blublas::dtype_size(dt);
  const std::string shape = std::to_string(N) + "x" + std::to_string(V);
  Buf x(N * V * es), y(N * V * es), dy(N * V * es);
  fill(x.p, N * V, dt, -8, 8, 31);
  fill(dy.p, N * V, dt, -1, 1, 32);
  const double fwd_ms = c.time([&](int) {
    BENCH_OK(blublas::softmax_forward(y.p, x.p, N, V, dt, c.stream));
  });
  c.add("softmax_fwd", dt, shape, 2.0 * N * V * es, fwd_ms);
  const double bwd_ms = c.time([&](int) {
    BENCH_OK(blublas::softmax_backward(x.p, dy.p, y.p, N, V, dt, c.stream));
  });
  c.add("softmax_bwd", dt, shape, 3.0 * N * V * es, bwd_ms);
}

void bench_xent(Ctx& c, Dtype dt, int64_t N, int64_t V) {
  const size_t es = blublas::dtype_size(dt);
  const std::string shape = std::to_string(N) + "x" + std::to_string(V);
  Buf logits(N * V * es), grad(N * V * es), losses(N * 4), mean(4), flag(4), targets(N * 4);
  fill(logits.p, N * V, dt, -8, 8, 41);
  std::vector<int32_t> t(N);
  std::mt19937 rng(5);
  for (auto& v : t) v = static_cast<int32_t>(rng() % V);
  BLU_BENCH_CUDA(cudaMemcpy(targets.p, t.data(), N * 4, cudaMemcpyHostToDevice));
  BLU_BENCH_CUDA(cudaMemset(flag.p, 0, 4));
  size_t ws_bytes = 0;
  BENCH_OK(blublas::cross_entropy_workspace_size(N, &ws_bytes));
  Buf ws(ws_bytes);
  const double ms = c.time([&](int) {
    BENCH_OK(blublas::cross_entropy_fused(losses.as<float>(), mean.as<float>(), grad.p, logits.p,
                                          targets.as<int32_t>(), N, V, -100, 1.0f,
                                          flag.as<int>(), dt, ws.p, ws_bytes, c.stream));
  });
  c.add("xent_fused", dt, shape, 2.0 * N * V * es + 8.0 * N, ms);
}

// GPT-2 124M's parameter list (vocab padded to 50304), in model order.
std::vector<int64_t> gpt2_param_sizes() {
  const int64_t C = 768, V = 50304, T = 1024;
  std::vector<int64_t> s = {V * C, T * C};
  for (int l = 0; l < 12; ++l) {
    for (int64_t n : {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C}) {
      s.push_back(n);
    }
  }
  s.push_back(C);
  s.push_back(C);
  return s;
}

void bench_adamw(Ctx& c) {
  const std::vector<int64_t> sizes = gpt2_param_sizes();
  int64_t total = 0;
  std::vector<int64_t> offs;
  for (int64_t n : sizes) {
    offs.push_back(total);
    total += (n + 63) / 64 * 64;  // 256-byte aligned tensors
  }
  Buf p(total * 4), g(total * 4), m(total * 4), v(total * 4);
  fill(p.p, total, Dtype::kF32, -1, 1, 51);
  fill(g.p, total, Dtype::kF32, -0.01f, 0.01f, 52);
  BLU_BENCH_CUDA(cudaMemset(m.p, 0, total * 4));
  BLU_BENCH_CUDA(cudaMemset(v.p, 0, total * 4));
  std::vector<blublas::AdamWTensor> list(sizes.size());
  int64_t params = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    list[i].param = p.as<float>() + offs[i];
    list[i].grad = g.as<float>() + offs[i];
    list[i].m = m.as<float>() + offs[i];
    list[i].v = v.as<float>() + offs[i];
    list[i].numel = sizes[i];
    list[i].weight_decay = sizes[i] > 4 * 768 ? 0.1f : 0.0f;
    params += sizes[i];
  }
  blublas::AdamWHyper h;
  h.lr = 6e-4f;
  h.beta2 = 0.95f;
  const std::string shape = std::to_string(params) + " params/" + std::to_string(sizes.size());
  const double ms = c.time([&](int i) {
    h.step = 1 + i;
    BENCH_OK(blublas::adamw_update(list.data(), static_cast<int>(list.size()), Dtype::kF32, h,
                                   nullptr, c.stream));
  });
  c.add("adamw", Dtype::kF32, shape, 28.0 * params, ms);
  size_t ws_bytes = 0;
  BENCH_OK(blublas::grad_global_norm_workspace_size(list.data(), static_cast<int>(list.size()),
                                                     &ws_bytes));
  Buf ws(ws_bytes), norm(4), scale(4);
  const double nms = c.time([&](int) {
    BENCH_OK(blublas::grad_global_norm(norm.as<float>(), scale.as<float>(), 1.0f, list.data(),
                                       static_cast<int>(list.size()), Dtype::kF32, ws.p, ws_bytes,
                                       c.stream));
  });
  c.add("grad_norm", Dtype::kF32, shape, 4.0 * params, nms);
}

void bench_embedding(Ctx& c, Dtype dt, int64_t B, int64_t T, int64_t C, int64_t V) {
  const size_t es = blublas::dtype_size(dt);
  const int64_t N = B * T;
  Buf dout(N * C * es), dwte(V * C * 4), dwpe(T * C * 4), tokens(N * 4), flag(4), wte(V * C * es),
      wpe(T * C * es), out(N * C * es);
  fill(dout.p, N * C, dt, -1, 1, 61);
  fill(wte.p, V * C, dt, -1, 1, 62);
  fill(wpe.p, T * C, dt, -1, 1, 63);
  BLU_BENCH_CUDA(cudaMemset(dwte.p, 0, V * C * 4));
  BLU_BENCH_CUDA(cudaMemset(dwpe.p, 0, T * C * 4));
  BLU_BENCH_CUDA(cudaMemset(flag.p, 0, 4));
  std::vector<int32_t> t(N);
  std::mt19937 rng(7);
  for (auto& v : t) v = static_cast<int32_t>(rng() % V);
  const double unique = static_cast<double>(std::set<int32_t>(t.begin(), t.end()).size());
  BLU_BENCH_CUDA(cudaMemcpy(tokens.p, t.data(), N * 4, cudaMemcpyHostToDevice));
  size_t ws_bytes = 0;
  BENCH_OK(blublas::embedding_backward_workspace_size(B, T, V, &ws_bytes));
  Buf ws(ws_bytes);
  const std::string shape = "B" + std::to_string(B) + "T" + std::to_string(T) + "C" +
                            std::to_string(C) + "V" + std::to_string(V);
  const double fms = c.time([&](int) {
    BENCH_OK(blublas::embedding_forward(out.p, tokens.as<int32_t>(), wte.p, wpe.p, B, T, C, V,
                                        flag.as<int>(), dt, c.stream));
  });
  c.add("embedding_fwd", dt, shape, (2.0 * N * C + T * C) * es + 4.0 * N, fms);
  const double ms = c.time([&](int) {
    BENCH_OK(blublas::embedding_backward(dwte.as<float>(), dwpe.as<float>(), dout.p,
                                         tokens.as<int32_t>(), B, T, C, V, flag.as<int>(), dt,
                                         ws.p, ws_bytes, c.stream));
  });
  c.add("embedding_bwd", dt, shape, N * C * es + 4.0 * N + 8.0 * T * C + 8.0 * unique * C, ms);
}

void bench_column_sum(Ctx& c, Dtype dt, int64_t N, int64_t C) {
  const size_t es = blublas::dtype_size(dt);
  Buf in(N * C * es), out(C * 4);
  fill(in.p, N * C, dt, -1, 1, 71);
  size_t ws_bytes = 0;
  BENCH_OK(blublas::column_sum_workspace_size(N, C, &ws_bytes));
  Buf ws(ws_bytes + 16);
  const double ms = c.time([&](int) {
    BENCH_OK(blublas::column_sum(out.as<float>(), in.p, N, C, dt, false, ws.p, ws_bytes, c.stream));
  });
  c.add("column_sum", dt, std::to_string(N) + "x" + std::to_string(C), N * C * es + 4.0 * C, ms);
}

}  // namespace

int main(int argc, char** argv) {
  const blu::bench::Options opt = blu::bench::parse_options(&argc, argv);
  int dev = 0;
  cudaDeviceProp prop{};
  BLU_BENCH_CUDA(cudaGetDevice(&dev));
  BLU_BENCH_CUDA(cudaGetDeviceProperties(&prop, dev));
  Ctx c;
  BLU_BENCH_CUDA(cudaStreamCreate(&c.stream));
  c.warmup = opt.quick ? 2 : 5;
  c.reps = opt.quick ? 7 : 25;
  std::printf("kernels_bench on %s (%d SMs)%s\n", prop.name, prop.multiProcessorCount,
              opt.quick ? " [quick]" : "");
  const double copy_gbs = copy_bandwidth(c, opt.quick ? (size_t{256} << 20) : (size_t{1} << 30));
  std::printf("  device-to-device copy: %.1f GB/s\n", copy_gbs);
  const int64_t B = 16, T = 1024, C = 768, V = 50304, N = B * T;
  bench_layernorm(c, Dtype::kF32, N, C);
  bench_layernorm(c, Dtype::kBF16, N, C);
  bench_gelu(c, Dtype::kF32, N, 4 * C);
  bench_gelu(c, Dtype::kBF16, N, 4 * C);
  bench_softmax(c, Dtype::kF32, N, V);
  bench_xent(c, Dtype::kF32, N, V);
  bench_xent(c, Dtype::kBF16, N, V);
  bench_adamw(c);
  bench_embedding(c, Dtype::kF32, B, T, C, V);
  bench_column_sum(c, Dtype::kF32, N, 4 * C);
  if (!opt.quick) {
    bench_softmax(c, Dtype::kBF16, N, V);
    bench_xent(c, Dtype::kF32, N, 50257);
  }

  blu::bench::Report rep("kernels_bench");
  rep.metric("kernels.copy_bw_TBs", copy_gbs / 1e3);
  std::set<std::string> seen;
  for (const Result& r : c.results) {
    const double gbs = r.bytes / r.ms / 1e6;
    const double frac = gbs / copy_gbs;
    // The contract metrics: the first (f32, GPT-2 size) row of each kernel.
    if (r.dtype == "f32" && seen.insert(r.name).second) {
      rep.metric("kernels." + r.name + ".fraction_of_copy_bw", frac);
      rep.metric("kernels." + r.name + ".GBs", gbs);
    }
    rep.row(blu::bench::Row()
                .str("kernel", r.name)
                .str("dtype", r.dtype)
                .str("shape", r.shape)
                .num("bytes", r.bytes)
                .num("time_us", r.ms * 1e3)
                .num("GBs", gbs)
                .num("fraction_of_copy_bw", frac));
  }
  rep.row(blu::bench::Row().str("kernel", "d2d_copy").num("GBs", copy_gbs).num("fraction_of_copy_bw", 1.0));
  rep.write(opt.out_dir);

  std::printf("\n| kernel | dtype | shape | MB moved | time (us) | GB/s | of copy (%.0f GB/s) |\n",
              copy_gbs);
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const Result& r : c.results) {
    const double gbs = r.bytes / r.ms / 1e6;
    std::printf("| %s | %s | %s | %.1f | %.1f | %.0f | %.2f |\n", r.name.c_str(), r.dtype.c_str(),
                r.shape.c_str(), r.bytes / 1e6, r.ms * 1e3, gbs, gbs / copy_gbs);
  }
  return 0;
}
