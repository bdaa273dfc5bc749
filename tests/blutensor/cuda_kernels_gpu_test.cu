// GPU tests of blutensor's CUDA kernels (blu::cuda_ops), each against a float64 reference computed
// here on the host: casts between all dtypes, strided and broadcast elementwise ops, reductions on
// every schedule, batched GEMM with transposed / broadcast operands, softmax, layernorm,
// embedding, cross-entropy, causal fill, AdamW, and Philox draws equal to the host's. Inputs are
// fresh pseudo-random values at odd sizes; outputs are poisoned (NaN) before each kernel; every
// element is bounded and the first failures are printed with index, got, expected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../../blutensor/src/cuda/cuda_ops.h"  // the kernel-level backend (src is private)
#include "../../blutensor/src/cuda/kernel_utils.cuh"  // blublas_fallback_count
#include "blutensor/cuda_stream.h"
#include "blutensor/philox.h"
#include "blutensor/tensor.h"
#include "common/gpu_test.h"

namespace {

using namespace blu;
namespace co = blu::cuda_ops;

const Device kGpu = Device::cuda(0);
const double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Lcg {
  uint64_t s;
  explicit Lcg(uint64_t seed) : s(seed * 2862933555777941757ull + 3037000493ull) {}
  double uniform() {  // [0, 1)
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(s >> 11) * (1.0 / 9007199254740992.0);
  }
};

double read_elem(const void* base, DType dt, int64_t i) {
  switch (dt) {
    case DType::F64: return static_cast<const double*>(base)[i];
    case DType::F32: return static_cast<const float*>(base)[i];
    case DType::BF16: return static_cast<float>(static_cast<const BFloat16*>(base)[i]);
    case DType::F16: return static_cast<float>(static_cast<const Half*>(base)[i]);
    case DType::I32: return static_cast<const int32_t*>(base)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::U16: return static_cast<const uint16_t*>(base)[i];
  }
  return 0;
}

// Values of a tensor (any device, any strides) in row-major order, through cuda_ops::copy_.
std::vector<double> values(const Tensor& t) {
  Tensor host = empty(t.sizes(), TensorOptions(t.dtype()));
  if (t.is_cuda()) {
    co::copy_(host, t);
  } else {
    co::copy_(host, t);  // CPU -> CPU goes to the CPU backend
  }
  std::vector<double> v(static_cast<std::size_t>(host.numel()));
  for (int64_t i = 0; i < host.numel(); ++i) v[static_cast<std::size_t>(i)] = read_elem(host.data_ptr(), t.dtype(), i);
  return v;
}

// Host tensor of random values: floats uniform in [lo, hi), integers in [lo, hi].
Tensor host_random(const Shape& shape, DType dt, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Lcg g(seed);
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (double& x : v) {
    x = lo + (hi - lo) * g.uniform();
    if (is_integral(dt)) x = std::floor(lo + (hi - lo + 1) * g.uniform());
  }
  return from_vector(v, shape, TensorOptions(dt));
}

Tensor to_gpu(const Tensor& host) {
  Tensor t = empty(host.sizes(), TensorOptions(host.dtype()).device(kGpu));
  co::copy_(t, host);
  return t;
}

Tensor gpu_random(const Shape& shape, DType dt, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return to_gpu(host_random(shape, dt, seed, lo, hi));
}

Tensor gpu_poisoned(const Shape& shape, DType dt) {
  Tensor t = empty(shape, TensorOptions(dt).device(kGpu));
  co::fill_(t, is_floating(dt) ? kNaN : -7.0);
  return t;
}

// The value a float64 result has after rounding to dtype (the best any kernel can do).
double round_to(double v, DType dt) {
  switch (dt) {
    case DType::F32: return static_cast<float>(v);
    case DType::BF16: return static_cast<float>(BFloat16(static_cast<float>(v)));
    case DType::F16: return static_cast<float>(Half(static_cast<float>(v)));
    default: return v;
  }
}

struct Tol {
  double rtol, atol;
};
Tol tol_for(DType dt) {
  switch (dt) {
    case DType::F64: return {1e-12, 1e-12};
    case DType::F32: return {2e-5, 1e-6};
    case DType::BF16: return {1.6e-2, 1e-3};
    case DType::F16: return {2e-3, 1e-4};
    default: return {0, 0};
  }
}

// |got - ref| <= atol + rtol * |ref| for every element (NaN in got fails); prints the first few.
::testing::AssertionResult all_close(const std::vector<double>& got, const std::vector<double>& ref,
                                     Tol tol, const std::string& what) {
  if (got.size() != ref.size()) {
    return ::testing::AssertionFailure() << what << ": " << got.size() << " values, expected "
                                         << ref.size();
  }
  int bad = 0;
  double max_err = 0;
  std::string msg;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - ref[i]);
    const bool ok = (std::isnan(ref[i]) && std::isnan(got[i])) ||
                    (std::isinf(ref[i]) && got[i] == ref[i]) ||
                    err <= tol.atol + tol.rtol * std::fabs(ref[i]);
    if (!std::isnan(err)) max_err = std::max(max_err, err);
    if (!ok) {
      if (bad < 8) {
        msg += "\n  [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " expected " +
               std::to_string(ref[i]);
      }
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size()
                                       << " elements out of tolerance (rtol " << tol.rtol
                                       << ", atol " << tol.atol << ", max abs err " << max_err
                                       << ")" << msg;
}

// Row-major strides / index helpers for references.
std::vector<int64_t> unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[static_cast<std::size_t>(d)] = i % shape[static_cast<std::size_t>(d)];
    i /= shape[static_cast<std::size_t>(d)];
  }
  return idx;
}
int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t i = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) i = i * shape[d] + (shape[d] == 1 ? 0 : idx[d]);
  return i;
}

const DType kFloatTypes[] = {DType::F64, DType::F32, DType::BF16, DType::F16};
const DType kAllTypes[] = {DType::F64, DType::F32, DType::BF16, DType::F16,
                           DType::I32, DType::I64, DType::U16};

// ------------------------------------------------------------------------------- copies, casts

double cast_ref(double v, DType from, DType to) {
  (void)from;
  switch (to) {
    case DType::F64: return v;
    case DType::F32: return static_cast<float>(v);
    case DType::BF16: return round_to(v, DType::BF16);
    case DType::F16: return round_to(v, DType::F16);
    case DType::I32: return static_cast<double>(static_cast<int32_t>(v));
    case DType::I64: return static_cast<double>(static_cast<int64_t>(v));
    case DType::U16: return static_cast<double>(static_cast<uint16_t>(v));
  }
  return v;
}

TEST(CudaKernels, CastsBetweenAllDtypes) {
  BLU_REQUIRE_GPU();
  const Shape shape{37, 19};
  uint64_t seed = 1;
  for (DType from : kAllTypes) {
    // Values every dtype holds: non-negative (u16) and below 2^8 for the integer conversions.
    Tensor src = gpu_random(shape, from, ++seed, 0.0, 200.0);
    std::vector<double> sv = values(src);
    for (DType to : kAllTypes) {
      Tensor dst = gpu_poisoned(shape, to);
      co::copy_(dst, src);
      std::vector<double> ref(sv.size());
      for (std::size_t i = 0; i < sv.size(); ++i) ref[i] = cast_ref(sv[i], from, to);
      EXPECT_TRUE(all_close(values(dst), ref, {0, 0},
                            std::string("cast ") + dtype_name(from) + " -> " + dtype_name(to)));
    }
  }
}

