// gemm_simt_gpu_test.cu: the strict fp32 SIMT GEMM kernels one by one (BLUBLAS_SIMT_VARIANT forces
// each: the lean l88 / l816 / l168 / l88n64 and wide l816w / l168w kernels, the same with 16-deep
// slabs (l88k16 ...), the warp w816 / w168, the legacy kernel and the default choice) against the
// float64 reference (support/gemm_reference.h), on problems big enough for the 128 x 128 tile plans
// (and the split-K plan): every op pair and layout, K with and without a tail slab (K % 8 != 0,
// K < 8; for the 16-deep slabs also K % 16 in 1..15, the tail's second 8-deep chunk partly or
// wholly past K),
// M / N not multiples of the tile (and not multiples of 4, where the lean kernels hand over to the
// older ones), padded leading dimensions, strided batches, alpha
// and beta with D aliasing C, the epilogues, poisoned outputs and padding, run-to-run bit
// equality, and exactness on data where any tf32 rounding would show.
// Bound per element (Note [GEMM test bound] in gemm_gpu_test.cu): |d - ref| <= 2e-6 * scale +
// 2e-7 * |ref|, scale = |alpha| sum_k |a||b| + |beta c| + |bias| (GELU: x1.2 on the first term).
#include <blublas/gemm.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/gpu_test.h"
#include "support/gemm_reference.h"

