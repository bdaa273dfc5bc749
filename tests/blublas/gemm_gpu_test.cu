// gemm_gpu_test.cu: blublas::gemm against a float64 reference (support/gemm_reference.h) over a
// covering set of precisions (strict f32, tf32, bf16, f16; f32/bf16/f16 outputs), op pairs,
// layouts, batches, epilogues, forced paths and odd sizes (1, 17, 129, 1000, 4099), plus the kAuto
// fallback on misaligned operands and errors (never faults) from forced paths.
//
// Note [GEMM test bound]
// Every checked element satisfies |d - ref| <= tol * scale + round_out * |ref| where
// scale = |alpha| sum_k |a_ik||b_kj| + |beta c_ij| + |bias| and tol is 2e-6 for strict fp32,
// 2e-3 for tf32 (both operands rounded to 10-bit mantissas) and 1e-4 for 16-bit inputs (their
// products are exact in fp32: only accumulation error remains); round_out is D's dtype unit
// roundoff (bf16 2^-8, f16 2^-11). GELU adds its slope (< 1.13) to the pre-activation error.
// Outputs and the ld padding around them are poisoned with 0xFF bytes (NaN in every dtype)
// first; the padding must stay poisoned. Problems up to 2^20 outputs are checked in full, bigger
// ones on sampled elements including the whole last row and column.
#include <blublas/device_info.h>
#include <blublas/gemm.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <sstream>
#include <string>
#include <vector>

#include "common/gpu_test.h"
#include "support/gemm_reference.h"

namespace {

using blublas::ComputeMode;
using blublas::Dtype;
using blublas::Epilogue;
using blublas::GemmDesc;
using blublas::GemmPath;
using blublas::Layout;
using blublas::Op;
using blublas::StatusCode;

// ---- host-side element access ----------------------------------------------------------------------
float bf16_bits_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t float_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (finite inputs only)
  return static_cast<uint16_t>(u >> 16);
}

// The matrices here are f32/bf16/f16; FP8 operands are gemm_fp8_gpu_test.cu's.
#define BLU_FAIL_FP8() throw std::logic_error("gemm_gpu_test HostMatrix: FP8 is not this test's dtype")

struct HostMatrix {
  Dtype type = Dtype::kF32;
  std::vector<uint8_t> bytes;
  double get(size_t i) const {
    switch (type) {
      case Dtype::kBF16: { uint16_t b; std::memcpy(&b, &bytes[2 * i], 2); return bf16_bits_to_float(b); }
      case Dtype::kF16: { __half h; std::memcpy(&h, &bytes[2 * i], 2); return __half2float(h); }
      case Dtype::kE4M3:
      case Dtype::kE5M2: BLU_FAIL_FP8(); break;  // FP8 has its own test (gemm_fp8_gpu_test.cu)
      case Dtype::kF32: break;
    }
    float f;
    std::memcpy(&f, &bytes[4 * i], 4);
    return f;
  }
  void set(size_t i, float v) {
    switch (type) {
      case Dtype::kBF16: { uint16_t b = float_to_bf16_bits(v); std::memcpy(&bytes[2 * i], &b, 2); return; }
      case Dtype::kF16: { __half h = __float2half_rn(v); std::memcpy(&bytes[2 * i], &h, 2); return; }
      case Dtype::kE4M3:
      case Dtype::kE5M2: BLU_FAIL_FP8(); break;
      case Dtype::kF32: break;
    }
    std::memcpy(&bytes[4 * i], &v, 4);
  }
  bool poisoned(size_t i) const {
    const size_t s = blublas::dtype_size(type);
    for (size_t b = 0; b < s; ++b) {
      if (bytes[s * i + b] != 0xFF) return false;
    }
    return true;
  }
};

HostMatrix random_matrix(Dtype t, size_t n, std::mt19937_64& rng) {
  HostMatrix m{t, std::vector<uint8_t>(n * blublas::dtype_size(t))};
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (size_t i = 0; i < n; ++i) m.set(i, dist(rng));
  return m;
}

