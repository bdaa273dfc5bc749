// CUDA copy_ (strided copies, contiguous(), dtype casts between all seven dtypes, and copies
// between the CPU and CUDA devices) and fill_. Same-device work is one launch_map
// (elementwise_engine.cuh); a same-dtype contiguous copy is a cudaMemcpyAsync.
//
// Note [Cross-device copies]
// CPU <-> CUDA and CUDA <-> CUDA(other) copies move contiguous bytes of one dtype; any cast or
// re-striding happens on the side where it is cheapest to express (on the GPU for CUDA sources,
// on the CPU for CPU sources) through a contiguous staging tensor. Host-to-device uses the
// destination's current stream (pageable memory is staged by the driver before the call returns);
// device-to-host synchronises the source's current stream before returning (the caller reads the
// host memory next). Peer copies wait for the source stream through an event, never the host.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cpu/cpu_ops.h"
#include "cuda/cuda_ops.h"
#include "cuda/elementwise_engine.cuh"

namespace blu::cuda_ops {
namespace detail {

namespace {
// A device attribute of the current device, cached for devices 0-63 (others are asked each time).
int cached_attribute(cudaDeviceAttr attr, std::atomic<int>* cache) {
  const int device = cuda::current_device();
  int v = device < 64 ? cache[device].load(std::memory_order_relaxed) : 0;
  if (v == 0) {
    BLU_CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, device));
    if (device < 64) cache[device].store(v, std::memory_order_relaxed);
  }
  return v;
}
}  // namespace

int sm_count() {
  static std::atomic<int> cache[64] = {};
  return cached_attribute(cudaDevAttrMultiProcessorCount, cache);
}

int sm_major() {
  static std::atomic<int> cache[64] = {};
  return cached_attribute(cudaDevAttrComputeCapabilityMajor, cache);
}

namespace {
std::atomic<int64_t> g_blublas_fallbacks{0};
}

bool blublas_ok(const blublas::Status& status, const char* op) {
  if (status.ok()) return true;
  g_blublas_fallbacks.fetch_add(1, std::memory_order_relaxed);
  const char* env = std::getenv("BLU_CUDA_OPS_LOG");
  if (env != nullptr && std::strcmp(env, "1") == 0) {
    std::fprintf(stderr, "cuda_ops: %s: blublas refused, generic kernel runs: %s\n", op,
                 status.to_string().c_str());
  }
  return false;
}

int64_t blublas_fallback_count() { return g_blublas_fallbacks.load(std::memory_order_relaxed); }

}  // namespace detail

namespace {

using namespace detail;

template <typename D, typename S>
struct CastFn {
  __device__ __forceinline__ D operator()(S x) const { return convert<D, S>(x); }
};

template <typename T>
struct FillFn {
  double value;
  __device__ __forceinline__ T operator()() const { return convert<T, double>(value); }
};

template <typename S>
void copy_from(const Tensor& dst, const Tensor& src) {
  BLU_CUDA_SWITCH_ALL(dst.dtype(), D, "copy_",
                      (launch_map<D, S, 1>(dst, {&src}, CastFn<D, S>{}, "copy_")));
}

// Same device: any strides, any dtypes.
void copy_same_device(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous() &&
      dst.sizes() == src.sizes()) {
    if (dst.data_ptr() == src.data_ptr()) return;
    BLU_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(),
                                   cudaMemcpyDeviceToDevice, stream_of(dst)));
    return;
  }
  BLU_CUDA_SWITCH_ALL(src.dtype(), S, "copy_", copy_from<S>(dst, src));
}

bool plain_bytes(const Tensor& dst, const Tensor& src) {
  return dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous() &&
         dst.sizes() == src.sizes();
}

void copy_host_to_device(const Tensor& dst, const Tensor& src) {
  if (plain_bytes(dst, src)) {
    BLU_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(),
                                   cudaMemcpyHostToDevice, stream_of(dst)));
    return;
  }
  Tensor host = empty(src.sizes(), TensorOptions(src.dtype()));
  cpu_ops::copy_(host, src);
  Tensor dev = empty(src.sizes(), TensorOptions(src.dtype()).device(dst.device()));
  BLU_CUDA_CHECK(cudaMemcpyAsync(dev.data_ptr(), host.data_ptr(), host.nbytes(),
                                 cudaMemcpyHostToDevice, stream_of(dst)));
  copy_same_device(dst, dev);
}