namespace {

using blublas::Epilogue;
using blublas::GemmDesc;
using blublas::GemmPath;
using blublas::Layout;
using blublas::Op;

struct Buf {
  void* p = nullptr;
  explicit Buf(size_t bytes) {
    if (bytes > 0 && cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
  }
  ~Buf() { if (p) cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

// Sets BLUBLAS_SIMT_VARIANT for one scope (read by blublas at every call).
struct VariantScope {
  explicit VariantScope(const char* v) {
    if (v) setenv("BLUBLAS_SIMT_VARIANT", v, 1); else unsetenv("BLUBLAS_SIMT_VARIANT");
  }
  ~VariantScope() { unsetenv("BLUBLAS_SIMT_VARIANT"); }
};

struct Case {
  int m = 0, n = 0, k = 0, batch = 1;
  Op oa = Op::kN, ob = Op::kT;
  Layout layout = Layout::kRowMajor;
  int ld_pad = 0, batch_pad = 0;
  float alpha = 1.0f, beta = 0.0f;
  bool in_place = false;  // D aliases C (beta != 0)
  Epilogue epi = Epilogue::kNone;
  uint64_t seed = 1;
  std::string name() const {
    std::ostringstream s;
    s << m << "x" << n << "x" << k << " b" << batch << " op" << (oa == Op::kT ? "T" : "N")
      << (ob == Op::kT ? "T" : "N") << (layout == Layout::kColMajor ? " col" : " row") << " pad"
      << ld_pad << " alpha" << alpha << " beta" << beta << (in_place ? " in-place" : "")
      << " epi" << static_cast<int>(epi) << " seed" << seed;
    return s.str();
  }
};

struct Mat {
  int64_t rows, cols, ld, stride, elems;
};
Mat mat_of(int64_t rows, int64_t cols, const Case& c) {
  Mat s;
  s.rows = rows; s.cols = cols;
  s.ld = (c.layout == Layout::kRowMajor ? cols : rows) + c.ld_pad;
  const int64_t per = (c.layout == Layout::kRowMajor ? rows : cols) * s.ld;
  s.stride = c.batch > 1 ? per + c.batch_pad : 0;
  s.elems = c.batch > 1 ? s.stride * (c.batch - 1) + per : per;
  return s;
}
int64_t at(const Mat& s, const Case& c, int b, int64_t r, int64_t col) {
  return b * s.stride + (c.layout == Layout::kRowMajor ? r * s.ld + col : col * s.ld + r);
}
double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
bool poisoned(float v) { uint32_t u; std::memcpy(&u, &v, 4); return u == 0xFFFFFFFFu; }

// Runs one case through kAuto (strict fp32 always takes the SIMT path) and checks it. `exact`:
// the inputs are chosen so that every product and partial sum is exact in fp32 (see ExactData);
// the result must then equal the reference bit for bit. Returns D (for the determinism check).
std::vector<float> run_case(const Case& c, bool exact = false) {
  SCOPED_TRACE(c.name());
  std::mt19937_64 rng(c.seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const Mat sa = c.oa == Op::kN ? mat_of(c.m, c.k, c) : mat_of(c.k, c.m, c);
  const Mat sb = c.ob == Op::kN ? mat_of(c.k, c.n, c) : mat_of(c.n, c.k, c);
  const Mat sd = mat_of(c.m, c.n, c);
  std::vector<float> ha(sa.elems), hb(sb.elems), hc(sd.elems), hbias(c.n);
  if (exact) {
    // a = 1 + j * 2^-18 (j in 0..6: tf32 would round it to 1), b in {-4..4}: products are
    // multiples of 2^-18 below 4.0001 and with K <= 15 every partial sum stays below 64 = 2^(24-18).
    for (auto& v : ha) v = 1.0f + static_cast<float>(rng() % 7) * 0x1p-18f;
    for (auto& v : hb) v = static_cast<float>(static_cast<int>(rng() % 9) - 4);
  } else {
    for (auto& v : ha) v = uni(rng);
    for (auto& v : hb) v = uni(rng);
  }
  for (auto& v : hc) v = uni(rng);
  for (auto& v : hbias) v = uni(rng);
  const bool use_c = c.beta != 0.0f;
  const bool gelu = c.epi == Epilogue::kBiasGelu || c.epi == Epilogue::kGelu;
  const bool bias = c.epi == Epilogue::kBias || c.epi == Epilogue::kBiasGelu;
  const bool grad = c.epi == Epilogue::kBiasGradA || c.epi == Epilogue::kBiasGradB;
  const int grad_len = c.epi == Epilogue::kBiasGradA ? c.m : c.n;

  const size_t d_bytes = sd.elems * sizeof(float);
  Buf da(ha.size() * 4), db(hb.size() * 4), dd(d_bytes), dc(use_c && !c.in_place ? d_bytes : 0),
      daux(gelu ? d_bytes : 0), dbias(c.n * 4), dgrad(grad ? grad_len * 4 : 0);
  EXPECT_TRUE(da.p && db.p && dd.p && dbias.p) << "cudaMalloc failed";
  if (!da.p || !db.p || !dd.p || !dbias.p) return {};
  cudaMemcpy(da.p, ha.data(), ha.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(db.p, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dbias.p, hbias.data(), c.n * 4, cudaMemcpyHostToDevice);
  cudaMemset(dd.p, 0xFF, d_bytes);
  if (gelu) cudaMemset(daux.p, 0xFF, d_bytes);
  if (grad) cudaMemset(dgrad.p, 0xFF, grad_len * 4);
  // C: in place, D holds C inside M x N and poison in the padding.
  std::vector<float> hc_dev(sd.elems);
  std::memset(hc_dev.data(), 0xFF, d_bytes);
  for (int b = 0; b < c.batch; ++b)
    for (int i = 0; i < c.m; ++i)
      for (int j = 0; j < c.n; ++j) hc_dev[at(sd, c, b, i, j)] = hc[at(sd, c, b, i, j)];
  if (use_c) cudaMemcpy(c.in_place ? dd.p : dc.p, hc_dev.data(), d_bytes, cudaMemcpyHostToDevice);

  GemmDesc d;
  d.m = c.m; d.n = c.n; d.k = c.k; d.batch = c.batch;
  d.op_a = c.oa; d.op_b = c.ob; d.layout = c.layout;
  d.a = da.p; d.lda = sa.ld; d.stride_a = sa.stride;
  d.b = db.p; d.ldb = sb.ld; d.stride_b = sb.stride;
  d.c = use_c ? (c.in_place ? dd.p : dc.p) : nullptr; d.ldc = sd.ld; d.stride_c = sd.stride;
  d.d = dd.p; d.ldd = sd.ld; d.stride_d = sd.stride;
  d.alpha = c.alpha; d.beta = c.beta;
  d.epilogue = c.epi;
  d.bias = bias ? dbias.p : nullptr;
  d.aux = gelu ? daux.p : nullptr; d.ld_aux = sd.ld; d.stride_aux = sd.stride;
  d.bias_grad = static_cast<float*>(dgrad.p);
  d.compute = blublas::ComputeMode::kStrictF32;
  d.path = GemmPath::kAuto;

  GemmPath chosen = GemmPath::kAuto;
  EXPECT_TRUE(blublas::gemm_selected_path(d, &chosen).ok());
  EXPECT_EQ(chosen, GemmPath::kSimt);
  size_t ws_bytes = 0;
  blublas::Status st = blublas::gemm_workspace_size(d, &ws_bytes);
  EXPECT_TRUE(st.ok()) << st.to_string();
  if (!st.ok()) return {};
  Buf ws(ws_bytes);
  const blublas::Status run_st = blublas::gemm(d, ws.p, ws_bytes, nullptr);
  EXPECT_TRUE(run_st.ok()) << run_st.to_string();
  const cudaError_t e = cudaDeviceSynchronize();
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  if (!run_st.ok() || e != cudaSuccess) return {};
  std::vector<float> hd(sd.elems), haux(gelu ? sd.elems : 0);
  cudaMemcpy(hd.data(), dd.p, d_bytes, cudaMemcpyDeviceToHost);
  if (gelu) cudaMemcpy(haux.data(), daux.p, d_bytes, cudaMemcpyDeviceToHost);

  const auto samples = blu::test::gemm_samples(c.batch, c.m, c.n, int64_t{1} << 18, 30000, c.seed);
  std::vector<blu::test::GemmRefValue> ref;
  EXPECT_EQ(blu::test::gemm_reference(d, samples, &ref), "");
  if (ref.size() != samples.size()) return hd;
  int bad = 0;
  for (size_t s = 0; s < samples.size(); ++s) {
    const auto& p = samples[s];
    const int64_t idx = at(sd, c, p.batch, p.i, p.j);
    double pre = c.alpha * ref[s].acc, scale = std::fabs(c.alpha) * ref[s].abs;
    if (use_c) { pre += c.beta * hc[idx]; scale += std::fabs(c.beta * hc[idx]); }
    if (bias) { pre += hbias[p.j]; scale += std::fabs(hbias[p.j]); }
    const double want = gelu ? gelu_ref(pre) : pre;
    const double bound =
        exact ? 0.0 : 2e-6 * scale * (gelu ? 1.2 : 1.0) + 2e-7 * std::fabs(want) + 1e-30;
    bool ok = std::fabs(hd[idx] - want) <= bound;
    if (ok && gelu) ok = std::fabs(haux[idx] - pre) <= 2e-6 * scale + 2e-7 * std::fabs(pre) + 1e-30;
    if (!ok && ++bad <= 8)
      ADD_FAILURE() << "(b " << p.batch << ", i " << p.i << ", j " << p.j << "): got " << hd[idx]
                    << (gelu ? " aux " + std::to_string(haux[idx]) : std::string()) << " want "
                    << want << " pre " << pre << " bound " << bound;
  }
  EXPECT_EQ(bad, 0) << bad << " of " << samples.size() << " elements out of bound";
  // Nothing written outside M x N: the ld and batch padding keep the poison.
  std::vector<uint8_t> inside(sd.elems, 0);
  for (int b = 0; b < c.batch; ++b)
    for (int i = 0; i < c.m; ++i)
      for (int j = 0; j < c.n; ++j) inside[at(sd, c, b, i, j)] = 1;
  int64_t stray = 0;
  for (int64_t i = 0; i < sd.elems; ++i)
    if (!inside[i] && (!poisoned(hd[i]) || (gelu && !poisoned(haux[i])))) ++stray;
  EXPECT_EQ(stray, 0) << "elements written outside M x N";
  if (grad) {
    std::vector<float> got(grad_len);
    cudaMemcpy(got.data(), dgrad.p, grad_len * 4, cudaMemcpyDeviceToHost);
    std::vector<double> want;
    EXPECT_EQ(blu::test::gemm_operand_sums(d, c.epi == Epilogue::kBiasGradA, &want), "");
    int gbad = 0;
    for (int r = 0; r < grad_len && r < static_cast<int>(want.size()); ++r)
      if (!(std::fabs(got[r] - want[r]) <= 1e-6 * c.k + 1e-6) && ++gbad <= 5)
        ADD_FAILURE() << "bias_grad[" << r << "] got " << got[r] << " want " << want[r];
    EXPECT_EQ(gbad, 0);
  }
  return hd;
}

// Every kernel a user can force, the default choice (nullptr), and a per-majors list (each op
// pair of a layout loop takes a different kernel).
const char* const kVariants[] = {nullptr,  "l88",   "l816",   "l168",      "l88n64",
                                 "l816w",  "l168w", "l88k16", "l88n64k16", "w816",
                                 "w168",   "legacy", "old",   "kk:l816w,kn:l168w,mn:l88,mk:w816",
                                 "kk:l88k16,kn:l816w,mn:l168w,mk:l88n64k16"};

// Op pairs x layouts on a problem with more 128 x 128 tiles than SMs (M, N multiples of 4 so the
// lean kernels take it; K with a tail slab: K % 16 = 3, 7, 11, 15), per variant.
TEST(GemmSimtGpu, OpPairsLayoutsPerVariant) {
  BLU_REQUIRE_GPU();
  for (const char* v : kVariants) {
    VariantScope scope(v);
    SCOPED_TRACE(v ? v : "default");
    int idx = 0;
    for (Layout l : {Layout::kRowMajor, Layout::kColMajor}) {
      for (Op oa : {Op::kN, Op::kT}) {
        for (Op ob : {Op::kN, Op::kT}) {
          Case c;
          c.m = 2052 + 4 * (idx % 3); c.n = 1796 + 8 * (idx % 2); c.k = 131 + 20 * idx;
          c.oa = oa; c.ob = ob; c.layout = l;
          c.ld_pad = 4 * (idx % 2);
          c.seed = 100 + idx++;
          run_case(c);
        }
      }
    }
  }
}

// K of 1..16 (tail-only slabs, one whole slab, whole + tail; 24 / 29 / 44: 16-deep slabs + a tail
// of 8 / 13 / 12), odd M / N (the lean kernels hand
// over to the older ones where an m/n-contiguous operand is not a multiple of 4), alpha and beta
// with D aliasing C, padded lds and strided batches, per variant.
TEST(GemmSimtGpu, EdgesPerVariant) {
  BLU_REQUIRE_GPU();
  for (const char* v : kVariants) {
    VariantScope scope(v);
    SCOPED_TRACE(v ? v : "default");
    int idx = 0;
    for (int k : {1, 5, 8, 13, 16, 257, 24, 29, 44}) {
      Case c;
      c.m = idx % 2 ? 2049 : 2048; c.n = idx % 3 == 1 ? 1795 : 1792; c.k = k;
      c.oa = idx % 2 ? Op::kT : Op::kN; c.ob = idx % 4 < 2 ? Op::kT : Op::kN;
      c.layout = idx == 3 ? Layout::kColMajor : Layout::kRowMajor;
      c.ld_pad = idx % 3 == 2 ? 8 : 0;
      c.alpha = idx % 2 ? 0.75f : 1.0f;
      c.beta = idx % 3 == 0 ? 0.5f : 0.0f;
      c.in_place = idx == 3;
      c.seed = 200 + idx++;
      run_case(c);
    }
    Case b;  // strided batch with padding between matrices
    b.m = 1028; b.n = 1156; b.k = 77; b.batch = 3; b.batch_pad = 12; b.ld_pad = 4;
    b.oa = Op::kT; b.ob = Op::kN; b.beta = 0.25f; b.in_place = true; b.seed = 299;
    run_case(b);
  }
}

// The epilogues the SIMT path applies (bias, bias + GELU with aux, GELU, bias gradients) through
// the lean kernels (default choice, and l816 forced).
TEST(GemmSimtGpu, EpiloguesLean) {
  BLU_REQUIRE_GPU();
  for (const char* v : {static_cast<const char*>(nullptr), "l816"}) {
    VariantScope scope(v);
    SCOPED_TRACE(v ? v : "default");
    int idx = 0;
    for (Epilogue e : {Epilogue::kBias, Epilogue::kBiasGelu, Epilogue::kGelu, Epilogue::kBiasGradA,
                       Epilogue::kBiasGradB}) {
      Case c;
      c.m = 2056; c.n = 1800; c.k = 203 + 8 * idx;
      c.oa = idx % 2 ? Op::kT : Op::kN; c.ob = idx % 3 ? Op::kT : Op::kN;
      c.epi = e;
      c.beta = idx == 1 ? 0.5f : 0.0f;
      c.seed = 300 + idx++;
      run_case(c);
    }
  }
}

// Skinny M x N with deep K: the split-K plan (partials + ordered reduce) through each lean kernel,
// K not a multiple of the split (a tail slab in the last split).
TEST(GemmSimtGpu, SplitKLean) {
  BLU_REQUIRE_GPU();
  for (const char* v : {static_cast<const char*>(nullptr), "l88", "l816", "l88n64", "l816w",
                        "l168w", "l88k16", "l88n64k16"}) {
    VariantScope scope(v);
    SCOPED_TRACE(v ? v : "default");
    int idx = 0;
    for (Op oa : {Op::kN, Op::kT}) {
      for (Op ob : {Op::kN, Op::kT}) {
        Case c;
        c.m = 388 + 4 * idx; c.n = 260 + 8 * idx; c.k = 5003 + 1000 * idx;
        c.oa = oa; c.ob = ob;
        c.epi = idx == 2 ? Epilogue::kBias : Epilogue::kNone;
        c.beta = idx == 1 ? 0.5f : 0.0f;
        c.seed = 400 + idx++;
        run_case(c);
      }
    }
  }
}

// Strictness: a = 1 + j 2^-18 is not a tf32 value; with these inputs every product and partial
// sum is exact in fp32, so the result must equal the float64 reference exactly.
TEST(GemmSimtGpu, ExactWhereTf32WouldRound) {
  BLU_REQUIRE_GPU();
  for (const char* v : kVariants) {
    VariantScope scope(v);
    SCOPED_TRACE(v ? v : "default");
    int idx = 0;
    for (Op oa : {Op::kN, Op::kT}) {
      for (Op ob : {Op::kN, Op::kT}) {
        Case c;
        c.m = 2048; c.n = 1792; c.k = idx % 2 ? 15 : 8;
        c.oa = oa; c.ob = ob; c.seed = 500 + idx++;
        run_case(c, /*exact=*/true);
      }
    }
  }
}

// Bitwise determinism: the same call twice gives the same bytes (split-K reduce included).
TEST(GemmSimtGpu, RunToRunBitwise) {
  BLU_REQUIRE_GPU();
  for (const char* v : {static_cast<const char*>(nullptr), "l88", "l816", "l88k16"}) {
    VariantScope scope(v);
    for (int k : {300, 6000}) {
      Case c;
      c.m = k > 1000 ? 512 : 2048; c.n = k > 1000 ? 384 : 1792; c.k = k;
      c.oa = Op::kT; c.ob = Op::kN; c.seed = 600;
      const std::vector<float> d1 = run_case(c), d2 = run_case(c);
      ASSERT_EQ(d1.size(), d2.size());
      EXPECT_EQ(std::memcmp(d1.data(), d2.data(), d1.size() * 4), 0) << (v ? v : "default");
    }
  }
}

}  // namespace
