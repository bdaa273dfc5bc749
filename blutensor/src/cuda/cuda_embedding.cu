// CUDA embedding forward (row gather, any weight dtype, i32/i64/u16 indices) and a deterministic
// embedding backward.
//
// Note [Deterministic embedding backward in blutensor]
// dweight[v] must be the sum of dout rows n with indices[n] == v in increasing n (the CPU order).
// f32/bf16/f16 use blublas::embedding_backward (it buckets positions by token id in a workspace
// and sums each bucket in position order; f32 accumulation), after casting the indices to i32 if
// needed; bf16/f16 results are accumulated in an f32 buffer and cast once. f64 (and any case
// blublas refuses) uses the generic path here: rank of each position among equal ids (a scan of
// the earlier positions, O(N^2 / threads): fine for the test sizes where f64 is used), counts,
// an exclusive scan, a stable scatter of positions, then one thread per (row, column) adding its
// bucket in order. Rows no index points to are zero. Indices outside [0, V) are skipped.
#include "blublas/embedding.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernel_utils.cuh"

namespace blu::cuda_ops {
namespace {

using namespace detail;

template <typename T, typename I>
__global__ void embedding_fwd_kernel(T* out, const T* weight, const I* indices, int64_t n,
                                     int64_t cols, int64_t vocab) {
  const int64_t total = n * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const int64_t v = static_cast<int64_t>(indices[r]);
    out[i] = (v >= 0 && v < vocab) ? weight[v * cols + c] : T();
  }
}

// Same, moving 16-byte words (cols * sizeof(T) a multiple of 16, pointers aligned).
template <typename I>
__global__ void embedding_fwd_vec_kernel(uint4* out, const uint4* weight, const I* indices,
                                         int64_t n, int64_t words, int64_t vocab) {
  const int64_t total = n * words;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / words, c = i % words;
    const int64_t v = static_cast<int64_t>(indices[r]);
    out[i] = (v >= 0 && v < vocab) ? weight[v * words + c] : make_uint4(0, 0, 0, 0);
  }
}

template <typename I>
__global__ void rank_kernel(int32_t* rank, int32_t* counts, const I* indices, int64_t n,
                            int64_t vocab) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t v = static_cast<int64_t>(indices[i]);
    if (v < 0 || v >= vocab) {
      rank[i] = -1;
      continue;
    }
    int32_t r = 0;
    for (int64_t j = 0; j < i; ++j) r += static_cast<int64_t>(indices[j]) == v;
    rank[i] = r;
    atomicAdd(&counts[v], 1);  // integer: the result does not depend on the order
  }
}

// Exclusive scan of counts[0, vocab) into offsets, one block: each thread scans a contiguous
// chunk, the chunk totals are scanned by thread 0.
__global__ void exclusive_scan_kernel(int32_t* offsets, const int32_t* counts, int64_t vocab) {
  __shared__ int32_t totals[kThreads];
  const int64_t chunk = (vocab + kThreads - 1) / kThreads;
  const int64_t b = threadIdx.x * chunk, e = min(vocab, b + chunk);
  int32_t s = 0;
  for (int64_t i = b; i < e; ++i) s += counts[i];
  totals[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t run = 0;
    for (int t = 0; t < kThreads; ++t) {
      const int32_t v = totals[t];
      totals[t] = run;
      run += v;
    }
  }
  __syncthreads();
  int32_t run = totals[threadIdx.x];
  for (int64_t i = b; i < e; ++i) {
    offsets[i] = run;
    run += counts[i];
  }
}

template <typename I>
__global__ void scatter_kernel(int32_t* positions, const int32_t* offsets, const int32_t* rank,
                               const I* indices, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (rank[i] < 0) continue;
    positions[offsets[static_cast<int64_t>(indices[i])] + rank[i]] = static_cast<int32_t>(i);
  }
}

