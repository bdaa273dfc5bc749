// CUDA cross-entropy (forward: per-row loss, log-sum-exp and validity; backward: dlogits) with
// ignore_index, any floating logits dtype and i32/i64/u16 targets. One block per row, fixed-order
// block reductions (block_reduce.cuh). Targets are not checked on the host (that would need a
// sync): a target outside [0, V) that is not ignore_index gives a NaN loss for its row, so a bad
// batch shows up in the loss instead of faulting. (blublas::cross_entropy_fused computes the mean
// loss with a uniform dloss and no lse output, a different contract: the trainer may call it
// directly; the op here keeps the per-row form that autograd needs.)
#include <type_traits>

#include "blublas/cross_entropy.h"
#include "blutensor/env_switch.h"
#include "cuda/block_reduce.cuh"
#include "cuda/cuda_ops.h"

namespace blu::cuda_ops {
namespace {

using namespace detail;

template <typename T> struct stats_of { using type = float; };
template <> struct stats_of<double> { using type = double; };

// A row's forward results from its log-sum-exp l (thread 0 of the row's block): lse, and loss and
// validity by its target (ignored: 0, 0; out of range: NaN, 1).
template <typename T, typename S, typename C, typename I>
__device__ __forceinline__ void write_row_loss(S* losses, S* lse, S* valid, int64_t row, C l, const T* xr,
                                               const I* targets, int64_t vocab, int64_t ignore_index) {
  lse[row] = static_cast<S>(l);
  const int64_t t = static_cast<int64_t>(targets[row]);
  if (t == ignore_index) {
    losses[row] = S(0);
    valid[row] = S(0);
  } else if (t < 0 || t >= vocab) {
    losses[row] = static_cast<S>(NAN);
    valid[row] = S(1);
  } else {
    losses[row] = static_cast<S>(l - load_c(xr[t]));
    valid[row] = S(1);
  }
}

template <typename T, typename I>
__global__ void xent_fwd_kernel(typename stats_of<T>::type* losses, typename stats_of<T>::type* lse,
                                typename stats_of<T>::type* valid, const T* logits,
                                const I* targets, int64_t vocab, int64_t ignore_index) {
  using C = compute_t<T>;
  using S = typename stats_of<T>::type;
  __shared__ C scratch[kThreads / 32];
  const int64_t row = blockIdx.x;
  const T* xr = logits + row * vocab;
  C m = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const C v = load_c(xr[i]);
    m = v > m ? v : m;
  }
  m = block_max(m, scratch);
  C s = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) s += exp(load_c(xr[i]) - m);
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) write_row_loss<T, S, C>(losses, lse, valid, row, m + log(s), xr, targets, vocab, ignore_index);
}

template <typename T, typename I>
__global__ void xent_bwd_kernel(T* dlogits, const typename stats_of<T>::type* dlosses,
                                const T* logits, const typename stats_of<T>::type* lse,
                                const I* targets, int64_t vocab, int64_t ignore_index) {
  using C = compute_t<T>;
  const int64_t row = blockIdx.x;
  T* o = dlogits + row * vocab;
  const int64_t t = static_cast<int64_t>(targets[row]);
  if (t == ignore_index) {
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) o[i] = store_c<T>(C(0));
    return;
  }
  const T* xr = logits + row * vocab;
  const C g = dlosses ? static_cast<C>(dlosses[row]) : C(1), l = static_cast<C>(lse[row]);
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    C v = g * exp(load_c(xr[i]) - l);
    if (i == t) v -= g;
    o[i] = store_c<T>(v);
  }
}

// Note [Vectorized cross-entropy rows]
// The row kernels above read one element per thread per step and the forward reads its row twice
// (max, then sum): on the H100 a bf16 GPT-2 step's chunks of [2624, 50304] logits took 210 us
// forward and 441 us backward each (1.2-1.3 TB/s of 3.0; session 18, compiled / autograd engines:
// 4.0 ms of the step against the fused engine's 1.2 ms for the same bytes through blublas). For
// 16- and 32-bit logits whose rows are whole 16-byte vectors (vocab % (16 / sizeof(T)) == 0, the
// base 16-byte aligned; GPT-2's 50304), these read (and the backward writes) 16 bytes per thread
// per step, and the forward makes one pass: each thread keeps a running (max, sum) and rescales
// its sum when its max grows, then the block takes the max of the maxima and the sum of the
// rescaled sums (fixed trees, so the bits are the same on every run). Other rows keep the kernels
// above. Predicted: ~100 and ~220 us a chunk (2.5-2.6 TB/s).
template <typename T>
constexpr int kXentVec = 16 / static_cast<int>(sizeof(T));