TEST(CudaKernels, StridedAndBroadcastCopies) {
  BLU_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16, DType::F64, DType::I64}) {
    Tensor a = gpu_random({13, 29}, dt, 11, -50, 50);
    std::vector<double> av = values(a);
    // Transposed source into a contiguous destination.
    Tensor at = a.transpose(0, 1);
    Tensor dst = gpu_poisoned({29, 13}, dt);
    co::copy_(dst, at);
    std::vector<double> ref(av.size());
    for (int64_t i = 0; i < 29; ++i)
      for (int64_t j = 0; j < 13; ++j) ref[static_cast<std::size_t>(i * 13 + j)] = av[static_cast<std::size_t>(j * 29 + i)];
    EXPECT_TRUE(all_close(values(dst), ref, {0, 0}, std::string("transpose copy ") + dtype_name(dt)));
    // Sliced (step 2) source, broadcast along a new leading dim, into a strided destination.
    Tensor sl = a.slice(1, 1, 29, 2);  // [13, 14]
    Tensor big = gpu_poisoned({3, 14, 13}, dt);
    Tensor dst_view = big.transpose(1, 2);  // [3, 13, 14], strided
    co::copy_(dst_view, sl.expand({3, 13, 14}));
    std::vector<double> got = values(big);
    std::vector<double> ref2(got.size());
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t j = 0; j < 14; ++j)
        for (int64_t i = 0; i < 13; ++i)
          ref2[static_cast<std::size_t>((b * 14 + j) * 13 + i)] = av[static_cast<std::size_t>(i * 29 + 1 + 2 * j)];
    EXPECT_TRUE(all_close(got, ref2, {0, 0}, std::string("broadcast strided copy ") + dtype_name(dt)));
  }
}

TEST(CudaKernels, CrossDeviceCopiesWithCastAndStrides) {
  BLU_REQUIRE_GPU();
  Tensor host = host_random({17, 33}, DType::F64, 5);
  std::vector<double> hv = values(host);
  // CPU f64 transposed -> CUDA bf16 contiguous.
  Tensor dev = gpu_poisoned({33, 17}, DType::BF16);
  co::copy_(dev, host.transpose(0, 1));
  std::vector<double> ref(hv.size());
  for (int64_t i = 0; i < 33; ++i)
    for (int64_t j = 0; j < 17; ++j)
      ref[static_cast<std::size_t>(i * 17 + j)] = round_to(hv[static_cast<std::size_t>(j * 33 + i)], DType::BF16);
  EXPECT_TRUE(all_close(values(dev), ref, {0, 0}, "cpu f64^T -> cuda bf16"));
  // CUDA bf16 transposed -> CPU f32.
  Tensor back = empty({17, 33}, TensorOptions(DType::F32));
  co::copy_(back, dev.transpose(0, 1));
  std::vector<double> ref2(hv.size());
  for (std::size_t i = 0; i < hv.size(); ++i) ref2[i] = round_to(hv[i], DType::BF16);
  EXPECT_TRUE(all_close(values(back), ref2, {0, 0}, "cuda bf16^T -> cpu f32"));
  EXPECT_THROW(co::copy_(back, dev), blu::Error);  // shapes differ
}

TEST(CudaKernels, FillStridedView) {
  BLU_REQUIRE_GPU();
  for (DType dt : kAllTypes) {
    Tensor t = gpu_random({9, 10}, dt, 3, 0, 100);
    std::vector<double> before = values(t);
    co::fill_(t.slice(1, 0, 10, 3), 42.0);
    std::vector<double> ref = before;
    for (int64_t i = 0; i < 9; ++i)
      for (int64_t j = 0; j < 10; j += 3) ref[static_cast<std::size_t>(i * 10 + j)] = 42.0;
    EXPECT_TRUE(all_close(values(t), ref, {0, 0}, std::string("fill_ ") + dtype_name(dt)));
  }
}

// ------------------------------------------------------------------------------- elementwise

