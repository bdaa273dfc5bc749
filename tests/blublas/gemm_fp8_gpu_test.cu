// gemm_fp8_gpu_test.cu: the FP8 GEMM (Note [FP8 GEMM] in blublas/src/gemm/gemm.cpp) through the
// public API on sm_90: every e4m3/e5m2 pair, f32 and bf16 D, row-major NT and column-major TN,
// odd sizes (edge tiles, K not a multiple of the 128-deep stage, K = 1), per-tensor scales (device
// pointers), alpha, beta with C, bias, amax of D, batches, a misaligned leading dimension (kAuto
// repacks it), each FP8 tile forced (BLUBLAS_SM90_TILE) and split-K (the reduction kernel then
// applies the epilogue and amax), the mma.sync FP8 kernels (Ada's path) forced, and bitwise
// determinism. Inputs are random FP8 values (decoded
// exactly to float64 for the reference); D is poisoned (NaN) first and its padding columns must
// stay poisoned. Bound, per element: |D - exact| <= tol * scale + u_D |exact|, scale = |alpha sa sb|
// sum_k |a b| + |beta c| + |bias|, with tol = kFp8Tol (the tensor cores' FP8 accumulation keeps
// fewer bits than fp32: Note [FP8 GEMM]); each case prints its worst err / scale.
// Skips unless the device is sm_90 and the build holds sm_90a code.
#include <cuda_fp8.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "blublas/device_info.h"
#include "blublas/gemm.h"
#include "common/gpu_test.h"
#include "common/scoped_env.h"

