// profile_attention.cu: the blublas-profiler `attention` command: forward and backward TFLOP/s of
// blublas attention at any B, T, H, d (64/128), mode (bf16, tf32, f32) and causal flag, plus the
// max error against a CPU float64 reference on a small case of the same mode and head dim.
//   blublas-profiler attention --B=16 --T=1024 --H=12 --d=64 --mode=bf16 --causal=1 [--path=auto]
//                              [--dq=auto|twopass|partials|accumulate] (AttnDqMode)
//                              [--json]    (exit codes: 0 ok, 1 blublas/CUDA error, 2 usage)
// FLOPs: forward 4*B*H*T*T*d (halved when causal), backward 2.5x forward.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "blublas/attention.h"
#include "profiler_registry.h"

namespace {

using blublas::AttnPath;
using blublas::AttnPrecision;

#define PROF_CUDA(expr)                                                           \
  do {                                                                            \
    cudaError_t e_ = (expr);                                                      \
    if (e_ != cudaSuccess) {                                                      \
      std::fprintf(stderr, "attention: %s: %s\n", #expr, cudaGetErrorString(e_)); \
      return 1;                                                                   \
    }                                                                             \
  } while (0)
#define PROF_OK(expr)                                                  \
  do {                                                                 \
    blublas::Status s_ = (expr);                                       \
    if (!s_.ok()) {                                                    \
      std::fprintf(stderr, "attention: %s\n", s_.to_string().c_str()); \
      return 1;                                                        \
    }                                                                  \
  } while (0)

struct Problem {
  int B, T, H, d;
  bool causal;
  AttnPrecision prec;
  AttnPath path;
  blublas::AttnDqMode dq_mode = blublas::AttnDqMode::kAuto;
};

// Device buffers for one dense problem; host copies (rounded to the storage type) in `h*`.
struct Buffers {
  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *d_o = nullptr;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr, *ws = nullptr;
  float* lse = nullptr;
  size_t ws_bytes = 0;
  std::vector<float> hq, hk, hv, hdo;
  ~Buffers() {
    for (void* p : {q, k, v, o, d_o, dq, dk, dv, ws, static_cast<void*>(lse)}) cudaFree(p);
  }
};

size_t elem_bytes(AttnPrecision p) {
  return p == AttnPrecision::kBF16 ? 2 : 4;
}

int setup(const Problem& pr, Buffers* b, blublas::AttentionDesc* desc) {
  const size_t n = static_cast<size_t>(pr.B) * pr.T * pr.H * pr.d, eb = elem_bytes(pr.prec);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& h, void** dptr) -> int {
    h.resize(n);
    std::vector<unsigned char> raw(n * eb);
    for (size_t i = 0; i < n; ++i) {
      float x = nd(rng);
      if (eb == 2) {
        __nv_bfloat16 y = __float2bfloat16(x);
        x = __bfloat162float(y);
        std::memcpy(raw.data() + 2 * i, &y, 2);
      } else {
        std::memcpy(raw.data() + 4 * i, &x, 4);
      }
      h[i] = x;
    }
    PROF_CUDA(cudaMalloc(dptr, n * eb));
    PROF_CUDA(cudaMemcpy(*dptr, raw.data(), raw.size(), cudaMemcpyHostToDevice));
    return 0;
  };
  if (int rc =
          fill(b->hq, &b->q) | fill(b->hk, &b->k) | fill(b->hv, &b->v) | fill(b->hdo, &b->d_o)) {
    return rc;
  }
  for (void** p : {&b->o, &b->dq, &b->dk, &b->dv}) PROF_CUDA(cudaMalloc(p, n * eb));
  PROF_CUDA(cudaMalloc(&b->lse, static_cast<size_t>(pr.B) * pr.H * pr.T * sizeof(float)));
  int64_t sb, st, sh;
  blublas::attn_dense_strides(pr.T, pr.H, pr.d, &sb, &st, &sh);
  desc->batch = pr.B;
  desc->seq_len = pr.T;
  desc->heads = pr.H;
  desc->head_dim = pr.d;
  desc->softmax_scale = 1.0f / std::sqrt(static_cast<float>(pr.d));
  desc->causal = pr.causal;
  desc->precision = pr.prec;
  desc->path = pr.path;
  desc->dq_mode = pr.dq_mode;
  desc->q = {b->q, sb, st, sh};
  desc->k = {b->k, sb, st, sh};
  desc->v = {b->v, sb, st, sh};
  desc->d_o = {b->d_o, sb, st, sh};
  desc->o = {b->o, sb, st, sh};
  desc->dq = {b->dq, sb, st, sh};
  desc->dk = {b->dk, sb, st, sh};
  desc->dv = {b->dv, sb, st, sh};
  desc->lse = b->lse;
  PROF_OK(blublas::attention_backward_workspace_size(*desc, &b->ws_bytes));
  PROF_CUDA(cudaMalloc(&b->ws, std::max<size_t>(b->ws_bytes, 16)));
  return 0;
}

std::vector<float> download(const void* d, size_t n, size_t eb) {
  std::vector<float> h(n);
  std::vector<unsigned char> raw(n * eb);
  cudaMemcpy(raw.data(), d, raw.size(), cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < n; ++i) {
    if (eb == 2) {
      __nv_bfloat16 y;
      std::memcpy(&y, raw.data() + 2 * i, 2);
      h[i] = __bfloat162float(y);
    } else {
      std::memcpy(&h[i], raw.data() + 4 * i, 4);
    }
  }
  return h;
}

// Max |got - ref| / max|ref| over O, dQ, dK, dV of a small problem (float64 reference).
int check_small(const Problem& big, double* max_rel) {
  Problem pr = big;
  pr.B = 1;
  pr.H = 2;
  pr.T = std::min(big.T, 77);
  Buffers b;
  blublas::AttentionDesc desc;
  if (int rc = setup(pr, &b, &desc)) return rc;
  PROF_OK(blublas::attention_forward(desc, nullptr));
  PROF_OK(blublas::attention_backward(desc, b.ws, b.ws_bytes, nullptr));
  PROF_CUDA(cudaDeviceSynchronize());
  const size_t n = static_cast<size_t>(pr.T) * pr.H * pr.d, eb = elem_bytes(pr.prec);
  const std::vector<float> go = download(b.o, n, eb), gdq = download(b.dq, n, eb),
                           gdk = download(b.dk, n, eb), gdv = download(b.dv, n, eb);
  const int T = pr.T, H = pr.H, d = pr.d;
  const double scale = desc.softmax_scale;
  auto at = [&](int t, int h, int i) { return (static_cast<size_t>(t) * H + h) * d + i; };
  std::vector<double> ro(n, 0), rdq(n, 0), rdk(n, 0), rdv(n, 0);
  for (int h = 0; h < H; ++h) {
    std::vector<double> P(static_cast<size_t>(T) * T, 0.0), dP(P.size(), 0.0), D(T, 0.0);
    for (int i = 0; i < T; ++i) {
      const int jn = pr.causal ? i + 1 : T;
      double mx = -INFINITY;
      for (int j = 0; j < jn; ++j) {
        double s = 0;
        for (int c = 0; c < d; ++c) s += double(b.hq[at(i, h, c)]) * b.hk[at(j, h, c)];
        P[i * T + j] = s * scale;
        mx = std::max(mx, s * scale);
      }
      double sum = 0;
      for (int j = 0; j < jn; ++j) sum += std::exp(P[i * T + j] - mx);
      for (int j = 0; j < jn; ++j) P[i * T + j] = std::exp(P[i * T + j] - mx) / sum;
      for (int c = 0; c < d; ++c) {
        double o = 0;
        for (int j = 0; j < jn; ++j) o += P[i * T + j] * b.hv[at(j, h, c)];
        ro[at(i, h, c)] = o;
        D[i] += o * b.hdo[at(i, h, c)];
      }
      for (int j = 0; j < jn; ++j) {
        double s = 0;
        for (int c = 0; c < d; ++c) s += double(b.hdo[at(i, h, c)]) * b.hv[at(j, h, c)];
        dP[i * T + j] = s;
      }
    }
    for (int i = 0; i < T; ++i) {
      const int jn = pr.causal ? i + 1 : T;
      for (int j = 0; j < jn; ++j) {
        const double p = P[i * T + j], ds = p * (dP[i * T + j] - D[i]);
        for (int c = 0; c < d; ++c) {
          rdq[at(i, h, c)] += scale * ds * b.hk[at(j, h, c)];
          rdk[at(j, h, c)] += scale * ds * b.hq[at(i, h, c)];
          rdv[at(j, h, c)] += p * b.hdo[at(i, h, c)];
        }
      }
    }
  }
  auto rel = [&](const std::vector<float>& g, const std::vector<double>& r) {
    double e = 0, m = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      e = std::max(e, std::isfinite(g[i]) ? std::fabs(g[i] - r[i]) : INFINITY);
      m = std::max(m, std::fabs(r[i]));
    }
    return e / std::max(m, 1e-30);
  };
  *max_rel = std::max({rel(go, ro), rel(gdq, rdq), rel(gdk, rdk), rel(gdv, rdv)});
  return 0;
}

