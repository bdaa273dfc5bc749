// gemm_property_gpu_test.cu: blublas::gemm on thousands of seeded random problems per run
// (support/gemm_random_problem.h draws them: every dtype pair and compute mode, op pair, layout,
// K from 1 up, M/N off every tile size, tight / padded / odd leading dimensions, misaligned base
// pointers, strided and broadcast batches, beta != 0 with D aliasing C, every epilogue), each run
// on every path that accepts it: kAuto, then kSimt, kSm80Mma and kSm90Wgmma forced (the forced
// sm_90a run in a random tile / split-K / epilogue variant). A forced path may refuse (misaligned,
// not supported, wrong arch) and must then write nothing; kAuto must take every problem.
//
// Every checked element meets the bound of support/gemm_bound.h against a float64 reference of
// the stored inputs (support/gemm_reference.h), all elements up to 32768 outputs, else sampled ones
// plus every edge. Beyond the bound: at K = 1 with 16-bit inputs, no epilogue, beta = 0 and alpha a
// power of two, every element must be bit for bit the correctly rounded alpha * a * b (issue 11,
// Note [GEMM bound near underflow]); every element of D is finite (nothing left poisoned); the
// bytes of D and aux outside M x N (ld and batch padding) keep their poison (0xFF, NaN in every
// dtype); operand and C padding holds NaN too, so a kernel that multiplies an element it should
// not read (even by zero) fails.
//
// Environment: BLU_GEMM_PROPERTY_CASES (default 6000), BLU_GEMM_PROPERTY_SEED (default 11),
// BLU_GEMM_PROPERTY_ONLY=<case> (rerun one case), BLU_GEMM_PROPERTY_SECONDS (stop drawing new
// problems after this long, default 100), BLU_GEMM_PROPERTY_REPORT=<file.json> (cases run /
// failed per precision: the device script turns it into gemm.<dtype>.cases_failed).
#include <blublas/device_info.h>
#include <blublas/gemm.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/gpu_test.h"
#include "support/gemm_bound.h"
#include "support/gemm_random_problem.h"
#include "support/gemm_reference.h"
#include "common/scoped_env.h"

namespace {

using blu::test::MatrixPlace;
using blu::test::RandomGemm;
using blublas::Dtype;
using blublas::Epilogue;
using blublas::GemmPath;
using blublas::Status;
using blublas::StatusCode;

// ---- device-side fills -------------------------------------------------------------------------
__device__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Writes uniform [-scale, scale] values (rounded to dtype) at every element of a placed matrix.
// The value is a hash of the element's buffer offset, so broadcast and overlapping-padding
// batches write the same value to the same element.
__global__ void fill_matrix_kernel(void* base, int dtype, MatrixPlace p, int batch, uint64_t seed,
                                   float scale) {
  const int64_t per = p.rows * p.cols, total = per * batch;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int b = static_cast<int>(idx / per);
    const int64_t rc = idx - b * per, r = rc / p.cols, c = rc - r * p.cols;
    const int64_t off = p.offset + b * p.stride + (p.col_major ? c * p.ld + r : r * p.ld + c);
    const uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(off) + 1);
    const float v = scale * (static_cast<float>(h >> 40) * (2.0f / 16777216.0f) - 1.0f);
    if (dtype == static_cast<int>(Dtype::kF32)) {
      static_cast<float*>(base)[off] = v;
    } else if (dtype == static_cast<int>(Dtype::kBF16)) {
      static_cast<__nv_bfloat16*>(base)[off] = __float2bfloat16_rn(v);
    } else {
      static_cast<__half*>(base)[off] = __float2half_rn(v);
    }
  }
}

