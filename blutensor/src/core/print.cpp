// PyTorch-like printing of tensors. Floating values share one format per tensor (fixed with 4
// decimals, or scientific when the magnitudes span too much); big tensors (> 1000 elements) show the
// first and last 3 entries along each dim with "...".
#include <cmath>
#include <cstdio>
#include <sstream>

#include "blutensor/autograd.h"
#include "blutensor/tensor.h"

namespace blu {

namespace {

constexpr int64_t kSummarizeThreshold = 1000;
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  bool floating = true;
  bool scientific = false;
  bool integral_values = false;  // floating but all integers: "1." style
  int width = 1;

  std::string format(double v) const {
    char buf[64];
    if (!floating) {
      std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v));
    } else if (std::isnan(v)) {
      std::snprintf(buf, sizeof(buf), "nan");
    } else if (std::isinf(v)) {
      std::snprintf(buf, sizeof(buf), v > 0 ? "inf" : "-inf");
    } else if (scientific) {
      std::snprintf(buf, sizeof(buf), "%.4e", v);
    } else if (integral_values) {
      std::snprintf(buf, sizeof(buf), "%.0f.", v);
    } else {
      std::snprintf(buf, sizeof(buf), "%.4f", v);
    }
    return buf;
  }
};

bool shown(int64_t i, int64_t n, bool summarize) {
  return !summarize || n <= 2 * kEdgeItems || i < kEdgeItems || i >= n - kEdgeItems;
}

void print_rec(std::ostream& os, const std::vector<double>& v, const Shape& sizes,
               const Shape& strides, int64_t dim, int64_t base, const Formatter& f, bool summarize,
               int indent) {
  if (sizes.empty()) {
    os << f.format(v[0]);
    return;
  }
  int64_t n = sizes[dim];
  os << '[';
  bool last = dim == static_cast<int64_t>(sizes.size()) - 1;
  bool first = true;
  for (int64_t i = 0; i < n; ++i) {
    if (!shown(i, n, summarize)) {
      if (i == kEdgeItems) {
        os << (last ? ", ..." : ",\n" + std::string(indent + 1, ' ') + "...");
      }
      continue;
    }
    if (!first) {
      if (last) {
        os << ", ";
      } else {
        os << ',' << std::string(static_cast<std::size_t>(sizes.size() - dim - 1), '\n')
           << std::string(indent + 1, ' ');
      }
    }
    first = false;
    if (last) {
      std::string s = f.format(v[base + i * strides[dim]]);
      os << std::string(f.width > static_cast<int>(s.size()) ? f.width - s.size() : 0, ' ') << s;
    } else {
      print_rec(os, v, sizes, strides, dim + 1, base + i * strides[dim], f, summarize, indent + 1);
    }
  }
  os << ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  std::vector<double> v = t.numel() > 0 ? t.to_double_vector() : std::vector<double>{};
  bool summarize = t.numel() > kSummarizeThreshold;
  Formatter f;
  f.floating = is_floating(t.dtype());
  Shape strides = contiguous_strides(t.sizes());
  // Format from the values that are shown.
  double max_abs = 0, min_abs = INFINITY;
  bool all_int = true;
  for (double x : v) {
    if (!std::isfinite(x)) continue;
    double a = std::fabs(x);
    max_abs = std::max(max_abs, a);
    if (a > 0) min_abs = std::min(min_abs, a);
    if (x != std::floor(x)) all_int = false;
  }
  if (f.floating) {
    f.integral_values = all_int && max_abs < 1e8;
    f.scientific = !f.integral_values && (max_abs >= 1e8 || (min_abs < 1e-4 && min_abs != INFINITY) ||
                                          (min_abs != INFINITY && max_abs / min_abs > 1e6));
  }
  for (double x : v) f.width = std::max<int>(f.width, static_cast<int>(f.format(x).size()));
  os << "tensor(";
  if (t.numel() == 0) {
    os << "[]";
  } else {
    print_rec(os, v, t.sizes(), strides, 0, 0, f, summarize, 7);
  }
  if (t.numel() == 0 && t.dim() != 1) os << ", size=" << shape_str(t.sizes());
  if (t.dtype() != kFloat32 && t.dtype() != kInt64) os << ", dtype=" << dtype_torch_name(t.dtype());
  if (t.is_cuda()) os << ", device='" << t.device().str() << "'";
  if (t.grad_fn()) {
    os << ", grad_fn=<" << t.grad_fn()->name() << ">";
  } else if (t.requires_grad()) {
    os << ", requires_grad=True";
  }
  return os << ')';
}

std::string to_string(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace blu
