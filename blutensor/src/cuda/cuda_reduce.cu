// CUDA reductions (sum, max) of a strided tensor into its keepdim-shaped contiguous output.
//
// Note [Deterministic reductions]
// Every output element is reduced in an order fixed by the shapes alone (never by timing or the
// device): a thread always takes the same elements, and partial results are combined by a fixed
// tree (shared memory / warp shuffles with fixed partners) or in chunk order. No atomics. Three
// schedules, picked from the shapes:
//  - inner reductions (the reduced elements are contiguous, e.g. rows): one block per output
//    when the reduction is long (>= 2048; with few outputs one block per chunk of each, Note
//    [Split whole-tensor reductions]), else one warp per output;
//  - outer reductions (the reduced dims are outside the output's contiguous dim, e.g. the bias
//    gradient sum over rows of [N, C]): one thread per output, coalesced across threads; when
//    there are too few outputs to fill the GPU the reduced range is cut into G chunks summed into
//    a [G, outputs] workspace, then added in chunk order by a second kernel.
// Accumulation in float (double for f64); max propagates NaN like the CPU backend.
// A contiguous f32 or bf16 [rows, cols] summed over rows uses blublas::column_sum (same guarantees;
// bf16 through an f32 [cols] result rounded once): the bias gradients of a bf16 step took the
// thread-per-output schedule at 83 us a launch, 4.1 ms of a GPT-2 d12 B16 step (H100, session 17),
// where the fused engine's column sums take ~44 us.
#include <cmath>
#include <algorithm>

#include "blublas/reduce.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernel_utils.cuh"

