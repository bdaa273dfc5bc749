// profile_gemm.cu: the blublas-profiler "gemm" command: one GEMM of any shape, dtype, transposes,
// layout, batch, epilogue and forced path, timed with blublas and with cuBLAS / cuBLASLt in the
// same process; prints both TFLOP/s, the ratio, the path kAuto took and the max difference.
//
// The reference: blublas/tools/cublas_reference.h (Note [The reference call] there: the row-major
// problem handed to cuBLAS as its transpose, epilogues on cuBLASLt). Without an epilogue cuBLAS's
// time is the better of cublasGemmStridedBatchedEx and cublasLtMatmul (top heuristic, 32 MiB
// workspace); with one, cuBLASLt runs the same epilogue; where cuBLASLt has none (a per-column
// bias on a column-major D) only blublas is timed.
// Timing: CUDA events around each call, >= 50 ms warm-up, median of --reps, rotating buffer sets
// > 3x L2 (at most 64 sets).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "blublas/gemm.h"
#include "cublas_reference.h"
#include "gpu_hold.cuh"
#include "profiler_registry.h"

namespace {

using blublas::ComputeMode;
using blublas::Dtype;
using blublas::Epilogue;
using blublas::GemmDesc;
using blublas::GemmPath;
using blublas::Layout;
using blublas::Op;
using blublas::profiler::Args;

namespace cref = blublas::cublas_ref;
constexpr size_t kCublasWorkspaceBytes = cref::kWorkspaceBytes;

struct Fail : std::runtime_error {  // a CUDA or cuBLAS error: exit code 1
  using std::runtime_error::runtime_error;
};
void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Fail(std::string(what) + ": " + cudaGetErrorString(e));
}
void cublas_ok(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Fail(std::string(what) + ": " + cublasGetStatusString(s));
}

// ---- flags --------------------------------------------------------------------------------------
struct Options {
  int m = 4096, n = 4096, k = 4096, batch = 1, reps = 20, beta = 0;
  std::string dtype = "bf16", out, op_a = "n", op_b = "t", layout = "row", epilogue = "none",
              path = "auto", variants;
  bool json = false;
};

const char* kUsage =
    "--m=4096 --n=4096 --k=4096 --batch=1 --dtype=bf16|f16|tf32|f32 --out=bf16|f16|f32 "
    "(default: bf16/f16 in -> same out, tf32/f32 -> f32) --op_a=n|t --op_b=t|n --layout=row|col "
    "--epilogue=none|bias|bias_gelu|gelu|gelu_grad|bgrada|bgradb --path=auto|simt|sm80|sm90 --beta=0|1 (1: D += op(A) op(B), "
    "C = D in place) --reps=20 --json "
    "--variants=auto,192x192_3c,128x256_2c/s3,auto/sk,... (sm90 tiles, BLUBLAS_SM90_TILE names, /sN: N K splits, /sk /nosk: stream-K on / off; "
    "each timed interleaved with cuBLAS, one call of each per round, and checked against it; noop / "
    "cublas: a one-thread kernel / cuBLAS in that place of the round)";

// Returns "" or the usage error.
std::string parse(const Args& a, Options* o) {
  static const std::set<std::string> known{"m", "n", "k", "batch", "dtype", "out", "op_a", "op_b",
                                           "layout", "epilogue", "path", "reps", "beta", "json",
                                           "variants"};
  for (auto& [k, v] : a.kv)
    if (!known.count(k)) return std::string("gemm: unknown flag --").append(k).append(" (flags: ").append(kUsage).append(")");
  auto pick = [&](const char* key, std::string* dst, std::initializer_list<const char*> allowed) {
    *dst = a.get(key, *dst);
    for (const char* x : allowed)
      if (*dst == x) return std::string();
    std::string msg = "gemm: --";
    msg.append(key).append("=").append(*dst).append(" is not one of ");
    bool first = true;
    for (const char* x : allowed) {
      msg.append(first ? "" : "|").append(x);
      first = false;
    }
    return msg;
  };
  auto integer = [&](const char* key, int* dst, long long lo, long long hi) {
    if (!a.has(key)) return std::string();
    const std::string text = a.get(key, "");
    long long v = 0;
    size_t used = 0;
    try {
      v = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size())
      return std::string("gemm: --").append(key).append("=").append(text).append(" is not an integer");
    if (v < lo || v > hi) {
      std::string msg = "gemm: --";
      msg.append(key).append("=").append(std::to_string(v)).append(" is out of range [");
      return msg.append(std::to_string(lo)).append(", ").append(std::to_string(hi)).append("]");
    }
    *dst = static_cast<int>(v);
    return std::string();
  };
  o->json = a.has("json");
  o->variants = a.get("variants", "");
  std::string e;
  if (!(e = integer("m", &o->m, 1, 1 << 30)).empty()) return e;
  if (!(e = integer("n", &o->n, 1, 1 << 30)).empty()) return e;
  if (!(e = integer("k", &o->k, 1, 1 << 30)).empty()) return e;
  if (!(e = integer("batch", &o->batch, 1, 1 << 20)).empty()) return e;
  if (!(e = integer("reps", &o->reps, 1, 100000)).empty()) return e;
  if (!(e = integer("beta", &o->beta, 0, 1)).empty()) return e;
  if (!(e = pick("dtype", &o->dtype, {"bf16", "f16", "tf32", "f32"})).empty()) return e;
  o->out = o->dtype == "bf16" || o->dtype == "f16" ? o->dtype : "f32";
  if (!(e = pick("out", &o->out, {"bf16", "f16", "f32"})).empty()) return e;
  if (!(e = pick("op_a", &o->op_a, {"n", "t"})).empty()) return e;
  if (!(e = pick("op_b", &o->op_b, {"n", "t"})).empty()) return e;
  if (!(e = pick("layout", &o->layout, {"row", "col"})).empty()) return e;
  if (!(e = pick("epilogue", &o->epilogue, {"none", "bias", "bias_gelu", "gelu", "gelu_grad", "bgrada", "bgradb"})).empty()) return e;
  if (!(e = pick("path", &o->path, {"auto", "simt", "sm80", "sm90"})).empty()) return e;
  return "";
}