// A device buffer freed on scope exit.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (n && cudaMalloc(&p, n) != cudaSuccess) p = nullptr;
  }
  ~DeviceBuffer() { if (p) cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// ---- cases ---------------------------------------------------------------------------------------
struct Case {
  int m = 17, n = 33, k = 129, batch = 1;
  Op op_a = Op::kN, op_b = Op::kN;
  Layout layout = Layout::kRowMajor;
  Dtype ab = Dtype::kF32, cd = Dtype::kF32;
  ComputeMode compute = ComputeMode::kDefault;
  Epilogue epi = Epilogue::kNone;
  bool with_aux = true;  // kGelu: store the pre-activation?
  GemmPath path = GemmPath::kAuto;
  float alpha = 1.0f, beta = 0.0f;
  int ld_align = 1;      // leading dimensions are rounded up to a multiple of this (elements)
  int ld_pad = 3;        // then this many elements are added (0 keeps them tight)
  int batch_pad = 5;     // elements added to every batch stride
  uint64_t seed = 1;

  std::string name() const {
    std::ostringstream os;
    os << blublas::gemm_path_name(path) << " " << blublas::dtype_name(ab) << "->"
       << blublas::dtype_name(cd) << (compute == ComputeMode::kTF32 ? "(tf32)" : "") << " "
       << (op_a == Op::kT ? 'T' : 'N') << (op_b == Op::kT ? 'T' : 'N') << " "
       << (layout == Layout::kColMajor ? "col" : "row") << " M=" << m << " N=" << n << " K=" << k
       << " batch=" << batch << " epi=" << static_cast<int>(epi) << (with_aux ? "" : "(no aux)")
       << " alpha=" << alpha << " beta=" << beta << " ld_align=" << ld_align << " ld_pad=" << ld_pad;
    return os.str();
  }
};

// Stored shape of a matrix (rows x cols as it lies, before op) and its ld for the layout.
struct Shape {
  int64_t rows, cols, ld, stride, elems;
};
Shape shape_of(int64_t rows, int64_t cols, const Case& c) {
  Shape s{rows, cols, 0, 0, 0};
  const int64_t inner = c.layout == Layout::kRowMajor ? cols : rows;
  const int64_t outer = c.layout == Layout::kRowMajor ? rows : cols;
  s.ld = (inner + c.ld_align - 1) / c.ld_align * c.ld_align + c.ld_pad;
  s.stride = outer * s.ld + c.batch_pad;
  s.elems = s.stride * c.batch;
  return s;
}
int64_t index_of(const Shape& s, const Case& c, int b, int64_t r, int64_t col) {
  return b * s.stride + (c.layout == Layout::kRowMajor ? r * s.ld + col : col * s.ld + r);
}

bool is_gelu(Epilogue e) { return e == Epilogue::kGelu || e == Epilogue::kBiasGelu; }
bool has_bias(Epilogue e) { return e == Epilogue::kBias || e == Epilogue::kBiasGelu; }
bool reads_aux(Epilogue e) { return e == Epilogue::kGeluGrad; }

double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

double gelu_grad_ref(double x) {
  const double k = 0.7978845608028654, cc = 0.044715;
  const double t = std::tanh(k * (x + cc * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * cc * x * x);
}

double tol_of(const Case& c) {
  if (c.ab != Dtype::kF32) return 1e-4;
  return c.compute == ComputeMode::kTF32 ? 2e-3 : 2e-6;
}
double round_of(Dtype t) {
  return t == Dtype::kBF16 ? 1.0 / 256 : t == Dtype::kF16 ? 1.0 / 2048 : 2e-7;
}
// Absolute rounding floor of D's dtype: f16 subnormals (below 6.1e-5) are spaced 2^-24 apart.
double round_abs_of(Dtype t) { return t == Dtype::kF16 ? 6e-8 : 1e-30; }

enum class Outcome { kChecked, kSkipped };

// Runs one case and checks every (or every sampled) element. Returns kSkipped only for a forced
// sm_90 path that reports kNotSupported (printed).
Outcome run_case(const Case& c) {
  SCOPED_TRACE(c.name());
  std::mt19937_64 rng(c.seed * 7919 + static_cast<uint64_t>(c.m) * 31 + c.n * 17 + c.k);
  const Shape sa = c.op_a == Op::kN ? shape_of(c.m, c.k, c) : shape_of(c.k, c.m, c);
  const Shape sb = c.op_b == Op::kN ? shape_of(c.k, c.n, c) : shape_of(c.n, c.k, c);
  const Shape sd = shape_of(c.m, c.n, c);
  const bool use_c = c.beta != 0.0f;
  const bool use_aux = is_gelu(c.epi) && (c.with_aux || c.epi == Epilogue::kBiasGelu);
  const bool bias_grad = c.epi == Epilogue::kBiasGradA || c.epi == Epilogue::kBiasGradB;

  HostMatrix ha = random_matrix(c.ab, sa.elems, rng), hb = random_matrix(c.ab, sb.elems, rng);
  HostMatrix hc = use_c ? random_matrix(c.cd, sd.elems, rng) : HostMatrix{c.cd, {}};
  HostMatrix hbias = random_matrix(c.cd, c.n, rng);
  // kGeluGrad reads aux: random pre-activations in D's layout (the padding is never read).
  HostMatrix hauxin = reads_aux(c.epi) ? random_matrix(c.cd, sd.elems, rng) : HostMatrix{c.cd, {}};
  const size_t d_bytes = sd.elems * blublas::dtype_size(c.cd);
  const int grad_len = c.epi == Epilogue::kBiasGradA ? c.m : c.n;

  DeviceBuffer da(ha.bytes.size()), db(hb.bytes.size()), dc(hc.bytes.size()), dd(d_bytes),
      daux(use_aux || reads_aux(c.epi) ? d_bytes : 0), dbias(hbias.bytes.size()),
      dgrad(bias_grad ? grad_len * sizeof(float) : 0);
  EXPECT_TRUE(da.p && db.p && dd.p && dbias.p) << "cudaMalloc failed";
  if (!da.p || !db.p || !dd.p || !dbias.p) return Outcome::kChecked;
  cudaMemcpy(da.p, ha.bytes.data(), ha.bytes.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(db.p, hb.bytes.data(), hb.bytes.size(), cudaMemcpyHostToDevice);
  if (use_c) cudaMemcpy(dc.p, hc.bytes.data(), hc.bytes.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(dbias.p, hbias.bytes.data(), hbias.bytes.size(), cudaMemcpyHostToDevice);
  cudaMemset(dd.p, 0xFF, d_bytes);
  if (use_aux) cudaMemset(daux.p, 0xFF, d_bytes);
  if (reads_aux(c.epi)) cudaMemcpy(daux.p, hauxin.bytes.data(), d_bytes, cudaMemcpyHostToDevice);
  if (bias_grad) cudaMemset(dgrad.p, 0xFF, grad_len * sizeof(float));

  GemmDesc d;
  d.m = c.m; d.n = c.n; d.k = c.k; d.batch = c.batch;
  d.op_a = c.op_a; d.op_b = c.op_b; d.layout = c.layout;
  d.ab_type = c.ab; d.cd_type = c.cd; d.compute = c.compute;
  d.a = da.p; d.lda = sa.ld; d.stride_a = sa.stride;
  d.b = db.p; d.ldb = sb.ld; d.stride_b = sb.stride;
  d.c = use_c ? dc.p : nullptr; d.ldc = sd.ld; d.stride_c = sd.stride;
  d.d = dd.p; d.ldd = sd.ld; d.stride_d = sd.stride;
  d.alpha = c.alpha; d.beta = c.beta;
  d.epilogue = c.epi;
  d.bias = has_bias(c.epi) ? dbias.p : nullptr;
  d.aux = use_aux || reads_aux(c.epi) ? daux.p : nullptr; d.ld_aux = sd.ld; d.stride_aux = sd.stride;
  d.bias_grad = static_cast<float*>(dgrad.p);
  d.path = c.path;

  size_t ws_bytes = 0;
  blublas::Status st = blublas::gemm_workspace_size(d, &ws_bytes);
  if (!st.ok() && c.path == GemmPath::kSm90Wgmma && st.code() == StatusCode::kNotSupported) {
    std::printf("[ skipped ] %s: %s\n", c.name().c_str(), st.to_string().c_str());
    return Outcome::kSkipped;
  }
  EXPECT_TRUE(st.ok()) << st.to_string();
  if (!st.ok()) return Outcome::kChecked;
  DeviceBuffer ws(ws_bytes);
  const blublas::Status run_st = blublas::gemm(d, ws.p, ws_bytes, nullptr);
  EXPECT_TRUE(run_st.ok()) << run_st.to_string();
  if (!run_st.ok()) return Outcome::kChecked;
  const cudaError_t e = cudaDeviceSynchronize();
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  if (e != cudaSuccess) return Outcome::kChecked;

  HostMatrix hd{c.cd, std::vector<uint8_t>(d_bytes)}, haux{c.cd, {}};
  cudaMemcpy(hd.bytes.data(), dd.p, d_bytes, cudaMemcpyDeviceToHost);
  if (use_aux) {
    haux.bytes.resize(d_bytes);
    cudaMemcpy(haux.bytes.data(), daux.p, d_bytes, cudaMemcpyDeviceToHost);
  }

  const std::vector<blu::test::GemmSample> samples =
      blu::test::gemm_samples(c.batch, c.m, c.n, int64_t{1} << 20, 20000, c.seed);
  std::vector<blu::test::GemmRefValue> ref;
  const std::string ref_err = blu::test::gemm_reference(d, samples, &ref);
  EXPECT_EQ(ref_err, "");
  if (!ref_err.empty()) return Outcome::kChecked;

  const double tol = tol_of(c), rnd = round_of(c.cd), rnd_abs = round_abs_of(c.cd);
  int failures = 0;
  double worst = 0.0;
  for (size_t s = 0; s < samples.size(); ++s) {
    const auto& smp = samples[s];
    const int64_t idx = index_of(sd, c, smp.batch, smp.i, smp.j);
    double pre = c.alpha * ref[s].acc;
    double scale = std::fabs(c.alpha) * ref[s].abs;
    if (use_c) {
      pre += c.beta * hc.get(idx);
      scale += std::fabs(c.beta * hc.get(idx));
    }
    if (has_bias(c.epi)) {
      pre += hbias.get(smp.j);
      scale += std::fabs(hbias.get(smp.j));
    }
    double want = is_gelu(c.epi) ? gelu_ref(pre) : pre;
    double bound = tol * scale * (is_gelu(c.epi) ? 1.2 : 1.0) + rnd * std::fabs(want) + rnd_abs;
    if (reads_aux(c.epi)) {  // |gelu'| <= 1.13: the product's error grows at most by that factor
      const double gg = gelu_grad_ref(hauxin.get(idx));
      want = pre * gg;
      bound = 1.2 * tol * scale * std::max(1.0, std::fabs(gg)) + rnd * std::fabs(want) + rnd_abs +
              2e-6 * std::fabs(pre);
    }
    const double got = hd.get(idx);
    const double err = std::fabs(got - want);
    bool bad = !(err <= bound);
    std::string what = "d";
    double aux_got = 0.0, aux_bound = tol * scale + rnd * std::fabs(pre) + rnd_abs;
    if (!bad && use_aux) {
      aux_got = haux.get(idx);
      bad = !(std::fabs(aux_got - pre) <= aux_bound);
      what = "aux";
    }
    worst = std::max(worst, err / bound);
    if (bad && ++failures <= 10) {
      ADD_FAILURE() << what << "(batch " << smp.batch << ", i " << smp.i << ", j " << smp.j
                    << "): got " << (what == "d" ? got : aux_got) << " want "
                    << (what == "d" ? want : pre) << " bound " << (what == "d" ? bound : aux_bound)
                    << " (scale " << scale << ")";
    }
  }
  // The ld and batch padding must still hold the poison: nothing is written outside M x N.
  int64_t stray = 0, first_stray = -1;
  std::vector<uint8_t> inside(sd.elems, 0);
  for (int b = 0; b < c.batch; ++b) {
    for (int i = 0; i < c.m; ++i) {
      for (int j = 0; j < c.n; ++j) inside[index_of(sd, c, b, i, j)] = 1;
    }
  }
  for (int64_t i = 0; i < sd.elems; ++i) {
    if (!inside[i] && (!hd.poisoned(i) || (use_aux && !haux.poisoned(i)))) {
      if (stray++ == 0) first_stray = i;
    }
  }
  EXPECT_EQ(stray, 0) << "elements written outside M x N (first at linear index " << first_stray << ")";
  EXPECT_EQ(failures, 0) << failures << " of " << samples.size()
                         << " checked elements out of bound; worst err/bound " << worst;

  if (bias_grad) {
    std::vector<float> got(grad_len);
    cudaMemcpy(got.data(), dgrad.p, grad_len * sizeof(float), cudaMemcpyDeviceToHost);
    std::vector<double> want;
    EXPECT_EQ(blu::test::gemm_operand_sums(d, c.epi == Epilogue::kBiasGradA, &want), "");
    int bad = 0;
    for (int r = 0; r < grad_len && r < static_cast<int>(want.size()); ++r) {
      const double bound = 1e-6 * c.k + 1e-6;
      if (!(std::fabs(got[r] - want[r]) <= bound) && ++bad <= 10) {
        ADD_FAILURE() << "bias_grad[" << r << "]: got " << got[r] << " want " << want[r]
                      << " bound " << bound;
      }
    }
    EXPECT_EQ(bad, 0) << bad << " of " << grad_len << " bias_grad elements wrong";
  }
  return Outcome::kChecked;
}

// The op pairs x layouts sweep for one path and input dtype, outputs and shapes rotating.
std::vector<Case> sweep(GemmPath path, Dtype ab, ComputeMode compute, std::vector<Dtype> outs) {
  const int shapes[][3] = {{17, 33, 129}, {129, 17, 33}, {33, 129, 17}, {65, 31, 47},
                           {1, 17, 9},    {17, 1, 33},   {100, 127, 1}, {129, 129, 129}};
  std::vector<Case> cases;
  int idx = 0;
  for (Layout l : {Layout::kRowMajor, Layout::kColMajor}) {
    for (Op oa : {Op::kN, Op::kT}) {
      for (Op ob : {Op::kN, Op::kT}) {
        Case c;
        c.path = path; c.ab = ab; c.compute = compute;
        c.cd = outs[idx % outs.size()];
        c.m = shapes[idx][0]; c.n = shapes[idx][1]; c.k = shapes[idx][2];
        c.op_a = oa; c.op_b = ob; c.layout = l;
        // Tensor-core paths need 16-byte aligned lds and batch strides: round them up (sizes stay
        // odd); the SIMT path gets tight and odd lds.
        const int per16 = ab == Dtype::kF32 ? 4 : 8;
        const bool tc = path != GemmPath::kSimt;
        c.ld_align = tc ? per16 : 1;
        c.ld_pad = tc ? per16 * (idx % 2) : (idx % 2) * 3;
        c.batch_pad = tc ? per16 : 5;
        c.alpha = idx % 3 == 0 ? 1.0f : 1.5f;
        c.beta = idx % 2 == 1 ? 0.75f : 0.0f;
        c.seed = 100 + idx;
        cases.push_back(c);
        ++idx;
      }
    }
  }
  return cases;
}

void run_all(const std::vector<Case>& cases) {
  for (const Case& c : cases) run_case(c);
}

bool device_is_sm90() {
  blublas::DeviceInfo info;
  return blublas::current_device_info(&info).ok() && info.sm_major == 9;
}

// ---- tests ---------------------------------------------------------------------------------------
TEST(GemmGpu, SimtStrictF32OpsAndLayouts) {
  BLU_REQUIRE_GPU();
  run_all(sweep(GemmPath::kSimt, Dtype::kF32, ComputeMode::kDefault, {Dtype::kF32}));
}

TEST(GemmGpu, SimtGeneric16BitOpsAndLayouts) {
  BLU_REQUIRE_GPU();
  run_all(sweep(GemmPath::kSimt, Dtype::kBF16, ComputeMode::kDefault,
                {Dtype::kF32, Dtype::kBF16, Dtype::kF16}));
  run_all(sweep(GemmPath::kSimt, Dtype::kF16, ComputeMode::kDefault,
                {Dtype::kF16, Dtype::kF32, Dtype::kBF16}));
}

TEST(GemmGpu, Sm80MmaOpsAndLayouts) {
  BLU_REQUIRE_GPU();
  run_all(sweep(GemmPath::kSm80Mma, Dtype::kBF16, ComputeMode::kDefault,
                {Dtype::kBF16, Dtype::kF32, Dtype::kF16}));
  run_all(sweep(GemmPath::kSm80Mma, Dtype::kF16, ComputeMode::kDefault,
                {Dtype::kF16, Dtype::kBF16, Dtype::kF32}));
  run_all(sweep(GemmPath::kSm80Mma, Dtype::kF32, ComputeMode::kTF32, {Dtype::kF32}));
}

TEST(GemmGpu, Sm90WgmmaOpsAndLayouts) {
  BLU_REQUIRE_GPU();
  if (!device_is_sm90()) GTEST_SKIP() << "the sm_90a wgmma path needs an sm_90 device";
  run_all(sweep(GemmPath::kSm90Wgmma, Dtype::kBF16, ComputeMode::kDefault,
                {Dtype::kBF16, Dtype::kF32, Dtype::kF16}));
  run_all(sweep(GemmPath::kSm90Wgmma, Dtype::kF16, ComputeMode::kDefault,
                {Dtype::kF16, Dtype::kBF16, Dtype::kF32}));
  run_all(sweep(GemmPath::kSm90Wgmma, Dtype::kF32, ComputeMode::kTF32, {Dtype::kF32}));
}

// Every epilogue, both layouts, on one configuration per path and precision.
std::vector<Case> epilogue_cases(GemmPath path, Dtype ab, ComputeMode compute, Dtype cd) {
  std::vector<Case> cases;
  const Epilogue epis[] = {Epilogue::kBias,      Epilogue::kBiasGelu,  Epilogue::kGelu,
                           Epilogue::kGelu,      Epilogue::kBiasGradA, Epilogue::kBiasGradB,
                           Epilogue::kGeluGrad,  Epilogue::kGeluGrad};
  int idx = 0;
  for (Layout l : {Layout::kRowMajor, Layout::kColMajor}) {
    for (int e = 0; e < 8; ++e, ++idx) {
      Case c;
      c.path = path; c.ab = ab; c.cd = cd; c.compute = compute;
      c.layout = l;
      c.epi = epis[e];
      c.with_aux = e != 3;  // the second kGelu stores no pre-activation
      c.m = 67; c.n = 45; c.k = idx % 2 ? 2500 : 131;  // K > 2048: the chunked bias_grad
      c.op_a = idx % 3 == 0 ? Op::kT : Op::kN;
      c.op_b = idx % 2 == 0 ? Op::kT : Op::kN;
      c.alpha = 0.5f;
      c.beta = e % 2 ? 0.0f : 1.25f;
      const int per16 = ab == Dtype::kF32 ? 4 : 8;
      c.ld_align = path == GemmPath::kSimt ? 1 : per16;
      c.ld_pad = path == GemmPath::kSimt ? 1 : per16;
      c.batch_pad = 0;
      c.seed = 300 + idx;
      cases.push_back(c);
    }
  }
  return cases;
}

TEST(GemmGpu, EpiloguesSimt) {
  BLU_REQUIRE_GPU();
  run_all(epilogue_cases(GemmPath::kSimt, Dtype::kF32, ComputeMode::kDefault, Dtype::kF32));
  run_all(epilogue_cases(GemmPath::kSimt, Dtype::kBF16, ComputeMode::kDefault, Dtype::kBF16));
}

TEST(GemmGpu, EpiloguesSm80) {
  BLU_REQUIRE_GPU();
  run_all(epilogue_cases(GemmPath::kSm80Mma, Dtype::kBF16, ComputeMode::kDefault, Dtype::kBF16));
  run_all(epilogue_cases(GemmPath::kSm80Mma, Dtype::kF16, ComputeMode::kDefault, Dtype::kF32));
  run_all(epilogue_cases(GemmPath::kSm80Mma, Dtype::kF32, ComputeMode::kTF32, Dtype::kF32));
}

TEST(GemmGpu, EpiloguesSm90) {
  BLU_REQUIRE_GPU();
  if (!device_is_sm90()) GTEST_SKIP() << "the sm_90a wgmma path needs an sm_90 device";
  run_all(epilogue_cases(GemmPath::kSm90Wgmma, Dtype::kBF16, ComputeMode::kDefault, Dtype::kBF16));
  run_all(epilogue_cases(GemmPath::kSm90Wgmma, Dtype::kF32, ComputeMode::kTF32, Dtype::kF32));
}

TEST(GemmGpu, StridedBatch) {
  BLU_REQUIRE_GPU();
  std::vector<Case> cases;
  const GemmPath paths[] = {GemmPath::kSimt, GemmPath::kSimt, GemmPath::kSm80Mma,
                            GemmPath::kSm80Mma, GemmPath::kAuto};
  const Dtype abs[] = {Dtype::kF32, Dtype::kF16, Dtype::kBF16, Dtype::kF32, Dtype::kBF16};
  for (int i = 0; i < 5; ++i) {
    Case c;
    c.path = paths[i]; c.ab = abs[i];
    c.cd = abs[i] == Dtype::kF32 ? Dtype::kF32 : Dtype::kBF16;
    c.compute = i == 3 ? ComputeMode::kTF32 : ComputeMode::kDefault;
    c.batch = 3 + i % 2;
    c.m = 45; c.n = 77; c.k = 93;
    c.op_a = i % 2 ? Op::kT : Op::kN;
    c.op_b = i % 3 ? Op::kT : Op::kN;
    c.layout = i % 2 ? Layout::kColMajor : Layout::kRowMajor;
    c.epi = i == 4 ? Epilogue::kBiasGelu : (i == 2 ? Epilogue::kBias : Epilogue::kNone);
    c.beta = i == 1 ? 0.5f : 0.0f;
    const int per16 = c.ab == Dtype::kF32 ? 4 : 8;
    const bool tc = c.path != GemmPath::kSimt;
    c.ld_align = tc ? per16 : 1;
    c.ld_pad = tc ? per16 : 2;
    c.batch_pad = tc ? 2 * per16 : 7;
    c.seed = 500 + i;
    cases.push_back(c);
  }
  run_all(cases);
}

// Skinny M x N with deep K takes the SIMT split-K route (partials in the workspace, fixed-order
// reduce, epilogue in the reduce): batched, col-major, with C, bias and GELU.
TEST(GemmGpu, SimtSplitK) {
  BLU_REQUIRE_GPU();
  std::vector<Case> cases;
  for (int i = 0; i < 3; ++i) {
    Case c;
    c.path = GemmPath::kSimt;
    c.m = 100 + 31 * i; c.n = 90 - 13 * i; c.k = 5000 + 777 * i;
    c.batch = 1 + i;
    c.op_a = i % 2 ? Op::kT : Op::kN;
    c.op_b = i == 1 ? Op::kN : Op::kT;
    c.layout = i == 2 ? Layout::kColMajor : Layout::kRowMajor;
    c.epi = i == 0 ? Epilogue::kBiasGelu : (i == 1 ? Epilogue::kBias : Epilogue::kNone);
    c.beta = i == 2 ? 0.5f : 0.0f;
    c.ld_pad = i;  // i = 0: float4 loads; else the scalar-load variant
    c.batch_pad = 4 * i;
    c.seed = 900 + i;
    cases.push_back(c);
  }
  run_all(cases);
}

// Problems with at least two 128 x 128 tiles per SM take the 128 x 128 SIMT tiles with float4
// loads (16-byte aligned lds): every operand major, odd M, N, K, an epilogue.
TEST(GemmGpu, SimtLargeTiles) {
  BLU_REQUIRE_GPU();
  std::vector<Case> cases;
  int idx = 0;
  for (Op oa : {Op::kN, Op::kT}) {
    for (Op ob : {Op::kN, Op::kT}) {
      Case c;
      c.path = GemmPath::kSimt;
      c.m = 2049 + 128 * (idx % 2); c.n = 2177 + 64 * idx; c.k = 129 + 62 * idx;
      c.op_a = oa; c.op_b = ob;
      c.layout = idx == 3 ? Layout::kColMajor : Layout::kRowMajor;
      c.ld_align = 4; c.ld_pad = 4 * (idx % 2); c.batch_pad = 0;
      c.epi = idx == 1 ? Epilogue::kBiasGelu : Epilogue::kNone;
      c.beta = idx == 2 ? 0.25f : 0.0f;
      c.seed = 950 + idx++;
      cases.push_back(c);
    }
  }
  run_all(cases);
}

// Sizes 1 and 4099 and 1000 mixed; big problems are checked on samples.
TEST(GemmGpu, OddAndLargeSizes) {
  BLU_REQUIRE_GPU();
  struct Big { GemmPath path; Dtype ab; ComputeMode cm; int m, n, k; Op oa, ob; Layout l; };
  const Big bigs[] = {
      {GemmPath::kSimt, Dtype::kF32, ComputeMode::kDefault, 1, 1, 1, Op::kN, Op::kN, Layout::kRowMajor},
      {GemmPath::kSimt, Dtype::kF32, ComputeMode::kDefault, 4099, 1000, 129, Op::kN, Op::kT, Layout::kRowMajor},
      {GemmPath::kSimt, Dtype::kF32, ComputeMode::kDefault, 129, 1000, 4099, Op::kT, Op::kN, Layout::kColMajor},
      {GemmPath::kSimt, Dtype::kF32, ComputeMode::kDefault, 1000, 1, 1000, Op::kN, Op::kN, Layout::kRowMajor},
      {GemmPath::kSimt, Dtype::kBF16, ComputeMode::kDefault, 1, 4099, 17, Op::kT, Op::kT, Layout::kRowMajor},
      {GemmPath::kSm80Mma, Dtype::kBF16, ComputeMode::kDefault, 1, 1, 1, Op::kN, Op::kT, Layout::kRowMajor},
      {GemmPath::kSm80Mma, Dtype::kBF16, ComputeMode::kDefault, 4099, 1000, 1000, Op::kN, Op::kT, Layout::kRowMajor},
      {GemmPath::kSm80Mma, Dtype::kF16, ComputeMode::kDefault, 1000, 4099, 129, Op::kT, Op::kN, Layout::kColMajor},
      {GemmPath::kSm80Mma, Dtype::kBF16, ComputeMode::kDefault, 129, 17, 4099, Op::kT, Op::kT, Layout::kRowMajor},
      {GemmPath::kSm80Mma, Dtype::kF32, ComputeMode::kTF32, 4099, 129, 1000, Op::kN, Op::kN, Layout::kRowMajor},
      {GemmPath::kSm80Mma, Dtype::kF32, ComputeMode::kTF32, 1000, 1000, 4099, Op::kT, Op::kN, Layout::kColMajor},
      {GemmPath::kAuto, Dtype::kBF16, ComputeMode::kDefault, 4099, 4099, 1000, Op::kN, Op::kT, Layout::kRowMajor},
      {GemmPath::kAuto, Dtype::kF32, ComputeMode::kTF32, 1000, 4099, 1000, Op::kT, Op::kT, Layout::kRowMajor},
  };
  int idx = 0;
  for (const Big& b : bigs) {
    Case c;
    c.path = b.path; c.ab = b.ab; c.compute = b.cm;
    c.cd = b.ab == Dtype::kF32 ? Dtype::kF32 : (idx % 2 ? Dtype::kF32 : Dtype::kBF16);
    c.m = b.m; c.n = b.n; c.k = b.k; c.op_a = b.oa; c.op_b = b.ob; c.layout = b.l;
    const int per16 = c.ab == Dtype::kF32 ? 4 : 8;
    const bool simt = c.path == GemmPath::kSimt;
    c.ld_align = simt ? 1 : per16;
    c.ld_pad = 0;
    c.batch_pad = 0;
    c.beta = idx % 3 == 1 ? 1.0f : 0.0f;
    c.seed = 700 + idx++;
    run_case(c);
  }
}

// kAuto copies operands whose ld is not 16-byte aligned into the workspace and still runs a
// tensor-core path (Note [Repacking misaligned operands] in gemm.cpp); a forced tensor-core path
// returns kMisaligned and writes nothing.
TEST(GemmGpu, AutoFallsBackOnMisalignedLd) {
  BLU_REQUIRE_GPU();
  Case c;
  c.ab = Dtype::kBF16; c.cd = Dtype::kBF16;
  c.m = 37; c.n = 41; c.k = 51;  // tight lds: lda = 51, odd
  c.ld_align = 1; c.ld_pad = 0;
  c.path = GemmPath::kAuto;
  run_case(c);

  const int64_t bytes = 64 * 64 * 2;
  DeviceBuffer a(bytes), b(bytes), d(bytes);
  cudaMemset(d.p, 0xFF, bytes);
  GemmDesc desc;
  desc.m = 37; desc.n = 41; desc.k = 51;
  desc.ab_type = Dtype::kBF16; desc.cd_type = Dtype::kBF16;
  desc.a = a.p; desc.lda = 51; desc.b = b.p; desc.ldb = 41; desc.d = d.p; desc.ldd = 41;
  GemmPath path = GemmPath::kAuto;
  ASSERT_TRUE(blublas::gemm_selected_path(desc, &path).ok());
  EXPECT_NE(path, GemmPath::kSimt) << "kAuto should repack, not fall back to SIMT";
  size_t ws = 0;
  ASSERT_TRUE(blublas::gemm_workspace_size(desc, &ws).ok());
  EXPECT_GT(ws, 0u) << "the repacked copies live in the workspace";
  for (GemmPath forced : {GemmPath::kSm80Mma, GemmPath::kSm90Wgmma}) {
    desc.path = forced;
    const blublas::Status st = blublas::gemm(desc, nullptr, 0, nullptr);
    if (forced == GemmPath::kSm90Wgmma) {  // refused: kUnsupportedArch off Hopper, else its reason
      EXPECT_FALSE(st.ok()) << "sm90 path accepted lda=51 bf16";
      EXPECT_NE(st.code(), StatusCode::kCudaError) << st.to_string();
      continue;
    }
    EXPECT_EQ(st.code(), StatusCode::kMisaligned) << st.to_string();
    EXPECT_NE(st.message().find("gemm"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(blublas::gemm_path_name(forced)), std::string::npos) << st.message();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> host(bytes);
  cudaMemcpy(host.data(), d.p, bytes, cudaMemcpyDeviceToHost);
  EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](uint8_t v) { return v == 0xFF; }))
      << "a refused forced path wrote to D";

  // An unaligned pointer (offset by one element) is refused by a forced path too.
  desc.path = GemmPath::kSm80Mma;
  desc.lda = 56;
  desc.ldb = 48;
  desc.a = static_cast<const uint16_t*>(a.p) + 1;
  EXPECT_EQ(blublas::gemm(desc, nullptr, 0, nullptr).code(), StatusCode::kMisaligned);
  // Strict fp32 forced onto a tensor-core path is refused.
  desc.ab_type = Dtype::kF32; desc.cd_type = Dtype::kF32;
  desc.a = a.p; desc.lda = 52; desc.ldb = 44; desc.ldd = 44;
  desc.path = GemmPath::kSm80Mma;
  EXPECT_EQ(blublas::gemm(desc, nullptr, 0, nullptr).code(), StatusCode::kNotSupported);
}

// kAuto on tight, odd leading dimensions and batch strides (every operand misaligned) in every
// major and precision: the repacked tensor-core run must match the reference.
TEST(GemmGpu, AutoRepacksMisalignedOperands) {
  BLU_REQUIRE_GPU();
  std::vector<Case> cases = sweep(GemmPath::kAuto, Dtype::kBF16, ComputeMode::kDefault,
                                  {Dtype::kBF16, Dtype::kF32});
  for (const Case& c : sweep(GemmPath::kAuto, Dtype::kF32, ComputeMode::kTF32, {Dtype::kF32})) {
    cases.push_back(c);
  }
  int idx = 0;
  for (Case& c : cases) {
    c.ld_align = 1;
    c.ld_pad = idx % 2;
    c.batch = 1 + idx % 3;
    c.batch_pad = 3;
    c.epi = idx % 4 == 3 ? Epilogue::kBiasGradA : Epilogue::kNone;
    if (c.batch > 1) c.epi = Epilogue::kNone;
    ++idx;
  }
  run_all(cases);
}

// The bias-gradient workspace is checked; results are bitwise reproducible run to run.
TEST(GemmGpu, WorkspaceAndDeterminism) {
  BLU_REQUIRE_GPU();
  const int m = 96, n = 72, k = 5000;
  DeviceBuffer a(m * k * 2), b(k * n * 2), d(m * n * 4), grad(n * 4);
  std::mt19937_64 rng(9);
  HostMatrix ha = random_matrix(Dtype::kBF16, static_cast<size_t>(m) * k, rng);
  HostMatrix hb = random_matrix(Dtype::kBF16, static_cast<size_t>(k) * n, rng);
  cudaMemcpy(a.p, ha.bytes.data(), ha.bytes.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(b.p, hb.bytes.data(), hb.bytes.size(), cudaMemcpyHostToDevice);
  for (GemmPath path : {GemmPath::kSimt, GemmPath::kSm80Mma, GemmPath::kAuto}) {
    SCOPED_TRACE(blublas::gemm_path_name(path));
    GemmDesc desc;
    desc.m = m; desc.n = n; desc.k = k;
    desc.ab_type = Dtype::kBF16; desc.cd_type = Dtype::kF32;
    desc.a = a.p; desc.lda = k; desc.b = b.p; desc.ldb = n; desc.d = d.p; desc.ldd = n;
    desc.epilogue = Epilogue::kBiasGradB;
    desc.bias_grad = static_cast<float*>(grad.p);
    desc.path = path;
    size_t ws = 0;
    ASSERT_TRUE(blublas::gemm_workspace_size(desc, &ws).ok());
    EXPECT_GT(ws, 0u) << "K=5000 needs chunk partials";
    EXPECT_EQ(blublas::gemm(desc, nullptr, 0, nullptr).code(), StatusCode::kWorkspaceTooSmall);
    DeviceBuffer w(ws);
    std::vector<float> d1(m * n), d2(m * n), g1(n), g2(n);
    for (int run = 0; run < 2; ++run) {
      cudaMemset(d.p, 0xFF, m * n * 4);
      cudaMemset(grad.p, 0xFF, n * 4);
      ASSERT_TRUE(blublas::gemm(desc, w.p, ws, nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      cudaMemcpy(run ? d2.data() : d1.data(), d.p, m * n * 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(run ? g2.data() : g1.data(), grad.p, n * 4, cudaMemcpyDeviceToHost);
    }
    EXPECT_EQ(std::memcmp(d1.data(), d2.data(), d1.size() * 4), 0) << "D differs between runs";
    EXPECT_EQ(std::memcmp(g1.data(), g2.data(), g1.size() * 4), 0) << "bias_grad differs between runs";
  }
}

// D may alias C (in place, beta = 1): D = A B + D.
TEST(GemmGpu, InPlaceAccumulate) {
  BLU_REQUIRE_GPU();
  const int m = 50, n = 60, k = 70;
  for (GemmPath path : {GemmPath::kSimt, GemmPath::kSm80Mma}) {
    SCOPED_TRACE(blublas::gemm_path_name(path));
    const Dtype t = path == GemmPath::kSimt ? Dtype::kF32 : Dtype::kBF16;
    const int lda = 72, ldb = 64;  // 16-byte aligned for both dtypes
    std::mt19937_64 rng(11);
    HostMatrix ha = random_matrix(t, static_cast<size_t>(m) * lda, rng);
    HostMatrix hb = random_matrix(t, static_cast<size_t>(k) * ldb, rng);
    HostMatrix hd = random_matrix(Dtype::kF32, static_cast<size_t>(m) * n, rng);
    DeviceBuffer a(ha.bytes.size()), b(hb.bytes.size()), d(hd.bytes.size());
    cudaMemcpy(a.p, ha.bytes.data(), ha.bytes.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(b.p, hb.bytes.data(), hb.bytes.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(d.p, hd.bytes.data(), hd.bytes.size(), cudaMemcpyHostToDevice);
    GemmDesc desc;
    desc.m = m; desc.n = n; desc.k = k;
    desc.ab_type = t; desc.cd_type = Dtype::kF32;
    desc.a = a.p; desc.lda = lda; desc.b = b.p; desc.ldb = ldb;
    desc.c = d.p; desc.ldc = n; desc.d = d.p; desc.ldd = n; desc.beta = 1.0f;
    desc.path = path;
    ASSERT_TRUE(blublas::gemm(desc, nullptr, 0, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> got(m * n);
    cudaMemcpy(got.data(), d.p, got.size() * 4, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double acc = hd.get(i * n + j), scale = std::fabs(acc);
        for (int kk = 0; kk < k; ++kk) {
          acc += ha.get(i * lda + kk) * hb.get(kk * ldb + j);
          scale += std::fabs(ha.get(i * lda + kk) * hb.get(kk * ldb + j));
        }
        if (!(std::fabs(got[i * n + j] - acc) <= 1e-4 * scale) && ++bad <= 5) {
          ADD_FAILURE() << "(" << i << ", " << j << "): got " << got[i * n + j] << " want " << acc;
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

}  // namespace