// ---- host-side element access -------------------------------------------------------------------
double bf16_bits_to_double(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
double round_to_bf16(float f) {  // round to nearest even (finite values)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16_bits_to_double(static_cast<uint16_t>(u >> 16));
}
// The correctly rounded value of an fp32-exact x in dtype t.
double round_to(Dtype t, float x) {
  if (t == Dtype::kBF16) return round_to_bf16(x);
  if (t == Dtype::kF16) return static_cast<double>(__half2float(__float2half_rn(x)));
  return x;
}

struct HostBuf {
  Dtype type = Dtype::kF32;
  std::vector<uint8_t> bytes;
  double get(int64_t i) const {
    if (type == Dtype::kF32) {
      float f;
      std::memcpy(&f, &bytes[4 * i], 4);
      return f;
    }
    uint16_t raw;
    std::memcpy(&raw, &bytes[2 * i], 2);
    if (type == Dtype::kBF16) return bf16_bits_to_double(raw);
    __half_raw hr;
    hr.x = raw;
    return static_cast<double>(__half2float(__half(hr)));
  }
};

// ---- one arena for every problem
// ------------------------------------------------------------------
class Arena {
 public:
  explicit Arena(std::size_t bytes) : size_(bytes) {
    if (cudaMalloc(&base_, bytes) != cudaSuccess) base_ = nullptr;
  }
  ~Arena() {
    if (base_) cudaFree(base_);
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  bool ok() const { return base_ != nullptr; }
  void reset() { used_ = 0; }
  // 256-byte aligned plus `offset` bytes; null when full.
  char* take(std::size_t bytes, std::size_t offset = 0) {
    const std::size_t start = (used_ + 255) / 256 * 256;
    if (start + offset + bytes > size_) return nullptr;
    used_ = start + offset + bytes;
    return static_cast<char*>(base_) + start + offset;
  }

 private:
  void* base_ = nullptr;
  std::size_t size_ = 0, used_ = 0;
};

bool fill(void* base, Dtype t, const MatrixPlace& p, int batch, uint64_t seed, float scale) {
  const int64_t total = p.rows * p.cols * batch;
  if (total == 0) return true;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((total + threads - 1) / threads, 4096));
  fill_matrix_kernel<<<blocks, threads>>>(base, static_cast<int>(t), p, batch, seed, scale);
  return cudaGetLastError() == cudaSuccess;
}

HostBuf download(const void* p, Dtype t, std::size_t bytes) {
  HostBuf h{t, std::vector<uint8_t>(bytes)};
  if (bytes && cudaMemcpy(h.bytes.data(), p, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
    h.bytes.clear();
  }
  return h;
}

// Marks the elements of a placed matrix inside its buffer (every batch).
std::vector<uint8_t> inside_mask(const MatrixPlace& p, int batch) {
  std::vector<uint8_t> m(static_cast<std::size_t>(p.elems), 0);
  const int64_t inner = p.col_major ? p.rows : p.cols, outer = p.col_major ? p.cols : p.rows;
  for (int b = 0; b < batch; ++b) {
    for (int64_t o = 0; o < outer; ++o) {
      const int64_t start = p.offset + b * p.stride + o * p.ld;
      std::memset(&m[static_cast<std::size_t>(start)], 1, static_cast<std::size_t>(inner));
    }
  }
  return m;
}

const char* precision_of(const RandomGemm& g) {
  return blu::test::gemm_precision_name(g.desc.ab_type, g.desc.compute);
}

bool is_gelu(Epilogue e) {
  return e == Epilogue::kGelu || e == Epilogue::kBiasGelu;
}
bool has_bias(Epilogue e) {
  return e == Epilogue::kBias || e == Epilogue::kBiasGelu;
}
bool is_bias_grad(Epilogue e) {
  return e == Epilogue::kBiasGradA || e == Epilogue::kBiasGradB;
}

using blu::test::ScopedEnv;

// ---- one problem on every path ------------------------------------------------------------------
enum class PathOutcome { kNotRun, kChecked, kRefused, kFailed };

struct CaseResult {
  bool failed = false;
  bool cuda_broken = false;  // a CUDA error: the context cannot be trusted after this
  std::string report;        // the failure description (empty when fine)
  PathOutcome outcome[4] = {};
  int relative_only_failures = 0;  // elements a bound without the absolute floor would flag
};

constexpr GemmPath kPaths[4] = {GemmPath::kAuto, GemmPath::kSimt, GemmPath::kSm80Mma,
                                GemmPath::kSm90Wgmma};

class CaseRunner {
 public:
  // Problems with at most max_full outputs are checked in full, larger ones on samples.
  CaseRunner(Arena* arena, int64_t max_full) : arena_(arena), max_full_(max_full) {}

  CaseResult run(RandomGemm g) {
    CaseResult res;
    arena_->reset();
    const blu::test::GemmBufferBytes bytes = blu::test::buffer_bytes(g);
    const blublas::GemmDesc& d = g.desc;
    char* a = arena_->take(bytes.a);
    char* b = arena_->take(bytes.b);
    char* c = bytes.c ? arena_->take(bytes.c) : nullptr;
    char* dd = arena_->take(bytes.d);
    char* c0 = d.beta != 0.0f && g.c_aliases_d ? arena_->take(bytes.d) : nullptr;
    char* aux = bytes.aux ? arena_->take(bytes.aux) : nullptr;
    char* bias = bytes.bias ? arena_->take(bytes.bias) : nullptr;
    char* grad = bytes.bias_grad ? arena_->take(bytes.bias_grad) : nullptr;
    if (!a || !b || !dd || (bytes.c && !c) || (bytes.aux && !aux) || (bytes.bias && !bias) ||
        (bytes.bias_grad && !grad) || (d.beta != 0.0f && g.c_aliases_d && !c0)) {
      return fail(res, g, "the test arena is too small for this problem");
    }
    const uint64_t seed = g.seed * 1000003ull + static_cast<uint64_t>(g.index) * 7919ull;
    // Inputs: NaN everywhere, then values at the elements the problem reads.
    cudaMemset(a, 0xFF, bytes.a);
    cudaMemset(b, 0xFF, bytes.b);
    bool ok = fill(a, d.ab_type, g.a, d.batch, seed + 1, g.input_scale) &&
              fill(b, d.ab_type, g.b, d.batch, seed + 2, g.input_scale);
    // C: in its own buffer, or (aliasing) in c0, copied over D before every run.
    char* c_buf = g.c_aliases_d ? c0 : c;
    const MatrixPlace& c_place = g.c_aliases_d ? g.d : g.c;
    const std::size_t c_bytes = g.c_aliases_d ? bytes.d : bytes.c;
    if (d.beta != 0.0f) {
      cudaMemset(c_buf, 0xFF, c_bytes);
      ok = ok && fill(c_buf, d.cd_type, c_place, d.batch, seed + 3, g.input_scale);
    }
    if (g.aux_read) {
      cudaMemset(aux, 0xFF, bytes.aux);
      ok = ok && fill(aux, d.cd_type, g.aux, d.batch, seed + 4, 2.0f);
    }
    if (bias) {
      MatrixPlace bp;
      bp.rows = 1;
      bp.cols = d.n;
      bp.ld = d.n;
      bp.offset = g.bias_offset;
      bp.elems = g.bias_offset + d.n;
      cudaMemset(bias, 0xFF, bytes.bias);
      ok = ok && fill(bias, d.cd_type, bp, 1, seed + 5, g.input_scale);
    }
    if (!ok || cudaDeviceSynchronize() != cudaSuccess) return broken(res, g, "input fill failed");
    blu::test::bind_buffers(&g, a, b, c, dd, aux, bias, reinterpret_cast<float*>(grad));

    // Host copies of what the bound needs, the reference of the sampled elements.
    const HostBuf h_c = d.beta != 0.0f ? download(c_buf, d.cd_type, c_bytes) : HostBuf{};
    const HostBuf h_aux_in = g.aux_read ? download(aux, d.cd_type, bytes.aux) : HostBuf{};
    const HostBuf h_bias = bias ? download(bias, d.cd_type, bytes.bias) : HostBuf{};
    const std::vector<blu::test::GemmSample> samples =
        blu::test::gemm_samples(d.batch, d.m, d.n, max_full_, 2000, seed);
    std::vector<blu::test::GemmRefValue> ref;
    const std::string ref_err = blu::test::gemm_reference(d, samples, &ref);
    if (!ref_err.empty()) return broken(res, g, "reference: " + ref_err);
    std::vector<double> grad_want;
    if (is_bias_grad(d.epilogue)) {
      const std::string e =
          blu::test::gemm_operand_sums(d, d.epilogue == Epilogue::kBiasGradA, &grad_want);
      if (!e.empty()) return broken(res, g, "bias-gradient reference: " + e);
    }
    const std::vector<uint8_t> d_inside = inside_mask(g.d, d.batch);
    const std::vector<uint8_t> aux_inside =
        g.aux_written ? inside_mask(g.aux, d.batch) : std::vector<uint8_t>{};
    // D's bytes before every run: the poison, or C's values (aliasing) with poisoned padding.
    const std::vector<uint8_t> d_before =
        d.beta != 0.0f && g.c_aliases_d ? h_c.bytes : std::vector<uint8_t>(bytes.d, 0xFF);

    for (int pi = 0; pi < 4; ++pi) {
      std::ostringstream why;
      const PathOutcome o =
          run_path(g, pi, c0, dd, aux, grad, bytes, samples, ref, grad_want, h_c, c_place, h_aux_in,
                   h_bias, d_inside, aux_inside, d_before, &res, why);
      res.outcome[pi] = o;
      if (o == PathOutcome::kFailed) {
        res.failed = true;
        res.report += "\n  " + std::string(blublas::gemm_path_name(kPaths[pi])) + ": " + why.str();
      }
      if (res.cuda_broken) break;
    }
    if (res.failed) res.report = "FAILED " + g.describe() + res.report;
    return res;
  }

 private:
  CaseResult& fail(CaseResult& res, const RandomGemm& g, const std::string& why) {
    res.failed = true;
    res.report = "FAILED " + g.describe() + "\n  " + why;
    return res;
  }
  CaseResult& broken(CaseResult& res, const RandomGemm& g, const std::string& why) {
    res.cuda_broken = true;
    return fail(res, g, why + " (" + cudaGetErrorString(cudaGetLastError()) + ")");
  }

  PathOutcome run_path(RandomGemm& g, int pi, const char* c0, char* dd, char* aux, char* grad,
                       const blu::test::GemmBufferBytes& bytes,
                       const std::vector<blu::test::GemmSample>& samples,
                       const std::vector<blu::test::GemmRefValue>& ref,
                       const std::vector<double>& grad_want, const HostBuf& h_c,
                       const MatrixPlace& c_place, const HostBuf& h_aux_in, const HostBuf& h_bias,
                       const std::vector<uint8_t>& d_inside, const std::vector<uint8_t>& aux_inside,
                       const std::vector<uint8_t>& d_before, CaseResult* res,
                       std::ostringstream& why) {
    blublas::GemmDesc d = g.desc;
    d.path = kPaths[pi];
    // Outputs back to their state before the call.
    if (c0 != nullptr) {
      cudaMemcpy(dd, c0, bytes.d, cudaMemcpyDeviceToDevice);
    } else {
      cudaMemset(dd, 0xFF, bytes.d);
    }
    if (g.aux_written) cudaMemset(aux, 0xFF, bytes.aux);
    if (grad != nullptr) cudaMemset(grad, 0xFF, bytes.bias_grad);
    const bool sm90 = d.path == GemmPath::kSm90Wgmma;
    ScopedEnv tile("BLUBLAS_SM90_TILE", sm90 ? g.sm90_tile : "");
    ScopedEnv splits("BLUBLAS_SM90_SPLITS",
                     sm90 && g.sm90_splits > 0 ? std::to_string(g.sm90_splits) : "");
    ScopedEnv generic("BLUBLAS_SM90_GENERIC_EPILOGUE", sm90 && g.sm90_generic_epilogue ? "1" : "");
    ScopedEnv stream_k("BLUBLAS_SM90_STREAMK", sm90 && g.sm90_stream_k == 1 ? "1" : "");
    const bool sm80 = d.path == GemmPath::kSm80Mma;
    ScopedEnv sm80_splits("BLUBLAS_SM80_SPLITS", sm80 && g.sm80_splits > 0 ? std::to_string(g.sm80_splits) : "");

    std::size_t ws_bytes = 0;
    const Status q = blublas::gemm_workspace_size(d, &ws_bytes);
    if (!q.ok()) {
      const bool refusal = q.code() == StatusCode::kMisaligned ||
                           q.code() == StatusCode::kNotSupported ||
                           q.code() == StatusCode::kUnsupportedArch;
      if (d.path != GemmPath::kAuto && refusal) return PathOutcome::kRefused;
      why << "workspace query: " << q.to_string();
      return PathOutcome::kFailed;
    }
    GemmPath ran = d.path;
    if (d.path == GemmPath::kAuto) (void)blublas::gemm_selected_path(d, &ran);
    char* ws = arena_->take(ws_bytes + 1, static_cast<std::size_t>(g.workspace_offset));
    if (ws == nullptr) {
      why << "the test arena has no room for " << ws_bytes << " workspace bytes";
      return PathOutcome::kFailed;
    }
    const Status st = blublas::gemm(d, ws, ws_bytes, nullptr);
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      res->cuda_broken = true;
      why << "CUDA error " << cudaGetErrorString(e)
          << " (path ran: " << blublas::gemm_path_name(ran) << ")";
      return PathOutcome::kFailed;
    }
    if (!st.ok()) {
      why << "gemm() after an accepted workspace query: " << st.to_string();
      return PathOutcome::kFailed;
    }
    const blublas::GemmDesc& gd = g.desc;
    const HostBuf h_d = download(dd, gd.cd_type, bytes.d);
    const HostBuf h_aux = g.aux_written ? download(aux, gd.cd_type, bytes.aux) : HostBuf{};
    if (h_d.bytes.size() != bytes.d || h_aux.bytes.size() != (g.aux_written ? bytes.aux : 0)) {
      res->cuda_broken = true;
      why << "downloading D / aux failed";
      return PathOutcome::kFailed;
    }
    std::vector<float> h_grad(grad ? bytes.bias_grad / 4 : 0);
    if (grad) cudaMemcpy(h_grad.data(), grad, bytes.bias_grad, cudaMemcpyDeviceToHost);
    why << "(path ran: " << blublas::gemm_path_name(ran) << ", workspace " << ws_bytes << " bytes)";

    int bad = 0;
    auto report_bad = [&](const std::string& s) {
      if (++bad <= 5) why << "\n    " << s;
    };
    // Padding keeps its bytes; every element inside is finite (written).
    const std::size_t es = blublas::dtype_size(gd.cd_type);
    for (std::size_t i = 0; i < d_inside.size(); ++i) {
      if (!d_inside[i]) {
        if (std::memcmp(&h_d.bytes[i * es], &d_before[i * es], es) != 0) {
          report_bad("d written outside M x N at buffer element " + std::to_string(i));
        }
      } else if (!std::isfinite(h_d.get(static_cast<int64_t>(i)))) {
        report_bad("d not finite (unwritten?) at buffer element " + std::to_string(i) + ": " +
                   std::to_string(h_d.get(static_cast<int64_t>(i))));
      }
    }
    for (std::size_t i = 0; i < aux_inside.size(); ++i) {
      if (!aux_inside[i]) {
        for (std::size_t k = 0; k < es; ++k) {
          if (h_aux.bytes[i * es + k] != 0xFF) {
            report_bad("aux written outside M x N at buffer element " + std::to_string(i));
            break;
          }
        }
      }
    }
    // The elements against the float64 reference.
    const blu::test::GemmElementKind kind = is_gelu(gd.epilogue) ? blu::test::GemmElementKind::kGelu
                                            : gd.epilogue == Epilogue::kGeluGrad
                                                ? blu::test::GemmElementKind::kGeluGrad
                                                : blu::test::GemmElementKind::kPlain;
    int mant_exp = 0;
    const bool alpha_pow2 = std::frexp(static_cast<double>(gd.alpha), &mant_exp) == 0.5 ||
                            std::frexp(static_cast<double>(gd.alpha), &mant_exp) == -0.5;
    const bool exact = gd.k == 1 && gd.ab_type != Dtype::kF32 && gd.beta == 0.0f && alpha_pow2 &&
                       (gd.epilogue == Epilogue::kNone || is_bias_grad(gd.epilogue));
    const double tol = blu::test::gemm_tol(gd.ab_type, gd.compute);
    const double rel = blu::test::gemm_round_rel(gd.cd_type);
    const double floor = blu::test::gemm_round_abs(gd.cd_type);
    int relative_only = 0;
    for (std::size_t s = 0; s < samples.size(); ++s) {
      const auto& smp = samples[s];
      const int64_t di = g.d.index(smp.batch, smp.i, smp.j);
      double pre = gd.alpha * ref[s].acc, scale = std::fabs(gd.alpha) * ref[s].abs;
      if (gd.beta != 0.0f) {
        const double cv = h_c.get(c_place.index(smp.batch, smp.i, smp.j));
        pre += gd.beta * cv;
        scale += std::fabs(gd.beta * cv);
      }
      if (has_bias(gd.epilogue)) {
        const double bv = h_bias.get(g.bias_offset + smp.j);
        pre += bv;
        scale += std::fabs(bv);
      }
      const double aux_in = g.aux_read ? h_aux_in.get(g.aux.index(smp.batch, smp.i, smp.j)) : 0.0;
      const blu::test::GemmElementBound eb = blu::test::gemm_element_bound(
          kind, pre, scale, aux_in, gd.ab_type, gd.compute, gd.cd_type);
      const double got = h_d.get(di);
      double want = eb.want, bound = eb.bound;
      if (exact) {  // the fp32 product is exact: one rounding to D's dtype
        want = round_to(gd.cd_type, static_cast<float>(pre));
        bound = 0.0;
      }
      if (!(std::fabs(got - eb.want) <= tol * scale + rel * std::fabs(eb.want))) ++relative_only;
      if (!(std::fabs(got - want) <= bound)) {
        std::ostringstream os;
        os.precision(9);
        os << "d(batch " << smp.batch << ", i " << smp.i << ", j " << smp.j << "): got " << got
           << " want " << want << (exact ? " (exactly: K = 1)" : "") << " |err| "
           << std::fabs(got - want) << " bound " << bound << " scale " << scale;
        report_bad(os.str());
      }
      if (g.aux_written) {
        const double ga = h_aux.get(g.aux.index(smp.batch, smp.i, smp.j));
        const double ab = tol * scale + rel * std::fabs(pre) + floor;
        if (!(std::fabs(ga - pre) <= ab)) {
          std::ostringstream os;
          os.precision(9);
          os << "aux(batch " << smp.batch << ", i " << smp.i << ", j " << smp.j << "): got " << ga
             << " want " << pre << " bound " << ab;
          report_bad(os.str());
        }
      }
    }
    res->relative_only_failures = std::max(res->relative_only_failures, relative_only);
    for (std::size_t r = 0; r < grad_want.size() && r < h_grad.size(); ++r) {
      const double bound = 1e-6 * gd.k * g.input_scale + 1e-6;
      if (!(std::fabs(h_grad[r] - grad_want[r]) <= bound)) {
        std::ostringstream os;
        os.precision(9);
        os << "bias_grad[" << r << "]: got " << h_grad[r] << " want " << grad_want[r] << " bound "
           << bound;
        report_bad(os.str());
      }
    }
    if (bad > 0) {
      why << "\n    " << bad << " bad element(s) of " << samples.size() << " checked";
      return PathOutcome::kFailed;
    }
    return PathOutcome::kChecked;
  }

  Arena* arena_;
  int64_t max_full_;
};

// ---- the run -----------------------------------------------------------------------------------
int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::strtoll(v, nullptr, 10);
}