template <typename T>
__device__ __forceinline__ void load_xent_vec(const T* p, float (&v)[kXentVec<T>]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
  for (int i = 0; i < kXentVec<T>; ++i) v[i] = load_c(e[i]);
}

// A row's log-sum-exp from its whole 16-byte vectors (every thread of the block gets it).
template <typename T>
__device__ __forceinline__ float row_lse_vec(const T* xr, int64_t vocab, float* scratch) {
  constexpr int V = kXentVec<T>;
  float m = -INFINITY, s = 0.0f;
  for (int64_t p = threadIdx.x; p < vocab / V; p += kThreads) {
    float v[V];
    load_xent_vec<T>(xr + p * V, v);
    float pm = v[0];
#pragma unroll
    for (int i = 1; i < V; ++i) pm = fmaxf(pm, v[i]);
    if (pm > m) {  // rescale the running sum to the new max (m = -inf: s is 0)
      s = m == -INFINITY ? 0.0f : s * expf(m - pm);
      m = pm;
    }
    if (m != -INFINITY) {
#pragma unroll
      for (int i = 0; i < V; ++i) s += expf(v[i] - m);
    }
  }
  const float bm = block_max(m, scratch);
  const float mine = (m == -INFINITY || bm == -INFINITY) ? 0.0f : s * expf(m - bm);
  return bm + logf(block_sum(mine, scratch));
}

// A row's gradient g * (softmax - onehot(t)) from its log-sum-exp l, whole 16-byte vectors (0 if
// ignored). o may be xr.
template <typename T>
__device__ __forceinline__ void write_row_grad_vec(T* o, const T* xr, int64_t vocab, int64_t t, bool ignored,
                                                   float g, float l) {
  constexpr int V = kXentVec<T>;
  for (int64_t p = threadIdx.x; p < vocab / V; p += kThreads) {
    float v[V];
    load_xent_vec<T>(xr + p * V, v);
    uint4 u;
    T* e = reinterpret_cast<T*>(&u);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      float d = ignored ? 0.0f : g * expf(v[i] - l);
      if (p * V + i == t) d -= g;
      e[i] = store_c<T>(d);
    }
    *reinterpret_cast<uint4*>(o + p * V) = u;
  }
}

template <typename T, typename I>
__global__ void xent_fwd_vec_kernel(float* losses, float* lse, float* valid, const T* logits,
                                    const I* targets, int64_t vocab, int64_t ignore_index) {
  __shared__ float scratch[kThreads / 32];
  const int64_t row = blockIdx.x;
  const T* xr = logits + row * vocab;
  const float l = row_lse_vec<T>(xr, vocab, scratch);
  if (threadIdx.x == 0) write_row_loss<T, float, float>(losses, lse, valid, row, l, xr, targets, vocab, ignore_index);
}

template <typename T, typename I>
__global__ void xent_bwd_vec_kernel(T* dlogits, const float* dlosses, const T* logits, const float* lse,
                                    const I* targets, int64_t vocab, int64_t ignore_index) {
  const int64_t row = blockIdx.x;
  const int64_t t = static_cast<int64_t>(targets[row]);
  const bool ignored = t == ignore_index;
  const float g = ignored ? 0.0f : (dlosses ? dlosses[row] : 1.0f);
  write_row_grad_vec<T>(dlogits + row * vocab, logits + row * vocab, vocab, t, ignored, g, lse[row]);
}