template <typename T>
__global__ void bucket_sum_kernel(T* dweight, const T* dout, const int32_t* positions,
                                  const int32_t* offsets, const int32_t* counts, int64_t vocab,
                                  int64_t cols) {
  using C = compute_t<T>;
  const int64_t total = vocab * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t v = i / cols, c = i % cols;
    const int32_t b = offsets[v], cnt = counts[v];
    C s = 0;
    for (int32_t k = 0; k < cnt; ++k) s += load_c(dout[static_cast<int64_t>(positions[b + k]) * cols + c]);
    dweight[i] = store_c<T>(s);
  }
}

template <typename T, typename I>
void embedding_fwd_typed(const Tensor& out, const Tensor& weight, const Tensor& indices) {
  const int64_t n = indices.numel(), cols = weight.size(1), vocab = weight.size(0);
  if (n == 0 || cols == 0) return;
  cudaStream_t stream = stream_of(out);
  const I* idx = static_cast<const I*>(indices.data_ptr());
  if ((cols * static_cast<int64_t>(sizeof(T))) % 16 == 0 && aligned_to(out.data_ptr(), 16) &&
      aligned_to(weight.data_ptr(), 16)) {
    const int64_t words = cols * static_cast<int64_t>(sizeof(T)) / 16;
    embedding_fwd_vec_kernel<I><<<grid_for(n * words), kThreads, 0, stream>>>(
        static_cast<uint4*>(out.data_ptr()), static_cast<const uint4*>(weight.data_ptr()), idx, n,
        words, vocab);
  } else {
    embedding_fwd_kernel<T, I><<<grid_for(n * cols), kThreads, 0, stream>>>(
        static_cast<T*>(out.data_ptr()), static_cast<const T*>(weight.data_ptr()), idx, n, cols,
        vocab);
  }
  BLU_KERNEL_LAUNCH_CHECK("embedding_fwd_kernel");
}

template <typename T, typename I>
void embedding_bwd_generic(const Tensor& dweight, const Tensor& dout, const Tensor& indices) {
  const int64_t n = indices.numel(), vocab = dweight.size(0), cols = dweight.size(1);
  BLU_CHECK(n < (int64_t{1} << 31), "embedding_backward (CUDA): too many indices");
  cudaStream_t stream = stream_of(dweight);
  const int device = dweight.device().index;
  DeviceBuffer ints(static_cast<std::size_t>(2 * n + 2 * vocab + 1) * sizeof(int32_t), device,
                    stream);
  int32_t* rank = ints.as<int32_t>();
  int32_t* positions = rank + n;
  int32_t* counts = positions + n;
  int32_t* offsets = counts + vocab;
  BLU_CUDA_CHECK(cudaMemsetAsync(counts, 0, static_cast<std::size_t>(vocab) * sizeof(int32_t),
                                 stream));
  const I* idx = static_cast<const I*>(indices.data_ptr());
  if (n > 0) {
    rank_kernel<I><<<grid_for(n), kThreads, 0, stream>>>(rank, counts, idx, n, vocab);
    BLU_KERNEL_LAUNCH_CHECK("embedding rank_kernel");
  }
  exclusive_scan_kernel<<<1, kThreads, 0, stream>>>(offsets, counts, vocab);
  BLU_KERNEL_LAUNCH_CHECK("embedding exclusive_scan_kernel");
  if (n > 0) {
    scatter_kernel<I><<<grid_for(n), kThreads, 0, stream>>>(positions, offsets, rank, idx, n);
    BLU_KERNEL_LAUNCH_CHECK("embedding scatter_kernel");
  }
  bucket_sum_kernel<T><<<grid_for(vocab * cols), kThreads, 0, stream>>>(
      static_cast<T*>(dweight.data_ptr()), static_cast<const T*>(dout.data_ptr()), positions,
      offsets, counts, vocab, cols);
  BLU_KERNEL_LAUNCH_CHECK("embedding bucket_sum_kernel");
}