struct Tally {
  int64_t run = 0, failed = 0;
};

void write_report(const std::string& path, const std::map<std::string, Tally>& by_precision,
                  const int64_t (&checked)[4], const int64_t (&refused)[4],
                  const int64_t (&failed)[4], uint64_t seed, int64_t requested, double seconds) {
  std::ofstream out(path);
  if (!out) {
    ADD_FAILURE() << "cannot write the report " << path;
    return;
  }
  Tally total;
  out << "{\"metrics\": {";
  for (const auto& [name, t] : by_precision) {
    out << "\"gemm." << name << ".cases_run\": " << t.run << ", \"gemm." << name
        << ".cases_failed\": " << t.failed << ", ";
    total.run += t.run;
    total.failed += t.failed;
  }
  for (int pi = 0; pi < 4; ++pi) {
    const std::string p = std::string("gemm.property.") + blublas::gemm_path_name(kPaths[pi]);
    out << "\"" << p << ".checked\": " << checked[pi] << ", \"" << p
        << ".refused\": " << refused[pi] << ", \"" << p << ".failed\": " << failed[pi] << ", ";
  }
  out << "\"gemm.property.cases_run\": " << total.run
      << ", \"gemm.property.cases_failed\": " << total.failed << "}, \"seed\": " << seed
      << ", \"requested\": " << requested << ", \"seconds\": " << seconds << "}\n";
}