// Note [Cross-entropy in one pass]
// linear_cross_entropy computes each chunk's loss and its unscaled gradient (dlosses = 1) in place
// one after the other (Note [Linear cross-entropy]): xent_fwd_vec_kernel read the [2624, 50304]
// bf16 chunk once (91 us) and xent_bwd_vec_kernel read it again and wrote it (166 us): 1.80 ms of
// a d12 bf16 B16 step on the H100 against the fused engine's 1.19 ms for one streamed pass
// (session 19). This kernel is the two kernels' bodies back to back in one block per row: the
// forward's pass over the row, its block reductions, then the backward's pass over the same row,
// which the block read a moment before, meant to come from L2 so that HBM sees one read and one
// write. Measured (H100, d12 bf16 B16, 7 chunks a step): 1.76 ms a step (baceddc) against the two
// kernels' 1.80: no gain. Not the L2: a version that let only 2 blocks share a SM (unused dynamic
// shared memory; ~26 MB of rows in flight instead of ~105) with 4 vector loads in flight a thread
// measured 1.75 ms (8a36f7b) and was dropped. 250 us a chunk is 2.1 TB/s for one read and one
// write; the fused engine's streamed kernel (blublas, TMA bulk copies into a shared-memory ring)
// does the same rows at ~190 us. What is kept: one launch a chunk instead of two and no buffer of
// ones (2 launches a step fewer), the same bits. The arithmetic and the order are the two kernels' (per-thread running max / sum over
// the same vectors, the same block trees, g = 1), so losses, lse and the gradient are the same
// bits as the two launches give. In place: the target's logit, which the loss needs, is read
// before the block's first barrier, so before any thread writes. Rows that are not whole aligned
// 16-byte vectors run the two kernels. (Predicted: -0.6 ms a bf16 step; measured -0.04, above.)
template <typename T, typename I>
__global__ void xent_fwd_bwd_vec_kernel(float* losses, float* lse, float* valid, T* dlogits, const T* logits,
                                        const I* targets, int64_t vocab, int64_t ignore_index) {
  __shared__ float scratch[kThreads / 32];
  const int64_t row = blockIdx.x;
  const T* xr = logits + row * vocab;
  const int64_t t = static_cast<int64_t>(targets[row]);
  const bool ignored = t == ignore_index;
  // The target's logit before any write (dlogits may be logits): row_lse_vec's barriers follow.
  const float xt = threadIdx.x == 0 && !ignored && t >= 0 && t < vocab ? load_c(xr[t]) : 0.0f;
  const float l = row_lse_vec<T>(xr, vocab, scratch);
  if (threadIdx.x == 0) {
    lse[row] = l;
    losses[row] = ignored ? 0.0f : (t < 0 || t >= vocab) ? NAN : l - xt;
    valid[row] = ignored ? 0.0f : 1.0f;
  }
  write_row_grad_vec<T>(dlogits + row * vocab, xr, vocab, t, ignored, ignored ? 0.0f : 1.0f, l);
}

// Whether the rows of `t` ([rows, vocab], contiguous) are whole aligned 16-byte vectors.
template <typename T>
bool xent_vec_ok(const Tensor& t, int64_t vocab) {
  if constexpr (sizeof(T) > 4) {
    return false;
  } else {
    return vocab % kXentVec<T> == 0 && reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0;
  }
}

template <typename T, typename I>
void xent_fwd_typed(const Tensor& losses, const Tensor& lse, const Tensor& valid,
                    const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  using S = typename stats_of<T>::type;
  const int64_t vocab = logits.size(-1), n = targets.numel();
  if (n == 0) return;
  if constexpr (std::is_same_v<S, float>) {
    if (xent_vec_ok<T>(logits, vocab)) {  // Note [Vectorized cross-entropy rows]
      xent_fwd_vec_kernel<T, I><<<static_cast<unsigned>(n), kThreads, 0, stream_of(logits)>>>(
          static_cast<float*>(losses.data_ptr()), static_cast<float*>(lse.data_ptr()),
          static_cast<float*>(valid.data_ptr()), static_cast<const T*>(logits.data_ptr()),
          static_cast<const I*>(targets.data_ptr()), vocab, ignore_index);
      BLU_KERNEL_LAUNCH_CHECK("xent_fwd_vec_kernel");
      return;
    }
  }
  xent_fwd_kernel<T, I><<<static_cast<unsigned>(n), kThreads, 0, stream_of(logits)>>>(
      static_cast<S*>(losses.data_ptr()), static_cast<S*>(lse.data_ptr()),
      static_cast<S*>(valid.data_ptr()), static_cast<const T*>(logits.data_ptr()),
      static_cast<const I*>(targets.data_ptr()), vocab, ignore_index);
  BLU_KERNEL_LAUNCH_CHECK("xent_fwd_kernel");
}