double gelu_ref(double x) {
  return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
double gelu_grad_ref(double x) {
  double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

TEST(CudaKernels, UnaryOpsOnStridedInputs) {
  BLU_REQUIRE_GPU();
  struct Case {
    UnaryOp op;
    double alpha;
    std::function<double(double)> f;
    const char* name;
  };
  const std::vector<Case> cases = {
      {UnaryOp::kNeg, 0, [](double x) { return -x; }, "neg"},
      {UnaryOp::kExp, 0, [](double x) { return std::exp(x); }, "exp"},
      {UnaryOp::kLog, 0, [](double x) { return std::log(x); }, "log"},
      {UnaryOp::kSqrt, 0, [](double x) { return std::sqrt(x); }, "sqrt"},
      {UnaryOp::kTanh, 0, [](double x) { return std::tanh(x); }, "tanh"},
      {UnaryOp::kRelu, 0, [](double x) { return x > 0 ? x : 0; }, "relu"},
      {UnaryOp::kGelu, 0, gelu_ref, "gelu"},
      {UnaryOp::kAddScalar, 0.75, [](double x) { return x + 0.75; }, "add_scalar"},
      {UnaryOp::kMulScalar, -1.5, [](double x) { return x * -1.5; }, "mul_scalar"},
      {UnaryOp::kPowScalar, 2.0, [](double x) { return x * x; }, "pow2"},
      {UnaryOp::kPowScalar, 1.7, [](double x) { return std::pow(x, 1.7); }, "pow1.7"},
      {UnaryOp::kRSubScalar, 2.0, [](double x) { return 2.0 - x; }, "rsub"},
      {UnaryOp::kRDivScalar, 3.0, [](double x) { return 3.0 / x; }, "rdiv"},
      {UnaryOp::kClampMax, 0.9, [](double x) { return x > 0.9 ? 0.9 : x; }, "clamp_max"},
  };
  uint64_t seed = 100;
  for (DType dt : kFloatTypes) {
    for (const Case& c : cases) {
      const bool positive = c.op == UnaryOp::kLog || c.op == UnaryOp::kSqrt ||
                            c.op == UnaryOp::kPowScalar || c.op == UnaryOp::kRDivScalar;
      Tensor a = gpu_random({23, 41}, dt, ++seed, positive ? 0.25 : -2.0, 2.0);
      std::vector<double> av = values(a);
      for (bool strided : {false, true}) {
        Tensor in = strided ? a.transpose(0, 1) : a;
        Tensor out = gpu_poisoned(in.sizes(), dt);
        co::unary(c.op, out, in, c.alpha);
        std::vector<double> iv = values(in);
        std::vector<double> ref(iv.size());
        for (std::size_t i = 0; i < iv.size(); ++i) ref[i] = round_to(c.f(iv[i]), dt);
        Tol tol = tol_for(dt);
        if (dt == DType::F32) tol = {1e-5, 1e-6};
        EXPECT_TRUE(all_close(values(out), ref, tol,
                              std::string("unary ") + c.name + " " + dtype_name(dt) +
                                  (strided ? " strided" : "")));
      }
    }
  }
}

TEST(CudaKernels, BinaryOpsWithBroadcasting) {
  BLU_REQUIRE_GPU();
  struct Case {
    BinaryOp op;
    double alpha;
    std::function<double(double, double)> f;
    const char* name;
  };
  const std::vector<Case> cases = {
      {BinaryOp::kAdd, 1.0, [](double a, double b) { return a + b; }, "add"},
      {BinaryOp::kAdd, -0.5, [](double a, double b) { return a - 0.5 * b; }, "add_alpha"},
      {BinaryOp::kSub, 0, [](double a, double b) { return a - b; }, "sub"},
      {BinaryOp::kMul, 0, [](double a, double b) { return a * b; }, "mul"},
      {BinaryOp::kDiv, 0, [](double a, double b) { return a / b; }, "div"},
      {BinaryOp::kReluBackward, 0, [](double g, double x) { return x > 0 ? g : 0; }, "relu_bwd"},
      {BinaryOp::kGeluBackward, 0, [](double g, double x) { return g * gelu_grad_ref(x); }, "gelu_bwd"},
      {BinaryOp::kTanhBackward, 0, [](double g, double y) { return g * (1 - y * y); }, "tanh_bwd"},
      {BinaryOp::kPowBackward, 2.5, [](double g, double x) { return g * 2.5 * std::pow(x, 1.5); }, "pow_bwd"},
      {BinaryOp::kEqMask, 0, [](double a, double b) { return a == b ? 1.0 : 0.0; }, "eq_mask"},
  };
  const Shape out_shape{5, 3, 7};
  uint64_t seed = 200;
  for (DType dt : kFloatTypes) {
    for (const Case& c : cases) {
      const bool positive = c.op == BinaryOp::kPowBackward || c.op == BinaryOp::kDiv;
      // a: [5, 1, 7] broadcast over dim 1; b: [3, 1] broadcast over dims 0 and 2.
      Tensor a = gpu_random({5, 1, 7}, dt, ++seed, -2, 2);
      Tensor b = gpu_random({3, 1}, dt, ++seed, positive ? 0.5 : -2, 2);
      if (c.op == BinaryOp::kEqMask) b = gpu_random({3, 1}, dt, seed, -2, 2);
      std::vector<double> av = values(a), bv = values(b);
      Tensor out = gpu_poisoned(out_shape, dt);
      co::binary(c.op, out, a.expand(out_shape), b.expand(out_shape), c.alpha);
      std::vector<double> ref(static_cast<std::size_t>(shape_numel(out_shape)));
      for (int64_t i = 0; i < shape_numel(out_shape); ++i) {
        std::vector<int64_t> idx = unravel(i, out_shape);
        double x = av[static_cast<std::size_t>(idx[0] * 7 + idx[2])];
        double y = bv[static_cast<std::size_t>(idx[1])];
        if (c.op == BinaryOp::kEqMask && idx[1] == 1) y = x;  // make some equal
        ref[static_cast<std::size_t>(i)] = round_to(c.f(x, y), dt);
      }
      if (c.op == BinaryOp::kEqMask) {
        // Exercise equality: b's middle row equals a's values through a second launch.
        Tensor a2 = a.expand(out_shape);
        Tensor out2 = gpu_poisoned(out_shape, dt);
        co::binary(c.op, out2, a2, a2, 0);
        std::vector<double> ones(ref.size(), 1.0);
        EXPECT_TRUE(all_close(values(out2), ones, {0, 0}, std::string("eq_mask self ") + dtype_name(dt)));
        for (int64_t i = 0; i < shape_numel(out_shape); ++i) {
          std::vector<int64_t> idx = unravel(i, out_shape);
          double x = av[static_cast<std::size_t>(idx[0] * 7 + idx[2])];
          ref[static_cast<std::size_t>(i)] = x == bv[static_cast<std::size_t>(idx[1])] ? 1.0 : 0.0;
        }
      }
      EXPECT_TRUE(all_close(values(out), ref, tol_for(dt),
                            std::string("binary ") + c.name + " " + dtype_name(dt)));
    }
  }
}

// Note [Row-vector path], its broadcasts: a bias [C] over [N, C], positions [T, C] over [B, T, C], a
// 0-d scalar, a [.., 1] column repeated along the row, mixed with full operands, in every float
// dtype (and a cast), against the host; plus the shapes that must fall back to the strided kernel
// (C not a multiple of the vector width, a misaligned bias).
TEST(CudaKernels, BroadcastFastPath) {
  BLU_REQUIRE_GPU();
  uint64_t seed = 900;
  for (DType dt : kFloatTypes) {
    for (int64_t c : {int64_t{64}, int64_t{63}}) {
      const Shape out_shape{6, 5, c};
      const int64_t n = shape_numel(out_shape);
      Tensor full = gpu_random(out_shape, dt, ++seed), bias = gpu_random({c + 1}, dt, ++seed);
      Tensor pos = gpu_random({5, c}, dt, ++seed), scalar = gpu_random({}, dt, ++seed);
      const std::vector<double> fv = values(full), bv = values(bias), pv = values(pos), sv = values(scalar);
      struct Run {
        const char* name;
        Tensor a, b;
        std::function<double(int64_t, int64_t, int64_t, int64_t)> ref;  // (i, t, j, linear)
      };
      Tensor bias0 = bias.narrow(0, 0, c), bias1 = bias.narrow(0, 1, c);  // aligned / misaligned
      const std::vector<Run> runs = {
          {"full + bias", full, bias0.expand(out_shape),
           [&](int64_t, int64_t, int64_t j, int64_t l) { return fv[l] + bv[j]; }},
          {"bias + full", bias0.expand(out_shape), full,
           [&](int64_t, int64_t, int64_t j, int64_t l) { return bv[j] + fv[l]; }},
          {"full + misaligned bias", full, bias1.expand(out_shape),
           [&](int64_t, int64_t, int64_t j, int64_t l) { return fv[l] + bv[j + 1]; }},
          {"pos + full", pos.expand(out_shape), full,
           [&](int64_t, int64_t t, int64_t j, int64_t l) { return pv[t * c + j] + fv[l]; }},
          {"full + scalar", full, scalar.expand(out_shape),
           [&](int64_t, int64_t, int64_t, int64_t l) { return fv[l] + sv[0]; }},
          {"bias + pos", bias0.expand(out_shape), pos.expand(out_shape),
           [&](int64_t, int64_t t, int64_t j, int64_t) { return bv[j] + pv[t * c + j]; }},
          {"full + transposed-broadcast", full, pos.narrow(1, 0, 1).expand(out_shape),
           [&](int64_t, int64_t t, int64_t, int64_t l) { return fv[l] + pv[t * c]; }},
      };
      for (const Run& r : runs) {
        Tensor out = gpu_poisoned(out_shape, dt);
        co::binary(BinaryOp::kAdd, out, r.a, r.b, 1.0);
        std::vector<double> ref(static_cast<std::size_t>(n));
        for (int64_t l = 0; l < n; ++l) {
          const int64_t i = l / (5 * c), t = (l / c) % 5, j = l % c;
          ref[static_cast<std::size_t>(l)] = round_to(r.ref(i, t, j, l), dt);
        }
        EXPECT_TRUE(all_close(values(out), ref, tol_for(dt),
                              std::string(r.name) + " C=" + std::to_string(c) + " " + dtype_name(dt)));
      }
      // A cast with a broadcast input (f32 out of dt's bias).
      Tensor out32 = gpu_poisoned(out_shape, DType::F32);
      co::copy_(out32, bias0.expand(out_shape));
      std::vector<double> ref32(static_cast<std::size_t>(n));
      for (int64_t l = 0; l < n; ++l) {  // the cast rounds to f32 (an f64 bias loses digits)
        ref32[static_cast<std::size_t>(l)] = round_to(bv[static_cast<std::size_t>(l % c)], DType::F32);
      }
      EXPECT_TRUE(all_close(values(out32), ref32, {0, 0}, std::string("broadcast cast ") + dtype_name(dt)));
    }
  }
}

// Note [Row-vector path]: the attention heads' transposes ([B, H, T, D] <-> [B, T, H, D], D = 64)
// as copies and as a binary with a contiguous operand, every float dtype, against the host; D = 63
// and a base one element off (misaligned) fall back to the strided kernel and must agree too.
TEST(CudaKernels, RowVectorPath) {
  BLU_REQUIRE_GPU();
  uint64_t seed = 1200;
  for (DType dt : kFloatTypes) {
    for (int64_t d : {int64_t{64}, int64_t{63}}) {
      const int64_t B = 2, H = 3, T = 5;
      Tensor src = gpu_random({B, H, T, d + 8}, dt, ++seed);  // rows of 72: aligned; first = 1: not
      const std::vector<double> sv = values(src);
      for (int64_t first : {int64_t{0}, int64_t{1}}) {
        Tensor view = src.narrow(3, first, d).transpose(1, 2);  // [B, T, H, d], stride 1 along d
        Tensor out = gpu_poisoned({B, T, H, d}, dt);
        co::copy_(out, view);
        Tensor other = gpu_random({B, T, H, d}, dt, ++seed);
        const std::vector<double> ov = values(other);
        Tensor sum = gpu_poisoned({B, T, H, d}, dt);
        co::binary(BinaryOp::kAdd, sum, view, other, 1.0);
        std::vector<double> ref_copy, ref_sum;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < H; ++h)
              for (int64_t j = 0; j < d; ++j) {
                const double x = sv[static_cast<std::size_t>(((b * H + h) * T + t) * (d + 8) + first + j)];
                ref_copy.push_back(x);
                ref_sum.push_back(round_to(x + ov[ref_sum.size()], dt));
              }
        const std::string what = std::string(" D=") + std::to_string(d) + " first=" + std::to_string(first) + " " +
                                 dtype_name(dt);
        EXPECT_TRUE(all_close(values(out), ref_copy, {0, 0}, "transpose copy" + what));
        EXPECT_TRUE(all_close(values(sum), ref_sum, tol_for(dt), "transpose add" + what));
        // And back: a contiguous source into a transposed destination view.
        Tensor back = gpu_poisoned({B, H, T, d}, dt);
        co::copy_(back.transpose(1, 2), out);
        std::vector<double> ref_back;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t t = 0; t < T; ++t)
              for (int64_t j = 0; j < d; ++j)
                ref_back.push_back(sv[static_cast<std::size_t>(((b * H + h) * T + t) * (d + 8) + first + j)]);
        EXPECT_TRUE(all_close(values(back), ref_back, {0, 0}, "transpose copy back" + what));
      }
    }
  }
}

