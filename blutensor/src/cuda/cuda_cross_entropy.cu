// CUDA cross-entropy (forward: per-row loss, log-sum-exp and validity; backward: dlogits) with
// ignore_index, any floating logits dtype and i32/i64/u16 targets. One block per row, fixed-order
// block reductions (block_reduce.cuh). Targets are not checked on the host (that would need a
// sync): a target outside [0, V) that is not ignore_index gives a NaN loss for its row, so a bad
// batch shows up in the loss instead of faulting. (blublas::cross_entropy_fused computes the mean
// loss with a uniform dloss and no lse output, a different contract: the trainer may call it
// directly; the op here keeps the per-row form that autograd needs.)
#include "cuda/block_reduce.cuh"
#include "cuda/cuda_ops.h"

namespace blu::cuda_ops {
namespace {

using namespace detail;

template <typename T> struct stats_of { using type = float; };
template <> struct stats_of<double> { using type = double; };

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
  if (threadIdx.x == 0) {
    const C l = m + log(s);
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
  const C g = static_cast<C>(dlosses[row]), l = static_cast<C>(lse[row]);
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    C v = g * exp(load_c(xr[i]) - l);
    if (i == t) v -= g;
    o[i] = store_c<T>(v);
  }
}

template <typename T, typename I>
void xent_fwd_typed(const Tensor& losses, const Tensor& lse, const Tensor& valid,
                    const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  using S = typename stats_of<T>::type;
  const int64_t vocab = logits.size(-1), n = targets.numel();
  if (n == 0) return;
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
  xent_bwd_kernel<T, I><<<static_cast<unsigned>(n), kThreads, 0, stream_of(logits)>>>(
      static_cast<T*>(dlogits.data_ptr()), static_cast<const S*>(dlosses.data_ptr()),
      static_cast<const T*>(logits.data_ptr()), static_cast<const S*>(lse.data_ptr()),
      static_cast<const I*>(targets.data_ptr()), vocab, ignore_index);
  BLU_KERNEL_LAUNCH_CHECK("xent_bwd_kernel");
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

}  // namespace

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