Dtype dtype_of(const std::string& s) {
  return s == "bf16" ? Dtype::kBF16 : s == "f16" ? Dtype::kF16 : Dtype::kF32;
}
Epilogue epilogue_of(const std::string& s) {
  if (s == "bias") return Epilogue::kBias;
  if (s == "bias_gelu") return Epilogue::kBiasGelu;
  if (s == "gelu") return Epilogue::kGelu;
  if (s == "bgrada") return Epilogue::kBiasGradA;
  if (s == "bgradb") return Epilogue::kBiasGradB;
  if (s == "gelu_grad") return Epilogue::kGeluGrad;
  return Epilogue::kNone;
}
GemmPath path_of(const std::string& s) {
  if (s == "simt") return GemmPath::kSimt;
  if (s == "sm80") return GemmPath::kSm80Mma;
  if (s == "sm90") return GemmPath::kSm90Wgmma;
  return GemmPath::kAuto;
}

// ---- device helpers -------------------------------------------------------------------------------
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }

template <typename T>
__global__ void fill_kernel(T* p, size_t n, unsigned long long seed, int nan) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned long long x = i * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 33; x *= 0xFF51AFD7ED558CCDull; x ^= x >> 33; x *= 0xC4CEB9FE1A85EC53ull; x ^= x >> 33;
    const float mag = 0.0625f + 0.9375f * (static_cast<float>(x >> 40) * (1.0f / 16777216.0f));
    p[i] = from_f<T>(nan ? __int_as_float(0x7fc00000) : ((x & 1u) ? -mag : mag));
  }
}
// out[0] = max |x - r| and out[1] = max |r| over n dense elements (float bits; NaN wins).
template <typename TX, typename TR>
__global__ void diff_kernel(const TX* x, const TR* r, size_t n, unsigned* out) {
  float d = 0.f, m = 0.f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float rv = to_f(r[i]), dv = fabsf(to_f(x[i]) - rv);
    d = (dv > d || dv != dv) ? dv : d;
    m = fmaxf(m, fabsf(rv));
  }
  atomicMax(out, __float_as_uint(fabsf(d)));
  atomicMax(out + 1, __float_as_uint(m));
}
int grid_for(size_t n) { return static_cast<int>(std::min<size_t>((n + 255) / 256, 4096)); }

void fill(void* p, Dtype t, size_t n, unsigned long long seed, bool nan = false) {
  const int g = grid_for(n), f = nan ? 1 : 0;
  if (t == Dtype::kBF16) fill_kernel<<<g, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed, f);
  else if (t == Dtype::kF16) fill_kernel<<<g, 256>>>(static_cast<__half*>(p), n, seed, f);
  else fill_kernel<<<g, 256>>>(static_cast<float*>(p), n, seed, f);
  cuda_ok(cudaGetLastError(), "fill");
}
template <typename TX>
void diff_from(const TX* x, const void* r, Dtype tr, size_t n, unsigned* out) {
  const int g = grid_for(n);
  if (tr == Dtype::kBF16) diff_kernel<<<g, 256>>>(x, static_cast<const __nv_bfloat16*>(r), n, out);
  else if (tr == Dtype::kF16) diff_kernel<<<g, 256>>>(x, static_cast<const __half*>(r), n, out);
  else diff_kernel<<<g, 256>>>(x, static_cast<const float*>(r), n, out);
}
// {max |x - r|, max |r|} over n dense elements.
std::pair<double, double> max_diff(const void* x, Dtype tx, const void* r, Dtype tr, size_t n, unsigned* scratch) {
  cuda_ok(cudaMemset(scratch, 0, 8), "cudaMemset");
  if (tx == Dtype::kBF16) diff_from(static_cast<const __nv_bfloat16*>(x), r, tr, n, scratch);
  else if (tx == Dtype::kF16) diff_from(static_cast<const __half*>(x), r, tr, n, scratch);
  else diff_from(static_cast<const float*>(x), r, tr, n, scratch);
  cuda_ok(cudaGetLastError(), "diff");
  unsigned bits[2];
  cuda_ok(cudaMemcpy(bits, scratch, 8, cudaMemcpyDeviceToHost), "cudaMemcpy");
  float d, m;
  std::memcpy(&d, &bits[0], 4);
  std::memcpy(&m, &bits[1], 4);
  return {d, m};
}

