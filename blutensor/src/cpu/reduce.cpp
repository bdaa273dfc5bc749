// CPU reductions (sum, max) into a keepdim-shaped output. Accumulation is in double (fixed order:
// row-major over the input), so float32 sums are accurate and deterministic. Rows reduced over the
// innermost contiguous dim run in parallel; other layouts use one strided pass.
#include <cmath>
#include <limits>

#include "cpu/cpu_loops.h"
#include "cpu/cpu_ops.h"
#include "cpu/dtype_switch.h"

namespace blu::cpu_ops {

namespace {

template <typename T>
void reduce_typed(ReduceOp op, const Tensor& out, const Tensor& a) {
  const int64_t nd = a.dim();
  const int64_t out_numel = out.numel();
  const bool is_max = op == ReduceOp::kMax;
  // Fast path: contiguous input reduced over a suffix of dims (softmax-like rows).
  int64_t inner = 1;
  int64_t first_reduced = nd;
  for (int64_t d = nd - 1; d >= 0; --d) {
    if (out.sizes()[d] == 1 && a.sizes()[d] != 1) {
      first_reduced = d;
      inner *= a.sizes()[d];
    } else if (a.sizes()[d] == 1) {
      continue;
    } else {
      break;
    }
  }
  bool suffix_only = true;
  for (int64_t d = 0; d < first_reduced; ++d) {
    if (out.sizes()[d] != a.sizes()[d]) suffix_only = false;
  }
  if (a.is_contiguous() && suffix_only && inner > 1) {
    const T* x = static_cast<const T*>(a.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    cpu::parallel_for(out_numel, inner, [&](int64_t r) {
      const T* row = x + r * inner;
      if (is_max) {
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t i = 0; i < inner; ++i) {
          double v = static_cast<double>(static_cast<cpu::compute_t<T>>(row[i]));
          if (v > m || std::isnan(v)) m = v;
        }
        o[r] = T(static_cast<cpu::compute_t<T>>(m));
      } else {
        double s = 0;
        for (int64_t i = 0; i < inner; ++i) s += static_cast<double>(static_cast<cpu::compute_t<T>>(row[i]));
        o[r] = T(static_cast<cpu::compute_t<T>>(s));
      }
    });
    return;
  }
  // General: accumulate into a double buffer addressed with stride 0 on reduced dims.
  std::vector<double> acc(static_cast<std::size_t>(out_numel),
                          is_max ? -std::numeric_limits<double>::infinity() : 0.0);
  Shape acc_strides = contiguous_strides(out.sizes());
  for (int64_t d = 0; d < nd; ++d) {
    if (out.sizes()[d] == 1) acc_strides[d] = 0;
  }
  Tensor acc_view = from_blob(acc.data(), a.sizes(), kFloat64);
  acc_view.impl()->strides = acc_strides;
  cpu::for_each<2>({&acc_view, &a},
                   [is_max](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
                     for (int64_t i = 0; i < n; ++i) {
                       double* o = reinterpret_cast<double*>(p[0] + i * s[0]);
                       const T* x = reinterpret_cast<const T*>(p[1] + i * s[1]);
                       double v = static_cast<double>(static_cast<cpu::compute_t<T>>(*x));
                       if (is_max) {
                         if (v > *o || std::isnan(v)) *o = v;
                       } else {
                         *o += v;
                       }
                     }
                   },
                   /*parallel=*/false);
  T* o = static_cast<T*>(out.data_ptr());
  for (int64_t i = 0; i < out_numel; ++i) o[i] = T(static_cast<cpu::compute_t<T>>(acc[i]));
}

}  // namespace

void reduce(ReduceOp op, const Tensor& out, const Tensor& a) {
  BLU_SWITCH_FLOAT_DTYPES(a.dtype(), T, "reduce", reduce_typed<T>(op, out, a));
}

}  // namespace blu::cpu_ops