TEST(GemmPropertyGpu, RandomProblems) {
  BLU_REQUIRE_GPU();
  const int64_t requested = env_int("BLU_GEMM_PROPERTY_CASES", 6000);
  const uint64_t seed = static_cast<uint64_t>(env_int("BLU_GEMM_PROPERTY_SEED", 11));
  const int64_t only = env_int("BLU_GEMM_PROPERTY_ONLY", -1);
  const double max_seconds = static_cast<double>(env_int("BLU_GEMM_PROPERTY_SECONDS", 100));
  Arena arena(size_t{1} << 30);
  ASSERT_TRUE(arena.ok()) << "cudaMalloc of the 1 GiB test arena failed";
  CaseRunner runner(&arena, 32768);

  std::map<std::string, Tally> by_precision = {
      {"fp32", {}}, {"tf32", {}}, {"bf16", {}}, {"f16", {}}};
  int64_t checked[4] = {}, refused[4] = {}, failed[4] = {};
  int printed = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double seconds = 0.0;
  int64_t cases = 0;
  for (int64_t i = only >= 0 ? only : 0; i < (only >= 0 ? only + 1 : requested); ++i) {
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (seconds > max_seconds) break;
    const RandomGemm g = blu::test::random_gemm(seed, static_cast<int>(i));
    const CaseResult r = runner.run(g);
    ++cases;
    Tally& t = by_precision[precision_of(g)];
    ++t.run;
    for (int pi = 0; pi < 4; ++pi) {
      if (r.outcome[pi] == PathOutcome::kChecked) ++checked[pi];
      if (r.outcome[pi] == PathOutcome::kRefused) ++refused[pi];
      if (r.outcome[pi] == PathOutcome::kFailed) ++failed[pi];
    }
    if (r.failed) {
      ++t.failed;
      if (++printed <= 25) {
        ADD_FAILURE() << r.report << "\n  rerun alone: BLU_GEMM_PROPERTY_SEED=" << seed
                      << " BLU_GEMM_PROPERTY_ONLY=" << i;
      }
    }
    if (r.cuda_broken) {
      ADD_FAILURE() << "stopping: a CUDA error leaves the context unusable";
      break;
    }
  }
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t total_failed = 0;
  std::printf("gemm property: seed %llu, %lld of %lld problems in %.1f s\n",
              static_cast<unsigned long long>(seed), static_cast<long long>(cases),
              static_cast<long long>(only >= 0 ? 1 : requested), seconds);
  for (const auto& [name, t] : by_precision) {
    std::printf("  %-5s %6lld problems, %lld failed\n", name.c_str(), static_cast<long long>(t.run),
                static_cast<long long>(t.failed));
    total_failed += t.failed;
  }
  for (int pi = 0; pi < 4; ++pi) {
    std::printf("  path %-10s checked %6lld, refused %6lld, failed %lld\n",
                blublas::gemm_path_name(kPaths[pi]), static_cast<long long>(checked[pi]),
                static_cast<long long>(refused[pi]), static_cast<long long>(failed[pi]));
  }
  if (const char* report = std::getenv("BLU_GEMM_PROPERTY_REPORT"); report && *report) {
    write_report(report, by_precision, checked, refused, failed, seed, requested, seconds);
  }
  EXPECT_EQ(total_failed, 0) << total_failed << " of " << cases << " problems failed (first "
                             << std::min(printed, 25) << " printed above)";
  if (only < 0) {
    EXPECT_GE(cases, std::min<int64_t>(requested, 5000))
        << "stopped after " << seconds << " s (BLU_GEMM_PROPERTY_SECONDS): too few problems";
  }
  EXPECT_GT(checked[0], 0);
}

// The two problems of issue 11 as reported (tight leading dimensions, so kAuto repacks B, and A
// at M = 4099), on every path: bit for bit at K = 1, within the bound at K = 2; prints how many
// elements a bound without the absolute floor would have flagged (Note [GEMM bound near
// underflow]).
TEST(GemmPropertyGpu, Issue11ReportedProblems) {
  BLU_REQUIRE_GPU();
  Arena arena(size_t{256} << 20);
  ASSERT_TRUE(arena.ok());
  CaseRunner runner(&arena, int64_t{1} << 20);  // 64 x 1536 in full
  for (int which = 0; which < 2; ++which) {
    const RandomGemm g = blu::test::issue11_gemm(which);
    const CaseResult r = runner.run(g);
    EXPECT_FALSE(r.failed) << r.report;
    std::printf("issue 11 problem %d (%s): %d element(s) outside a bound without the f16 floor\n",
                which, g.describe().c_str(), r.relative_only_failures);
    int accepted = 0;
    for (int pi = 0; pi < 4; ++pi) accepted += r.outcome[pi] == PathOutcome::kChecked;
    EXPECT_GE(accepted, 1);
    if (r.cuda_broken) break;
  }
}

}  // namespace
