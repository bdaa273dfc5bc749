// blutensor/src/cuda/elementwise_engine.cuh: launch_map, the one elementwise loop behind copies,
// casts, fills, unary and binary ops. out[i] = f(in_0[i], ..., in_{N-1}[i]) over out's shape.
//
// Note [Elementwise fast path]
// When the output and every input are contiguous with out's shape (no broadcast) and all pointers
// are 16-byte aligned, each thread moves V = 16 / (smallest element size) elements with vector
// loads and stores (16 bytes for the smaller type, a multiple of 16 for the larger), in a
// grid-stride loop; the < V tail elements are a second, scalar launch (one call site of the
// functor per kernel: ops with slow-path subroutines, such as IEEE division, do not spill). Otherwise the strided
// kernel maps each linear index through OffsetCalc (dims merged on the host, 32-bit index math
// when the tensor has fewer than 2^31 elements). Functors, not lambdas: no --extended-lambda.
#pragma once

#include <array>

#include "cuda/kernel_utils.cuh"

namespace blu::cuda_ops::detail {

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

template <typename T, int N>
struct Ptrs {
  const T* p[N > 0 ? N : 1];
};

template <int V, typename OutT, typename InT, int NIN, typename F>
__global__ void
    map_contiguous_kernel(OutT* __restrict__ out, Ptrs<InT, NIN> in, int64_t n, F f) {
  const int64_t n_vec = n / V;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = first; i < n_vec; i += step) {
    Vec<InT, V> x[NIN > 0 ? NIN : 1];
#pragma unroll
    for (int a = 0; a < NIN; ++a) x[a] = reinterpret_cast<const Vec<InT, V>*>(in.p[a])[i];
    Vec<OutT, V> y;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if constexpr (NIN == 0) {
        y.v[j] = f();
      } else if constexpr (NIN == 1) {
        y.v[j] = f(x[0].v[j]);
      } else if constexpr (NIN == 2) {
        y.v[j] = f(x[0].v[j], x[1].v[j]);
      } else {
        y.v[j] = f(x[0].v[j], x[1].v[j], x[2].v[j]);
      }
    }
    reinterpret_cast<Vec<OutT, V>*>(out)[i] = y;
  }
}

template <typename IndexT, typename OutT, typename InT, int NIN, typename F>
__global__ void
    map_strided_kernel(OutT* out, Ptrs<InT, NIN> in, OffsetCalc<NIN + 1> oc, IndexT n, F f) {
  const IndexT step = static_cast<IndexT>(gridDim.x) * blockDim.x;
  for (IndexT i = static_cast<IndexT>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[NIN + 1];
    oc.get(i, off);
    if constexpr (NIN == 0) {
      out[off[0]] = f();
    } else if constexpr (NIN == 1) {
      out[off[0]] = f(in.p[0][off[1]]);
    } else if constexpr (NIN == 2) {
      out[off[0]] = f(in.p[0][off[1]], in.p[1][off[2]]);
    } else {
      out[off[0]] = f(in.p[0][off[1]], in.p[1][off[2]], in.p[2][off[3]]);
    }
  }
}

// Strides of `t` seen over `shape` (right-aligned; missing or size-1 dims broadcast: stride 0).
inline Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  Shape st(shape.size(), 0);
  const int64_t off = static_cast<int64_t>(shape.size()) - t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) {
    st[static_cast<std::size_t>(d + off)] = t.sizes()[static_cast<std::size_t>(d)] == 1
                                                ? 0
                                                : t.strides()[static_cast<std::size_t>(d)];
  }
  return st;
}

template <typename OutT, typename InT, int NIN, typename F>
void launch_map(const Tensor& out, const std::array<const Tensor*, (NIN > 0 ? NIN : 1)>& ins,
                F f, const char* name) {
  const int64_t n = out.numel();
  if (n == 0) return;
  cudaStream_t stream = stream_of(out);
  OutT* out_ptr = static_cast<OutT*>(out.data_ptr());
  Ptrs<InT, NIN> in{};
  bool contiguous = out.is_contiguous();
  for (int a = 0; a < NIN; ++a) {
    in.p[a] = static_cast<const InT*>(ins[a]->data_ptr());
    contiguous = contiguous && ins[a]->is_contiguous() && ins[a]->sizes() == out.sizes();
  }
  if (contiguous) {
    constexpr std::size_t min_size = NIN == 0 || sizeof(OutT) < sizeof(InT) ? sizeof(OutT)
                                                                            : sizeof(InT);
    constexpr int V = static_cast<int>(16 / min_size);
    bool aligned = aligned_to(out_ptr, sizeof(OutT) * V);
    for (int a = 0; a < NIN; ++a) aligned = aligned && aligned_to(in.p[a], sizeof(InT) * V);
    if (aligned && V > 1) {
      map_contiguous_kernel<V, OutT, InT, NIN, F>
          <<<grid_for(n / V), kThreads, 0, stream>>>(out_ptr, in, n, f);
      const int64_t done = n / V * V;
      if (done < n) {  // the < V tail elements: a second, scalar launch
        Ptrs<InT, NIN> tail_in = in;
        for (int a = 0; a < NIN; ++a) tail_in.p[a] += done;
        map_contiguous_kernel<1, OutT, InT, NIN, F>
            <<<1, kThreads, 0, stream>>>(out_ptr + done, tail_in, n - done, f);
      }
    } else {
      map_contiguous_kernel<1, OutT, InT, NIN, F>
          <<<grid_for(n), kThreads, 0, stream>>>(out_ptr, in, n, f);
    }
    BLU_KERNEL_LAUNCH_CHECK(name);
    return;
  }
  std::array<Shape, NIN + 1> strides;
  strides[0] = out.strides();
  for (int a = 0; a < NIN; ++a) strides[a + 1] = broadcast_strides(*ins[a], out.sizes());
  OffsetCalc<NIN + 1> oc = make_offset_calc<NIN + 1>(out.sizes(), strides);
  if (n < (int64_t{1} << 31)) {
    map_strided_kernel<uint32_t, OutT, InT, NIN, F>
        <<<grid_for(n), kThreads, 0, stream>>>(out_ptr, in, oc, static_cast<uint32_t>(n), f);
  } else {
    map_strided_kernel<uint64_t, OutT, InT, NIN, F>
        <<<grid_for(n), kThreads, 0, stream>>>(out_ptr, in, oc, static_cast<uint64_t>(n), f);
  }
  BLU_KERNEL_LAUNCH_CHECK(name);
}

}  // namespace blu::cuda_ops::detail
