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
//
// Note [Row-vector path]
// Between the two: when out steps contiguously along its last dim and every input either does too
// (stride 1) or repeats one value along it (stride 0: a 0-d scalar, a [N, 1] column), with the
// last dim a multiple of V, every stride-1 operand's outer strides multiples of V and its base
// aligned, a thread takes V consecutive elements of one row: the outer dims go through OffsetCalc
// once per vector instead of once per element, and loads and stores stay vectors (a stride-0
// operand's one value fills the V lanes). This covers the broadcasts of training (a bias [C] over
// [N, C]: outer stride 0; positions [T, C] over [B, T, C]; scalars) and the attention heads'
// [B, H, T, D] <-> [B, T, H, D] transposes (D = 64). On the strided kernel a bf16 bias add over
// [16384, 3072] took ~212 us (11.9 ms of a GPT-2 d12 B16 autograd step) and the qkv gradient's
// transposed copies ran at ~0.86 TB/s (H100, session 17). Each element gets the same functor call
// as on the other paths.
#pragma once

#include <algorithm>
#include <array>

#include "cuda/kernel_utils.cuh"

namespace blu::cuda_ops::detail {

// grid_for capped by Note [Side map budget] (cuda_stream.h): the map kernels are grid-stride loops
// over independent elements, so any grid gives the same bits.
inline unsigned map_grid_for(int64_t work_items) {
  const unsigned g = grid_for(work_items);
  const int per_sm = cuda::map_block_budget();
  if (per_sm <= 0) return g;
  const int64_t cap = static_cast<int64_t>(per_sm) * sm_count();
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(g, cap)));
}

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

template <typename T, int N>
struct Ptrs {
  const T* p[N > 0 ? N : 1];
};

// y[j] = f(x[0][j], ..., x[NIN-1][j]) for the V lanes of one vector (NIN = 0: f()).
template <int V, typename OutT, typename InT, int NIN, typename F>
__device__ __forceinline__ Vec<OutT, V> apply_lanes(const F& f, const Vec<InT, V> (&x)[NIN > 0 ? NIN : 1]) {
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
  return y;
}

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
    reinterpret_cast<Vec<OutT, V>*>(out)[i] = apply_lanes<V, OutT, InT, NIN>(f, x);
  }
}

// Note [Row-vector path]: vector i is row i / vecs_per_row (offsets from oc over the outer dims),
// elements V * (i % vecs_per_row) .. + V - 1 of it; input a with lane_step[a] == 0 repeats its one
// value of the row over the V lanes.
template <int NIN>
struct LaneSteps {
  int step[NIN > 0 ? NIN : 1];
};

