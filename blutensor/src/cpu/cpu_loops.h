// blutensor/src/cpu/cpu_loops.h: the CPU iteration engine. N operands of one shape with arbitrary
// element strides are coalesced (adjacent dims merged where every operand allows it), the linear
// index range is split across OpenMP threads, and each thread hands the kernel runs of the
// innermost dim: kernel(ptrs, byte_strides, n). Kernels branch once per run on contiguity, so the
// contiguous case is a plain vectorisable loop; there are no per-element virtual calls.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "blutensor/tensor.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace blu::cpu {

// Below this much work (elements, or elements x inner work), a loop stays on one thread: an
// OpenMP region costs microseconds, and far more when the cores are oversubscribed.
constexpr int64_t kParallelGrainElements = 1 << 16;

inline int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

template <int N>
struct Geometry {
  std::vector<int64_t> sizes;                       // coalesced, innermost last
  std::array<std::vector<int64_t>, N> byte_strides;  // per operand
};

template <int N>
Geometry<N> coalesce(const Shape& sizes, const std::array<const Shape*, N>& strides,
                     const std::array<int64_t, N>& elem_bytes) {
  Geometry<N> g;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    bool merge = !g.sizes.empty();
    if (merge) {
      for (int k = 0; k < N; ++k) {
        int64_t inner = (*strides[k])[d] * elem_bytes[k];
        if (g.byte_strides[k].back() != inner * sizes[d]) { merge = false; break; }
      }
    }
    if (merge) {
      g.sizes.back() *= sizes[d];
      for (int k = 0; k < N; ++k) g.byte_strides[k].back() = (*strides[k])[d] * elem_bytes[k];
    } else {
      g.sizes.push_back(sizes[d]);
      for (int k = 0; k < N; ++k) g.byte_strides[k].push_back((*strides[k])[d] * elem_bytes[k]);
    }
  }
  if (g.sizes.empty()) {
    g.sizes.push_back(1);
    for (int k = 0; k < N; ++k) g.byte_strides[k].push_back(elem_bytes[k]);
  }
  return g;
}

// Runs kernel over the linear range [begin, end) of the coalesced geometry.
template <int N, typename Kernel>
void run_range(const Geometry<N>& g, const std::array<char*, N>& base, int64_t begin, int64_t end,
               Kernel& kernel) {
  const int64_t nd = static_cast<int64_t>(g.sizes.size());
  std::vector<int64_t> idx(nd, 0);
  int64_t rem = begin;
  for (int64_t d = nd - 1; d >= 0; --d) {
    idx[d] = rem % g.sizes[d];
    rem /= g.sizes[d];
  }
  std::array<char*, N> ptr;
  for (int k = 0; k < N; ++k) {
    ptr[k] = base[k];
    for (int64_t d = 0; d < nd; ++d) ptr[k] += idx[d] * g.byte_strides[k][d];
  }
  std::array<int64_t, N> inner;
  for (int k = 0; k < N; ++k) inner[k] = g.byte_strides[k][nd - 1];
  int64_t pos = begin;
  while (pos < end) {
    int64_t n = std::min(g.sizes[nd - 1] - idx[nd - 1], end - pos);
    kernel(ptr, inner, n);
    pos += n;
    if (pos >= end) break;
    // Advance: the inner index wraps to 0, carry into outer dims.
    for (int k = 0; k < N; ++k) ptr[k] -= idx[nd - 1] * inner[k];
    idx[nd - 1] = 0;
    for (int64_t d = nd - 2; d >= 0; --d) {
      ++idx[d];
      for (int k = 0; k < N; ++k) ptr[k] += g.byte_strides[k][d];
      if (idx[d] < g.sizes[d]) break;
      for (int k = 0; k < N; ++k) ptr[k] -= idx[d] * g.byte_strides[k][d];
      idx[d] = 0;
    }
  }
}

// operands[0] is the output. Parallel over the linear range when large (and `parallel`).
template <int N, typename Kernel>
void for_each(const std::array<const Tensor*, N>& operands, Kernel kernel, bool parallel = true) {
  const Shape& sizes = operands[0]->sizes();
  std::array<const Shape*, N> strides;
  std::array<int64_t, N> elem;
  std::array<char*, N> base;
  for (int k = 0; k < N; ++k) {
    strides[k] = &operands[k]->strides();
    elem[k] = static_cast<int64_t>(operands[k]->element_size());
    base[k] = static_cast<char*>(operands[k]->data_ptr());
  }
  int64_t total = shape_numel(sizes);
  if (total == 0) return;
  Geometry<N> g = coalesce<N>(sizes, strides, elem);
  int threads = parallel && total >= kParallelGrainElements ? max_threads() : 1;
  if (threads <= 1) {
    run_range<N>(g, base, 0, total, kernel);
    return;
  }
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
  {
    int t = omp_get_thread_num();
    int nt = omp_get_num_threads();
    int64_t chunk = (total + nt - 1) / nt;
    int64_t b = std::min<int64_t>(total, chunk * t), e = std::min<int64_t>(total, b + chunk);
    Kernel local = kernel;
    if (b < e) run_range<N>(g, base, b, e, local);
  }
#endif
}

// Simple parallel for over [0, n) (rows of a row-wise kernel).
template <typename F>
void parallel_for(int64_t n, int64_t work_per_item, F f) {
#ifdef _OPENMP
  if (n > 1 && n * work_per_item >= kParallelGrainElements && max_threads() > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) f(i);
}

// Value conversions through the compute type.
template <typename T> struct Compute { using type = float; };
template <> struct Compute<double> { using type = double; };
template <typename T> using compute_t = typename Compute<T>::type;

}  // namespace blu::cpu