TEST(CudaKernels, ElementwiseContiguousVectorPathWithTail) {
  BLU_REQUIRE_GPU();
  // 1e5 + 3 elements: the vectorised body plus a tail; also an offset (misaligned) view.
  for (DType dt : {DType::F32, DType::BF16}) {
    const int64_t n = 100003;
    Tensor a = gpu_random({n}, dt, 7), b = gpu_random({n}, dt, 8);
    Tensor out = gpu_poisoned({n}, dt);
    co::binary(BinaryOp::kMul, out, a, b, 0);
    std::vector<double> av = values(a), bv = values(b), ref(av.size());
    for (std::size_t i = 0; i < av.size(); ++i) ref[i] = round_to(av[i] * bv[i], dt);
    EXPECT_TRUE(all_close(values(out), ref, tol_for(dt), std::string("mul contiguous ") + dtype_name(dt)));
    Tensor a1 = a.slice(0, 1, n), b1 = b.slice(0, 1, n);
    Tensor out1 = gpu_poisoned({n - 1}, dt);
    co::binary(BinaryOp::kAdd, out1, a1, b1, 1.0);
    std::vector<double> ref1(av.size() - 1);
    for (std::size_t i = 0; i + 1 < av.size(); ++i) ref1[i] = round_to(av[i + 1] + bv[i + 1], dt);
    EXPECT_TRUE(all_close(values(out1), ref1, tol_for(dt), std::string("add misaligned ") + dtype_name(dt)));
  }
}

// ------------------------------------------------------------------------------- reductions

void check_reduce(const Shape& shape, const Shape& dims, DType dt, bool transpose_input, uint64_t seed) {
  Tensor base = gpu_random(shape, dt, seed, -1, 1);
  Tensor a = transpose_input ? base.transpose(0, static_cast<int64_t>(shape.size()) - 1) : base;
  Shape in_shape = a.sizes();
  Shape out_shape = in_shape;
  for (int64_t d : dims) out_shape[static_cast<std::size_t>(d)] = 1;
  std::vector<double> av = values(a);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    Tensor out = gpu_poisoned(out_shape, dt);
    co::reduce(op, out, a);
    std::vector<double> ref(static_cast<std::size_t>(shape_numel(out_shape)),
                            op == ReduceOp::kSum ? 0.0 : -INFINITY);
    std::vector<double> abs_sum(ref.size(), 0.0);
    for (int64_t i = 0; i < a.numel(); ++i) {
      int64_t o = ravel(unravel(i, in_shape), out_shape);
      double v = av[static_cast<std::size_t>(i)];
      auto& r = ref[static_cast<std::size_t>(o)];
      r = op == ReduceOp::kSum ? r + v : std::max(r, v);
      abs_sum[static_cast<std::size_t>(o)] += std::fabs(v);
    }
    std::vector<double> got = values(out);
    // Sum: error bound from the accumulation type (float for 16/32-bit) over sum |x|.
    double eps = dt == DType::F64 ? 1e-15 : 1e-6;
    std::vector<double> err_ref(ref.size());
    bool ok = true;
    std::string msg;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      double r = round_to(ref[i], dt);
      double bound = op == ReduceOp::kMax ? 0.0
                                          : eps * 4 * abs_sum[i] + tol_for(dt).rtol * std::fabs(ref[i]);
      if (!(std::fabs(got[i] - r) <= bound)) {
        if (ok) msg = "first bad [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " expected " + std::to_string(r);
        ok = false;
      }
    }
    EXPECT_TRUE(ok) << (op == ReduceOp::kSum ? "sum" : "max") << " of " << shape_str(in_shape)
                    << " over " << shape_str(dims) << " " << dtype_name(dt)
                    << (transpose_input ? " (transposed input)" : "") << ": " << msg;
  }
}

TEST(CudaKernels, ReductionsOnEverySchedule) {
  BLU_REQUIRE_GPU();
  uint64_t seed = 300;
  for (DType dt : {DType::F32, DType::F64, DType::BF16}) {
    check_reduce({7, 33, 129}, {2}, dt, false, ++seed);      // inner, warp per output
    check_reduce({7, 33, 129}, {0}, dt, false, ++seed);      // outer, thread per output
    check_reduce({7, 33, 129}, {1}, dt, false, ++seed);      // middle
    check_reduce({7, 33, 129}, {0, 2}, dt, false, ++seed);   // two dims
    check_reduce({7, 33, 129}, {0, 1, 2}, dt, false, ++seed);  // all
    check_reduce({3, 5001}, {1}, dt, false, ++seed);         // inner, block per output
    check_reduce({5001, 3}, {0}, dt, false, ++seed);         // outer, chunked two-stage
    check_reduce({4099, 67}, {0}, dt, false, ++seed);        // bias-gradient shape
    check_reduce({33, 129}, {0}, dt, true, ++seed);          // transposed input
    check_reduce({7, 1, 5}, {1}, dt, false, ++seed);         // reduce a size-1 dim
    // Note [Split whole-tensor reductions]: few outputs of long inner reductions, cut into chunks
    // (a ragged last chunk; one output; several; a transposed input keeps the old schedules).
    check_reduce({3, 70001}, {1}, dt, false, ++seed);
    check_reduce({5, 17, 4099}, {0, 1, 2}, dt, false, ++seed);
    check_reduce({2, 3, 40000}, {2}, dt, false, ++seed);
    check_reduce({40000, 3}, {0, 1}, dt, false, ++seed);     // [N, 3] whole: not a column sum any more
  }
}

TEST(CudaKernels, ReductionsAreDeterministic) {
  BLU_REQUIRE_GPU();
  Tensor a = gpu_random({2049, 769}, DType::F32, 9);
  Tensor whole = gpu_random({8, 1024, 129}, DType::F32, 10);  // split into chunks
  std::vector<double> first, first_whole;
  for (int rep = 0; rep < 3; ++rep) {
    Tensor out = gpu_poisoned({1, 769}, DType::F32);
    co::reduce(ReduceOp::kSum, out, a);
    std::vector<double> v = values(out);
    if (rep == 0) first = v;
    EXPECT_EQ(v, first) << "run " << rep << " differs";
    Tensor out_whole = gpu_poisoned({1, 1, 1}, DType::F32);
    co::reduce(ReduceOp::kSum, out_whole, whole);
    std::vector<double> w = values(out_whole);
    if (rep == 0) first_whole = w;
    EXPECT_EQ(w, first_whole) << "whole-tensor sum, run " << rep << " differs";
  }
}

// ------------------------------------------------------------------------------- GEMM