void copy_device_to_host(const Tensor& dst, const Tensor& src) {
  cudaStream_t stream = stream_of(src);
  if (plain_bytes(dst, src)) {
    BLU_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(),
                                   cudaMemcpyDeviceToHost, stream));
    BLU_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  Tensor dev = empty(src.sizes(), TensorOptions(dst.dtype()).device(src.device()));
  copy_same_device(dev, src);
  Tensor host = empty(src.sizes(), TensorOptions(dst.dtype()));
  BLU_CUDA_CHECK(cudaMemcpyAsync(host.data_ptr(), dev.data_ptr(), dev.nbytes(),
                                 cudaMemcpyDeviceToHost, stream));
  BLU_CUDA_CHECK(cudaStreamSynchronize(stream));
  cpu_ops::copy_(dst, host);
}

void copy_device_to_device(const Tensor& dst, const Tensor& src) {
  const int src_dev = src.device().index, dst_dev = dst.device().index;
  Tensor staged = src;
  if (!src.is_contiguous() || src.dtype() != dst.dtype()) {
    cuda::DeviceGuard guard(src_dev);
    staged = empty(src.sizes(), TensorOptions(dst.dtype()).device(src.device()));
    copy_same_device(staged, src);
  }
  const bool direct = dst.is_contiguous();
  Tensor target = direct ? dst : empty(dst.sizes(), TensorOptions(dst.dtype()).device(dst.device()));
  cudaStream_t src_stream = cuda::current_stream(src_dev);
  cudaStream_t dst_stream = cuda::current_stream(dst_dev);
  cudaEvent_t ready = nullptr;
  {
    cuda::DeviceGuard guard(src_dev);
    BLU_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    BLU_CUDA_CHECK(cudaEventRecord(ready, src_stream));
  }
  cudaError_t err = cudaStreamWaitEvent(dst_stream, ready, 0);
  if (err == cudaSuccess) {
    err = cudaMemcpyPeerAsync(target.data_ptr(), dst_dev, staged.data_ptr(), src_dev,
                              staged.nbytes(), dst_stream);
  }
  (void)cudaEventDestroy(ready);
  BLU_CUDA_CHECK(err);
  // The staging tensor lives on the source device and is read on the destination stream.
  if (!staged.is_same(src) && staged.storage()) {
    cuda::CachingAllocator::get().record_stream(staged.storage()->data(), dst_stream);
  }
  if (!direct) copy_same_device(dst, target);
}

// src's shape broadcasts to dst's (NumPy rules, src not longer than dst).
bool broadcasts_to(const Shape& src, const Shape& dst) {
  if (src.size() > dst.size()) return false;
  const std::size_t off = dst.size() - src.size();
  for (std::size_t d = 0; d < src.size(); ++d) {
    if (src[d] != 1 && src[d] != dst[d + off]) return false;
  }
  return true;
}

}  // namespace

void copy_(const Tensor& dst, const Tensor& src) {
  const Device dd = dst.device(), sd = src.device();
  const bool same_device = dd == sd;
  BLU_CHECK(dst.sizes() == src.sizes() || (same_device && broadcasts_to(src.sizes(), dst.sizes())),
            "copy_ (CUDA): shapes differ: dst ", dst.describe(), ", src ", src.describe());
  if (dst.numel() == 0) return;
  if (dd.is_cuda() && sd.is_cuda()) {
    if (dd.index == sd.index) {
      cuda::DeviceGuard guard(dd.index);
      copy_same_device(dst, src);
    } else {
      cuda::DeviceGuard guard(dd.index);
      copy_device_to_device(dst, src);
    }
  } else if (dd.is_cuda()) {
    cuda::DeviceGuard guard(dd.index);
    copy_host_to_device(dst, src);
  } else if (sd.is_cuda()) {
    cuda::DeviceGuard guard(sd.index);
    copy_device_to_host(dst, src);
  } else {
    cpu_ops::copy_(dst, src);
  }
}

void fill_(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  BLU_CUDA_SWITCH_ALL(dst.dtype(), T, "fill_",
                      (launch_map<T, T, 0>(dst, {nullptr}, FillFn<T>{value}, "fill_")));
}

}  // namespace blu::cuda_ops