namespace blu::cuda_ops {
namespace {

using namespace detail;

template <typename C, bool kMax>
struct Combine {
  __device__ __forceinline__ static C identity() {
    if constexpr (kMax) {
      return -INFINITY;
    } else {
      return C(0);
    }
  }
  __device__ __forceinline__ static C apply(C acc, C v) {
    if constexpr (kMax) {
      return (v > acc || isnan(v)) ? v : acc;
    } else {
      return acc + v;
    }
  }
};

template <typename C>
__device__ __forceinline__ C shfl_xor(C v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}

// Note [Loads in flight for a one-block reduction]
// A whole-tensor sum (the loss's sum over 16384 rows and the count of valid targets, both on the
// bf16 step's critical path between the classifier and the backward) runs as one block, where each
// thread's loop added one load before issuing the next: 64 dependent global-memory latencies, 43 us
// a launch in the H100 profile of session 24 (85.6 us for the two). Each thread now issues
// kLoadBatch loads, then adds them in the order it always did: the same elements, the same order,
// the same bits, ~kLoadBatch times fewer exposed latencies. Built after session 24's last device
// call: not yet measured (ops_cpu_vs_cuda and cuda_kernels GPU tests cover the kernel).
constexpr int kLoadBatch = 8;

// Note [Split whole-tensor reductions]
// An inner reduction with few outputs (the Llama benchmark's loss: mean(y^2) over 8.4M floats, one
// output) ran as one block per output: one SM reading 32 MB. With fewer than kSplitBelowOutputs
// outputs and at least two chunks of kSplitChunk elements, each output's range is cut into chunks of
// at least kSplitChunk (at most kSplitBlocks blocks in all), one block per (chunk, output), partials
// in f32 combined by one block per output in a fixed tree (reduce_chunks_block_kernel). The constants are the only inputs besides the
// shapes: the same bits on every device (Note [Deterministic reductions]).
constexpr int64_t kSplitBelowOutputs = 256;
constexpr int64_t kSplitChunk = 8192;
constexpr int64_t kSplitBlocks = 1024;

// acc combined with the elements r = begin, begin + stride, ... < end of src (offsets through
// red_oc), in that order. Note [Loads in flight for a one-block reduction]: kLoadBatch loads are
// issued before they are added, in the same order (the same bits as one at a time).
template <typename T, bool kMax, int kStride>
__device__ __forceinline__ compute_t<T> accumulate_range(compute_t<T> acc, const T* src, const OffsetCalc<1>& red_oc,
                                                         uint32_t begin, uint32_t end) {
  using C = compute_t<T>;
  using Op = Combine<C, kMax>;
  uint32_t r = begin;
  for (; r + (kLoadBatch - 1) * kStride < end; r += kLoadBatch * kStride) {
    C v[kLoadBatch];
#pragma unroll
    for (int j = 0; j < kLoadBatch; ++j) {
      int64_t off[1];
      red_oc.get(r + static_cast<uint32_t>(j * kStride), off);
      v[j] = load_c(src[off[0]]);
    }
#pragma unroll
    for (int j = 0; j < kLoadBatch; ++j) acc = Op::apply(acc, v[j]);
  }
  for (; r < end; r += kStride) {
    int64_t off[1];
    red_oc.get(r, off);
    acc = Op::apply(acc, load_c(src[off[0]]));
  }
  return acc;
}

// The block's kThreads values combined by a fixed tree (shared memory, then warp shuffles with
// fixed partners); the result is valid in thread 0.
template <typename C, bool kMax>
__device__ __forceinline__ C block_combine(C acc) {
  using Op = Combine<C, kMax>;
  __shared__ C sh[kThreads];
  sh[threadIdx.x] = acc;
  __syncthreads();
#pragma unroll
  for (int width = kThreads / 2; width >= 32; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) sh[threadIdx.x] = Op::apply(sh[threadIdx.x], sh[threadIdx.x + width]);
    __syncthreads();
  }
  C v = sh[threadIdx.x < 32 ? threadIdx.x : 0];
  if (threadIdx.x < 32) {
#pragma unroll
    for (int m = 16; m >= 1; m /= 2) v = Op::apply(v, shfl_xor(v, m));
  }
  return v;
}

// One block per (chunk, output) (Note [Split whole-tensor reductions]): reduces the reduced range
// [chunk * chunk_len, ...) of output blockIdx.x; partial == nullptr: one chunk, written to out;
// the reduction indexer's offsets are relative to the output's base.
template <typename T, bool kMax>
__global__ void reduce_block_kernel(T* out, compute_t<T>* partial, const T* a, OffsetCalc<1> out_oc,
                                    OffsetCalc<1> red_oc, uint32_t reduce_n, uint32_t chunk_len) {
  using C = compute_t<T>;
  int64_t base[1];
  out_oc.get(static_cast<uint32_t>(blockIdx.x), base);
  const uint32_t r0 = blockIdx.y * chunk_len;
  const uint32_t r1 = min(reduce_n, r0 + chunk_len);
  const C v = block_combine<C, kMax>(
      accumulate_range<T, kMax, kThreads>(Combine<C, kMax>::identity(), a + base[0], red_oc, r0 + threadIdx.x, r1));
  if (threadIdx.x == 0) {
    if (partial == nullptr) {
      out[blockIdx.x] = store_c<T>(v);
    } else {
      partial[static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x] = v;
    }
  }
}

// One warp per output.
template <typename T, bool kMax>
__global__ void reduce_warp_kernel(T* out, const T* a, OffsetCalc<1> out_oc, OffsetCalc<1> red_oc,
                                   uint32_t out_n, uint32_t reduce_n) {
  using C = compute_t<T>;
  using Op = Combine<C, kMax>;
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t warps_per_block = kThreads / 32;
  for (uint32_t o = blockIdx.x * warps_per_block + threadIdx.x / 32; o < out_n;
       o += gridDim.x * warps_per_block) {
    int64_t base[1];
    out_oc.get(o, base);
    const T* src = a + base[0];
    C acc = accumulate_range<T, kMax, 32>(Op::identity(), src, red_oc, lane, reduce_n);
#pragma unroll
    for (int m = 16; m >= 1; m /= 2) acc = Op::apply(acc, shfl_xor(acc, m));
    if (lane == 0) out[o] = store_c<T>(acc);
  }
}

// One thread per (chunk, output): reduces [chunk * chunk_len, ...) in order. partial == nullptr:
// a single chunk, written to out directly.
template <typename T, bool kMax>
__global__ void reduce_thread_kernel(T* out, compute_t<T>* partial, const T* a,
                                     OffsetCalc<1> out_oc, OffsetCalc<1> red_oc, uint32_t out_n,
                                     uint32_t reduce_n, uint32_t chunk_len) {
  using C = compute_t<T>;
  using Op = Combine<C, kMax>;
  const uint32_t chunk = blockIdx.y;
  const uint32_t r0 = chunk * chunk_len;
  const uint32_t r1 = min(reduce_n, r0 + chunk_len);
  for (uint32_t o = blockIdx.x * kThreads + threadIdx.x; o < out_n; o += gridDim.x * kThreads) {
    int64_t base[1];
    out_oc.get(o, base);
    const T* src = a + base[0];
    C acc = Op::identity();
    for (uint32_t r = r0; r < r1; ++r) {
      int64_t off[1];
      red_oc.get(r, off);
      acc = Op::apply(acc, load_c(src[off[0]]));
    }
    if (partial == nullptr) {
      out[o] = store_c<T>(acc);
    } else {
      partial[static_cast<int64_t>(chunk) * out_n + o] = acc;
    }
  }
}

template <typename T, bool kMax>
__global__ void reduce_chunks_kernel(T* out, const compute_t<T>* partial, uint32_t out_n,
                                     uint32_t chunks) {
  using C = compute_t<T>;
  using Op = Combine<C, kMax>;
  for (uint32_t o = blockIdx.x * kThreads + threadIdx.x; o < out_n; o += gridDim.x * kThreads) {
    C acc = Op::identity();
    for (uint32_t g = 0; g < chunks; ++g) {
      acc = Op::apply(acc, partial[static_cast<int64_t>(g) * out_n + o]);
    }
    out[o] = store_c<T>(acc);
  }
}

// One block per output: the chunks' partials of output blockIdx.x combined by a fixed tree
// (thread t takes chunks t, t + kThreads, ... in order; then shared memory and warp shuffles with
// fixed partners): the same bits on every run, ~log2 steps instead of `chunks` dependent loads
// (Note [Split whole-tensor reductions]: 1024 partials of one output took 19 us in one thread).
template <typename T, bool kMax>
__global__ void reduce_chunks_block_kernel(T* out, const compute_t<T>* partial, uint32_t out_n,
                                           uint32_t chunks) {
  using C = compute_t<T>;
  using Op = Combine<C, kMax>;
  const uint32_t o = blockIdx.x;
  C acc = Op::identity();
  for (uint32_t g = threadIdx.x; g < chunks; g += kThreads) {
    acc = Op::apply(acc, partial[static_cast<int64_t>(g) * out_n + o]);
  }
  const C v = block_combine<C, kMax>(acc);
  if (threadIdx.x == 0) out[o] = store_c<T>(v);
}

template <typename T, bool kMax>
void reduce_typed(const Tensor& out, const Tensor& a) {
  const int64_t out_n = out.numel();
  if (out_n == 0) return;
  cudaStream_t stream = stream_of(out);
  T* out_ptr = static_cast<T*>(out.data_ptr());
  const T* a_ptr = static_cast<const T*>(a.data_ptr());

  Shape out_sizes, out_strides, red_sizes, red_strides;
  for (int64_t d = 0; d < a.dim(); ++d) {
    const auto du = static_cast<std::size_t>(d);
    if (out.sizes()[du] == 1 && a.sizes()[du] != 1) {
      red_sizes.push_back(a.sizes()[du]);
      red_strides.push_back(a.strides()[du]);
    } else {
      out_sizes.push_back(a.sizes()[du]);
      out_strides.push_back(a.strides()[du]);
    }
  }
  const int64_t reduce_n = shape_numel(red_sizes);
  BLU_CHECK(out_n < (int64_t{1} << 31) && reduce_n < (int64_t{1} << 31),
            "reduce (CUDA): ", a.describe(), " -> ", out.describe(),
            " has more than 2^31 outputs or reduced elements");
  OffsetCalc<1> out_oc = make_offset_calc<1>(out_sizes, {out_strides});
  OffsetCalc<1> red_oc = make_offset_calc<1>(red_sizes, {red_strides});
  const bool inner = red_oc.ndim == 0 || red_oc.strides[0][red_oc.ndim - 1] == 1;
  const int sms = sm_count();

  if (reduce_n == 0 || (inner && reduce_n >= 2048)) {
    // Note [Split whole-tensor reductions]: few outputs of long reductions are cut into chunks.
    int64_t chunks = 1;
    if (out_n < kSplitBelowOutputs && reduce_n >= 2 * kSplitChunk) {
      chunks = std::min<int64_t>((reduce_n + kSplitChunk - 1) / kSplitChunk,
                                 std::max<int64_t>(1, kSplitBlocks / out_n));
    }
    const int64_t chunk_len = std::max<int64_t>(1, (reduce_n + chunks - 1) / chunks);
    chunks = reduce_n == 0 ? 1 : (reduce_n + chunk_len - 1) / chunk_len;
    using C = compute_t<T>;
    if (chunks == 1) {
      reduce_block_kernel<T, kMax><<<dim3(static_cast<unsigned>(out_n), 1), kThreads, 0, stream>>>(
          out_ptr, nullptr, a_ptr, out_oc, red_oc, static_cast<uint32_t>(reduce_n),
          static_cast<uint32_t>(std::max<int64_t>(reduce_n, 1)));
      BLU_KERNEL_LAUNCH_CHECK("reduce_block_kernel");
      return;
    }
    DeviceBuffer partial(static_cast<std::size_t>(chunks * out_n) * sizeof(C), out.device().index, stream);
    reduce_block_kernel<T, kMax>
        <<<dim3(static_cast<unsigned>(out_n), static_cast<unsigned>(chunks)), kThreads, 0, stream>>>(
            out_ptr, partial.as<C>(), a_ptr, out_oc, red_oc, static_cast<uint32_t>(reduce_n),
            static_cast<uint32_t>(chunk_len));
    BLU_KERNEL_LAUNCH_CHECK("reduce_block_kernel");
    reduce_chunks_block_kernel<T, kMax><<<static_cast<unsigned>(out_n), kThreads, 0, stream>>>(
        out_ptr, partial.as<C>(), static_cast<uint32_t>(out_n), static_cast<uint32_t>(chunks));
    BLU_KERNEL_LAUNCH_CHECK("reduce_chunks_block_kernel");
    return;
  }
  if (inner && reduce_n >= 32) {
    reduce_warp_kernel<T, kMax><<<grid_for(out_n * 32), kThreads, 0, stream>>>(
        out_ptr, a_ptr, out_oc, red_oc, static_cast<uint32_t>(out_n),
        static_cast<uint32_t>(reduce_n));
    BLU_KERNEL_LAUNCH_CHECK("reduce_warp_kernel");
    return;
  }
  // Thread per output, the reduced range cut into chunks when outputs alone cannot fill the GPU.
  const int64_t target_threads = static_cast<int64_t>(sms) * 2048;
  int64_t chunks = 1;
  if (out_n < target_threads && reduce_n >= 64) {
    chunks = std::min<int64_t>((target_threads + out_n - 1) / out_n, reduce_n / 32);
    chunks = std::max<int64_t>(1, std::min<int64_t>(chunks, 65535));
  }
  const int64_t chunk_len = (reduce_n + chunks - 1) / chunks;
  chunks = (reduce_n + chunk_len - 1) / chunk_len;
  const unsigned gx = static_cast<unsigned>(
      std::min<int64_t>((out_n + kThreads - 1) / kThreads, 65535));
  if (chunks == 1) {
    reduce_thread_kernel<T, kMax><<<dim3(gx, 1), kThreads, 0, stream>>>(
        out_ptr, nullptr, a_ptr, out_oc, red_oc, static_cast<uint32_t>(out_n),
        static_cast<uint32_t>(reduce_n), static_cast<uint32_t>(chunk_len));
    BLU_KERNEL_LAUNCH_CHECK("reduce_thread_kernel");
    return;
  }
  using C = compute_t<T>;
  DeviceBuffer partial(static_cast<std::size_t>(chunks * out_n) * sizeof(C), out.device().index,
                       stream);
  reduce_thread_kernel<T, kMax><<<dim3(gx, static_cast<unsigned>(chunks)), kThreads, 0, stream>>>(
      out_ptr, partial.as<C>(), a_ptr, out_oc, red_oc, static_cast<uint32_t>(out_n),
      static_cast<uint32_t>(reduce_n), static_cast<uint32_t>(chunk_len));
  BLU_KERNEL_LAUNCH_CHECK("reduce_thread_kernel");
  reduce_chunks_kernel<T, kMax><<<grid_for(out_n), kThreads, 0, stream>>>(
      out_ptr, partial.as<C>(), static_cast<uint32_t>(out_n), static_cast<uint32_t>(chunks));
  BLU_KERNEL_LAUNCH_CHECK("reduce_chunks_kernel");
}

// blublas::column_sum for a contiguous f32 or bf16 [rows, cols] summed over rows (Note [blublas
// fast paths] in cuda_elementwise.cu): f32 accumulation, bf16 rounded once at the end, as the
// generic kernels do. False: not taken.
bool try_column_sum(const Tensor& out, const Tensor& a) {
  if ((a.dtype() != DType::F32 && a.dtype() != DType::BF16) || !a.is_contiguous() || a.dim() < 2) return false;
  // Reduced dims must be exactly a leading prefix of a's dims.
  int64_t split = 0;
  while (split < a.dim() && out.sizes()[static_cast<std::size_t>(split)] == 1) ++split;
  for (int64_t d = split; d < a.dim(); ++d) {
    if (out.sizes()[static_cast<std::size_t>(d)] != a.sizes()[static_cast<std::size_t>(d)]) {
      return false;
    }
  }
  int64_t rows = 1;
  for (int64_t d = 0; d < split; ++d) rows *= a.sizes()[static_cast<std::size_t>(d)];
  const int64_t cols = a.numel() / std::max<int64_t>(rows, 1);
  // One column (a whole-tensor sum) leaves blublas's column-parallel kernel one busy thread a
  // block (377 us for the Llama loss's 8.4M floats, H200): the generic split path, whose chunks
  // depend on the shape alone (a few columns stay here: the generic outer path's chunk count
  // depends on the SM count).
  if (rows < 2 || cols < 2) return false;
  std::size_t ws_bytes = 0;
  if (!blublas_ok(blublas::column_sum_workspace_size(rows, cols, &ws_bytes), "reduce(sum)")) {
    return false;
  }
  cudaStream_t stream = stream_of(out);
  DeviceBuffer ws(ws_bytes, out.device().index, stream);
  const bool bf16 = a.dtype() == DType::BF16;
  const Tensor sums = bf16 ? empty(out.sizes(), TensorOptions(DType::F32).device(out.device())) : out;
  if (!blublas_ok(blublas::column_sum(static_cast<float*>(sums.data_ptr()), a.data_ptr(), rows, cols,
                                      bf16 ? blublas::Dtype::kBF16 : blublas::Dtype::kF32, false, ws.get(),
                                      ws_bytes, stream),
                  "reduce(sum)")) {
    return false;
  }
  if (bf16) copy_(out, sums);  // one rounding to bf16
  return true;
}

}  // namespace

void reduce(ReduceOp op, const Tensor& out, const Tensor& a) {
  BLU_CHECK(out.dim() == a.dim(), "reduce (CUDA): output ", out.describe(),
            " is not the keepdim form of ", a.describe());
  if (out.numel() == 0) return;
  if (op == ReduceOp::kSum && try_column_sum(out, a)) return;
  if (op == ReduceOp::kMax) {
    BLU_CUDA_SWITCH_FLOAT(a.dtype(), T, "reduce(max)", (reduce_typed<T, true>(out, a)));
  } else {
    BLU_CUDA_SWITCH_FLOAT(a.dtype(), T, "reduce(sum)", (reduce_typed<T, false>(out, a)));
  }
}

}  // namespace blu::cuda_ops