void check_gemm(DType dt, int64_t batch, int64_t m, int64_t n, int64_t k, bool ta, bool tb,
                bool bcast_b, bool accumulate, uint64_t seed, double tol) {
  // a: [B, M, K] (stored transposed when ta), bm: [B, K, N] (stored transposed when tb).
  Tensor a = ta ? gpu_random({batch, k, m}, dt, seed).transpose(1, 2) : gpu_random({batch, m, k}, dt, seed);
  Tensor b_store = tb ? gpu_random({bcast_b ? 1 : batch, n, k}, dt, seed + 1).transpose(1, 2)
                      : gpu_random({bcast_b ? 1 : batch, k, n}, dt, seed + 1);
  Tensor b = bcast_b ? b_store.expand({batch, k, n}) : b_store;
  Tensor out = accumulate ? gpu_random({batch, m, n}, dt, seed + 2) : gpu_poisoned({batch, m, n}, dt);
  std::vector<double> av = values(a), bv = values(b), ov = values(out);
  co::gemm(out, a, b, accumulate);
  std::vector<double> got = values(out);
  int bad = 0;
  std::string msg;
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double ref = 0, mag = 0;
        for (int64_t p = 0; p < k; ++p) {
          double x = av[static_cast<std::size_t>((bi * m + i) * k + p)];
          double y = bv[static_cast<std::size_t>((bi * k + p) * n + j)];
          ref += x * y;
          mag += std::fabs(x * y);
        }
        std::size_t o = static_cast<std::size_t>((bi * m + i) * n + j);
        if (accumulate) {
          ref += ov[o];
          mag += std::fabs(ov[o]);
        }
        double err = std::fabs(got[o] - ref);
        if (!(err <= tol * mag + tol_for(dt).atol)) {
          if (bad < 5) msg += " [" + std::to_string(bi) + "," + std::to_string(i) + "," + std::to_string(j) + "] got " + std::to_string(got[o]) + " expected " + std::to_string(ref);
          ++bad;
        }
      }
  EXPECT_EQ(bad, 0) << "gemm " << dtype_name(dt) << " B" << batch << " M" << m << " N" << n << " K" << k
                    << (ta ? " A^T" : "") << (tb ? " B^T" : "") << (bcast_b ? " B broadcast" : "")
                    << (accumulate ? " accumulate" : "") << ":" << msg;
}

TEST(CudaKernels, GemmLayoutsAndDtypes) {
  BLU_REQUIRE_GPU();
  uint64_t seed = 400;
  set_matmul_precision(MatmulPrecision::kHighest);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_gemm(DType::F32, 3, 37, 41, 29, ta, tb, false, false, seed += 3, 1e-5);
      check_gemm(DType::F64, 2, 19, 23, 31, ta, tb, false, false, seed += 3, 1e-13);
      check_gemm(DType::BF16, 2, 37, 41, 70, ta, tb, false, false, seed += 3, 1.6e-2);
    }
  check_gemm(DType::F32, 4, 33, 17, 65, false, true, true, false, seed += 3, 1e-5);  // broadcast B
  check_gemm(DType::F32, 2, 33, 17, 65, false, false, false, true, seed += 3, 1e-5);  // accumulate
  check_gemm(DType::F64, 2, 33, 17, 65, true, false, true, true, seed += 3, 1e-13);
  check_gemm(DType::F16, 1, 65, 129, 47, false, false, false, false, seed += 3, 2e-3);
  check_gemm(DType::F32, 1, 1, 300, 77, false, false, false, false, seed += 3, 1e-5);  // M = 1
  set_matmul_precision(MatmulPrecision::kHigh);
  check_gemm(DType::F32, 2, 130, 70, 200, false, true, false, false, seed += 3, 3e-3);  // tf32
  set_matmul_precision(MatmulPrecision::kHighest);
}

// ------------------------------------------------------------------------------- row kernels

TEST(CudaKernels, SoftmaxForwardBackward) {
  BLU_REQUIRE_GPU();
  uint64_t seed = 500;
  for (DType dt : {DType::F32, DType::F64, DType::BF16})
    for (int64_t cols : {1, 37, 3001})
      for (bool log : {false, true}) {
        const int64_t rows = 11;
        Tensor x = gpu_random({rows, cols}, dt, ++seed, -4, 4);
        Tensor y = gpu_poisoned({rows, cols}, dt);
        co::softmax_forward(y, x, log);
        std::vector<double> xv = values(x), yv = values(y);
        std::vector<double> ref(xv.size()), yref(xv.size());
        for (int64_t r = 0; r < rows; ++r) {
          double m = -INFINITY, s = 0;
          for (int64_t c = 0; c < cols; ++c) m = std::max(m, xv[static_cast<std::size_t>(r * cols + c)]);
          for (int64_t c = 0; c < cols; ++c) s += std::exp(xv[static_cast<std::size_t>(r * cols + c)] - m);
          for (int64_t c = 0; c < cols; ++c) {
            double v = xv[static_cast<std::size_t>(r * cols + c)] - m;
            yref[static_cast<std::size_t>(r * cols + c)] = log ? v - std::log(s) : std::exp(v) / s;
            ref[static_cast<std::size_t>(r * cols + c)] = round_to(yref[static_cast<std::size_t>(r * cols + c)], dt);
          }
        }
        Tol tol = tol_for(dt);
        tol.atol = dt == DType::F64 ? 1e-13 : dt == DType::F32 ? 1e-6 : 4e-3;
        std::string what = std::string(log ? "log_softmax " : "softmax ") + dtype_name(dt) + " cols " + std::to_string(cols);
        EXPECT_TRUE(all_close(yv, ref, tol, what));
        // Backward from the kernel's own y.
        Tensor dy = gpu_random({rows, cols}, dt, ++seed);
        Tensor dx = gpu_poisoned({rows, cols}, dt);
        co::softmax_backward(dx, dy, y, log);
        std::vector<double> dyv = values(dy), dref(xv.size());
        for (int64_t r = 0; r < rows; ++r) {
          double dot = 0;
          for (int64_t c = 0; c < cols; ++c) {
            std::size_t i = static_cast<std::size_t>(r * cols + c);
            dot += log ? dyv[i] : dyv[i] * yv[i];
          }
          for (int64_t c = 0; c < cols; ++c) {
            std::size_t i = static_cast<std::size_t>(r * cols + c);
            dref[i] = round_to(log ? dyv[i] - std::exp(yv[i]) * dot : yv[i] * (dyv[i] - dot), dt);
          }
        }
        Tol btol = tol;
        btol.atol = dt == DType::F64 ? 1e-12 : dt == DType::F32 ? 2e-6 : 2e-2;
        EXPECT_TRUE(all_close(values(dx), dref, btol, what + " backward"));
      }
}

TEST(CudaKernels, CausalFill) {
  BLU_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor x = gpu_random({2, 5, 7}, dt, 77);  // rows 5 < cols 7: offset diagonal
    Tensor out = gpu_poisoned({2, 5, 7}, dt);
    co::causal_fill(out, x, -INFINITY);
    std::vector<double> xv = values(x), ref(xv.size());
    for (int64_t i = 0; i < 70; ++i) {
      int64_t c = i % 7, r = (i / 7) % 5;
      ref[static_cast<std::size_t>(i)] = c > r + 2 ? -INFINITY : xv[static_cast<std::size_t>(i)];
    }
    EXPECT_TRUE(all_close(values(out), ref, {0, 0}, std::string("causal_fill ") + dtype_name(dt)));
  }
}