// blublas's deterministic backward of dout (f32, bf16 or f16) into the f32 accumulator `acc`
// ([vocab, C], contiguous), zeroed first unless `accumulate`.
bool embedding_bwd_into_f32(const Tensor& acc, const Tensor& dout, const Tensor& indices, bool accumulate) {
  blublas::Dtype bt;
  switch (dout.dtype()) {
    case DType::F32: bt = blublas::Dtype::kF32; break;
    case DType::BF16: bt = blublas::Dtype::kBF16; break;
    case DType::F16: bt = blublas::Dtype::kF16; break;
    default: return false;
  }
  const int64_t n = indices.numel(), vocab = acc.size(0), cols = acc.size(1);
  if (n == 0 || n >= (int64_t{1} << 31)) return false;
  std::size_t ws_bytes = 0;
  if (!blublas_ok(blublas::embedding_backward_workspace_size(1, n, vocab, &ws_bytes), "embedding_backward")) {
    return false;
  }
  cudaStream_t stream = stream_of(acc);
  const Device dev = acc.device();
  Tensor idx32 = indices;
  if (indices.dtype() != DType::I32) {
    idx32 = empty(indices.sizes(), TensorOptions(DType::I32).device(dev));
    copy_(idx32, indices);
  }
  if (!accumulate) BLU_CUDA_CHECK(cudaMemsetAsync(acc.data_ptr(), 0, acc.nbytes(), stream));
  DeviceBuffer ws(ws_bytes, dev.index, stream);
  DeviceBuffer flag(sizeof(int), dev.index, stream);
  BLU_CUDA_CHECK(cudaMemsetAsync(flag.get(), 0, sizeof(int), stream));
  blublas::Status st = blublas::embedding_backward(
      static_cast<float*>(acc.data_ptr()), nullptr, dout.data_ptr(),
      static_cast<const int32_t*>(idx32.data_ptr()), 1, n, cols, vocab, flag.as<int>(), bt,
      ws.get(), ws_bytes, stream);
  return blublas_ok(st, "embedding_backward");
}

bool embedding_bwd_blublas(const Tensor& dweight, const Tensor& dout, const Tensor& indices) {
  switch (dweight.dtype()) {
    case DType::F32: case DType::BF16: case DType::F16: break;
    default: return false;
  }
  if (dout.dtype() != dweight.dtype()) return false;
  const bool direct = dweight.dtype() == DType::F32;
  Tensor acc = direct ? dweight : empty(dweight.sizes(), TensorOptions(DType::F32).device(dweight.device()));
  if (!embedding_bwd_into_f32(acc, dout, indices, /*accumulate=*/false)) return false;
  if (!direct) copy_(dweight, acc);
  return true;
}

template <typename T>
void embedding_fwd_dispatch(const Tensor& out, const Tensor& weight, const Tensor& indices) {
  BLU_CUDA_SWITCH_INDEX(indices.dtype(), I, "embedding",
                        (embedding_fwd_typed<T, I>(out, weight, indices)));
}

template <typename T>
void embedding_bwd_dispatch(const Tensor& dweight, const Tensor& dout, const Tensor& indices) {
  BLU_CUDA_SWITCH_INDEX(indices.dtype(), I, "embedding_backward",
                        (embedding_bwd_generic<T, I>(dweight, dout, indices)));
}

}  // namespace

void embedding_forward(const Tensor& out, const Tensor& weight, const Tensor& indices) {
  BLU_CUDA_SWITCH_ALL(weight.dtype(), T, "embedding",
                      embedding_fwd_dispatch<T>(out, weight, indices));
}

bool embedding_backward_accumulate_f32(const Tensor& dweight, const Tensor& dout, const Tensor& indices) {
  if (dweight.dtype() != DType::F32 || !dweight.is_contiguous() || dweight.dim() != 2 || !dout.is_contiguous() ||
      dout.numel() != indices.numel() * dweight.size(1) || !indices.is_contiguous())
    return false;
  return embedding_bwd_into_f32(dweight, dout, indices, /*accumulate=*/true);
}

void embedding_backward(const Tensor& dweight, const Tensor& dout, const Tensor& indices) {
  if (dweight.numel() == 0) return;
  if (embedding_bwd_blublas(dweight, dout, indices)) return;
  BLU_CUDA_SWITCH_FLOAT(dweight.dtype(), T, "embedding_backward",
                        embedding_bwd_dispatch<T>(dweight, dout, indices));
}

}  // namespace blu::cuda_ops