template <int V, typename IndexT, typename OutT, typename InT, int NIN, typename F>
__global__ void map_rows_kernel(OutT* out, Ptrs<InT, NIN> in, OffsetCalc<NIN + 1> oc, LaneSteps<NIN> lanes,
                                IndexT n_vec, IndexT vecs_per_row, F f) {
  const IndexT step = static_cast<IndexT>(gridDim.x) * blockDim.x;
  for (IndexT i = static_cast<IndexT>(blockIdx.x) * blockDim.x + threadIdx.x; i < n_vec; i += step) {
    const IndexT row = i / vecs_per_row;
    const int64_t col = static_cast<int64_t>(i - row * vecs_per_row) * V;
    int64_t off[NIN + 1];
    oc.get(row, off);
    Vec<InT, V> x[NIN > 0 ? NIN : 1];
#pragma unroll
    for (int a = 0; a < NIN; ++a) {
      if (lanes.step[a] != 0) {
        x[a] = *reinterpret_cast<const Vec<InT, V>*>(in.p[a] + off[a + 1] + col);
      } else {
        const InT v = in.p[a][off[a + 1]];
#pragma unroll
        for (int j = 0; j < V; ++j) x[a].v[j] = v;
      }
    }
    *reinterpret_cast<Vec<OutT, V>*>(out + off[0] + col) = apply_lanes<V, OutT, InT, NIN>(f, x);
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

// Note [Row-vector path]: the outer dims' OffsetCalc and each input's lane step when out has
// stride 1 along a last dim of a multiple of V elements, outer strides that are multiples of V and
// an aligned base, and every input has stride 1 there (with the same conditions) or 0; false
// otherwise.
template <int V, typename OutT, typename InT, int NIN>
bool rows_fast_path(const Tensor& out, const std::array<const Tensor*, (NIN > 0 ? NIN : 1)>& ins,
                    const Ptrs<InT, NIN>& in, OffsetCalc<NIN + 1>* oc, LaneSteps<NIN>* lanes) {
  const int64_t nd = out.dim();
  if (NIN == 0 || V < 2 || nd < 1) return false;
  const Shape& sizes = out.sizes();
  const auto last = static_cast<std::size_t>(nd - 1);
  if (sizes[last] % V != 0 || out.strides()[last] != 1 || !aligned_to(out.data_ptr(), sizeof(OutT) * V)) {
    return false;
  }
  const Shape outer(sizes.begin(), sizes.end() - 1);
  const auto outer_ok = [&](const Shape& st) {
    for (std::size_t d = 0; d < last; ++d) {
      if (sizes[d] != 1 && st[d] % V != 0) return false;
    }
    return true;
  };
  if (!outer_ok(out.strides())) return false;
  std::array<Shape, NIN + 1> strides;
  strides[0] = Shape(out.strides().begin(), out.strides().end() - 1);
  for (int a = 0; a < NIN; ++a) {
    const Shape bs = broadcast_strides(*ins[a], sizes);
    if (bs[last] != 0 && bs[last] != 1) return false;
    lanes->step[a] = static_cast<int>(bs[last]);
    if (bs[last] == 1 && (!outer_ok(bs) || !aligned_to(in.p[a], sizeof(InT) * V))) return false;
    strides[static_cast<std::size_t>(a) + 1] = Shape(bs.begin(), bs.end() - 1);
  }
  *oc = make_offset_calc<NIN + 1>(outer, strides);
  return true;
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
          <<<map_grid_for(n / V), kThreads, 0, stream>>>(out_ptr, in, n, f);
      const int64_t done = n / V * V;
      if (done < n) {  // the < V tail elements: a second, scalar launch
        Ptrs<InT, NIN> tail_in = in;
        for (int a = 0; a < NIN; ++a) tail_in.p[a] += done;
        map_contiguous_kernel<1, OutT, InT, NIN, F>
            <<<1, kThreads, 0, stream>>>(out_ptr + done, tail_in, n - done, f);
      }
    } else {
      map_contiguous_kernel<1, OutT, InT, NIN, F>
          <<<map_grid_for(n), kThreads, 0, stream>>>(out_ptr, in, n, f);
    }
    BLU_KERNEL_LAUNCH_CHECK(name);
    return;
  }
  if constexpr (NIN > 0) {
    constexpr std::size_t min_size = sizeof(OutT) < sizeof(InT) ? sizeof(OutT) : sizeof(InT);
    constexpr int V = static_cast<int>(16 / min_size);
    OffsetCalc<NIN + 1> row_oc;
    LaneSteps<NIN> lanes{};
    if (rows_fast_path<V, OutT, InT, NIN>(out, ins, in, &row_oc, &lanes)) {
      const int64_t n_vec = n / V, vecs_per_row = out.sizes().back() / V;
      if (n_vec < (int64_t{1} << 31)) {
        map_rows_kernel<V, uint32_t, OutT, InT, NIN, F><<<map_grid_for(n_vec), kThreads, 0, stream>>>(
            out_ptr, in, row_oc, lanes, static_cast<uint32_t>(n_vec), static_cast<uint32_t>(vecs_per_row), f);
      } else {
        map_rows_kernel<V, uint64_t, OutT, InT, NIN, F><<<map_grid_for(n_vec), kThreads, 0, stream>>>(
            out_ptr, in, row_oc, lanes, static_cast<uint64_t>(n_vec), static_cast<uint64_t>(vecs_per_row), f);
      }
      BLU_KERNEL_LAUNCH_CHECK(name);
      return;
    }
  }
  std::array<Shape, NIN + 1> strides;
  strides[0] = out.strides();
  for (int a = 0; a < NIN; ++a) strides[a + 1] = broadcast_strides(*ins[a], out.sizes());
  OffsetCalc<NIN + 1> oc = make_offset_calc<NIN + 1>(out.sizes(), strides);
  if (n < (int64_t{1} << 31)) {
    map_strided_kernel<uint32_t, OutT, InT, NIN, F>
        <<<map_grid_for(n), kThreads, 0, stream>>>(out_ptr, in, oc, static_cast<uint32_t>(n), f);
  } else {
    map_strided_kernel<uint64_t, OutT, InT, NIN, F>
        <<<map_grid_for(n), kThreads, 0, stream>>>(out_ptr, in, oc, static_cast<uint64_t>(n), f);
  }
  BLU_KERNEL_LAUNCH_CHECK(name);
}

}  // namespace blu::cuda_ops::detail