struct DevMem {
  std::vector<void*> ptrs;
  void* alloc(size_t bytes) {
    void* p = nullptr;
    cuda_ok(cudaMalloc(&p, std::max<size_t>(bytes, 256)), "cudaMalloc");
    ptrs.push_back(p);
    return p;
  }
  ~DevMem() { for (void* p : ptrs) cudaFree(p); }
};

// Median ms of fn(rep) over reps (each timed by its own event pair, behind a hold: Note [Timing
// behind a hold]) after a warm-up of at least ~50 ms of GPU time (clocks ramp up) and 2 calls.
double median_ms(const std::function<void(int)>& fn, cudaStream_t s, int reps) {
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto& e : ev) cuda_ok(cudaEventCreate(&e), "cudaEventCreate");
  cuda_ok(cudaEventRecord(ev[0], s), "cudaEventRecord");
  fn(0);
  cuda_ok(cudaEventRecord(ev[1], s), "cudaEventRecord");
  cuda_ok(cudaEventSynchronize(ev[1]), "first call");
  float first_ms = 0;
  cuda_ok(cudaEventElapsedTime(&first_ms, ev[0], ev[1]), "cudaEventElapsedTime");
  const int warmup = static_cast<int>(std::clamp(50.0 / std::max(first_ms, 1e-3f), 2.0, 2000.0));
  for (int i = 1; i < warmup; ++i) fn(i);
  // Note [Timing behind a hold] (gpu_hold.cuh): the host enqueues every rep while the GPU spins.
  cuda_ok(blublas::profiler::hold_gpu(s, 5.0 + 0.1 * reps), "hold");
  for (int i = 0; i < reps; ++i) {
    cuda_ok(cudaEventRecord(ev[2 * i], s), "cudaEventRecord");
    fn(warmup + i);
    cuda_ok(cudaEventRecord(ev[2 * i + 1], s), "cudaEventRecord");
  }
  cuda_ok(cudaStreamSynchronize(s), "timed run");
  std::vector<double> ms(reps);
  for (int i = 0; i < reps; ++i) {
    float t = 0;
    cuda_ok(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]), "cudaEventElapsedTime");
    ms[i] = t;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

// max that keeps a NaN (an unwritten, poisoned output element must not hide).
double nan_max(double a, double b) { return (std::isnan(a) || std::isnan(b)) ? NAN : std::max(a, b); }

// ---- the command --------------------------------------------------------------------------------------
std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') { o += '\\'; o += c; }
    else if (static_cast<unsigned char>(c) >= 0x20) o += c;
  }
  return o + "\"";
}
std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char b[32];
  std::snprintf(b, sizeof(b), "%.6g", v);
  return b;
}

int report_error(const Options& o, int code, const std::string& msg) {
  if (o.json) std::printf("{\"command\": \"gemm\", \"error\": %s}\n", json_str(msg).c_str());
  std::fprintf(stderr, "blublas-profiler: %s\n", msg.c_str());
  return code;
}