TEST(CudaKernels, LayerNormForwardBackward) {
  BLU_REQUIRE_GPU();
  uint64_t seed = 600;
  // cols 768 / 256 take the warp-per-row dx kernel (Note [LayerNorm backward rows in registers]:
  // bf16 3 and 1 vectors a lane, f32 without affine 2) and 613 rows make 19+ chunk partials for the
  // dweight/dbias finish; 7 and 769 take the block-per-row kernel.
  for (DType dt : {DType::F32, DType::F64, DType::BF16})
    for (int64_t cols : {7, 769, 768, 256})
      for (bool affine : {true, false}) {
        const int64_t rows = cols % 256 == 0 ? 613 : 13;
        const DType st = dt == DType::F64 ? DType::F64 : DType::F32;
        Tensor x = gpu_random({rows, cols}, dt, ++seed, -3, 3);
        Tensor w = affine ? gpu_random({cols}, dt, ++seed, 0.5, 1.5) : Tensor();
        Tensor b = affine ? gpu_random({cols}, dt, ++seed) : Tensor();
        Tensor y = gpu_poisoned({rows, cols}, dt), mean = gpu_poisoned({rows}, st), rstd = gpu_poisoned({rows}, st);
        co::layer_norm_forward(y, mean, rstd, x, w, b, 1e-5);
        std::vector<double> xv = values(x), wv = affine ? values(w) : std::vector<double>(static_cast<std::size_t>(cols), 1.0),
                            bv = affine ? values(b) : std::vector<double>(static_cast<std::size_t>(cols), 0.0);
        std::vector<double> yref(xv.size()), mref(static_cast<std::size_t>(rows)), rref(static_cast<std::size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) {
          double mu = 0, var = 0;
          for (int64_t c = 0; c < cols; ++c) mu += xv[static_cast<std::size_t>(r * cols + c)];
          mu /= static_cast<double>(cols);
          for (int64_t c = 0; c < cols; ++c) var += std::pow(xv[static_cast<std::size_t>(r * cols + c)] - mu, 2);
          double rs = 1 / std::sqrt(var / static_cast<double>(cols) + 1e-5);
          mref[static_cast<std::size_t>(r)] = mu;
          rref[static_cast<std::size_t>(r)] = rs;
          for (int64_t c = 0; c < cols; ++c) {
            std::size_t i = static_cast<std::size_t>(r * cols + c);
            yref[i] = round_to((xv[i] - mu) * rs * wv[static_cast<std::size_t>(c)] + bv[static_cast<std::size_t>(c)], dt);
          }
        }
        std::string what = std::string("layer_norm ") + dtype_name(dt) + " cols " + std::to_string(cols) + (affine ? "" : " no affine");
        Tol tol = tol_for(dt);
        tol.atol = dt == DType::F64 ? 1e-12 : dt == DType::F32 ? 1e-5 : 2e-2;
        EXPECT_TRUE(all_close(values(y), yref, tol, what));
        EXPECT_TRUE(all_close(values(mean), mref, {1e-5, 1e-6}, what + " mean"));
        EXPECT_TRUE(all_close(values(rstd), rref, {1e-5, 1e-6}, what + " rstd"));
        // Backward.
        Tensor dy = gpu_random({rows, cols}, dt, ++seed);
        Tensor dx = gpu_poisoned({rows, cols}, dt);
        Tensor dw = affine ? gpu_poisoned({cols}, dt) : Tensor(), db = affine ? gpu_poisoned({cols}, dt) : Tensor();
        co::layer_norm_backward(dx, dw, db, dy, x, w, mean, rstd);
        std::vector<double> dyv = values(dy), dxref(xv.size()), dwref(static_cast<std::size_t>(cols), 0.0), dbref(static_cast<std::size_t>(cols), 0.0);
        for (int64_t r = 0; r < rows; ++r) {
          double mu = mref[static_cast<std::size_t>(r)], rs = rref[static_cast<std::size_t>(r)], sg = 0, sgx = 0;
          for (int64_t c = 0; c < cols; ++c) {
            std::size_t i = static_cast<std::size_t>(r * cols + c);
            double g = dyv[i] * wv[static_cast<std::size_t>(c)], xh = (xv[i] - mu) * rs;
            sg += g;
            sgx += g * xh;
            dwref[static_cast<std::size_t>(c)] += dyv[i] * xh;
            dbref[static_cast<std::size_t>(c)] += dyv[i];
          }
          for (int64_t c = 0; c < cols; ++c) {
            std::size_t i = static_cast<std::size_t>(r * cols + c);
            double g = dyv[i] * wv[static_cast<std::size_t>(c)], xh = (xv[i] - mu) * rs;
            dxref[i] = round_to(rs * (g - sg / static_cast<double>(cols) - xh * sgx / static_cast<double>(cols)), dt);
          }
        }
        Tol btol = tol;
        btol.atol = dt == DType::F64 ? 1e-11 : dt == DType::F32 ? 2e-5 : 5e-2;
        EXPECT_TRUE(all_close(values(dx), dxref, btol, what + " dx"));
        if (affine) {
          for (auto& v : dwref) v = round_to(v, dt);
          for (auto& v : dbref) v = round_to(v, dt);
          EXPECT_TRUE(all_close(values(dw), dwref, btol, what + " dweight"));
          EXPECT_TRUE(all_close(values(db), dbref, btol, what + " dbias"));
        }
        if (cols == 768 && dt == DType::BF16) {  // dy 2 bytes off 16-byte alignment: the block kernel
          Tensor dy_odd = gpu_random({rows * cols + 1}, dt, seed).narrow(0, 1, rows * cols).view({rows, cols});
          co::copy_(dy_odd, dy);
          Tensor dx_odd = gpu_poisoned({rows, cols}, dt);
          co::layer_norm_backward(dx_odd, Tensor(), Tensor(), dy_odd, x, w, mean, rstd);
          EXPECT_TRUE(all_close(values(dx_odd), dxref, btol, what + " dx, misaligned dy"));
        }
      }
}

// ------------------------------------------------------------------------------- indexing, loss

TEST(CudaKernels, EmbeddingForwardBackward) {
  BLU_REQUIRE_GPU();
  uint64_t seed = 700;
  for (DType dt : {DType::F32, DType::F64, DType::BF16})
    for (DType it : {DType::I64, DType::I32, DType::U16})
      for (int64_t cols : {5, 64}) {
        const int64_t vocab = 23, n = 301;
        Tensor w = gpu_random({vocab, cols}, dt, ++seed);
        Tensor idx = gpu_random({n}, it, ++seed, 0, vocab - 1);
        Tensor out = gpu_poisoned({n, cols}, dt);
        co::embedding_forward(out, w, idx);
        std::vector<double> wv = values(w), iv = values(idx), ref(static_cast<std::size_t>(n * cols));
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < cols; ++c)
            ref[static_cast<std::size_t>(r * cols + c)] = wv[static_cast<std::size_t>(static_cast<int64_t>(iv[static_cast<std::size_t>(r)]) * cols + c)];
        std::string what = std::string("embedding ") + dtype_name(dt) + " idx " + dtype_name(it) + " cols " + std::to_string(cols);
        EXPECT_TRUE(all_close(values(out), ref, {0, 0}, what));
        Tensor dout = gpu_random({n, cols}, dt, ++seed);
        Tensor dw = gpu_poisoned({vocab, cols}, dt);
        co::embedding_backward(dw, dout, idx);
        std::vector<double> dov = values(dout), dref(static_cast<std::size_t>(vocab * cols), 0.0), mag(dref.size(), 0.0);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            std::size_t o = static_cast<std::size_t>(static_cast<int64_t>(iv[static_cast<std::size_t>(r)]) * cols + c);
            dref[o] += dov[static_cast<std::size_t>(r * cols + c)];
            mag[o] += std::fabs(dov[static_cast<std::size_t>(r * cols + c)]);
          }
        std::vector<double> got = values(dw);
        int bad = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
          double bound = (dt == DType::F64 ? 1e-14 : dt == DType::F32 ? 1e-6 : 1e-2) * (mag[i] + 1e-30) +
                         tol_for(dt).rtol * std::fabs(dref[i]);
          if (!(std::fabs(got[i] - dref[i]) <= bound)) ++bad;
        }
        EXPECT_EQ(bad, 0) << what << " backward";
        // Deterministic: a second run gives the same bits.
        Tensor dw2 = gpu_poisoned({vocab, cols}, dt);
        co::embedding_backward(dw2, dout, idx);
        EXPECT_EQ(values(dw2), got) << what << " backward not deterministic";
      }
}

