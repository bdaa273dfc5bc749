// CPU elementwise kernels: copy_ (with casts), fill_, unary, binary. Each op/dtype pair is its own
// instantiated loop over runs (cpu_loops.h); bf16/f16 compute in float, f64 in double.
#include <cmath>
#include <limits>
#include <cstring>
#include <type_traits>

#include "cpu/cpu_loops.h"
#include "cpu/cpu_math.h"
#include "cpu/cpu_ops.h"
#include "cpu/dtype_switch.h"

namespace blu::cpu_ops {

using cpu::compute_t;

namespace {

template <typename T> inline double to_double(T v) {
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}
// Floating to integer: truncation toward zero, saturated to T's range, NaN -> 0 (what CUDA's
// float-to-integer conversions do, so both backends agree). A plain static_cast of an out-of-range
// value (-2.25 to uint16) is undefined behaviour (UBSan, clang, 2026-11-26).
template <typename T> inline T from_double(double v) {
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
    return T(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (std::isnan(v)) return T(0);
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else {
    return static_cast<T>(v);
  }
}
template <typename D, typename S> inline D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr ((std::is_same_v<D, float> || std::is_same_v<D, BFloat16> || std::is_same_v<D, Half>) &&
                       (std::is_same_v<S, float> || std::is_same_v<S, BFloat16> || std::is_same_v<S, Half>)) {
    return D(static_cast<float>(v));
  } else {
    return from_double<D>(to_double(v));
  }
}

template <typename D, typename S>
void copy_typed(const Tensor& dst, const Tensor& src) {
  cpu::for_each<2>({&dst, &src}, [](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
    if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
      if constexpr (std::is_same_v<D, S>) {
        std::memcpy(p[0], p[1], static_cast<std::size_t>(n) * sizeof(D));
      } else {
        D* o = reinterpret_cast<D*>(p[0]);
        const S* x = reinterpret_cast<const S*>(p[1]);
        for (int64_t i = 0; i < n; ++i) o[i] = convert<D, S>(x[i]);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        S v;
        std::memcpy(&v, p[1] + i * s[1], sizeof(S));
        D o = convert<D, S>(v);
        std::memcpy(p[0] + i * s[0], &o, sizeof(D));
      }
    }
  });
}

constexpr double kGeluK = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluC = 0.044715;

template <typename C> inline C gelu_fwd(C x) {
  C u = static_cast<C>(kGeluK) * (x + static_cast<C>(kGeluC) * x * x * x);
  return static_cast<C>(0.5) * x * (static_cast<C>(1) + cpu::tanh_any<C>(u));
}
template <typename C> inline C gelu_grad(C x) {
  C x2 = x * x;
  C u = static_cast<C>(kGeluK) * (x + static_cast<C>(kGeluC) * x2 * x);
  C t = cpu::tanh_any<C>(u);
  C du = static_cast<C>(kGeluK) * (static_cast<C>(1) + static_cast<C>(3 * kGeluC) * x2);
  return static_cast<C>(0.5) * (static_cast<C>(1) + t) + static_cast<C>(0.5) * x * (static_cast<C>(1) - t * t) * du;
}

template <typename T, typename F>
void unary_loop(const Tensor& out, const Tensor& a, F f) {
  using C = compute_t<T>;
  cpu::for_each<2>({&out, &a}, [f](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
    if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
      T* o = reinterpret_cast<T*>(p[0]);
      const T* x = reinterpret_cast<const T*>(p[1]);
      for (int64_t i = 0; i < n; ++i) o[i] = T(f(static_cast<C>(x[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const T* x = reinterpret_cast<const T*>(p[1] + i * s[1]);
        T* o = reinterpret_cast<T*>(p[0] + i * s[0]);
        *o = T(f(static_cast<C>(*x)));
      }
    }
  });
}

template <typename T, typename F>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  using C = compute_t<T>;
  cpu::for_each<3>({&out, &a, &b}, [f](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) {
    T* o = reinterpret_cast<T*>(p[0]);
    const T* x = reinterpret_cast<const T*>(p[1]);
    const T* y = reinterpret_cast<const T*>(p[2]);
    if (s[0] == sizeof(T) && s[1] == sizeof(T) && s[2] == sizeof(T)) {
      for (int64_t i = 0; i < n; ++i) o[i] = T(f(static_cast<C>(x[i]), static_cast<C>(y[i])));
    } else if (s[0] == sizeof(T) && s[1] == sizeof(T) && s[2] == 0) {
      C yv = static_cast<C>(*y);
      for (int64_t i = 0; i < n; ++i) o[i] = T(f(static_cast<C>(x[i]), yv));
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const T* xv = reinterpret_cast<const T*>(p[1] + i * s[1]);
        const T* yv = reinterpret_cast<const T*>(p[2] + i * s[2]);
        T* ov = reinterpret_cast<T*>(p[0] + i * s[0]);
        *ov = T(f(static_cast<C>(*xv), static_cast<C>(*yv)));
      }
    }
  });
}

template <typename T>
void unary_typed(UnaryOp op, const Tensor& out, const Tensor& a, double alpha) {
  using C = compute_t<T>;
  const C al = static_cast<C>(alpha);
  switch (op) {
    case UnaryOp::kNeg: unary_loop<T>(out, a, [](C x) { return -x; }); break;
    case UnaryOp::kExp: unary_loop<T>(out, a, [](C x) { return std::exp(x); }); break;
    case UnaryOp::kLog: unary_loop<T>(out, a, [](C x) { return std::log(x); }); break;
    case UnaryOp::kSqrt: unary_loop<T>(out, a, [](C x) { return std::sqrt(x); }); break;
    case UnaryOp::kTanh: unary_loop<T>(out, a, [](C x) { return std::tanh(x); }); break;
    case UnaryOp::kRelu: unary_loop<T>(out, a, [](C x) { return x > C(0) ? x : C(0); }); break;
    case UnaryOp::kGelu: unary_loop<T>(out, a, [](C x) { return gelu_fwd<C>(x); }); break;
    case UnaryOp::kAddScalar: unary_loop<T>(out, a, [al](C x) { return x + al; }); break;
    case UnaryOp::kMulScalar: unary_loop<T>(out, a, [al](C x) { return x * al; }); break;
    case UnaryOp::kPowScalar:
      if (alpha == 2.0) {
        unary_loop<T>(out, a, [](C x) { return x * x; });
      } else {
        unary_loop<T>(out, a, [al](C x) { return std::pow(x, al); });
      }
      break;
    case UnaryOp::kRSubScalar: unary_loop<T>(out, a, [al](C x) { return al - x; }); break;
    case UnaryOp::kRDivScalar: unary_loop<T>(out, a, [al](C x) { return al / x; }); break;
    case UnaryOp::kClampMax: unary_loop<T>(out, a, [al](C x) { return x > al ? al : x; }); break;
  }
}

template <typename T>
void binary_typed(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  using C = compute_t<T>;
  const C al = static_cast<C>(alpha);
  switch (op) {
    case BinaryOp::kAdd:
      if (alpha == 1.0) {
        binary_loop<T>(out, a, b, [](C x, C y) { return x + y; });
      } else {
        binary_loop<T>(out, a, b, [al](C x, C y) { return x + al * y; });
      }
      break;
    case BinaryOp::kSub: binary_loop<T>(out, a, b, [](C x, C y) { return x - y; }); break;
    case BinaryOp::kMul: binary_loop<T>(out, a, b, [](C x, C y) { return x * y; }); break;
    case BinaryOp::kDiv: binary_loop<T>(out, a, b, [](C x, C y) { return x / y; }); break;
    case BinaryOp::kReluBackward:
      binary_loop<T>(out, a, b, [](C g, C x) { return x > C(0) ? g : C(0); });
      break;
    case BinaryOp::kGeluBackward:
      binary_loop<T>(out, a, b, [](C g, C x) { return g * gelu_grad<C>(x); });
      break;
    case BinaryOp::kTanhBackward:
      binary_loop<T>(out, a, b, [](C g, C y) { return g * (C(1) - y * y); });
      break;
    case BinaryOp::kPowBackward:
      binary_loop<T>(out, a, b, [al](C g, C x) { return g * al * std::pow(x, al - C(1)); });
      break;
    case BinaryOp::kEqMask:
      binary_loop<T>(out, a, b, [](C x, C y) { return x == y ? C(1) : C(0); });
      break;
  }
}

template <typename T>
void fill_typed(const Tensor& dst, double value) {
  T v = from_double<T>(value);
  cpu::for_each<1>({&dst}, [v](std::array<char*, 1> p, std::array<int64_t, 1> s, int64_t n) {
    if (s[0] == sizeof(T)) {
      T* o = reinterpret_cast<T*>(p[0]);
      for (int64_t i = 0; i < n; ++i) o[i] = v;
    } else {
      for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * s[0], &v, sizeof(T));
    }
  });
}

template <typename S>
void copy_from(const Tensor& dst, const Tensor& src) {
  BLU_SWITCH_ALL_DTYPES(dst.dtype(), D, "copy_", copy_typed<D, S>(dst, src));
}

}  // namespace

void copy_(const Tensor& dst, const Tensor& src) {
  BLU_CHECK(dst.device().is_cpu() && src.device().is_cpu(), "cpu_ops::copy_: ", dst.describe(), " <- ",
            src.describe(), " is not a CPU copy");
  BLU_SWITCH_ALL_DTYPES(src.dtype(), S, "copy_", copy_from<S>(dst, src));
}

void fill_(const Tensor& dst, double value) {
  BLU_SWITCH_ALL_DTYPES(dst.dtype(), T, "fill_", fill_typed<T>(dst, value));
}

void unary(UnaryOp op, const Tensor& out, const Tensor& a, double alpha) {
  BLU_SWITCH_FLOAT_DTYPES(out.dtype(), T, "unary", unary_typed<T>(op, out, a, alpha));
}

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  BLU_SWITCH_FLOAT_DTYPES(out.dtype(), T, "binary", binary_typed<T>(op, out, a, b, alpha));
}

}  // namespace blu::cpu_ops