// Note [Interleaved tile A/B]
// --variants times several sm90 plans of one problem and cuBLAS in the same process, one call of
// each per round (after a shared warm-up), so clock drift and the machine's state between
// processes (one plan's row moved 5-9% between processes in session 28, cuBLAS's too) fall on all
// of them alike; the medians are then comparable. Each variant is forced through
// BLUBLAS_SM90_TILE (read at every call), gets its own workspace, and is checked once against
// cuBLAS into a poisoned D (beta = 0) and bitwise against the first variant: plans with one
// K split sum each element in the same k order, so they should agree to the bit. Two pseudo-
// variants place other kernels in the round: "noop" (a one-thread kernel) and "cublas" (the
// reference once more), to see what a GEMM kernel pays for following a different kernel.
// Mind the order: a variant whose kernel is the one just before it in the round (e.g. auto then
// the tile auto picked) runs warm, ~5-11 us faster than after another GEMM kernel (session 29,
// Note [sm90 plain epilogue] in sm90_gemm_kernel.cuh); a training step's GEMMs run cold.
int run_variants(const Options& o, std::vector<GemmDesc>& sets, int rot, size_t d_el, size_t cd,
                 const void* ref_d, unsigned* scratch, DevMem& mem, cudaStream_t stream,
                 const std::function<void(const GemmDesc&)>& ref_call) {
  std::vector<std::string> names;
  for (size_t b = 0; b <= o.variants.size();) {
    size_t e = o.variants.find(',', b);
    if (e == std::string::npos) e = o.variants.size();
    if (e > b) names.push_back(o.variants.substr(b, e - b));
    b = e + 1;
  }
  // A variant is a tile name or "auto", optionally with "/s<N>": N K splits forced too.
  struct SavedEnv {
    const char* name;
    bool had;
    std::string value;
    explicit SavedEnv(const char* n) : name(n), had(std::getenv(n) != nullptr), value(had ? std::getenv(n) : "") {}
    ~SavedEnv() { if (had) setenv(name, value.c_str(), 1); else unsetenv(name); }
  };
  // "/sk" forces stream-K on, "/nosk" off (Note [sm90 stream-K]); else the cost model decides.
  SavedEnv saved_tile("BLUBLAS_SM90_TILE"), saved_splits("BLUBLAS_SM90_SPLITS"),
      saved_sk("BLUBLAS_SM90_STREAMK");
  auto select = [&](const std::string& v) {
    const size_t slash = v.find('/');
    const std::string tile = v.substr(0, slash);
    if (tile == "auto") unsetenv("BLUBLAS_SM90_TILE");
    else setenv("BLUBLAS_SM90_TILE", tile.c_str(), 1);
    unsetenv("BLUBLAS_SM90_SPLITS");
    unsetenv("BLUBLAS_SM90_STREAMK");
    for (size_t b = slash; b != std::string::npos && b < v.size();) {
      const size_t e = v.find('/', b + 1);
      const std::string opt = v.substr(b + 1, e == std::string::npos ? std::string::npos : e - b - 1);
      if (opt == "sk") setenv("BLUBLAS_SM90_STREAMK", "1", 1);
      else if (opt == "nosk") setenv("BLUBLAS_SM90_STREAMK", "0", 1);
      else if (opt.size() > 1 && opt[0] == 's') setenv("BLUBLAS_SM90_SPLITS", opt.substr(1).c_str(), 1);
      b = e;
    }
  };
  struct Variant { std::string name; void* ws = nullptr; size_t ws_bytes = 0; double diff = NAN, vs_first = NAN; };
  std::vector<Variant> vs;
  void* first_d = nullptr;
  const Dtype cdt = sets[0].cd_type;
  for (const std::string& nm : names) {
    Variant v;
    v.name = nm;
    if (nm == "noop" || nm == "cublas") {  // pseudo-variants: a one-thread kernel, cuBLAS again
      vs.push_back(v);
      continue;
    }
    select(nm);
    blublas::Status st = blublas::gemm_workspace_size(sets[0], &v.ws_bytes);
    if (!st.ok()) return report_error(o, 1, "variant " + nm + ": " + st.to_string());
    v.ws = v.ws_bytes ? mem.alloc(v.ws_bytes) : nullptr;
    if (sets[0].beta == 0.0f) {  // checked run into a poisoned D
      fill(sets[0].d, cdt, d_el, 0, true);
      if (!(st = blublas::gemm(sets[0], v.ws, v.ws_bytes, stream)).ok()) {
        return report_error(o, 1, "variant " + nm + ": " + st.to_string());
      }
      cuda_ok(cudaStreamSynchronize(stream), "variant check");
      v.diff = max_diff(sets[0].d, cdt, ref_d, cdt, d_el, scratch).first;
      if (first_d == nullptr) {
        first_d = mem.alloc(d_el * cd);
        cuda_ok(cudaMemcpy(first_d, sets[0].d, d_el * cd, cudaMemcpyDeviceToDevice), "copy D");
      } else {
        v.vs_first = max_diff(sets[0].d, cdt, first_d, cdt, d_el, scratch).first;
      }
    }
    vs.push_back(v);
  }
  const int nv = static_cast<int>(vs.size()) + 1;  // + cuBLAS, last
  auto call = [&](int v, int i) {
    const GemmDesc& g = sets[i % rot];
    if (v == nv - 1 || vs[v].name == "cublas") { ref_call(g); return; }
    if (vs[v].name == "noop") { cuda_ok(blublas::profiler::hold_gpu(stream, 0.0), "noop"); return; }
    select(vs[v].name);
    blublas::Status st = blublas::gemm(g, vs[v].ws, vs[v].ws_bytes, stream);
    if (!st.ok()) throw Fail("variant " + vs[v].name + ": " + st.to_string());
  };
  // Warm-up: every variant, until ~50 ms of GPU time have passed (clocks ramp up).
  cudaEvent_t w0, w1;
  cuda_ok(cudaEventCreate(&w0), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&w1), "cudaEventCreate");
  float warm_ms = 0;
  for (int round = 0; round < 2000 && warm_ms < 50.0f; ++round) {
    cuda_ok(cudaEventRecord(w0, stream), "cudaEventRecord");
    for (int v = 0; v < nv; ++v) call(v, round);
    cuda_ok(cudaEventRecord(w1, stream), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(w1), "warm-up");
    float t = 0;
    cuda_ok(cudaEventElapsedTime(&t, w0, w1), "cudaEventElapsedTime");
    warm_ms += t;
  }
  cudaEventDestroy(w0);
  cudaEventDestroy(w1);
  const int reps = o.reps;
  std::vector<cudaEvent_t> ev(2 * nv * reps);
  for (auto& e : ev) cuda_ok(cudaEventCreate(&e), "cudaEventCreate");
  // Note [Timing behind a hold]: the whole loop is enqueued while the GPU spins; each variant's
  // host time per call (its enqueue, events excluded) is reported apart.
  cuda_ok(blublas::profiler::hold_gpu(stream, 5.0 + 0.1 * reps * nv), "hold");
  std::vector<double> host_us(nv, 0.0);
  for (int r = 0; r < reps; ++r) {
    for (int v = 0; v < nv; ++v) {
      cuda_ok(cudaEventRecord(ev[2 * (r * nv + v)], stream), "cudaEventRecord");
      const auto h0 = std::chrono::steady_clock::now();
      call(v, r * nv + v);
      host_us[v] += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count();
      cuda_ok(cudaEventRecord(ev[2 * (r * nv + v) + 1], stream), "cudaEventRecord");
    }
  }
  cuda_ok(cudaStreamSynchronize(stream), "interleaved runs");
  std::vector<double> med(nv);
  for (int v = 0; v < nv; ++v) {
    std::vector<double> ms(reps);
    for (int r = 0; r < reps; ++r) {
      float t = 0;
      cuda_ok(cudaEventElapsedTime(&t, ev[2 * (r * nv + v)], ev[2 * (r * nv + v) + 1]), "cudaEventElapsedTime");
      ms[r] = t;
    }
    std::sort(ms.begin(), ms.end());
    med[v] = ms[reps / 2];
  }
  for (auto& e : ev) cudaEventDestroy(e);
  const double ref_ms = med[nv - 1];
  for (int v = 0; v < nv - 1; ++v) {
    if (o.json) {
      std::printf("{\"command\": \"gemm_variant\", \"variant\": %s, \"blublas_ms\": %s, \"cublas_ms\": %s, "
                  "\"ratio\": %s, \"max_abs_diff\": %s, \"max_abs_diff_vs_first\": %s, \"host_us_per_call\": %s, "
                  "\"cublas_host_us_per_call\": %s}\n",
                  json_str(vs[v].name).c_str(), num(med[v]).c_str(), num(ref_ms).c_str(),
                  num(ref_ms / med[v]).c_str(), num(vs[v].diff).c_str(), num(vs[v].vs_first).c_str(),
                  num(host_us[v] / reps).c_str(), num(host_us[nv - 1] / reps).c_str());
    } else {
      std::printf("  variant %-16s %9.4f ms  cuBLAS %9.4f ms  ratio %6.3f  max|d - cuBLAS| %.3e  max|d - %s| %.3e"
                  "  host us/call %.1f (cuBLAS %.1f)\n",
                  vs[v].name.c_str(), med[v], ref_ms, ref_ms / med[v], vs[v].diff, vs[0].name.c_str(),
                  vs[v].vs_first, host_us[v] / reps, host_us[nv - 1] / reps);
    }
  }
  return 0;
}