template <typename T, typename I>
void xent_bwd_typed(const Tensor& dlogits, const Tensor& dlosses, const Tensor& logits,
                    const Tensor& lse, const Tensor& targets, int64_t ignore_index) {
  using S = typename stats_of<T>::type;
  const int64_t vocab = logits.size(-1), n = targets.numel();
  if (n == 0) return;
  if constexpr (std::is_same_v<S, float>) {
    if (xent_vec_ok<T>(logits, vocab) && xent_vec_ok<T>(dlogits, vocab)) {  // Note [Vectorized cross-entropy rows]
      xent_bwd_vec_kernel<T, I><<<static_cast<unsigned>(n), kThreads, 0, stream_of(logits)>>>(
          static_cast<T*>(dlogits.data_ptr()), dlosses.defined() ? static_cast<const float*>(dlosses.data_ptr()) : nullptr,
          static_cast<const T*>(logits.data_ptr()), static_cast<const float*>(lse.data_ptr()),
          static_cast<const I*>(targets.data_ptr()), vocab, ignore_index);
      BLU_KERNEL_LAUNCH_CHECK("xent_bwd_vec_kernel");
      return;
    }
  }
  xent_bwd_kernel<T, I><<<static_cast<unsigned>(n), kThreads, 0, stream_of(logits)>>>(
      static_cast<T*>(dlogits.data_ptr()), dlosses.defined() ? static_cast<const S*>(dlosses.data_ptr()) : nullptr,
      static_cast<const T*>(logits.data_ptr()), static_cast<const S*>(lse.data_ptr()),
      static_cast<const I*>(targets.data_ptr()), vocab, ignore_index);
  BLU_KERNEL_LAUNCH_CHECK("xent_bwd_kernel");
}

// Note [Streamed cross-entropy rows]
// The one-pass op's chunks of GPT-2 logits ([2624, 50304] bf16 in the compiled d12 B16 step) ran
// xent_fwd_bwd_vec_kernel at ~250 us a chunk, 1.76 ms a step, against 1.18 ms for the same rows
// through blublas's streamed kernel in the fused engine (session 20's profiles; Note [Cross-entropy
// in one pass] found the vector kernel's limit in its two dependent passes per row, not in HBM).
// blublas::cross_entropy_rows is that streamed kernel with this op's contract: per-row loss
// (NaN for a bad target), lse, valid and the unscaled gradient (dloss = 1), in place. Taken for
// f32 / bf16 logits with i32 targets, rows of 32 KiB and more (where blublas streams them; shorter
// rows keep this file's kernels and their bits) on sm_90 and newer, contiguous and 16-byte
// aligned; BLU_XENT_STREAMED=0 keeps this file's kernels for A/B. Bits: blublas's exp (bf16:
// ex2.approx on a folded exponent) and its order of the row sums differ from the vector kernel's,
// within the tolerances of cuda_kernels_gpu_test's float64 reference; the autograd, captured and
// compiled steps all call this op, so they still agree with each other bit for bit. A bad target's
// gradient row is 0 here (the vector kernel wrote the softmax): its loss is NaN either way.
// Predicted: -0.55 ms a compiled bf16 d12 B16 step on the H100.
template <typename T, typename I>
bool xent_fwd_bwd_blublas(const Tensor& losses, const Tensor& lse, const Tensor& valid, const Tensor& dlogits,
                          const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  if constexpr (!(std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16>) || !std::is_same_v<I, int32_t>) {
    return false;
  } else {
    static const bool enabled = env_switch_on("BLU_XENT_STREAMED");
    const int64_t vocab = logits.size(-1), n = targets.numel();
    const auto aligned = [](const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0; };
    if (!enabled || vocab * static_cast<int64_t>(sizeof(T)) < 32768 || sm_major() < 9) return false;
    if (!logits.is_contiguous() || !dlogits.is_contiguous() || !targets.is_contiguous() || !losses.is_contiguous() ||
        !lse.is_contiguous() || !valid.is_contiguous() || !aligned(logits) || !aligned(dlogits))
      return false;
    if (ignore_index < INT32_MIN || ignore_index > INT32_MAX) return false;
    std::size_t ws_bytes = 0;
    if (!blublas_ok(blublas::cross_entropy_workspace_size(n, &ws_bytes), "cross_entropy_forward_backward"))
      return false;
    cudaStream_t stream = stream_of(logits);
    DeviceBuffer ws(ws_bytes, logits.device().index, stream);
    const blublas::Status st = blublas::cross_entropy_rows(
        static_cast<float*>(losses.data_ptr()), static_cast<float*>(lse.data_ptr()),
        static_cast<float*>(valid.data_ptr()), dlogits.data_ptr(), logits.data_ptr(),
        static_cast<const int32_t*>(targets.data_ptr()), n, vocab, static_cast<int>(ignore_index), 1.0f,
        std::is_same_v<T, float> ? blublas::Dtype::kF32 : blublas::Dtype::kBF16, ws.get(), ws_bytes, stream);
    return blublas_ok(st, "cross_entropy_forward_backward");
  }
}