namespace {

using blublas::Dtype;
using blublas::Epilogue;
using blublas::GemmDesc;
using blublas::Layout;
using blublas::Op;
using blublas::Status;

// Random-sign inputs: the fast FP8 accumulation stays far below this (the cases print their worst
// err / scale). The all-positive case (partial sums as large as the scale) has its own bound.
constexpr double kFp8Tol = 2e-3;
constexpr double kFp8PositiveTol = 3e-2;

uint8_t encode(Dtype t, float v) {
  if (t == Dtype::kE4M3) {
    __nv_fp8_e4m3 x(v);
    return x.__x;
  }
  __nv_fp8_e5m2 x(v);
  return x.__x;
}
double decode(Dtype t, uint8_t b) {
  if (t == Dtype::kE4M3) {
    __nv_fp8_e4m3 x;
    x.__x = b;
    return static_cast<double>(static_cast<float>(x));
  }
  __nv_fp8_e5m2 x;
  x.__x = b;
  return static_cast<double>(static_cast<float>(x));
}
double out_get(Dtype t, const std::vector<uint8_t>& bytes, std::size_t i) {
  if (t == Dtype::kF32) {
    float v;
    std::memcpy(&v, bytes.data() + 4 * i, 4);
    return v;
  }
  __nv_bfloat16_raw r;
  std::memcpy(&r.x, bytes.data() + 2 * i, 2);
  return static_cast<double>(__bfloat162float(__nv_bfloat16(r)));
}
void out_put(Dtype t, std::vector<uint8_t>& bytes, std::size_t i, float v) {
  if (t == Dtype::kF32) {
    std::memcpy(bytes.data() + 4 * i, &v, 4);
  } else {
    __nv_bfloat16_raw r = __nv_bfloat16(__float2bfloat16(v));
    std::memcpy(bytes.data() + 2 * i, &r.x, 2);
  }
}

struct DevBuf {
  void* ptr = nullptr;
  explicit DevBuf(std::size_t n) {
    if (n > 0 && cudaMalloc(&ptr, n) != cudaSuccess) ptr = nullptr;
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (ptr) cudaFree(ptr);
  }
};

std::string sm90_unavailable() {
  blublas::DeviceInfo dev;
  Status st = blublas::current_device_info(&dev);
  if (!st.ok()) return "device query failed: " + st.to_string();
  if (dev.sm_major != 9 || dev.sm_minor != 0) {
    return "device is sm_" + std::to_string(dev.sm_major) + std::to_string(dev.sm_minor) +
           ", the FP8 kernels need sm_90";
  }
  return "";
}

#define BLU_REQUIRE_SM90()                                          \
  BLU_REQUIRE_GPU();                                                \
  do {                                                              \
    std::string why_ = sm90_unavailable();                          \
    if (!why_.empty()) GTEST_SKIP() << "FP8 test skipped: " << why_; \
  } while (0)

using blu::test::ScopedEnv;

struct Fp8Case {
  Dtype a = Dtype::kE4M3, b = Dtype::kE4M3, cd = Dtype::kBF16;
  Layout layout = Layout::kRowMajor;
  int m = 17, n = 33, k = 64, batch = 1;
  bool bias = false, scales = true, amax = true, positive = false;
  float alpha = 1.0f, beta = 0.0f;
  int ld_pad = 16;  // extra elements per operand row (not a multiple of 16: kAuto repacks)
  std::string tile, splits;  // forced (BLUBLAS_SM90_TILE / BLUBLAS_SM90_SPLITS), "" = heuristic
  blublas::GemmPath path = blublas::GemmPath::kAuto;  // kSm80Mma: the mma.sync FP8 kernels
  std::string str() const {
    std::ostringstream os;
    os << "a=" << blublas::dtype_name(a) << " b=" << blublas::dtype_name(b)
       << " cd=" << blublas::dtype_name(cd) << (layout == Layout::kRowMajor ? " row-major NT" : " col-major TN")
       << " M=" << m << " N=" << n << " K=" << k << " batch=" << batch << (bias ? " bias" : "")
       << (scales ? " scales" : "") << (amax ? " amax" : "") << (positive ? " positive" : "")
       << " alpha=" << alpha << " beta=" << beta << " ld_pad=" << ld_pad
       << " tile=" << (tile.empty() ? "auto" : tile) << " splits=" << (splits.empty() ? "auto" : splits)
       << " path=" << blublas::gemm_path_name(path);
    return os.str();
  }
};

// Runs one case; returns its worst err / scale (and fails the test on any bad element).
double run_case(const Fp8Case& c, bool check_determinism = false) {
  SCOPED_TRACE(c.str());
  ScopedEnv tile_env("BLUBLAS_SM90_TILE", c.tile), split_env("BLUBLAS_SM90_SPLITS", c.splits);
  std::mt19937 rng(977u + c.m * 7u + c.n * 13u + c.k * 17u + static_cast<unsigned>(c.a) * 5u +
                   static_cast<unsigned>(c.b) * 11u + static_cast<unsigned>(c.cd) * 3u + c.batch * 31u);
  // Values spread over a few binades of each format; e5m2's wider range is used too.
  std::uniform_real_distribution<float> mag(0.05f, 4.0f);
  std::bernoulli_distribution sign(0.5);
  auto rnd = [&](Dtype t) {
    const float v = mag(rng) * (t == Dtype::kE5M2 ? 2.0f : 1.0f);
    return encode(t, c.positive || !sign(rng) ? v : -v);
  };
  // A' (M x K) and B' (N x K) are K-major in both layouts: element (i, k) at a[i*lda + k], (j, k)
  // at b[j*ldb + k] (row-major NT, and column-major TN whose stored A is K x M: the same bytes).
  const int64_t lda = c.k + c.ld_pad, ldb = c.k + c.ld_pad;
  const int64_t sa_elems = static_cast<int64_t>(c.m) * lda, sb_elems = static_cast<int64_t>(c.n) * ldb;
  const bool row = c.layout == Layout::kRowMajor;
  const int64_t ldd = (row ? c.n : c.m) + 8;  // padding columns (rows in col-major) stay poisoned
  const int64_t d_elems = ldd * (row ? c.m : c.n);
  std::vector<uint8_t> ha(static_cast<std::size_t>(sa_elems * c.batch)), hb(static_cast<std::size_t>(sb_elems * c.batch));
  for (auto& x : ha) x = rnd(c.a);
  for (auto& x : hb) x = rnd(c.b);
  const std::size_t es = blublas::dtype_size(c.cd);
  std::vector<uint8_t> hc(static_cast<std::size_t>(d_elems * c.batch) * es), hbias(static_cast<std::size_t>(c.n) * es);  // bias[j]: D's columns in both layouts
  std::uniform_real_distribution<float> cval(-2.0f, 2.0f);
  for (std::size_t i = 0; i < hc.size() / es; ++i) out_put(c.cd, hc, i, cval(rng));
  for (std::size_t i = 0; i < hbias.size() / es; ++i) out_put(c.cd, hbias, i, cval(rng));
  const float scale_a = c.scales ? 0.37f : 1.0f, scale_b = c.scales ? 2.5f : 1.0f;

  DevBuf da(ha.size()), db(hb.size()), dc(hc.size()), dbias(hbias.size()), dd(hc.size()), dscale(8), damax(4);
  EXPECT_TRUE(da.ptr && db.ptr && dc.ptr && dbias.ptr && dd.ptr && dscale.ptr && damax.ptr);
  if (!(da.ptr && db.ptr && dc.ptr && dbias.ptr && dd.ptr && dscale.ptr && damax.ptr)) return 0;
  const float scales[2] = {scale_a, scale_b};
  EXPECT_EQ(cudaMemcpy(da.ptr, ha.data(), ha.size(), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(db.ptr, hb.data(), hb.size(), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dc.ptr, hc.data(), hc.size(), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dbias.ptr, hbias.data(), hbias.size(), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dscale.ptr, scales, sizeof(scales), cudaMemcpyHostToDevice), cudaSuccess);

  GemmDesc d;
  d.m = c.m; d.n = c.n; d.k = c.k; d.batch = c.batch;
  d.layout = c.layout;
  d.ab_type = c.a;
  d.b_type = c.b;
  d.cd_type = c.cd;
  if (row) {  // D (M x N) = A (M x K, row-major) B^T (B stored N x K): NT
    d.op_a = Op::kN; d.op_b = Op::kT;
    d.a = da.ptr; d.lda = lda; d.stride_a = sa_elems;
    d.b = db.ptr; d.ldb = ldb; d.stride_b = sb_elems;
  } else {    // column-major D (M x N) = A^T B with A stored K x M and B stored K x N: TN
    d.op_a = Op::kT; d.op_b = Op::kN;
    d.a = da.ptr; d.lda = lda; d.stride_a = sa_elems;
    d.b = db.ptr; d.ldb = ldb; d.stride_b = sb_elems;
  }
  d.c = dc.ptr; d.ldc = ldd; d.stride_c = d_elems;
  d.d = dd.ptr; d.ldd = ldd; d.stride_d = d_elems;
  d.alpha = c.alpha; d.beta = c.beta;
  d.path = c.path;
  d.epilogue = c.bias ? Epilogue::kBias : Epilogue::kNone;
  d.bias = c.bias ? dbias.ptr : nullptr;
  if (c.scales) {
    d.scale_a = static_cast<const float*>(dscale.ptr);
    d.scale_b = static_cast<const float*>(dscale.ptr) + 1;
  }
  if (c.amax) d.amax_d = static_cast<float*>(damax.ptr);
  std::size_t ws_bytes = 0;
  Status st = blublas::gemm_workspace_size(d, &ws_bytes);
  EXPECT_TRUE(st.ok()) << st.to_string();
  DevBuf ws(ws_bytes);

  auto run_once = [&](std::vector<uint8_t>* out, float* amax) {
    EXPECT_EQ(cudaMemset(dd.ptr, 0xFF, hc.size()), cudaSuccess);
    EXPECT_EQ(cudaMemset(damax.ptr, 0, 4), cudaSuccess);
    Status s = blublas::gemm(d, ws.ptr, ws_bytes, nullptr);
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    out->resize(hc.size());
    EXPECT_EQ(cudaMemcpy(out->data(), dd.ptr, hc.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(amax, damax.ptr, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  };
  std::vector<uint8_t> got;
  float amax_got = 0;
  run_once(&got, &amax_got);

  const double u = c.cd == Dtype::kF32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -8);
  const double tol = c.positive ? kFp8PositiveTol : kFp8Tol;
  const double s_ab = static_cast<double>(c.alpha) * scale_a * scale_b;
  double worst = 0, ref_amax = 0, amax_slack = 0;
  int bad = 0, unwritten = 0, clobbered = 0;
  for (int bt = 0; bt < c.batch; ++bt) {
    for (int i = 0; i < c.m; ++i) {
      for (int j = 0; j < c.n; ++j) {
        double acc = 0, mag_sum = 0;
        for (int kk = 0; kk < c.k; ++kk) {
          const double x = decode(c.a, ha[static_cast<std::size_t>(bt * sa_elems + i * lda + kk)]) *
                           decode(c.b, hb[static_cast<std::size_t>(bt * sb_elems + j * ldb + kk)]);
          acc += x;
          mag_sum += std::fabs(x);
        }
        const std::size_t di = static_cast<std::size_t>(bt * d_elems + (row ? i * ldd + j : j * ldd + i));
        double exact = s_ab * acc, scale = std::fabs(s_ab) * mag_sum;
        if (c.beta != 0.0f) {
          exact += c.beta * out_get(c.cd, hc, di);
          scale += std::fabs(c.beta * out_get(c.cd, hc, di));
        }
        if (c.bias) {
          const double bv = out_get(c.cd, hbias, static_cast<std::size_t>(j));
          exact += bv;
          scale += std::fabs(bv);
        }
        const double v = out_get(c.cd, got, di);
        const double err = std::fabs(v - exact);
        if (!std::isfinite(v)) {
          if (++unwritten <= 5) ADD_FAILURE() << "D(" << bt << ", " << i << ", " << j << ") not written";
          continue;
        }
        worst = std::max(worst, err / (scale + 1e-30));
        if (err > tol * scale + u * std::fabs(exact) + 1e-30 && ++bad <= 10) {
          ADD_FAILURE() << "D(" << bt << ", " << i << ", " << j << ") = " << v << ", exact " << exact
                        << " (err " << err << ", scale " << scale << ")";
        }
        ref_amax = std::max(ref_amax, std::fabs(exact));
        amax_slack = std::max(amax_slack, tol * scale);
      }
    }
    // Padding: columns past N of row-major rows, rows past M of column-major columns.
    for (int64_t o = 0; o < (row ? c.m : c.n); ++o) {
      for (int64_t p = row ? c.n : c.m; p < ldd; ++p) {
        const double v = out_get(c.cd, got, static_cast<std::size_t>(bt * d_elems + o * ldd + p));
        if (!std::isnan(v) && ++clobbered <= 5) ADD_FAILURE() << "padding element " << o << ", " << p << " overwritten: " << v;
      }
    }
  }
  EXPECT_EQ(bad, 0) << "worst err/scale " << worst;
  EXPECT_EQ(unwritten, 0);
  EXPECT_EQ(clobbered, 0);
  if (c.amax) {
    EXPECT_LE(std::fabs(amax_got - ref_amax), amax_slack + 1e-6 * ref_amax)
        << "amax " << amax_got << " vs max |exact D| " << ref_amax;
  } else {
    EXPECT_EQ(amax_got, 0.0f) << "amax written without amax_d";
  }
  if (check_determinism) {
    std::vector<uint8_t> again;
    float amax_again = 0;
    run_once(&again, &amax_again);
    EXPECT_TRUE(again == got) << "a second run gave other bits";
    EXPECT_EQ(amax_again, amax_got);
  }
  std::printf("fp8 %s: worst err/scale %.3g\n", c.str().c_str(), worst);
  return worst;
}

// Every A x B format pair and both D types over `shapes`, the options varied case by case (bias,
// scales, amax, alpha, beta; with batches, some cases batched and some rerun for bitwise equality).
template <std::size_t N>
void run_every_pair(blublas::GemmPath path, const int (&shapes)[N][3], bool batches) {
  const Dtype types[2] = {Dtype::kE4M3, Dtype::kE5M2};
  int idx = 0;
  for (Dtype a : types) {
    for (Dtype b : types) {
      for (Dtype cd : {Dtype::kF32, Dtype::kBF16}) {
        for (const auto& s : shapes) {
          Fp8Case c;
          c.path = path;
          c.a = a; c.b = b; c.cd = cd;
          c.m = s[0]; c.n = s[1]; c.k = s[2];
          // A forced path never repacks (gemm.cpp, plan_path): its rows must start 16-byte aligned.
          if (path != blublas::GemmPath::kAuto) c.ld_pad = (16 - c.k % 16) % 16 + 16;
          c.bias = idx % 2 == 0;
          c.scales = idx % 3 != 0;
          c.amax = idx % 4 != 1;
          c.alpha = idx % 5 == 0 ? -0.75f : 1.0f;
          c.beta = idx % 3 == 2 ? 0.5f : 0.0f;
          if (batches) c.batch = idx % 7 == 3 ? 2 : 1;
          run_case(c, /*check_determinism=*/batches && idx % 4 == 0);
          ++idx;
        }
      }
    }
  }
}

TEST(GemmFp8, EveryPairAndOutputOnOddSizes) {
  BLU_REQUIRE_SM90();
  const int shapes[][3] = {{1, 1, 1}, {17, 33, 64}, {129, 77, 200}, {64, 256, 128}, {200, 300, 640}, {5, 517, 33}};
  run_every_pair(blublas::GemmPath::kAuto, shapes, /*batches=*/false);
}

TEST(GemmFp8, ColumnMajorTnAndBatches) {
  BLU_REQUIRE_SM90();
  Fp8Case c;
  c.layout = Layout::kColMajor;
  c.a = Dtype::kE4M3; c.b = Dtype::kE5M2;
  c.m = 150; c.n = 97; c.k = 300; c.bias = true; c.beta = 0.25f;
  run_case(c);
  c.cd = Dtype::kF32;
  c.batch = 3;
  c.layout = Layout::kRowMajor;
  run_case(c);
}

// Each FP8 tile forced, with many tiles per CTA, and split-K (amax then comes from the reduction).
TEST(GemmFp8, ForcedTilesAndSplitK) {
  BLU_REQUIRE_SM90();
  for (const char* tile : {"128x256_2c", "64x256_pp", "128x128_2c"}) {
    Fp8Case c;
    c.m = 1000; c.n = 700; c.k = 384; c.tile = tile; c.bias = true;
    run_case(c, /*check_determinism=*/true);
  }
  Fp8Case c;
  c.m = 300; c.n = 260; c.k = 2000; c.splits = "3"; c.tile = "128x256_2c"; c.cd = Dtype::kF32;
  run_case(c, /*check_determinism=*/true);
  c.cd = Dtype::kBF16;
  c.bias = true;
  c.beta = 0.5f;
  run_case(c, /*check_determinism=*/true);
}

// The mma.sync FP8 kernels (Note [sm89 FP8 mma.sync]: Ada's FP8 path), forced on Hopper: every
// pair, both D types, odd sizes, scales, alpha, beta, bias, amax, batches, bitwise reruns.
TEST(GemmFp8, Sm80MmaPathEveryPair) {
  BLU_REQUIRE_SM90();
  const int shapes[][3] = {{1, 1, 1}, {17, 33, 64}, {129, 77, 200}, {200, 300, 640}};
  run_every_pair(blublas::GemmPath::kSm80Mma, shapes, /*batches=*/true);
}

// Forced onto the mma.sync path, a leading dimension that is not 16-byte aligned is refused with
// kMisaligned naming the path (a forced path does not repack), not run and not a fault.
TEST(GemmFp8, Sm80MmaPathRefusesMisalignedLd) {
  BLU_REQUIRE_SM90();
  DevBuf a(64 * 17), b(64 * 17), d(64 * 64 * 4);
  ASSERT_TRUE(a.ptr && b.ptr && d.ptr);
  GemmDesc g;
  g.m = 64; g.n = 64; g.k = 16;
  g.op_a = Op::kN; g.op_b = Op::kT;
  g.ab_type = Dtype::kE4M3; g.b_type = Dtype::kE4M3; g.cd_type = Dtype::kF32;
  g.a = a.ptr; g.lda = 17; g.b = b.ptr; g.ldb = 17;
  g.c = d.ptr; g.ldc = 64; g.d = d.ptr; g.ldd = 64;
  g.alpha = 1.0f; g.beta = 0.0f;
  g.path = blublas::GemmPath::kSm80Mma;
  const Status s = blublas::gemm(g, nullptr, 0, nullptr);
  EXPECT_EQ(s.code(), blublas::StatusCode::kMisaligned) << s.to_string();
  EXPECT_NE(s.to_string().find("sm80_mma"), std::string::npos) << s.to_string();
}

// A leading dimension that is not a multiple of 16 bytes: kAuto copies the operand (1-byte repack).
TEST(GemmFp8, MisalignedOperandIsRepacked) {
  BLU_REQUIRE_SM90();
  Fp8Case c;
  c.m = 70; c.n = 90; c.k = 100; c.ld_pad = 3;
  run_case(c);
}

// All-positive inputs: every partial sum is as large as the scale, the worst case of the
// tensor cores' reduced-precision FP8 accumulation; measured and held to kFp8PositiveTol.
TEST(GemmFp8, PositiveInputsLongK) {
  BLU_REQUIRE_SM90();
  Fp8Case c;
  c.m = 64; c.n = 64; c.k = 4096; c.positive = true; c.cd = Dtype::kF32;
  const double worst = run_case(c);
  std::printf("fp8 all-positive K=4096: worst err/scale %.3g (bound %.3g)\n", worst, kFp8PositiveTol);
}

}  // namespace