int run_gemm(const Args& args) {
  Options o;
  if (std::string e = parse(args, &o); !e.empty()) return report_error(o, 2, e);
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    (void)cudaGetLastError();
    return report_error(o, 1, "gemm: no CUDA device");
  }
  GemmDesc d;
  d.m = o.m; d.n = o.n; d.k = o.k; d.batch = o.batch;
  d.op_a = o.op_a == "t" ? Op::kT : Op::kN;
  d.op_b = o.op_b == "t" ? Op::kT : Op::kN;
  d.layout = o.layout == "col" ? Layout::kColMajor : Layout::kRowMajor;
  d.ab_type = dtype_of(o.dtype);
  d.cd_type = dtype_of(o.out);
  d.compute = o.dtype == "tf32" ? ComputeMode::kTF32 : o.dtype == "f32" ? ComputeMode::kStrictF32 : ComputeMode::kDefault;
  d.epilogue = epilogue_of(o.epilogue);
  d.path = path_of(o.path);
  d.beta = static_cast<float>(o.beta);  // C = D: accumulate in place (the chunked weight gradient's GEMM)
  const bool row = d.layout == Layout::kRowMajor;
  // Tight leading dimensions of the stored matrices.
  const int64_t a_rows = d.op_a == Op::kN ? d.m : d.k, a_cols = d.op_a == Op::kN ? d.k : d.m;
  const int64_t b_rows = d.op_b == Op::kN ? d.k : d.n, b_cols = d.op_b == Op::kN ? d.n : d.k;
  d.lda = row ? a_cols : a_rows;
  d.ldb = row ? b_cols : b_rows;
  d.ldd = row ? d.n : d.m;
  d.ldc = d.ldd;
  d.stride_a = a_rows * a_cols; d.stride_b = b_rows * b_cols; d.stride_d = int64_t(d.m) * d.n;
  d.stride_c = d.stride_d;
  const bool has_bias = d.epilogue == Epilogue::kBias || d.epilogue == Epilogue::kBiasGelu;
  const bool has_aux = d.epilogue == Epilogue::kBiasGelu || d.epilogue == Epilogue::kGelu ||
                       d.epilogue == Epilogue::kGeluGrad;
  const bool aux_in = d.epilogue == Epilogue::kGeluGrad;  // aux an input (random), not an output
  const bool has_bgrad = cref::is_bias_grad(d.epilogue);
  const int64_t bgrad_len = d.epilogue == Epilogue::kBiasGradA ? d.m : d.n;
  if (has_aux) { d.ld_aux = d.ldd; d.stride_aux = d.stride_d; }
  const size_t ab = blublas::dtype_size(d.ab_type), cd = blublas::dtype_size(d.cd_type);
  const size_t a_el = size_t(d.stride_a) * d.batch, b_el = size_t(d.stride_b) * d.batch, d_el = size_t(d.stride_d) * d.batch;

  DevMem mem;
  int l2 = 0, dev = 0;
  cuda_ok(cudaGetDevice(&dev), "cudaGetDevice");
  cuda_ok(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev), "L2 size");
  const size_t set_bytes = (a_el + b_el) * ab + d_el * cd * (has_aux ? 2 : 1);
  // Rotating sets > 3x L2, at most 64 (tiny problems then stay L2-resident, as they would in use).
  const int rot = static_cast<int>(std::clamp<size_t>((3 * size_t(l2) + set_bytes - 1) / set_bytes, 1, 64));
  std::vector<GemmDesc> sets(rot, d);
  for (int r = 0; r < rot; ++r) {
    GemmDesc& s = sets[r];
    s.a = mem.alloc(a_el * ab); fill(const_cast<void*>(s.a), d.ab_type, a_el, 100 * r + 1);
    s.b = mem.alloc(b_el * ab); fill(const_cast<void*>(s.b), d.ab_type, b_el, 100 * r + 2);
    s.d = mem.alloc(d_el * cd);
    if (d.beta != 0.0f) {
      fill(s.d, d.cd_type, d_el, 100 * r + 4);
      s.c = s.d;
    }
    if (has_bias) { s.bias = mem.alloc(d.n * cd); fill(const_cast<void*>(s.bias), d.cd_type, d.n, 100 * r + 3); }
    if (has_aux) s.aux = mem.alloc(d_el * cd);
    if (aux_in) fill(s.aux, d.cd_type, d_el, 100 * r + 4);  // kGeluGrad reads aux (the pre-activation)
    if (has_bgrad) s.bias_grad = static_cast<float*>(mem.alloc(bgrad_len * 4));
  }
  cudaStream_t stream;
  // Blocking: fills, poisons and memsets on the legacy default stream stay ordered with it.
  cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate");
  struct StreamGuard { cudaStream_t s; ~StreamGuard() { cudaStreamDestroy(s); } } sg{stream};
  unsigned* scratch = static_cast<unsigned*>(mem.alloc(8));

  // blublas: path, workspace, one checked run into poisoned outputs, then timing.
  GemmPath taken = d.path;
  blublas::Status st = blublas::gemm_selected_path(sets[0], &taken);
  size_t ws_bytes = 0;
  if (st.ok()) (void)(st = blublas::gemm_workspace_size(sets[0], &ws_bytes));
  if (!st.ok()) return report_error(o, 1, st.to_string());
  void* ws = ws_bytes ? mem.alloc(ws_bytes) : nullptr;
  if (d.beta == 0.0f) fill(sets[0].d, d.cd_type, d_el, 0, true);  // poisoned (C = D keeps its values)
  if (has_aux && !aux_in) fill(sets[0].aux, d.cd_type, d_el, 0, true);
  // With beta, cuBLAS's output starts from the same C as ours (set 0's D before our checked run).
  void* ref_c0 = nullptr;
  if (d.beta != 0.0f) {
    ref_c0 = mem.alloc(d_el * cd);
    cuda_ok(cudaMemcpy(ref_c0, sets[0].d, d_el * cd, cudaMemcpyDeviceToDevice), "copy C");
  }
  if (has_bgrad) fill(sets[0].bias_grad, Dtype::kF32, bgrad_len, 0, true);
  if (!(st = blublas::gemm(sets[0], ws, ws_bytes, stream)).ok()) return report_error(o, 1, st.to_string());
  cuda_ok(cudaStreamSynchronize(stream), "blublas gemm");
  // With beta the timed runs below accumulate into set 0's D again: compare the checked run's copy.
  void* ours_d = sets[0].d;
  if (d.beta != 0.0f) {
    ours_d = mem.alloc(d_el * cd);
    cuda_ok(cudaMemcpy(ours_d, sets[0].d, d_el * cd, cudaMemcpyDeviceToDevice), "copy D");
  }
  const double flop = 2.0 * d.m * d.n * double(d.k) * d.batch;
  blublas::Status run_st;
  const double ours_ms = median_ms([&](int i) {
    blublas::Status r = blublas::gemm(sets[i % rot], ws, ws_bytes, stream);
    if (!r.ok() && run_st.ok()) (void)(run_st = r);
  }, stream, o.reps);
  if (!run_st.ok()) return report_error(o, 1, run_st.to_string());

  // cuBLAS: the same problem into separate outputs (set 0's inputs), checked once, then timed.
  GemmDesc ref = sets[0];
  ref.d = mem.alloc(d_el * cd);
  if (ref_c0 != nullptr) {
    cuda_ok(cudaMemcpy(ref.d, ref_c0, d_el * cd, cudaMemcpyDeviceToDevice), "copy C");
    ref.c = ref.d;
  }
  if (has_aux && !aux_in) ref.aux = mem.alloc(d_el * cd);  // kGeluGrad: both read set 0's aux
  if (has_bgrad) ref.bias_grad = static_cast<float*>(mem.alloc(bgrad_len * 4));
  cublasHandle_t h;
  cublasLtHandle_t lt;
  cublas_ok(cublasCreate(&h), "cublasCreate");
  cublas_ok(cublasLtCreate(&lt), "cublasLtCreate");
  struct Handles { cublasHandle_t h; cublasLtHandle_t lt; ~Handles() { cublasLtDestroy(lt); cublasDestroy(h); } } hg{h, lt};
  void* cws = mem.alloc(kCublasWorkspaceBytes);
  void* lt_ws = mem.alloc(kCublasWorkspaceBytes);
  cublas_ok(cublasSetStream(h, stream), "cublasSetStream");
  cublas_ok(cublasSetWorkspace(h, cws, kCublasWorkspaceBytes), "cublasSetWorkspace");
  // A plan cuBLASLt accepts but then refuses at the first call is dropped (its reason kept).
  auto plan_and_try = [&](cudaDataType_t bias_grad_type) {
    auto pl = std::make_unique<cref::LtPlan>();
    cublas_ok(cref::lt_plan_and_try(lt, ref, bias_grad_type, *pl, lt_ws, kCublasWorkspaceBytes, stream),
              "cuBLASLt plan");
    return pl;
  };
  // The bias gradient comes in D's type (cuBLASLt's default), else in fp32.
  std::unique_ptr<cref::LtPlan> plan = plan_and_try(cref::data_type(d.cd_type));
  if (!plan->ok && has_bgrad && d.cd_type != Dtype::kF32) plan = plan_and_try(CUDA_R_32F);
  // The plan's trial call accumulated into ref.d when beta != 0: start the checked run from C again.
  if (ref_c0 != nullptr) cuda_ok(cudaMemcpy(ref.d, ref_c0, d_el * cd, cudaMemcpyDeviceToDevice), "copy C");
  auto gemm_ex = [&](const GemmDesc& x) { cublas_ok(cref::gemm_ex(h, x), "cublasGemmStridedBatchedEx"); };
  auto lt_run = [&](const GemmDesc& x) {
    cublas_ok(cref::lt_matmul(lt, *plan, x, lt_ws, kCublasWorkspaceBytes, stream), "cublasLtMatmul");
  };
  const bool epi = d.epilogue != Epilogue::kNone;
  double ref_ms = NAN, diff = NAN, rel = NAN;
  std::string impl = "none", note;
  if (!epi || plan->ok) {
    if (epi) lt_run(ref); else gemm_ex(ref);
    cuda_ok(cudaStreamSynchronize(stream), "cuBLAS reference");
    auto [dd, dm] = max_diff(ours_d, d.cd_type, ref.d, d.cd_type, d_el, scratch);
    diff = dd;
    rel = dm > 0 ? dd / dm : dd;
    if (has_aux && !aux_in) {
      auto [ad, am] = max_diff(sets[0].aux, d.cd_type, ref.aux, d.cd_type, d_el, scratch);
      rel = nan_max(rel, am > 0 ? ad / am : ad);
    }
    if (has_bgrad) {
      const Dtype bt = plan->bias_type == CUDA_R_32F ? Dtype::kF32 : d.cd_type;
      auto [bd, bm] = max_diff(sets[0].bias_grad, Dtype::kF32, ref.bias_grad, bt, bgrad_len, scratch);
      rel = nan_max(rel, bm > 0 ? bd / bm : bd);
    }
    if (!epi) { ref_ms = median_ms([&](int i) { gemm_ex(sets[i % rot]); }, stream, o.reps); impl = "cublasGemmEx"; }
    if (plan->ok) {
      const double t = median_ms([&](int i) { lt_run(sets[i % rot]); }, stream, o.reps);
      if (!(t >= ref_ms)) { ref_ms = t; impl = "cublasLt"; }
    }
  } else {
    note = plan->why;
  }
  if (!o.variants.empty() && std::isfinite(ref_ms)) {
    std::function<void(const GemmDesc&)> ref_call = gemm_ex;
    if (impl == "cublasLt") ref_call = lt_run;
    if (int rc = run_variants(o, sets, rot, d_el, cd, ref.d, scratch, mem, stream, ref_call); rc != 0) return rc;
  }
  const double ours_tf = flop / (ours_ms * 1e-3) / 1e12, ref_tf = flop / (ref_ms * 1e-3) / 1e12;
  const double ratio = ref_ms / ours_ms;
  const char* ran = blublas::gemm_path_name(taken);
  if (o.json) {
    std::printf("{\"command\": \"gemm\", \"m\": %d, \"n\": %d, \"k\": %d, \"batch\": %d, \"dtype\": %s, \"out\": %s, "
                "\"op_a\": %s, \"op_b\": %s, \"layout\": %s, \"epilogue\": %s, \"beta\": %d, \"path_requested\": %s, \"path\": %s, "
                "\"blublas_ms\": %s, \"blublas_tflops\": %s, \"cublas_impl\": %s, \"cublas_ms\": %s, "
                "\"cublas_tflops\": %s, \"ratio\": %s, \"max_abs_diff\": %s, \"max_rel_diff\": %s, \"note\": %s}\n",
                d.m, d.n, d.k, d.batch, json_str(o.dtype).c_str(), json_str(o.out).c_str(), json_str(o.op_a).c_str(),
                json_str(o.op_b).c_str(), json_str(o.layout).c_str(), json_str(o.epilogue).c_str(), o.beta,
                json_str(o.path).c_str(), json_str(ran).c_str(), num(ours_ms).c_str(), num(ours_tf).c_str(),
                json_str(impl).c_str(), num(ref_ms).c_str(), num(ref_tf).c_str(), num(ratio).c_str(),
                num(diff).c_str(), num(rel).c_str(), json_str(note).c_str());
  } else {
    std::printf("gemm M=%d N=%d K=%d batch=%d op=%s%s %s-major %s->%s epilogue=%s beta=%d path=%s (ran %s)\n", d.m,
                d.n, d.k, d.batch, o.op_a.c_str(), o.op_b.c_str(), o.layout.c_str(), o.dtype.c_str(), o.out.c_str(),
                o.epilogue.c_str(), o.beta, o.path.c_str(), ran);
    std::printf("  blublas : %9.4f ms  %8.1f TFLOP/s\n", ours_ms, ours_tf);
    if (std::isfinite(ref_ms)) {
      std::printf("  cuBLAS  : %9.4f ms  %8.1f TFLOP/s  (%s)\n", ref_ms, ref_tf, impl.c_str());
      std::printf("  ratio   : %9.3f  (blublas throughput / cuBLAS)\n", ratio);
      std::printf("  max |blublas - cuBLAS| = %.3e  (%.3e of max |cuBLAS|)\n", diff, rel);
    } else {
      std::printf("  cuBLAS  : not run: %s\n", note.c_str());
    }
  }
  return 0;
}

BLUBLAS_PROFILER_COMMAND("gemm", "one GEMM: blublas vs cuBLAS(Lt) TFLOP/s, ratio, path taken, max difference",
                         kUsage, run_gemm);

}  // namespace