int run_attention(const blublas::profiler::Args& args) {
  Problem pr;
  pr.B = static_cast<int>(args.get_int("B", 16));
  pr.T = static_cast<int>(args.get_int("T", 1024));
  pr.H = static_cast<int>(args.get_int("H", 12));
  pr.d = static_cast<int>(args.get_int("d", 64));
  pr.causal = args.get_int("causal", 1) != 0;
  const std::string mode = args.get("mode", "bf16");
  const std::string path = args.get("path", "auto");
  const std::string dq = args.get("dq", "auto");
  if (dq == "auto")
    pr.dq_mode = blublas::AttnDqMode::kAuto;
  else if (dq == "twopass")
    pr.dq_mode = blublas::AttnDqMode::kTwoPass;
  else if (dq == "partials")
    pr.dq_mode = blublas::AttnDqMode::kPartials;
  else if (dq == "accumulate")
    pr.dq_mode = blublas::AttnDqMode::kAccumulate;
  else {
    std::fprintf(stderr, "attention: --dq must be auto, twopass, partials or accumulate (got %s)\n",
                 dq.c_str());
    return 2;
  }
  const int reps = static_cast<int>(args.get_int("reps", 20));
  if (mode == "bf16")
    pr.prec = AttnPrecision::kBF16;
  else if (mode == "tf32")
    pr.prec = AttnPrecision::kF32TF32;
  else if (mode == "f32" || mode == "fp32")
    pr.prec = AttnPrecision::kF32Strict;
  else if (mode == "f32x3")  // fp32 in and out, 3xTF32 products (the fp32 race's attention)
    pr.prec = AttnPrecision::kF32Split3TF32;
  else {
    std::fprintf(stderr, "attention: --mode must be bf16, tf32, f32 or f32x3 (got %s)\n",
                 mode.c_str());
    return 2;
  }
  if (path == "auto")
    pr.path = AttnPath::kAuto;
  else if (path == "simt")
    pr.path = AttnPath::kSimt;
  else if (path == "sm80")
    pr.path = AttnPath::kSm80Mma;
  else if (path == "sm90")
    pr.path = AttnPath::kSm90Wgmma;
  else {
    std::fprintf(stderr, "attention: --path must be auto, simt, sm80 or sm90 (got %s)\n",
                 path.c_str());
    return 2;
  }

  Buffers b;
  blublas::AttentionDesc desc;
  if (int rc = setup(pr, &b, &desc)) return rc;
  AttnPath chosen = AttnPath::kAuto;
  PROF_OK(blublas::attention_selected_path(desc, &chosen));
  cudaEvent_t e0, e1;
  PROF_CUDA(cudaEventCreate(&e0));
  PROF_CUDA(cudaEventCreate(&e1));
  auto time_ms = [&](bool bwd, float* ms) -> int {
    for (int i = 0; i < 3; ++i) {
      PROF_OK(blublas::attention_forward(desc, nullptr));
      if (bwd) PROF_OK(blublas::attention_backward(desc, b.ws, b.ws_bytes, nullptr));
    }
    std::vector<float> t(reps);
    for (int i = 0; i < reps; ++i) {
      PROF_CUDA(cudaEventRecord(e0));
      if (bwd)
        PROF_OK(blublas::attention_backward(desc, b.ws, b.ws_bytes, nullptr));
      else
        PROF_OK(blublas::attention_forward(desc, nullptr));
      PROF_CUDA(cudaEventRecord(e1));
      PROF_CUDA(cudaEventSynchronize(e1));
      PROF_CUDA(cudaEventElapsedTime(&t[i], e0, e1));
    }
    std::sort(t.begin(), t.end());
    *ms = t[reps / 2];
    return 0;
  };
  float fwd_ms = 0, bwd_ms = 0;
  if (int rc = time_ms(false, &fwd_ms)) return rc;
  if (int rc = time_ms(true, &bwd_ms)) return rc;
  const double fwd_flop =
      4.0 * pr.B * pr.H * static_cast<double>(pr.T) * pr.T * pr.d / (pr.causal ? 2.0 : 1.0);
  double err = NAN;
  if (int rc = check_small(pr, &err)) return rc;
  const double fwd_tf = fwd_flop / (fwd_ms * 1e-3) / 1e12;
  const double bwd_tf = 2.5 * fwd_flop / (bwd_ms * 1e-3) / 1e12;
  const double all_tf = 3.5 * fwd_flop / ((fwd_ms + bwd_ms) * 1e-3) / 1e12;
  if (args.has("json")) {
    std::printf(
        "{\"command\": \"attention\", \"B\": %d, \"T\": %d, \"H\": %d, \"d\": %d, "
        "\"mode\": \"%s\", \"causal\": %d, \"path\": \"%s\", \"fwd_ms\": %.4f, \"bwd_ms\": %.4f, "
        "\"fwd_tflops\": %.2f, \"bwd_tflops\": %.2f, \"fwdbwd_tflops\": %.2f, "
        "\"max_rel_err\": %.3e}\n",
        pr.B, pr.T, pr.H, pr.d, mode.c_str(), pr.causal ? 1 : 0, blublas::attn_path_name(chosen),
        fwd_ms, bwd_ms, fwd_tf, bwd_tf, all_tf, err);
  } else {
    std::printf("attention B=%d T=%d H=%d d=%d mode=%s causal=%d path=%s\n", pr.B, pr.T, pr.H, pr.d,
                mode.c_str(), pr.causal ? 1 : 0, blublas::attn_path_name(chosen));
    std::printf("  forward : %.3f ms  %.1f TFLOP/s\n", fwd_ms, fwd_tf);
    std::printf("  backward: %.3f ms  %.1f TFLOP/s (2.5x forward FLOPs)\n", bwd_ms, bwd_tf);
    std::printf("  fwd+bwd : %.1f TFLOP/s\n", all_tf);
    std::printf("  max |err| / max |ref| vs float64 CPU (B1 H2 T%d, O dQ dK dV): %.3e\n",
                std::min(pr.T, 77), err);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 0;
}

}  // namespace

BLUBLAS_PROFILER_COMMAND("attention", "flash attention forward/backward TFLOP/s and error",
                         "--B=16 --T=1024 --H=12 --d=64|128 --mode=bf16|tf32|f32|f32x3 --causal=1|0 "
                         "--path=auto|simt|sm80|sm90 --dq=auto|twopass|partials|accumulate --reps=20 --json",
                         run_attention);