TEST(CudaKernels, CrossEntropyWithIgnoreIndex) {
  BLU_REQUIRE_GPU();
  uint64_t seed = 800;
  // vocab 1031: the per-element kernels; 1032 and GPT-2's 50304: Note [Vectorized cross-entropy
  // rows] for f32 / bf16 / f16 (whole 16-byte vectors); f64 always per element.
  for (const int64_t vocab : {int64_t{1031}, int64_t{1032}, int64_t{50304}})
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16})
    for (DType it : {DType::I64, DType::I32}) {
      if (vocab == 50304 && it == DType::I64) continue;
      const int64_t n = vocab == 50304 ? 5 : 17, ignore = -100;
      const DType st = dt == DType::F64 ? DType::F64 : DType::F32;
      Tensor logits = gpu_random({n, vocab}, dt, ++seed, -5, 5);
      Tensor tgt_host = host_random({n}, it, ++seed, 0, vocab - 1);
      std::vector<double> tv = values(tgt_host);
      tv[3] = ignore;
      if (n > 10) tv[10] = ignore;
      Tensor targets = to_gpu(from_vector(tv, {n}, TensorOptions(it)));
      Tensor losses = gpu_poisoned({n}, st), lse = gpu_poisoned({n}, st), valid = gpu_poisoned({n}, st);
      co::cross_entropy_forward(losses, lse, valid, logits, targets, ignore);
      std::vector<double> lv = values(logits), lref(static_cast<std::size_t>(n)), eref(lref.size()), vref(lref.size());
      for (int64_t r = 0; r < n; ++r) {
        double m = -INFINITY, s = 0;
        for (int64_t c = 0; c < vocab; ++c) m = std::max(m, lv[static_cast<std::size_t>(r * vocab + c)]);
        for (int64_t c = 0; c < vocab; ++c) s += std::exp(lv[static_cast<std::size_t>(r * vocab + c)] - m);
        double l = m + std::log(s);
        eref[static_cast<std::size_t>(r)] = l;
        bool ign = tv[static_cast<std::size_t>(r)] == ignore;
        lref[static_cast<std::size_t>(r)] = ign ? 0 : l - lv[static_cast<std::size_t>(r * vocab + static_cast<int64_t>(tv[static_cast<std::size_t>(r)]))];
        vref[static_cast<std::size_t>(r)] = ign ? 0 : 1;
      }
      std::string what = std::string("cross_entropy ") + dtype_name(dt) + " targets " + dtype_name(it) +
                         " vocab " + std::to_string(vocab);
      Tol tol = {dt == DType::F64 ? 1e-12 : 1e-5, dt == DType::F64 ? 1e-12 : 1e-5};
      EXPECT_TRUE(all_close(values(losses), lref, tol, what + " losses"));
      EXPECT_TRUE(all_close(values(lse), eref, tol, what + " lse"));
      EXPECT_TRUE(all_close(values(valid), vref, {0, 0}, what + " valid"));
      Tensor dl = gpu_random({n}, st, ++seed, 0.5, 1.5);
      Tensor dlogits = gpu_poisoned({n, vocab}, dt);
      co::cross_entropy_backward(dlogits, dl, logits, lse, targets, ignore);
      std::vector<double> dlv = values(dl), lsev = values(lse), dref(lv.size());
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < vocab; ++c) {
          std::size_t i = static_cast<std::size_t>(r * vocab + c);
          if (tv[static_cast<std::size_t>(r)] == ignore) {
            dref[i] = 0;
            continue;
          }
          double v = dlv[static_cast<std::size_t>(r)] * std::exp(lv[i] - lsev[static_cast<std::size_t>(r)]);
          if (c == static_cast<int64_t>(tv[static_cast<std::size_t>(r)])) v -= dlv[static_cast<std::size_t>(r)];
          dref[i] = round_to(v, dt);
        }
      Tol btol = tol_for(dt);
      btol.atol = dt == DType::F64 ? 1e-13 : dt == DType::F32 ? 1e-6 : 1e-3;
      EXPECT_TRUE(all_close(values(dlogits), dref, btol, what + " dlogits"));
      // Note [Cross-entropy in one pass]: forward + backward with dlosses = 1 in one call, out of
      // place and in place, bit for bit the two calls' results (vocab 1031 and f64: the fallback).
      // Note [Streamed cross-entropy rows]: f32 / bf16 rows of 32 KiB and more with i32 targets go
      // to blublas's streamed kernel on sm_90: float64 references there (dlosses = 1).
      Tensor ones = gpu_random({n}, st, ++seed, 1, 1);
      Tensor d1 = gpu_poisoned({n, vocab}, dt);
      co::cross_entropy_backward(d1, ones, logits, lse, targets, ignore);
      const bool streamed = (dt == DType::F32 || dt == DType::BF16) && it == DType::I32 &&
                            vocab * static_cast<int64_t>(logits.element_size()) >= 32768 && blu::test::gpu_sm_major() >= 9;
      std::vector<double> d1ref(lv.size());
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < vocab; ++c) {
          const std::size_t i = static_cast<std::size_t>(r * vocab + c);
          const double t = tv[static_cast<std::size_t>(r)];
          d1ref[i] = t == ignore ? 0
                                 : round_to(std::exp(lv[i] - eref[static_cast<std::size_t>(r)]) -
                                                (c == static_cast<int64_t>(t) ? 1.0 : 0.0),
                                            dt);
        }
      for (const bool in_place : {false, true}) {
        Tensor l2 = gpu_poisoned({n}, st), e2 = gpu_poisoned({n}, st), v2 = gpu_poisoned({n}, st);
        Tensor x2 = gpu_poisoned({n, vocab}, dt);
        co::copy_(x2, logits);
        Tensor d2 = in_place ? x2 : gpu_poisoned({n, vocab}, dt);
        co::cross_entropy_forward_backward(l2, e2, v2, d2, x2, targets, ignore);
        const std::string how = what + (in_place ? " forward_backward in place" : " forward_backward");
        if (streamed) {
          EXPECT_TRUE(all_close(values(l2), lref, tol, how + " losses"));
          EXPECT_TRUE(all_close(values(e2), eref, tol, how + " lse"));
          EXPECT_TRUE(all_close(values(v2), vref, {0, 0}, how + " valid"));
          EXPECT_TRUE(all_close(values(d2), d1ref, btol, how + " dlogits"));
          continue;
        }
        EXPECT_EQ(values(l2), values(losses)) << how;
        EXPECT_EQ(values(e2), values(lse)) << how;
        EXPECT_EQ(values(v2), values(valid)) << how;
        EXPECT_EQ(values(d2), values(d1)) << how;
      }
    }
}

TEST(CudaKernels, CrossEntropyBadTargetGivesNaNNotFault) {
  BLU_REQUIRE_GPU();
  Tensor logits = gpu_random({3, 10}, DType::F32, 5);
  Tensor targets = to_gpu(from_vector(std::vector<double>{1, 10, -3}, {3}, TensorOptions(DType::I64)));
  Tensor losses = gpu_poisoned({3}, DType::F32), lse = gpu_poisoned({3}, DType::F32), valid = gpu_poisoned({3}, DType::F32);
  co::cross_entropy_forward(losses, lse, valid, logits, targets, -100);
  std::vector<double> l = values(losses);
  EXPECT_FALSE(std::isnan(l[0]));
  EXPECT_TRUE(std::isnan(l[1]));
  EXPECT_TRUE(std::isnan(l[2]));
  // The same from the one-pass op, on the vector kernel (vocab 16) and the fallback (10).
  for (const int64_t vocab : {int64_t{16}, int64_t{10}}) {
    Tensor x = gpu_random({3, vocab}, DType::F32, 6);
    Tensor d = gpu_poisoned({3, vocab}, DType::F32);
    co::cross_entropy_forward_backward(losses, lse, valid, d, x, targets, -100);
    l = values(losses);
    EXPECT_FALSE(std::isnan(l[0])) << vocab;
    EXPECT_EQ(std::isnan(l[1]), vocab <= 10) << vocab;  // target 10 is in range for vocab 16
    EXPECT_TRUE(std::isnan(l[2])) << vocab;
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// ------------------------------------------------------------------------------- random

TEST(CudaKernels, RandomDrawsEqualTheHostPhilox) {
  BLU_REQUIRE_GPU();
  const uint64_t seed = 1234567, offset = 99;
  const int64_t n = 10007;
  for (DType dt : kFloatTypes) {
    Tensor u = gpu_poisoned({n}, dt), z = gpu_poisoned({n}, dt);
    co::random_uniform(u, seed, offset, -2.0, 3.0);
    co::random_normal(z, seed, offset, 0.5, 2.0);
    std::vector<double> uref(static_cast<std::size_t>(n)), zref(uref.size());
    for (int64_t i = 0; i < n; ++i) {
      float uf = philox::uniform_at(seed, offset, static_cast<uint64_t>(i));
      float zf = philox::normal_at(seed, offset, static_cast<uint64_t>(i));
      double uv = -2.0 + 5.0 * static_cast<double>(uf), zv = 0.5 + 2.0 * static_cast<double>(zf);
      uref[static_cast<std::size_t>(i)] = dt == DType::F64 ? uv : round_to(static_cast<float>(uv), dt);
      zref[static_cast<std::size_t>(i)] = dt == DType::F64 ? zv : round_to(static_cast<float>(zv), dt);
    }
    EXPECT_TRUE(all_close(values(u), uref, {0, 0}, std::string("uniform ") + dtype_name(dt)));
    // Normals: equal up to the last bit of log/cos in double (Note [Random streams]).
    EXPECT_TRUE(all_close(values(z), zref, {dt == DType::F64 ? 1e-6 : 1e-6, 1e-6}, std::string("normal ") + dtype_name(dt)));
  }
}

TEST(CudaKernels, DropoutMaskEqualsTheHostPhilox) {
  BLU_REQUIRE_GPU();
  const uint64_t seed = 42, offset = 7;
  const double p = 0.3;
  for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
    Tensor x = gpu_random({129, 31}, dt, 3, 0.5, 1.5);
    Tensor out = gpu_poisoned({129, 31}, dt);
    co::dropout(out, x, p, seed, offset);
    std::vector<double> xv = values(x), ref(xv.size());
    int kept = 0;
    for (std::size_t i = 0; i < xv.size(); ++i) {
      bool keep = philox::dropout_keep(seed, offset, i, static_cast<float>(p));
      kept += keep;
      double scale = dt == DType::F64 ? 1.0 / (1.0 - p) : static_cast<float>(1.0 / (1.0 - p));
      ref[i] = keep ? round_to(xv[i] * scale, dt) : 0.0;
    }
    EXPECT_TRUE(all_close(values(out), ref, {dt == DType::F64 ? 1e-15 : 1e-6, 0}, std::string("dropout ") + dtype_name(dt)));
    EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(xv.size()), 0.7, 0.03);
  }
}

