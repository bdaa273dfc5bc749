// gemm_sm90_gpu_test.cu: the sm_90a wgmma GEMM path (blublas/src/gemm/sm90_*), forced, against a
// float64 reference on fresh random inputs: bf16 / f16 / tf32, all four operand-major pairs, odd
// sizes (edge tiles, K not a multiple of the tile), batches, every epilogue, forced tiles (the
// simple 1-consumer one and the ping-pong schedule with many tiles per CTA included), split-K (and
// its determinism: two runs, same bits), the misalignment error, and the public API with the path
// forced (row- and column-major).
// Every output is poisoned (NaN) first; the padding columns of D must stay poisoned; each checked
// element must satisfy |got - ref| <= tol * (|alpha| sum_k |a||b| + |beta c| + |bias|).
// Skips with a message unless the device is sm_90 and the build holds sm_90a code.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../../blublas/src/gemm/sm90_heuristics.h"
#include "blublas/gemm.h"
#include "common/gpu_test.h"

namespace {

using blublas::Dtype;
using blublas::Epilogue;
using blublas::Status;
using blublas::StatusCode;
using blublas::gemm_detail::GemmProblem;
namespace sm90 = blublas::gemm_detail::sm90;

// ---- host-side typed buffers ----------------------------------------------------------------------
struct HostMat {
  Dtype type = Dtype::kF32;
  std::vector<uint8_t> bytes;
  double get(std::size_t i) const {
    if (type == Dtype::kF32) {
      float v;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      return v;
    }
    uint16_t raw;
    std::memcpy(&raw, bytes.data() + 2 * i, 2);
    if (type == Dtype::kBF16) {
      __nv_bfloat16_raw r;
      r.x = raw;
      return static_cast<double>(__bfloat162float(__nv_bfloat16(r)));
    }
    __half_raw r;
    r.x = raw;
    return static_cast<double>(__half2float(__half(r)));
  }
};

HostMat random_mat(Dtype t, std::size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  HostMat m;
  m.type = t;
  m.bytes.resize(n * blublas::dtype_size(t));
  for (std::size_t i = 0; i < n; ++i) {
    const float v = dist(rng);
    if (t == Dtype::kF32) {
      std::memcpy(m.bytes.data() + 4 * i, &v, 4);
    } else if (t == Dtype::kBF16) {
      __nv_bfloat16_raw r = __nv_bfloat16(__float2bfloat16(v));
      std::memcpy(m.bytes.data() + 2 * i, &r.x, 2);
    } else {
      __half_raw r = __half(__float2half(v));
      std::memcpy(m.bytes.data() + 2 * i, &r.x, 2);
    }
  }
  return m;
}

struct DevBuf {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  explicit DevBuf(std::size_t n) : bytes(n) {
    if (n > 0 && cudaMalloc(&ptr, n) != cudaSuccess) ptr = nullptr;
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (ptr) cudaFree(ptr);
  }
};

bool upload(DevBuf& d, const HostMat& h) {
  return d.ptr && cudaMemcpy(d.ptr, h.bytes.data(), h.bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess;
}

HostMat download(const DevBuf& d, Dtype t) {
  HostMat h;
  h.type = t;
  h.bytes.resize(d.bytes);
  if (cudaMemcpy(h.bytes.data(), d.ptr, d.bytes, cudaMemcpyDeviceToHost) != cudaSuccess) h.bytes.clear();
  return h;
}

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Skip reason when the path cannot run here (no GPU handled by BLU_REQUIRE_GPU).
std::string sm90_unavailable(blublas::DeviceInfo* dev) {
  Status st = blublas::current_device_info(dev);
  if (!st.ok()) return "device query failed: " + st.to_string();
  if (dev->sm_major != 9 || dev->sm_minor != 0) {
    return "device is sm_" + std::to_string(dev->sm_major) + std::to_string(dev->sm_minor) +
           ", the wgmma path needs sm_90";
  }
  return "";
}

#define BLU_REQUIRE_SM90(dev)                                   \
  BLU_REQUIRE_GPU();                                            \
  blublas::DeviceInfo dev;                                      \
  do {                                                          \
    std::string why_ = sm90_unavailable(&dev);                  \
    if (!why_.empty()) GTEST_SKIP() << "sm90 test skipped: " << why_; \
  } while (0)

const char* dname(Dtype t) { return blublas::dtype_name(t); }
const char* ename(Epilogue e) { return blublas::epilogue_name(e); }

double gelu_grad_ref(double x) {  // d/dx of gelu_ref (the tanh form)
  const double k = 0.7978845608028654, c3 = 0.044715;
  const double t = std::tanh(k * (x + c3 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c3 * x * x);
}

double gelu_ref(double x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}

// ---- one case --------------------------------------------------------------------------------------
struct Case {
  Dtype ab = Dtype::kBF16, cd = Dtype::kF32;
  int m = 17, n = 17, k = 17, batch = 1;
  bool a_k = true, b_k = true;
  Epilogue epi = Epilogue::kNone;
  bool aux = true;  // kGelu: store aux or not
  float alpha = 1.0f, beta = 0.0f;
  int tile = -1, splits = 0;  // forced plan (-1 / 0: heuristic)
  bool check_determinism = false;
  bool odd_ldd = false;   // odd ldd: the generic epilogue's scalar (unpaired) store path
  bool even_ldd = false;  // even, not 16-byte ldd: the generic epilogue's paired stores
  bool generic_epi = false;  // force the staged generic epilogue (not the TMA-store one)
  bool c_in_place = false;   // beta != 0 with C = D (D holds C before the call, guards poisoned)
  bool misaligned_bias = false;  // the bias one element past an aligned address (no pair loads)
  int epi_ahead = -1;            // Note [sm90 epilogue loads ahead]: -1 default, 0 off, 1 on
  int max_ctas = 0;              // Note [GEMM CTA budget]: 0 one CTA per SM
  std::vector<uint8_t>* bits = nullptr;  // receives D's bytes when set
  std::vector<uint8_t>* bgrad_bits = nullptr;  // receives bias_grad's bytes when set
  int fused_bias_grad = -1;      // Note [sm90 fused bias gradient]: -1 default, 0 off, 1 on
  int stream_k = -1;             // Note [sm90 stream-K]: -1 the cost model, 0 off, 1 on where allowed
  std::string str() const {
    std::ostringstream os;
    os << "ab=" << dname(ab) << " cd=" << dname(cd) << " M=" << m << " N=" << n << " K=" << k
       << " batch=" << batch << " A'" << (a_k ? "K-major" : "MN-major") << " B'"
       << (b_k ? "K-major" : "MN-major") << " epi=" << ename(epi) << (aux ? "" : "(no aux)")
       << " alpha=" << alpha << " beta=" << beta << " tile="
       << (tile >= 0 ? sm90::sm90_tile_name(static_cast<sm90::Sm90Tile>(tile)) : "auto")
       << " splits=" << (splits > 0 ? std::to_string(splits) : "auto")
       << (odd_ldd ? " odd ldd" : "") << (even_ldd ? " even ldd" : "") << (generic_epi ? " generic-epilogue" : "")
       << (c_in_place ? " C=D" : "") << (misaligned_bias ? " misaligned bias" : "")
       << (max_ctas > 0 ? " max_ctas=" + std::to_string(max_ctas) : "")
       << (fused_bias_grad >= 0 ? " fused_bias_grad=" + std::to_string(fused_bias_grad) : "")
       << (stream_k >= 0 ? " stream_k=" + std::to_string(stream_k) : "");
    return os.str();
  }
};

double tol_for(Dtype ab, Dtype cd) {
  double t = ab == Dtype::kF32 ? 2.5e-3 : (ab == Dtype::kBF16 ? 1e-2 : 4e-3);
  if (cd == Dtype::kBF16) t = std::max(t, 1e-2);
  if (cd == Dtype::kF16) t = std::max(t, 2e-3);
  return t;
}

void run_case(const Case& c, const blublas::DeviceInfo& dev) {
  SCOPED_TRACE(c.str());

  std::mt19937 rng(12345u + c.m * 7u + c.n * 13u + c.k * 17u + static_cast<unsigned>(c.ab) * 3u +
                   static_cast<unsigned>(c.epi) * 101u + (c.a_k ? 1u : 0u) + (c.b_k ? 2u : 0u));
  const std::size_t es = blublas::dtype_size(c.ab);
  const int64_t align_elems = 16 / static_cast<int64_t>(es);
  // Stored shapes: A' K-major -> m rows of k; MN-major -> k rows of m. Pad lds by one 16B chunk.
  const int64_t a_rows = c.a_k ? c.m : c.k, a_inner = c.a_k ? c.k : c.m;
  const int64_t b_rows = c.b_k ? c.n : c.k, b_inner = c.b_k ? c.k : c.n;
  const int64_t lda = round_up(a_inner, align_elems) + align_elems;
  const int64_t ldb = round_up(b_inner, align_elems) + align_elems;
  // Poisoned guard columns after each row. Default: ldd a multiple of 8 elements (16-byte rows:
  // the TMA-store epilogue can take 16-bit D); even_ldd: even but not 16-byte (the generic
  // epilogue's paired stores); odd_ldd: odd (its scalar stores).
  int64_t ldd = round_up(c.n, 8) + 8;
  if (c.even_ldd) ldd = (round_up(c.n, 2) + 2) % 8 == 0 ? round_up(c.n, 2) + 4 : round_up(c.n, 2) + 2;
  if (c.odd_ldd) ldd = c.n + 3;
  const int64_t stride_a = c.batch > 1 ? a_rows * lda + align_elems : 0;
  const int64_t stride_b = c.batch > 1 ? b_rows * ldb : 0;
  const int64_t stride_d = c.batch > 1 ? c.m * ldd + (c.odd_ldd ? 5 : (c.even_ldd ? 6 : 8)) : 0;
  const std::size_t a_count = static_cast<std::size_t>(c.batch > 1 ? stride_a * c.batch : a_rows * lda);
  const std::size_t b_count = static_cast<std::size_t>(c.batch > 1 ? stride_b * c.batch : b_rows * ldb);
  const std::size_t d_count = static_cast<std::size_t>(c.batch > 1 ? stride_d * c.batch : c.m * ldd);

  HostMat ha = random_mat(c.ab, a_count, rng);
  HostMat hb = random_mat(c.ab, b_count, rng);
  HostMat hc = random_mat(c.cd, d_count, rng);
  // misaligned_bias: element 0 is padding and the bias starts at element 1.
  const std::size_t bias_at = c.misaligned_bias ? 1 : 0;
  HostMat hbias = random_mat(c.cd, static_cast<std::size_t>(c.n) + bias_at, rng);
  DevBuf da(ha.bytes.size()), db(hb.bytes.size()), dc(hc.bytes.size()), dbias(hbias.bytes.size());
  DevBuf dd(d_count * blublas::dtype_size(c.cd)), daux(d_count * blublas::dtype_size(c.cd));
  DevBuf dbg(static_cast<std::size_t>(std::max(c.m, c.n)) * 4);
  ASSERT_TRUE(upload(da, ha) && upload(db, hb) && upload(dc, hc) && upload(dbias, hbias));
  ASSERT_TRUE(dd.ptr && daux.ptr && dbg.ptr);

  GemmProblem p;
  p.m = c.m; p.n = c.n; p.k = c.k; p.batch = c.batch;
  p.ab_type = c.ab; p.cd_type = c.cd;
  p.compute = c.ab == Dtype::kF32 ? blublas::ComputeMode::kTF32 : blublas::ComputeMode::kDefault;
  p.a = da.ptr; p.lda = lda; p.stride_a = stride_a; p.a_k_major = c.a_k;
  p.b = db.ptr; p.ldb = ldb; p.stride_b = stride_b; p.b_k_major = c.b_k;
  p.c = c.beta == 0.0f ? nullptr : c.c_in_place ? dd.ptr : dc.ptr; p.ldc = ldd; p.stride_c = stride_d;
  // C = D: D starts as C with NaN (0xFF) guard columns, so the guard check below still holds.
  HostMat hc_in_d = hc;
  if (c.c_in_place) {
    const std::size_t ces = blublas::dtype_size(c.cd);
    for (int b = 0; b < c.batch; ++b)
      for (int i = 0; i < c.m; ++i)
        for (int64_t j = c.n; j < ldd; ++j)
          std::memset(hc_in_d.bytes.data() + (b * stride_d + i * ldd + j) * ces, 0xFF, ces);
  }
  p.d = dd.ptr; p.ldd = ldd; p.stride_d = stride_d;
  p.alpha = c.alpha; p.beta = c.beta;
  p.epilogue = c.epi;
  const bool has_bias = c.epi == Epilogue::kBias || c.epi == Epilogue::kBiasGelu;
  const bool has_gelu = c.epi == Epilogue::kBiasGelu || c.epi == Epilogue::kGelu;
  const bool has_aux = has_gelu && c.aux;
  const bool gelu_grad = c.epi == Epilogue::kGeluGrad;  // aux is an input: D = pre * gelu'(aux)
  const HostMat haux_in = random_mat(c.cd, d_count, rng);
  const bool bias_grad = c.epi == Epilogue::kBiasGradA || c.epi == Epilogue::kBiasGradB;
  p.bias = has_bias ? static_cast<char*>(dbias.ptr) + bias_at * blublas::dtype_size(c.cd) : nullptr;
  p.bias_per_col = true;
  p.aux = has_aux || gelu_grad ? daux.ptr : nullptr; p.ld_aux = ldd; p.stride_aux = stride_d;
  p.bias_grad = bias_grad ? static_cast<float*>(dbg.ptr) : nullptr;
  p.max_ctas = c.max_ctas;

  Status st = blublas::gemm_detail::sm90_gemm_supports(p, dev);
  ASSERT_TRUE(st.ok()) << st.to_string();
  sm90::Sm90Override force;
  force.tile = c.tile;
  force.splits = c.splits;
  force.generic_epilogue = c.generic_epi;
  force.c_through_tma = 1;  // Note [sm90 C through TMA] (on by default; forced against the environment)
  force.epi_ahead = c.epi_ahead;
  force.fused_bias_grad = c.fused_bias_grad;
  force.stream_k = c.stream_k;
  if (c.stream_k == 1) {  // the forced mode is taken (else the comparisons are vacuous)
    EXPECT_TRUE(sm90::choose_plan(p, dev, force).stream_k);
  }
  const std::size_t ws_bytes = sm90::workspace_bytes_with(p, dev, force);
  DevBuf ws(ws_bytes);
  ASSERT_TRUE(ws_bytes == 0 || ws.ptr != nullptr) << "workspace of " << ws_bytes << " bytes";

  auto run_once = [&]() -> HostMat {
    if (c.c_in_place) {
      EXPECT_TRUE(upload(dd, hc_in_d));
    } else {
      EXPECT_EQ(cudaMemset(dd.ptr, 0xFF, dd.bytes), cudaSuccess);
    }
    if (gelu_grad) {
      EXPECT_TRUE(upload(daux, haux_in));
    } else {
      EXPECT_EQ(cudaMemset(daux.ptr, 0xFF, daux.bytes), cudaSuccess);
    }
    EXPECT_EQ(cudaMemset(dbg.ptr, 0xFF, dbg.bytes), cudaSuccess);
    Status s = sm90::run_with(p, dev, force, ws.ptr, ws_bytes, nullptr);
    EXPECT_TRUE(s.ok()) << s.to_string();
    cudaError_t e = cudaDeviceSynchronize();
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    return download(dd, c.cd);
  };
  HostMat got = run_once();
  ASSERT_FALSE(got.bytes.empty());
  if (c.bits != nullptr) *c.bits = got.bytes;
  HostMat got_aux = download(daux, c.cd);
  HostMat got_bg = download(dbg, Dtype::kF32);
  if (c.bgrad_bits != nullptr) *c.bgrad_bits = got_bg.bytes;

  auto a_at = [&](int b, int i, int kk) {
    return ha.get(static_cast<std::size_t>(b * stride_a + (c.a_k ? i * lda + kk : kk * lda + i)));
  };
  auto b_at = [&](int b, int kk, int j) {
    return hb.get(static_cast<std::size_t>(b * stride_b + (c.b_k ? j * ldb + kk : kk * ldb + j)));
  };

  // Which elements to check: all when small, else a sample plus the last row and column.
  std::vector<std::array<int, 3>> pts;
  const double work = static_cast<double>(c.m) * c.n * c.k * c.batch;
  if (work <= 4e7) {
    for (int b = 0; b < c.batch; ++b)
      for (int i = 0; i < c.m; ++i)
        for (int j = 0; j < c.n; ++j) pts.push_back({b, i, j});
  } else {
    std::uniform_int_distribution<int> di(0, c.m - 1), dj(0, c.n - 1), dbt(0, c.batch - 1);
    for (int s = 0; s < 2000; ++s) pts.push_back({dbt(rng), di(rng), dj(rng)});
    for (int j = 0; j < c.n; j += std::max(1, c.n / 200)) pts.push_back({c.batch - 1, c.m - 1, j});
    for (int i = 0; i < c.m; i += std::max(1, c.m / 200)) pts.push_back({c.batch - 1, i, c.n - 1});
    pts.push_back({0, 0, 0});
    pts.push_back({c.batch - 1, c.m - 1, c.n - 1});
  }
  const double tol = tol_for(c.ab, c.cd);
  int bad = 0;
  double worst = 0.0;
  for (const auto& q : pts) {
    const int b = q[0], i = q[1], j = q[2];
    double acc = 0.0, mag = 0.0;
    for (int kk = 0; kk < c.k; ++kk) {
      const double x = a_at(b, i, kk) * b_at(b, kk, j);
      acc += x;
      mag += std::fabs(x);
    }
    const std::size_t di = static_cast<std::size_t>(b * stride_d + static_cast<int64_t>(i) * ldd + j);
    double pre = c.alpha * acc, scale = std::fabs(c.alpha) * mag;
    if (c.beta != 0.0f) {
      pre += c.beta * hc.get(di);
      scale += std::fabs(c.beta * hc.get(di));
    }
    if (has_bias) {
      pre += hbias.get(static_cast<std::size_t>(j) + bias_at);
      scale += std::fabs(hbias.get(static_cast<std::size_t>(j) + bias_at));
    }
    double ref = has_gelu ? gelu_ref(pre) : pre;
    if (gelu_grad) {
      const double g = gelu_grad_ref(haux_in.get(di));
      ref = pre * g;
      scale *= std::max(1.0, std::fabs(g));
    }
    const double bound = tol * (scale + 1e-6) * (has_gelu ? 1.2 : 1.0);
    const double v = got.get(di);
    const double err = std::fabs(v - ref);
    bool ok = std::isfinite(v) && err <= bound;
    if (has_aux) {
      const double va = got_aux.get(di);
      ok = ok && std::isfinite(va) && std::fabs(va - pre) <= tol * (scale + 1e-6);
    }
    if (std::isfinite(v)) worst = std::max(worst, err / (scale + 1e-6));
    if (!ok && ++bad <= 10) {
      ADD_FAILURE() << "D[b=" << b << "][i=" << i << "][j=" << j << "] = " << v << ", expected "
                    << ref << " (|err| " << err << " > bound " << bound << ")"
                    << (has_aux ? " aux=" + std::to_string(got_aux.get(di)) +
                                      " expected pre=" + std::to_string(pre)
                                : "");
    }
  }
  // Poison checks: every D element written (finite), every guard column untouched (NaN).
  int unwritten = 0, clobbered = 0;
  for (int b = 0; b < c.batch; ++b) {
    for (int i = 0; i < c.m; ++i) {
      for (int j = 0; j < ldd; ++j) {
        const double v = got.get(static_cast<std::size_t>(b * stride_d + static_cast<int64_t>(i) * ldd + j));
        if (j < c.n && !std::isfinite(v) && ++unwritten <= 5) {
          ADD_FAILURE() << "D[b=" << b << "][i=" << i << "][j=" << j << "] not written (" << v << ")";
        }
        if (j >= c.n && !std::isnan(v) && ++clobbered <= 5) {
          ADD_FAILURE() << "guard D[b=" << b << "][i=" << i << "][j=" << j << "] overwritten (" << v << ")";
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << bad << " of " << pts.size() << " checked elements out of bounds; worst err/scale " << worst;
  EXPECT_EQ(unwritten, 0);
  EXPECT_EQ(clobbered, 0);

  if (bias_grad) {
    const bool over_a = c.epi == Epilogue::kBiasGradA;
    const int len = over_a ? c.m : c.n;
    int bg_bad = 0;
    for (int r = 0; r < len; ++r) {
      double s = 0.0, mag = 0.0;
      for (int kk = 0; kk < c.k; ++kk) {
        const double x = over_a ? a_at(0, r, kk) : b_at(0, kk, r);
        s += x;
        mag += std::fabs(x);
      }
      const double v = got_bg.get(static_cast<std::size_t>(r));
      if (!(std::fabs(v - s) <= 1e-5 * mag + 1e-6) && ++bg_bad <= 5) {
        ADD_FAILURE() << "bias_grad[" << r << "] = " << v << ", expected " << s;
      }
    }
    EXPECT_EQ(bg_bad, 0);
  }

  if (c.check_determinism) {
    HostMat again = run_once();
    ASSERT_EQ(again.bytes.size(), got.bytes.size());
    EXPECT_EQ(std::memcmp(again.bytes.data(), got.bytes.data(), got.bytes.size()), 0)
        << "two runs gave different bits";
    if (bias_grad) {
      HostMat bg_again = download(dbg, Dtype::kF32);
      EXPECT_EQ(std::memcmp(bg_again.bytes.data(), got_bg.bytes.data(), got_bg.bytes.size()), 0)
          << "two runs gave different bias-gradient bits";
    }
  }
}

// `on` and `off` (one switch apart), each against float64 (run_case), `on` twice; the bytes that
// `field` captures (D's or the bias gradient's) bit for bit the same.
void expect_same_bits(Case on, Case off, std::vector<uint8_t>* Case::*field,
                      const blublas::DeviceInfo& dev, const char* what) {
  std::vector<uint8_t> a, b;
  on.*field = &a;
  on.check_determinism = true;
  run_case(on, dev);
  off.*field = &b;
  off.check_determinism = false;
  run_case(off, dev);
  ASSERT_EQ(a.size(), b.size()) << on.str();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0) << what << ": " << on.str();
}

// c with the second staging tile (epi_ahead: C / aux loads ahead, GELU's aux buffer) and without.
void expect_epi_ahead_keeps_the_bits(Case c, const blublas::DeviceInfo& dev, const char* what) {
  Case off = c;
  c.epi_ahead = 1;
  off.epi_ahead = 0;
  expect_same_bits(c, off, &Case::bits, dev, what);
}

constexpr int kSimple = static_cast<int>(sm90::Sm90Tile::k128x128_1c);
constexpr int kWide = static_cast<int>(sm90::Sm90Tile::k128x256_2c);
constexpr int kNarrow = static_cast<int>(sm90::Sm90Tile::k128x128_2c);
constexpr int kCluster2 = static_cast<int>(sm90::Sm90Tile::k128x256_2c_cl2);
constexpr int kPingPong64 = static_cast<int>(sm90::Sm90Tile::k64x256_pp);
constexpr int kTile192 = static_cast<int>(sm90::Sm90Tile::k192x192_3c);

// ---- tests -------------------------------------------------------------------------------------------
TEST(GemmSm90Gpu, SimpleTileBf16AllMajors) {
  BLU_REQUIRE_SM90(dev);
  for (int mj = 0; mj < 4; ++mj) {
    Case c;
    c.ab = Dtype::kBF16;
    c.cd = Dtype::kF32;
    c.m = 129; c.n = 130; c.k = 200;
    c.a_k = (mj & 1) == 0;
    c.b_k = (mj & 2) == 0;
    c.tile = kSimple;
    run_case(c, dev);
  }
}

TEST(GemmSm90Gpu, AllTilesAllMajorsOddSizes) {
  BLU_REQUIRE_SM90(dev);
  const int sizes[][3] = {{1, 1, 1}, {17, 17, 17}, {129, 1000, 129}, {1000, 17, 1000}, {4099, 129, 17}};
  for (Dtype ab : {Dtype::kBF16, Dtype::kF16}) {
    for (int tile : {kSimple, kWide, kNarrow, kCluster2, kPingPong64, kTile192}) {
      for (int mj = 0; mj < 4; ++mj) {
        for (const auto& s : sizes) {
          Case c;
          c.ab = ab;
          c.cd = ab;
          c.m = s[0]; c.n = s[1]; c.k = s[2];
          c.a_k = (mj & 1) == 0;
          c.b_k = (mj & 2) == 0;
          c.tile = tile;
          run_case(c, dev);
        }
      }
    }
  }
}

TEST(GemmSm90Gpu, GenericEpilogueAllMajors) {
  BLU_REQUIRE_SM90(dev);
  for (int tile : {kSimple, kWide, kCluster2, kPingPong64, kTile192}) {
    for (int mj = 0; mj < 4; ++mj) {
      Case c;
      c.ab = Dtype::kBF16;
      c.cd = Dtype::kBF16;
      c.m = 257; c.n = 300; c.k = 129;
      c.a_k = (mj & 1) == 0;
      c.b_k = (mj & 2) == 0;
      c.tile = tile;
      c.generic_epi = true;
      run_case(c, dev);
    }
  }
}

TEST(GemmSm90Gpu, Tf32AllMajors) {
  BLU_REQUIRE_SM90(dev);
  const int sizes[][3] = {{1, 1, 1}, {17, 33, 19}, {129, 1000, 129}, {1000, 129, 1001}};
  for (int tile : {kSimple, kWide, kNarrow, kCluster2, kPingPong64, kTile192}) {
    for (int mj = 0; mj < 4; ++mj) {
      for (const auto& s : sizes) {
        Case c;
        c.ab = Dtype::kF32;
        c.cd = Dtype::kF32;
        c.m = s[0]; c.n = s[1]; c.k = s[2];
        c.a_k = (mj & 1) == 0;
        c.b_k = (mj & 2) == 0;
        c.tile = tile;
        run_case(c, dev);
      }
    }
  }
}

TEST(GemmSm90Gpu, OutputTypesAlphaBeta) {
  BLU_REQUIRE_SM90(dev);
  for (Dtype ab : {Dtype::kBF16, Dtype::kF16}) {
    for (Dtype cd : {Dtype::kF32, Dtype::kBF16, Dtype::kF16}) {
      Case c;
      c.ab = ab; c.cd = cd;
      c.m = 300; c.n = 257; c.k = 333;
      c.alpha = 0.75f; c.beta = -0.5f;
      c.a_k = true; c.b_k = false;
      c.odd_ldd = cd == Dtype::kF16;
      c.even_ldd = cd == Dtype::kBF16;
      run_case(c, dev);
    }
  }
  Case t;
  t.ab = Dtype::kF32; t.cd = Dtype::kF32;
  t.m = 200; t.n = 100; t.k = 77; t.alpha = 2.0f; t.beta = 0.5f;
  run_case(t, dev);
}

// Note [sm90 C through TMA]: beta != 0 on the TMA-store epilogue, every tile, 16-bit and f32 D,
// C in its own buffer and C = D (the chunked weight gradient's in-place accumulation), 2-d and
// 3-d maps, with a bias, edge tiles in M and N (N a multiple of 8 elements so the path engages),
// and the same problems through the generic epilogue.
TEST(GemmSm90Gpu, CThroughTma) {
  BLU_REQUIRE_SM90(dev);
  for (int tile : {kSimple, kWide, kNarrow, kCluster2, kPingPong64, kTile192}) {
    for (Dtype cd : {Dtype::kF32, Dtype::kBF16}) {
      for (int variant = 0; variant < 4; ++variant) {
        Case c;
        c.ab = Dtype::kBF16; c.cd = cd;
        c.m = 300; c.n = 520; c.k = 200;
        c.batch = variant == 2 ? 2 : 1;
        c.a_k = variant != 1; c.b_k = variant == 1;
        c.alpha = 1.0f; c.beta = variant == 3 ? -0.5f : 1.0f;
        c.c_in_place = variant != 3;
        c.epi = variant == 3 ? Epilogue::kBias : Epilogue::kNone;
        c.tile = tile;
        c.check_determinism = variant == 0;
        run_case(c, dev);
        c.generic_epi = true;
        run_case(c, dev);
      }
    }
  }
  // kGeluGrad (aux read through TMA the same way), every tile, with a bias on one of them.
  for (int tile : {kSimple, kWide, kNarrow, kCluster2, kPingPong64, kTile192}) {
    for (Dtype cd : {Dtype::kF32, Dtype::kBF16}) {
      Case c;
      c.ab = Dtype::kBF16; c.cd = cd;
      c.m = 300; c.n = 520; c.k = 200;
      c.a_k = true; c.b_k = false;
      c.epi = Epilogue::kGeluGrad;
      c.tile = tile;
      run_case(c, dev);
      c.generic_epi = true;
      run_case(c, dev);
    }
  }
  // tf32 (f32 in, f32 out), the ping-pong tile with several units per CTA.
  Case t;
  t.ab = Dtype::kF32; t.cd = Dtype::kF32;
  t.m = 2100; t.n = 1032; t.k = 96; t.beta = 1.0f; t.c_in_place = true;
  t.tile = kPingPong64;
  run_case(t, dev);
}

// Note [sm90 epilogue bias prefetch]: the pass's column-bias pairs loaded ahead, on every tile,
// 16-bit and f32 D, a pair-aligned bias and one a single element off (scalar loads), with GELU,
// N = 520 (a last tile of 8 columns: pairs past N read as 0) and M with an edge tile.
TEST(GemmSm90Gpu, EpilogueBiasPrefetch) {
  BLU_REQUIRE_SM90(dev);
  for (int tile : {kSimple, kWide, kNarrow, kCluster2, kPingPong64, kTile192}) {
    for (Dtype cd : {Dtype::kF32, Dtype::kBF16}) {
      for (int variant = 0; variant < 3; ++variant) {
        Case c;
        c.ab = Dtype::kBF16; c.cd = cd;
        c.m = 300; c.n = 520; c.k = 136;
        c.a_k = true; c.b_k = variant == 2;
        c.epi = variant == 1 ? Epilogue::kBiasGelu : Epilogue::kBias;
        c.misaligned_bias = variant == 2;
        c.tile = tile;
        run_case(c, dev);
      }
    }
  }
  Case h;  // f16 D, misaligned
  h.ab = Dtype::kF16; h.cd = Dtype::kF16;
  h.m = 129; h.n = 264; h.k = 64; h.epi = Epilogue::kBias; h.misaligned_bias = true; h.tile = kPingPong64;
  run_case(h, dev);
}

TEST(GemmSm90Gpu, Batched) {
  BLU_REQUIRE_SM90(dev);
  for (Dtype ab : {Dtype::kBF16, Dtype::kF32}) {
    for (int mj = 0; mj < 4; ++mj) {
      Case c;
      c.ab = ab; c.cd = Dtype::kF32;
      c.m = 65; c.n = 129; c.k = 100; c.batch = 3;
      c.a_k = (mj & 1) == 0;
      c.b_k = (mj & 2) == 0;
      c.beta = 1.0f;
      run_case(c, dev);
    }
  }
  for (int tile : {kWide, kCluster2, kPingPong64, kTile192}) {  // TMA-store epilogue, 3-d maps
    Case c;
    // 16-bit D on kTile192: one-box store passes (Note [sm90 epilogue pass width]), and
    // N = 200 puts 8 columns in a second tile (Note [sm90 192x192 tile]).
    c.ab = Dtype::kF16;
    c.cd = tile == kWide || tile == kPingPong64 || tile == kTile192 ? Dtype::kF16 : Dtype::kF32;
    c.m = 300; c.n = 200; c.k = 64; c.batch = 2;
    c.a_k = false; c.b_k = true;
    c.epi = Epilogue::kBiasGelu;
    c.tile = tile;
    run_case(c, dev);
  }
}

TEST(GemmSm90Gpu, Epilogues) {
  BLU_REQUIRE_SM90(dev);
  for (Dtype cd : {Dtype::kBF16, Dtype::kF32}) {
    for (Epilogue e : {Epilogue::kBias, Epilogue::kBiasGelu, Epilogue::kGelu, Epilogue::kBiasGradA,
                       Epilogue::kBiasGradB}) {
      for (int variant = 0; variant < 3; ++variant) {  // TMA-store epilogue, generic, split-K
        const int splits = variant == 2 ? 3 : 1;
        Case c;
        c.generic_epi = variant == 1;
        c.even_ldd = variant == 1;
        c.ab = Dtype::kBF16; c.cd = cd;
        // N = 520 (a multiple of 8) lets 16-bit D take the TMA-store epilogue; N = 517 cannot
        // (TMA stores whole 16-byte chunks) and must fall back to the generic one.
        c.m = 300; c.n = variant == 0 ? 520 : 517; c.k = 1000;
        c.a_k = false; c.b_k = true;
        c.epi = e;
        c.splits = splits;
        c.beta = e == Epilogue::kBias ? 0.5f : 0.0f;
        run_case(c, dev);
      }
    }
  }
  for (int n : {517, 520}) {  // 16-bit D, N % 8 != 0 must not take the TMA-store path
    Case c;
    c.ab = Dtype::kF16; c.cd = Dtype::kF16;
    c.m = 130; c.n = n; c.k = 72;
    c.epi = Epilogue::kGelu;
    c.tile = kCluster2;
    run_case(c, dev);
  }
  Case noaux;
  noaux.odd_ldd = true;
  noaux.epi = Epilogue::kGelu;
  noaux.aux = false;
  noaux.m = 100; noaux.n = 70; noaux.k = 64;
  run_case(noaux, dev);
  for (int n : {202, 204}) {  // f32 D: TMA-store epilogue only when N % 4 == 0
    Case c;
    c.ab = Dtype::kBF16; c.cd = Dtype::kF32;
    c.m = 200; c.n = n; c.k = 96;
    c.epi = Epilogue::kBiasGelu;
    run_case(c, dev);
  }
  Case tf;
  tf.ab = Dtype::kF32; tf.cd = Dtype::kF32; tf.epi = Epilogue::kBiasGelu;
  tf.m = 130; tf.n = 200; tf.k = 99; tf.a_k = false; tf.b_k = false;
  run_case(tf, dev);
}

TEST(GemmSm90Gpu, SplitKDeterministic) {
  BLU_REQUIRE_SM90(dev);
  // Forced splits on odd shapes, every tile.
  for (int tile : {kSimple, kWide, kNarrow, kCluster2, kPingPong64, kTile192}) {
    Case c;
    c.ab = Dtype::kBF16; c.cd = Dtype::kBF16;
    c.m = 200; c.n = 300; c.k = 4099;
    c.a_k = false; c.b_k = false;
    c.tile = tile; c.splits = 5;
    c.check_determinism = true;
    run_case(c, dev);
  }
  // The GPT-2 dW shapes with the heuristic's choice (split-K or stream-K), bf16 and tf32.
  for (Dtype ab : {Dtype::kBF16, Dtype::kF32}) {
    Case c;
    c.ab = ab; c.cd = ab == Dtype::kF32 ? Dtype::kF32 : Dtype::kBF16;
    c.m = 768; c.n = 2304; c.k = 16384;
    c.a_k = false; c.b_k = false;
    c.check_determinism = true;
    run_case(c, dev);
  }
}

// Ping-pong (Note [sm90 ping-pong]): many work units per CTA (so both consumer warpgroups take
// several turns), K not a multiple of the stage ring, and forced uneven splits (13 k-blocks in 3
// splits: 4, 4, 5), so the ring skipping of the other warpgroup's k-blocks is exercised at every
// ring offset; every epilogue kind through both epilogue paths.
TEST(GemmSm90Gpu, PingPongManyUnits) {
  BLU_REQUIRE_SM90(dev);
  for (int tile : {kPingPong64}) {
    for (int splits : {1, 3}) {
      for (Dtype ab : {Dtype::kBF16, Dtype::kF32}) {
        Case c;
        c.ab = ab; c.cd = ab == Dtype::kF32 ? Dtype::kF32 : Dtype::kBF16;
        c.m = 3001; c.n = 1999; c.k = ab == Dtype::kF32 ? 389 : 777;
        c.a_k = true; c.b_k = ab == Dtype::kF32;
        c.tile = tile; c.splits = splits;
        c.check_determinism = splits > 1;
        run_case(c, dev);
      }
    }
  }
  for (int tile : {kPingPong64}) {
    for (Epilogue e : {Epilogue::kBias, Epilogue::kBiasGelu, Epilogue::kGelu, Epilogue::kBiasGradA,
                       Epilogue::kBiasGradB}) {
      for (int variant = 0; variant < 2; ++variant) {  // TMA-store epilogue, generic
        Case c;
        c.ab = Dtype::kBF16; c.cd = Dtype::kBF16;
        c.m = 2100; c.n = variant == 0 ? 1032 : 1031; c.k = 200;  // > 1 unit per CTA
        c.a_k = false; c.b_k = true;
        c.epi = e;
        c.generic_epi = variant == 1;
        c.beta = e == Epilogue::kBias ? 0.5f : 0.0f;
        c.tile = tile;
        run_case(c, dev);
      }
    }
  }
}

// Note [sm90 epilogue loads ahead]: the ping-pong tile with several units a warpgroup (M = 8000:
// 625 units on 132 CTAs, so each warpgroup's later units load their C / aux while its earlier
// stores may still read the buffers), kGeluGrad and beta != 0 (in place, and with a bias), bf16,
// f16 and f32 D (f32: four passes, the third and fourth loads reusing the buffers, and N = 1184,
// whose last tile has three), an N whose last tile has one pass only, batches, tf32; each checked
// against float64 with the loads ahead and without, and the two bit for bit. (Whether a launch
// took the loads-ahead path is not visible from outside: the launcher takes it for every
// ping-pong problem that loads C or aux, which all of these do.)
TEST(GemmSm90Gpu, EpilogueLoadsAhead) {
  BLU_REQUIRE_SM90(dev);
  const std::pair<Dtype, Dtype> types[] = {{Dtype::kBF16, Dtype::kBF16}, {Dtype::kBF16, Dtype::kF32},
                                           {Dtype::kF16, Dtype::kF16}, {Dtype::kF32, Dtype::kF32}};
  for (const auto& [ab, cd] : types) {
    for (int variant = 0; variant < 4; ++variant) {
      Case c;
      c.ab = ab; c.cd = cd;
      c.m = 8000; c.k = ab == Dtype::kF32 ? 96 : 200;
      c.n = variant != 2 ? 1032 : cd == Dtype::kF32 ? 1184 : 1096;
      c.batch = variant == 3 ? 2 : 1;
      c.a_k = true; c.b_k = ab == Dtype::kF32 || variant == 1;
      c.epi = variant == 0 ? Epilogue::kGeluGrad : variant == 2 ? Epilogue::kBias : Epilogue::kNone;
      c.beta = variant == 0 ? 0.0f : variant == 2 ? -0.5f : 1.0f;
      c.c_in_place = variant == 1 || variant == 3;
      c.tile = kPingPong64;
      expect_epi_ahead_keeps_the_bits(c, dev, "loads ahead changed the bits");
    }
  }
}

// Note [sm90 fused bias gradient]: kBiasGradA of an MN-major 16-bit A summed by the kernel's
// producer warps, on every tile that has it (one, two and three 64-row panels, ping-pong), bf16 and
// f16, M not a multiple of 64, K giving one chunk, an odd number of k-blocks (the last chunk one
// stage deep, its tail zero-filled) and many chunks, forced splits whose boundaries fall on chunk
// boundaries (fused) and one that does not (the separate pass): each against float64 (run_case) and
// bit for bit against the separate pass (Note [Fixed-order bias-gradient reduction]), twice for
// determinism.
TEST(GemmSm90Gpu, FusedBiasGradKeepsTheBits) {
  BLU_REQUIRE_SM90(dev);
  // max_ctas: a few CTAs, so each runs many units (the bias warps' ring and phase across units,
  // the ping-pong alternation, chunks spread over the column tiles).
  struct Shape { int m, n, k, splits, max_ctas; };
  const Shape shapes[] = {{300, 136, 100, 1, 0}, {771, 264, 130, 1, 0}, {200, 72, 1000, 1, 0},
                          {450, 520, 1024, 2, 0}, {131, 200, 2048, 4, 0}, {260, 136, 960, 3, 0},
                          {517, 1032, 1000, 1, 2}, {389, 776, 640, 2, 3}};
  for (int tile : {kSimple, kWide, kNarrow, kPingPong64, kTile192}) {
    for (Dtype ab : {Dtype::kBF16, Dtype::kF16}) {
      for (const Shape& sh : shapes) {
        Case c;
        c.ab = ab; c.cd = Dtype::kF32;
        c.m = sh.m; c.n = sh.n; c.k = sh.k;
        c.a_k = false; c.b_k = false;
        c.epi = Epilogue::kBiasGradA;
        c.tile = tile;
        c.splits = sh.splits;
        c.max_ctas = sh.max_ctas;
        {  // the fused path is taken where expected (else the comparison below is vacuous)
          blublas::gemm_detail::GemmProblem q;
          q.m = c.m; q.n = c.n; q.k = c.k; q.ab_type = q.b_type = ab; q.a_k_major = false;
          q.epilogue = Epilogue::kBiasGradA;
          const int kblocks = (c.k + 63) / 64;
          const bool even = sh.splits == 1 || (kblocks % 2 == 0 && kblocks / sh.splits % 2 == 0 &&
                                               kblocks % sh.splits == 0);
          EXPECT_EQ(sm90::sm90_fuses_bias_grad(q, static_cast<sm90::Sm90Tile>(tile), sh.splits, false), even)
              << c.str();
        }
        Case separate = c;
        c.fused_bias_grad = 1;
        separate.fused_bias_grad = 0;
        expect_same_bits(c, separate, &Case::bgrad_bits, dev, "the fused bias gradient differs from the separate pass");
      }
    }
  }
}

// Note [sm90 GELU epilogue]: with the second staging tile (aux_buffer, the ping-pong tile; it rides
// on epi_ahead) aux is staged there while D is staged in the first, and the D pass starts from the
// pre-activation the aux pass left in the accumulators. Several units a warpgroup (M = 8000), with
// and without the bias, alpha 1 and not, GELU with and without aux, an N whose last tile has one
// pass, bf16, f16 and f32 D: each against float64 (aux too) with the second tile and without, bit for bit.
TEST(GemmSm90Gpu, GeluAuxSecondTile) {
  BLU_REQUIRE_SM90(dev);
  const std::pair<Dtype, Dtype> types[] = {{Dtype::kBF16, Dtype::kBF16}, {Dtype::kF16, Dtype::kF16},
                                           {Dtype::kBF16, Dtype::kF32}};
  for (const auto& [ab, cd] : types) {
    for (int variant = 0; variant < 3; ++variant) {
      Case c;
      c.ab = ab; c.cd = cd;
      c.m = 8000; c.k = 200;
      c.n = variant == 1 ? 1096 : 1032;
      c.a_k = true; c.b_k = variant == 2;
      c.epi = variant == 2 ? Epilogue::kGelu : Epilogue::kBiasGelu;
      c.aux = variant != 1 || cd != Dtype::kBF16;  // one run without aux
      c.alpha = variant == 0 ? 1.0f : 0.75f;
      c.tile = kPingPong64;
      expect_epi_ahead_keeps_the_bits(c, dev, "the second tile changed the bits");
    }
  }
}

// Note [sm90 plain epilogue]: the plain pass (alpha 1, no bias) and the lean pass (alpha 1, column
// bias) store the bits the generic epilogue stores (alpha * acc + bias with alpha 1 is acc + bias),
// and so does the general pass with alpha 0.5 (an exact product, so no fused-multiply-add question);
// with one K split every tile sums each element in the same k order, so all tiles agree bit for
// bit too. bf16 and f32 D, two operand majors, N with a partial last tile; each run also checked
// against float64 by run_case.
TEST(GemmSm90Gpu, PlainAndLeanPassesKeepTheBits) {
  BLU_REQUIRE_SM90(dev);
  for (Dtype cd : {Dtype::kBF16, Dtype::kF32}) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool bias = variant % 2 == 1;
      const float alpha = variant < 2 ? 1.0f : 0.5f;
      for (int mj = 0; mj < 2; ++mj) {
        std::vector<uint8_t> first;
        for (int tile : {kWide, kNarrow, kPingPong64, kTile192, kSimple, kCluster2}) {
          for (bool generic : {false, true}) {
            Case c;
            c.ab = Dtype::kBF16; c.cd = cd;
            c.m = 700; c.n = 584; c.k = 320;  // 584 = 2 x 256 + 72: a partial last tile
            c.a_k = true; c.b_k = mj == 0;
            c.epi = bias ? Epilogue::kBias : Epilogue::kNone;
            c.alpha = alpha;
            c.tile = tile; c.splits = 1;
            c.generic_epi = generic;
            std::vector<uint8_t> got;
            c.bits = &got;
            run_case(c, dev);
            if (first.empty()) {
              first = got;
              continue;
            }
            ASSERT_EQ(first.size(), got.size()) << c.str();
            EXPECT_EQ(std::memcmp(first.data(), got.data(), got.size()), 0)
                << "bits differ from the 128x256 TMA-store run: " << c.str();
          }
        }
      }
    }
  }
}

// Note [GEMM CTA budget]: a grid capped at 5 CTAs (2 clusters and a half for the 2-CTA tiles) or
// 1 runs every unit on fewer CTAs: the same units, so D (and the bias gradient) bit for bit as on
// the full grid, and each within the float64 bound; the cooperative and ping-pong tiles, split-K.
TEST(GemmSm90Gpu, CtaBudgetKeepsTheBits) {
  BLU_REQUIRE_SM90(dev);
  for (int variant = 0; variant < 4; ++variant) {
    Case c;
    c.ab = Dtype::kBF16; c.cd = variant == 1 ? Dtype::kF32 : Dtype::kBF16;
    c.m = 1500; c.n = 1032; c.k = variant == 1 ? 1200 : 200;
    c.a_k = variant != 2; c.b_k = true;
    c.tile = variant >= 2 ? kPingPong64 : -1;
    c.splits = variant == 1 ? 3 : 0;
    c.epi = variant == 2 ? Epilogue::kBiasGradA : variant == 3 ? Epilogue::kGeluGrad : Epilogue::kNone;
    c.beta = variant == 0 ? 0.5f : 0.0f;
    std::vector<uint8_t> full;
    c.bits = &full;
    run_case(c, dev);
    for (int ctas : {5, 1}) {
      std::vector<uint8_t> few;
      c.max_ctas = ctas;
      c.bits = &few;
      run_case(c, dev);
      ASSERT_EQ(full.size(), few.size()) << c.str();
      EXPECT_EQ(std::memcmp(full.data(), few.data(), full.size()), 0) << "the CTA budget changed the bits: " << c.str();
    }
  }
}

// Note [sm90 stream-K]: forced on every tile that takes it, odd shapes, odd k-block counts (one
// k-block granularity) and even ones (two), output types and epilogues, each against float64 and
// run twice for the same bits; under CTA budgets (a launched CTA runs several partition CTAs, in
// descending order) bit for bit as on the full grid; the fused bias gradient bit for bit against
// the separate pass; bf16 and f16 (tf32 and FP8 have no stream-K kernels).
TEST(GemmSm90Gpu, StreamKKeepsTheBits) {
  BLU_REQUIRE_SM90(dev);
  struct Shape { int m, n, k; };
  const Shape shapes[] = {{200, 300, 4099}, {131, 72, 1000}, {768, 768, 16384}, {1500, 1032, 2048},
                          {64, 64, 2560}, {1000, 520, 1100}};
  const Epilogue epis[] = {Epilogue::kNone, Epilogue::kBias, Epilogue::kBiasGelu};
  int variant = 0;
  for (int tile : {kSimple, kWide, kNarrow, kTile192}) {
    for (const Shape& sh : shapes) {
      Case c;
      c.ab = variant % 5 == 4 ? Dtype::kF16 : Dtype::kBF16;
      c.cd = variant % 2 == 0 ? Dtype::kF32 : c.ab;
      c.m = sh.m; c.n = sh.n; c.k = sh.k;
      c.a_k = variant % 3 != 0; c.b_k = variant % 4 != 1;
      c.epi = epis[variant % 3];
      c.beta = variant % 7 == 3 ? 0.5f : 0.0f;
      c.tile = tile;
      c.stream_k = 1;
      ++variant;
      std::vector<uint8_t> full;
      c.bits = &full;
      c.check_determinism = true;
      run_case(c, dev);
      for (int ctas : {7, 1}) {
        if (ctas == 1 && static_cast<int64_t>(sh.m) * sh.n * sh.k > (int64_t{1} << 31)) continue;
        std::vector<uint8_t> few;
        Case b = c;
        b.max_ctas = ctas;
        b.bits = &few;
        b.check_determinism = false;
        run_case(b, dev);
        ASSERT_EQ(full.size(), few.size()) << b.str();
        EXPECT_EQ(std::memcmp(full.data(), few.data(), full.size()), 0)
            << "the CTA budget changed stream-K's bits: " << b.str();
      }
      if (tile != kSimple) {  // MN-major A: the fused bias gradient (even k-block counts only)
        Case on = c;
        on.a_k = false;
        on.cd = Dtype::kF32;
        on.epi = Epilogue::kBiasGradA;
        on.beta = 0.0f;
        on.bits = nullptr;
        Case off = on;
        on.fused_bias_grad = 1;
        off.fused_bias_grad = 0;
        expect_same_bits(on, off, &Case::bgrad_bits, dev, "stream-K's fused bias gradient differs from the separate pass");
      }
    }
  }
}

TEST(GemmSm90Gpu, MisalignedIsReported) {
  BLU_REQUIRE_SM90(dev);
  DevBuf a(1 << 16), b(1 << 16), d(1 << 16);
  ASSERT_TRUE(a.ptr && b.ptr && d.ptr);
  GemmProblem p;
  p.m = 17; p.n = 17; p.k = 17;
  p.ab_type = Dtype::kBF16; p.cd_type = Dtype::kF32;
  p.a = a.ptr; p.lda = 17;  // 34 bytes: not a multiple of 16
  p.b = b.ptr; p.ldb = 24;
  p.d = d.ptr; p.ldd = 17;
  Status st = blublas::gemm_detail::sm90_gemm_supports(p, dev);
  EXPECT_EQ(st.code(), StatusCode::kMisaligned) << st.to_string();
  EXPECT_NE(st.message().find("lda"), std::string::npos) << st.message();
  p.lda = 24;
  p.b = static_cast<const char*>(b.ptr) + 2;  // base not 16-byte aligned
  const Status st_base = blublas::gemm_detail::sm90_gemm_supports(p, dev);
  EXPECT_EQ(st_base.code(), StatusCode::kMisaligned) << st_base.to_string();

  // Through the public API with the path forced: the same error, before any launch.
  blublas::GemmDesc desc;
  desc.m = 17; desc.n = 17; desc.k = 17;
  desc.ab_type = Dtype::kBF16; desc.cd_type = Dtype::kF32;
  desc.a = a.ptr; desc.lda = 17;
  desc.b = b.ptr; desc.ldb = 24;
  desc.d = d.ptr; desc.ldd = 17;
  desc.path = blublas::GemmPath::kSm90Wgmma;
  const Status st_api = blublas::gemm(desc, nullptr, 0, nullptr);
  EXPECT_EQ(st_api.code(), StatusCode::kMisaligned) << st_api.to_string();
  // kAuto does not fail: it falls back to another path, or (gemm.cpp's operand repack) runs this
  // path on an aligned copy of the operand.
  desc.path = blublas::GemmPath::kAuto;
  blublas::GemmPath chosen = blublas::GemmPath::kAuto;
  const Status st_auto = blublas::gemm_selected_path(desc, &chosen);
  EXPECT_TRUE(st_auto.ok()) << st_auto.to_string();
}

// The public API, path forced, row- and column-major, all op pairs: normalization + this path.
TEST(GemmSm90Gpu, PublicApiForced) {
  BLU_REQUIRE_SM90(dev);
  std::mt19937 rng(99);
  const int m = 77, n = 130, k = 96;
  for (blublas::Layout layout : {blublas::Layout::kRowMajor, blublas::Layout::kColMajor}) {
    for (int ops = 0; ops < 4; ++ops) {
      const blublas::Op op_a = (ops & 1) ? blublas::Op::kT : blublas::Op::kN;
      const blublas::Op op_b = (ops & 2) ? blublas::Op::kT : blublas::Op::kN;
      SCOPED_TRACE(std::string(layout == blublas::Layout::kRowMajor ? "row" : "col") + " op_a=" +
                   (op_a == blublas::Op::kT ? "T" : "N") + " op_b=" + (op_b == blublas::Op::kT ? "T" : "N"));
      const bool row = layout == blublas::Layout::kRowMajor;
      // Stored shapes and leading dims (padded to 16 bytes).
      const int a_r = op_a == blublas::Op::kN ? m : k, a_c = op_a == blublas::Op::kN ? k : m;
      const int b_r = op_b == blublas::Op::kN ? k : n, b_c = op_b == blublas::Op::kN ? n : k;
      const int64_t lda = round_up(row ? a_c : a_r, 8), ldb = round_up(row ? b_c : b_r, 8);
      const int64_t ldd = row ? n : m;
      HostMat ha = random_mat(Dtype::kBF16, static_cast<std::size_t>(lda * (row ? a_r : a_c)), rng);
      HostMat hb = random_mat(Dtype::kBF16, static_cast<std::size_t>(ldb * (row ? b_r : b_c)), rng);
      DevBuf da(ha.bytes.size()), db(hb.bytes.size()), dd(static_cast<std::size_t>(m) * n * 4);
      ASSERT_TRUE(upload(da, ha) && upload(db, hb) && dd.ptr);
      ASSERT_EQ(cudaMemset(dd.ptr, 0xFF, dd.bytes), cudaSuccess);
      auto at = [&](const HostMat& h, int64_t ld, int r, int cidx) {
        return h.get(static_cast<std::size_t>(row ? r * ld + cidx : cidx * ld + r));
      };
      blublas::GemmDesc desc;
      desc.m = m; desc.n = n; desc.k = k;
      desc.op_a = op_a; desc.op_b = op_b; desc.layout = layout;
      desc.ab_type = Dtype::kBF16; desc.cd_type = Dtype::kF32;
      desc.a = da.ptr; desc.lda = lda;
      desc.b = db.ptr; desc.ldb = ldb;
      desc.d = dd.ptr; desc.ldd = ldd;
      desc.path = blublas::GemmPath::kSm90Wgmma;
      std::size_t ws_bytes = 0;
      Status st = blublas::gemm_workspace_size(desc, &ws_bytes);
      ASSERT_TRUE(st.ok()) << st.to_string();
      DevBuf ws(ws_bytes);
      const Status st_run = blublas::gemm(desc, ws.ptr, ws_bytes, nullptr);
      ASSERT_TRUE(st_run.ok()) << st_run.to_string();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      HostMat got = download(dd, Dtype::kF32);
      int bad = 0;
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double acc = 0.0, mag = 0.0;
          for (int kk = 0; kk < k; ++kk) {
            const double x = (op_a == blublas::Op::kN ? at(ha, lda, i, kk) : at(ha, lda, kk, i)) *
                             (op_b == blublas::Op::kN ? at(hb, ldb, kk, j) : at(hb, ldb, j, kk));
            acc += x;
            mag += std::fabs(x);
          }
          const double v = got.get(static_cast<std::size_t>(row ? i * ldd + j : j * ldd + i));
          if (!(std::fabs(v - acc) <= 1e-2 * mag + 1e-6) && ++bad <= 5) {
            ADD_FAILURE() << "D(" << i << "," << j << ") = " << v << ", expected " << acc;
          }
        }
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

}  // namespace
