// cuda_multi_tensor.cu: the CUDA backend's multi-tensor optimizer kernels (backend_ops.def):
// global_norm through blublas::grad_global_norm (f32 or bf16 lists: deterministic two-stage sum,
// clip coefficient written on the device) and scale_tensors_, blutensor's own multi-tensor kernel
// (Note [Multi-tensor scale]). Nothing synchronises the host.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <type_traits>
#include <vector>

#include "blublas/adamw.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernel_utils.cuh"

namespace blu::cuda_ops {
namespace {

using namespace detail;

// Note [Multi-tensor scale]
// One launch multiplies up to kScaleTensorsPerLaunch tensors of one dtype by a device scalar: the
// host packs pointers, sizes and a prefix of block counts into a __grid_constant__ kernel
// parameter (~7 KB); each block owns kScaleElemsPerBlock consecutive elements of one tensor,
// found by a binary search over the prefix, and each thread issues all its loads before its
// stores (kScaleElemsPerThread in flight) to keep the memory system busy.
constexpr int kScaleTensorsPerLaunch = 256;
constexpr int kScaleElemsPerThread = 16;
constexpr int64_t kScaleElemsPerBlock = int64_t{kThreads} * kScaleElemsPerThread;

// One launch's tensors (the cast's sources too; src is unused by the scale kernel).
struct TensorTable {
  int count;
  int block_start[kScaleTensorsPerLaunch + 1];
  void* data[kScaleTensorsPerLaunch];
  const void* src[kScaleTensorsPerLaunch];
  int64_t numel[kScaleTensorsPerLaunch];
};

// The tensor of a multi-tensor table this block works on: the largest t with block_start[t] <=
// blockIdx.x.
__device__ __forceinline__ int table_entry(const TensorTable& tab) {
  int lo = 0, hi = tab.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tab.block_start[mid] <= static_cast<int>(blockIdx.x)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Packs tensors 0 .. count-1 (entry(i, &data, &src, &numel)) into tables of at most
// kScaleTensorsPerLaunch tensors and calls launch(table, blocks) for each.
template <class Entry, class Launch>
void launch_tables(std::size_t count, Entry entry, Launch launch, const char* what) {
  TensorTable tab{};
  int64_t blocks = 0;
  auto flush = [&] {
    if (tab.count == 0) return;
    tab.block_start[tab.count] = static_cast<int>(blocks);
    launch(tab, static_cast<unsigned>(blocks));
    BLU_KERNEL_LAUNCH_CHECK(what);
    tab = TensorTable{};
    blocks = 0;
  };
  for (std::size_t i = 0; i < count; ++i) {
    void* data = nullptr;
    const void* src = nullptr;
    int64_t n = 0;
    entry(i, &data, &src, &n);
    if (n == 0) continue;
    const int64_t need = (n + kScaleElemsPerBlock - 1) / kScaleElemsPerBlock;
    if (tab.count == kScaleTensorsPerLaunch || blocks + need > int64_t{INT32_MAX}) flush();
    BLU_CHECK(need <= int64_t{INT32_MAX}, what, " (CUDA): a tensor of ", n, " elements is too large");
    tab.block_start[tab.count] = static_cast<int>(blocks);
    tab.data[tab.count] = data;
    tab.src[tab.count] = src;
    tab.numel[tab.count] = n;
    ++tab.count;
    blocks += need;
  }
  flush();
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    scale_tensors_kernel(const __grid_constant__ TensorTable tab, const float* __restrict__ factor) {
  using C = compute_t<T>;
  const int lo = table_entry(tab);
  T* __restrict__ x = static_cast<T*>(tab.data[lo]);
  const int64_t n = tab.numel[lo];
  const int64_t start =
      static_cast<int64_t>(blockIdx.x - tab.block_start[lo]) * kScaleElemsPerBlock;
  const C f = static_cast<C>(*factor);
  C v[kScaleElemsPerThread];
#pragma unroll
  for (int j = 0; j < kScaleElemsPerThread; ++j) {
    const int64_t e = start + static_cast<int64_t>(j) * kThreads + threadIdx.x;
    v[j] = e < n ? load_c(x[e]) : C(0);
  }
#pragma unroll
  for (int j = 0; j < kScaleElemsPerThread; ++j) {
    const int64_t e = start + static_cast<int64_t>(j) * kThreads + threadIdx.x;
    if (e < n) x[e] = store_c<T>(v[j] * f);
  }
}

template <typename T>
void scale_list(const std::vector<const Tensor*>& ts, const float* factor, cudaStream_t stream) {
  launch_tables(
      ts.size(),
      [&](std::size_t i, void** data, const void**, int64_t* n) {
        *data = ts[i]->data_ptr();
        *n = ts[i]->numel();
      },
      [&](const TensorTable& tab, unsigned blocks) {
        scale_tensors_kernel<T><<<blocks, kThreads, 0, stream>>>(tab, factor);
      },
      "scale_tensors_kernel");
}

// Note [Multi-tensor cast] (ops/multi_cast.cpp) on CUDA: the scale kernel's tables with a source
// per tensor: each block converts kScaleElemsPerBlock consecutive elements of one pair, loads
// before stores.
template <typename D, typename S>
__global__ void __launch_bounds__(kThreads) copy_tensors_kernel(const __grid_constant__ TensorTable tab) {
  const int lo = table_entry(tab);
  D* __restrict__ y = static_cast<D*>(tab.data[lo]);
  const S* __restrict__ x = static_cast<const S*>(tab.src[lo]);
  const int64_t n = tab.numel[lo];
  const int64_t start = static_cast<int64_t>(blockIdx.x - tab.block_start[lo]) * kScaleElemsPerBlock;
  using C = std::conditional_t<std::is_same_v<D, double> || std::is_same_v<S, double>, double, float>;
  C v[kScaleElemsPerThread];
#pragma unroll
  for (int j = 0; j < kScaleElemsPerThread; ++j) {
    const int64_t e = start + static_cast<int64_t>(j) * kThreads + threadIdx.x;
    v[j] = e < n ? static_cast<C>(load_c(x[e])) : C(0);
  }
#pragma unroll
  for (int j = 0; j < kScaleElemsPerThread; ++j) {
    const int64_t e = start + static_cast<int64_t>(j) * kThreads + threadIdx.x;
    if (e < n) y[e] = store_c<D>(static_cast<compute_t<D>>(v[j]));
  }
}

template <typename D, typename S>
void copy_list(const std::vector<Tensor>& dsts, const std::vector<Tensor>& srcs, cudaStream_t stream) {
  launch_tables(
      dsts.size(),
      [&](std::size_t i, void** data, const void** src, int64_t* n) {
        *data = dsts[i].data_ptr();
        *src = srcs[i].data_ptr();
        *n = dsts[i].numel();
      },
      [&](const TensorTable& tab, unsigned blocks) { copy_tensors_kernel<D, S><<<blocks, kThreads, 0, stream>>>(tab); },
      "copy_tensors_kernel");
}

template <typename D>
void copy_list_from(const std::vector<Tensor>& dsts, const std::vector<Tensor>& srcs, cudaStream_t stream) {
  BLU_CUDA_SWITCH_FLOAT(srcs[0].dtype(), S, "copy_tensors_", copy_list<D, S>(dsts, srcs, stream));
}

blublas::Dtype blublas_grad_dtype(DType d) {
  return d == DType::F32 ? blublas::Dtype::kF32 : blublas::Dtype::kBF16;
}

}  // namespace

bool global_norm(const Tensor& norm, const Tensor& clip_coef, const std::vector<Tensor>& tensors,
                 double max_norm) {
  if (tensors.empty()) return false;
  const DType dt = tensors[0].dtype();
  if (dt != DType::F32 && dt != DType::BF16) return false;
  std::vector<blublas::AdamWTensor> descs;
  descs.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    if (t.dtype() != dt) return false;
    blublas::AdamWTensor d;
    d.grad = t.data_ptr();
    d.numel = t.numel();
    descs.push_back(d);
  }
  const int count = static_cast<int>(descs.size());
  std::size_t ws_bytes = 0;
  if (!blublas_ok(blublas::grad_global_norm_workspace_size(descs.data(), count, &ws_bytes),
                  "global_norm")) {
    return false;
  }
  cudaStream_t stream = stream_of(tensors[0]);
  DeviceBuffer ws(ws_bytes, tensors[0].device().index, stream);
  const blublas::Status st = blublas::grad_global_norm(
      static_cast<float*>(norm.data_ptr()),
      clip_coef.defined() ? static_cast<float*>(clip_coef.data_ptr()) : nullptr,
      static_cast<float>(max_norm), descs.data(), count, blublas_grad_dtype(dt), ws.get(), ws_bytes,
      stream);
  return blublas_ok(st, "global_norm");
}

void copy_tensors_(const std::vector<Tensor>& dsts, const std::vector<Tensor>& srcs) {
  if (dsts.empty()) return;
  cudaStream_t stream = stream_of(dsts[0]);
  BLU_CUDA_SWITCH_FLOAT(dsts[0].dtype(), D, "copy_tensors_", copy_list_from<D>(dsts, srcs, stream));
}

void scale_tensors_(const std::vector<Tensor>& tensors, const Tensor& factor) {
  if (tensors.empty()) return;
  // One launch sequence per dtype, in first-appearance order of the dtypes.
  std::vector<DType> order;
  std::map<DType, std::vector<const Tensor*>> by_dtype;
  for (const Tensor& t : tensors) {
    if (by_dtype.find(t.dtype()) == by_dtype.end()) order.push_back(t.dtype());
    by_dtype[t.dtype()].push_back(&t);
  }
  const float* f = static_cast<const float*>(factor.data_ptr());
  cudaStream_t stream = stream_of(tensors[0]);
  for (DType d : order) {
    BLU_CUDA_SWITCH_FLOAT(d, T, "scale_tensors_", scale_list<T>(by_dtype[d], f, stream));
  }
}

}  // namespace blu::cuda_ops