// ------------------------------------------------------------------------------- AdamW

TEST(CudaKernels, AdamWMultiTensor) {
  BLU_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::F64}) {
    std::vector<int64_t> sizes = {1, 1000, 4097, 33};
    std::vector<Tensor> p, g, m, v;
    std::vector<std::vector<double>> pv, gv, mv, vv;
    uint64_t seed = 900;
    for (int64_t s : sizes) {
      p.push_back(gpu_random({s}, dt, ++seed));
      g.push_back(gpu_random({s}, dt, ++seed));
      m.push_back(gpu_random({s}, dt, ++seed, -0.1, 0.1));
      v.push_back(gpu_random({s}, dt, ++seed, 0.0, 0.01));
      pv.push_back(values(p.back()));
      gv.push_back(values(g.back()));
      mv.push_back(values(m.back()));
      vv.push_back(values(v.back()));
    }
    AdamWParams hp;
    hp.lr = 3e-3;
    hp.weight_decay = 0.1;
    hp.step = 7;
    co::adamw_step(p, g, m, v, Tensor(), hp);
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      std::vector<double> pr(pv[t].size()), mr(pr.size()), vr(pr.size());
      double bc1 = 1 - std::pow(hp.beta1, 7.0), bc2 = 1 - std::pow(hp.beta2, 7.0);
      for (std::size_t i = 0; i < pr.size(); ++i) {
        mr[i] = hp.beta1 * mv[t][i] + (1 - hp.beta1) * gv[t][i];
        vr[i] = hp.beta2 * vv[t][i] + (1 - hp.beta2) * gv[t][i] * gv[t][i];
        pr[i] = pv[t][i] * (1 - hp.lr * hp.weight_decay) -
                hp.lr / bc1 * mr[i] / (std::sqrt(vr[i]) / std::sqrt(bc2) + hp.eps);
      }
      Tol tol = dt == DType::F64 ? Tol{1e-12, 1e-14} : Tol{2e-5, 1e-6};
      std::string what = std::string("adamw ") + dtype_name(dt) + " tensor " + std::to_string(t);
      EXPECT_TRUE(all_close(values(p[t]), pr, tol, what + " param"));
      EXPECT_TRUE(all_close(values(m[t]), mr, tol, what + " exp_avg"));
      EXPECT_TRUE(all_close(values(v[t]), vr, tol, what + " exp_avg_sq"));
    }
  }
}

// ------------------------------------------------------------------------------- blublas paths

// The GPT-2-like layouts (contiguous, aligned, f32 / bf16) must reach the blublas launchers, not
// the generic fallbacks (Note [blublas fast paths]); refusals are printed with their reason.
TEST(CudaKernels, BlublasFastPathsAreTakenOnTrainingLayouts) {
  BLU_REQUIRE_GPU();
  setenv("BLU_CUDA_OPS_LOG", "1", 1);
  const int64_t before = co::detail::blublas_fallback_count();
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor a = gpu_random({1, 256, 768}, dt, 1), w = gpu_random({1, 768, 512}, dt, 2);
    Tensor c = gpu_poisoned({1, 256, 512}, dt);
    co::gemm(c, a, w, false);                          // blublas::gemm
    co::gemm(c, a, gpu_random({1, 512, 768}, dt, 3).transpose(1, 2), true);  // NT, accumulate
    Tensor x = gpu_random({64, 1024}, dt, 4), y = gpu_poisoned({64, 1024}, dt);
    co::softmax_forward(y, x, false);                  // blublas::softmax_forward
    co::softmax_backward(x, y, y, false);              // blublas::softmax_backward
    co::unary(UnaryOp::kGelu, y, x, 0);                // blublas::gelu_forward
    co::binary(BinaryOp::kGeluBackward, y, x, x, 0);   // blublas::gelu_backward
    Tensor h = gpu_random({256, 768}, dt, 5), g = gpu_random({768}, dt, 6), b = gpu_random({768}, dt, 7);
    Tensor ln = gpu_poisoned({256, 768}, dt), mean = gpu_poisoned({256}, DType::F32),
           rstd = gpu_poisoned({256}, DType::F32);
    co::layer_norm_forward(ln, mean, rstd, h, g, b, 1e-5);  // blublas::layernorm_forward
    Tensor wte = gpu_random({1000, 768}, dt, 8);
    Tensor tokens = gpu_random({512}, DType::I32, 9, 0, 999);
    Tensor dwte = gpu_poisoned({1000, 768}, dt);
    co::embedding_backward(dwte, gpu_random({512, 768}, dt, 10), tokens);  // blublas::embedding_backward
  }
  {
    Tensor h = gpu_random({256, 768}, DType::F32, 11), g = gpu_random({768}, DType::F32, 12),
           b = gpu_random({768}, DType::F32, 13);
    Tensor ln = gpu_poisoned({256, 768}, DType::F32), mean = gpu_poisoned({256}, DType::F32),
           rstd = gpu_poisoned({256}, DType::F32);
    co::layer_norm_forward(ln, mean, rstd, h, g, b, 1e-5);
    Tensor dx = gpu_poisoned({256, 768}, DType::F32), dg = gpu_poisoned({768}, DType::F32),
           db = gpu_poisoned({768}, DType::F32);
    co::layer_norm_backward(dx, dg, db, ln, h, g, mean, rstd);  // blublas::layernorm_backward
    Tensor bias_grad = gpu_poisoned({1, 768}, DType::F32);
    co::reduce(ReduceOp::kSum, bias_grad, h);                    // blublas::column_sum
    Tensor bias_grad16 = gpu_poisoned({1, 768}, DType::BF16);
    co::reduce(ReduceOp::kSum, bias_grad16, h.to(DType::BF16));  // blublas::column_sum (bf16 in)
    std::vector<Tensor> p{gpu_random({768, 768}, DType::F32, 14), gpu_random({768}, DType::F32, 15)};
    std::vector<Tensor> gr{gpu_random({768, 768}, DType::F32, 16), gpu_random({768}, DType::F32, 17)};
    std::vector<Tensor> m{gpu_random({768, 768}, DType::F32, 18), gpu_random({768}, DType::F32, 19)};
    std::vector<Tensor> v{gpu_random({768, 768}, DType::F32, 20, 0, 1), gpu_random({768}, DType::F32, 21, 0, 1)};
    co::adamw_step(p, gr, m, v, Tensor(), AdamWParams{});                // blublas::adamw_update
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(co::detail::blublas_fallback_count() - before, 0)
      << "some blublas launchers refused training layouts (reasons printed above as "
         "'cuda_ops: <op>: blublas refused')";
}

}  // namespace