// Note [Cross-entropy in one pass]: one kernel for whole aligned vector rows, else the two.
template <typename T, typename I>
void xent_fwd_bwd_typed(const Tensor& losses, const Tensor& lse, const Tensor& valid, const Tensor& dlogits,
                        const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  const int64_t vocab = logits.size(-1), n = targets.numel();
  if (n == 0) return;
  if (xent_fwd_bwd_blublas<T, I>(losses, lse, valid, dlogits, logits, targets, ignore_index)) return;
  if constexpr (std::is_same_v<typename stats_of<T>::type, float>) {
    if (xent_vec_ok<T>(logits, vocab) && xent_vec_ok<T>(dlogits, vocab)) {
      xent_fwd_bwd_vec_kernel<T, I><<<static_cast<unsigned>(n), kThreads, 0, stream_of(logits)>>>(
          static_cast<float*>(losses.data_ptr()), static_cast<float*>(lse.data_ptr()),
          static_cast<float*>(valid.data_ptr()), static_cast<T*>(dlogits.data_ptr()),
          static_cast<const T*>(logits.data_ptr()), static_cast<const I*>(targets.data_ptr()), vocab, ignore_index);
      BLU_KERNEL_LAUNCH_CHECK("xent_fwd_bwd_vec_kernel");
      return;
    }
  }
  xent_fwd_typed<T, I>(losses, lse, valid, logits, targets, ignore_index);
  xent_bwd_typed<T, I>(dlogits, Tensor(), logits, lse, targets, ignore_index);
}

template <typename T>
void xent_fwd_dispatch(const Tensor& losses, const Tensor& lse, const Tensor& valid,
                       const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  BLU_CUDA_SWITCH_INDEX(targets.dtype(), I, "cross_entropy",
                        (xent_fwd_typed<T, I>(losses, lse, valid, logits, targets, ignore_index)));
}

template <typename T>
void xent_bwd_dispatch(const Tensor& dlogits, const Tensor& dlosses, const Tensor& logits,
                       const Tensor& lse, const Tensor& targets, int64_t ignore_index) {
  BLU_CUDA_SWITCH_INDEX(targets.dtype(), I, "cross_entropy_backward",
                        (xent_bwd_typed<T, I>(dlogits, dlosses, logits, lse, targets,
                                              ignore_index)));
}

template <typename T>
void xent_fwd_bwd_dispatch(const Tensor& losses, const Tensor& lse, const Tensor& valid, const Tensor& dlogits,
                           const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  BLU_CUDA_SWITCH_INDEX(targets.dtype(), I, "cross_entropy_forward_backward",
                        (xent_fwd_bwd_typed<T, I>(losses, lse, valid, dlogits, logits, targets, ignore_index)));
}

}  // namespace

void cross_entropy_forward_backward(const Tensor& losses, const Tensor& lse, const Tensor& valid,
                                    const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                    int64_t ignore_index) {
  BLU_CUDA_SWITCH_FLOAT(logits.dtype(), T, "cross_entropy_forward_backward",
                        xent_fwd_bwd_dispatch<T>(losses, lse, valid, dlogits, logits, targets, ignore_index));
}

void cross_entropy_forward(const Tensor& losses, const Tensor& lse, const Tensor& valid,
                           const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  BLU_CUDA_SWITCH_FLOAT(logits.dtype(), T, "cross_entropy",
                        xent_fwd_dispatch<T>(losses, lse, valid, logits, targets, ignore_index));
}

void cross_entropy_backward(const Tensor& dlogits, const Tensor& dlosses, const Tensor& logits,
                            const Tensor& lse, const Tensor& targets, int64_t ignore_index) {
  BLU_CUDA_SWITCH_FLOAT(logits.dtype(), T, "cross_entropy_backward",
                        xent_bwd_dispatch<T>(dlogits, dlosses, logits, lse, targets,
                                             ignore_index));
}

}  // namespace blu::cuda_ops
