// blutensor/src/cuda/kernel_utils.cuh: the shared machinery of blutensor's generic CUDA kernels:
// dtype -> device type dispatch, load/convert/store in the compute type, the strided offset
// calculator (dims coalesced on the host), launch geometry, and temporary device buffers from the
// caching allocator. Design choice: one elementwise engine (OffsetCalc + a vectorised contiguous
// path) serves copies, casts, fills, unary and binary ops, so every op handles any strides.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <type_traits>

#include "blublas/status.h"
#include "blutensor/cuda_allocator.h"
#include "blutensor/cuda_stream.h"
#include "blutensor/dtype.h"
#include "blutensor/error.h"
#include "blutensor/tensor.h"

namespace blu::cuda_ops::detail {

// ---- dtypes ---------------------------------------------------------------------------------

template <DType D> struct device_type;
template <> struct device_type<DType::F64> { using type = double; };
template <> struct device_type<DType::F32> { using type = float; };
template <> struct device_type<DType::BF16> { using type = __nv_bfloat16; };
template <> struct device_type<DType::F16> { using type = __half; };
template <> struct device_type<DType::I32> { using type = int32_t; };
template <> struct device_type<DType::I64> { using type = int64_t; };
template <> struct device_type<DType::U16> { using type = uint16_t; };

// The arithmetic type of a floating storage type: double for f64, float otherwise (as on the CPU).
template <typename T> struct compute_of { using type = float; };
template <> struct compute_of<double> { using type = double; };
template <typename T> using compute_t = typename compute_of<T>::type;

template <typename T>
inline constexpr bool is_half_like_v =
    std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;
template <typename T>
inline constexpr bool is_floatish_v = std::is_same_v<T, float> || is_half_like_v<T>;

template <typename T> __device__ __forceinline__ float to_float(T v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else {
    return static_cast<float>(v);
  }
}
template <typename T> __device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else {
    return static_cast<T>(v);
  }
}

// Storage -> compute type and back (compute_t<T>).
template <typename T> __device__ __forceinline__ compute_t<T> load_c(T v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return to_float(v);
  }
}
template <typename T> __device__ __forceinline__ T store_c(compute_t<T> v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return from_float<T>(v);
  }
}

// Casts with the CPU backend's rules (cpu/elementwise.cpp): between f32/bf16/f16 through float;
// anything involving f64 or an integer through double (16-bit results rounded from float).
template <typename D, typename S> __device__ __forceinline__ D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (is_floatish_v<D> && is_floatish_v<S>) {
    return from_float<D>(to_float(v));
  } else {
    double d;
    if constexpr (is_half_like_v<S>) {
      d = static_cast<double>(to_float(v));
    } else {
      d = static_cast<double>(v);
    }
    if constexpr (is_half_like_v<D>) {
      return from_float<D>(static_cast<float>(d));
    } else {
      return static_cast<D>(d);
    }
  }
}

// ---- dtype switches (bind T to the device type) ----------------------------------------------

#define BLU_CUDA_DTYPE_CASE(enumerator, T, ...)                                              \
  case ::blu::DType::enumerator: {                                                           \
    using T = typename ::blu::cuda_ops::detail::device_type<::blu::DType::enumerator>::type; \
    __VA_ARGS__;                                                                             \
    break;                                                                                   \
  }

#define BLU_CUDA_SWITCH_FLOAT(dtype, T, op, ...)                                               \
  switch (dtype) {                                                                             \
    BLU_CUDA_DTYPE_CASE(F64, T, __VA_ARGS__)                                                   \
    BLU_CUDA_DTYPE_CASE(F32, T, __VA_ARGS__)                                                   \
    BLU_CUDA_DTYPE_CASE(BF16, T, __VA_ARGS__)                                                  \
    BLU_CUDA_DTYPE_CASE(F16, T, __VA_ARGS__)                                                   \
    default:                                                                                   \
      BLU_THROW(op, " (CUDA): unsupported dtype ", ::blu::dtype_name(dtype), " (floating only)"); \
  }

#define BLU_CUDA_SWITCH_ALL(dtype, T, op, ...)                                  \
  switch (dtype) {                                                              \
    BLU_CUDA_DTYPE_CASE(F64, T, __VA_ARGS__)                                    \
    BLU_CUDA_DTYPE_CASE(F32, T, __VA_ARGS__)                                    \
    BLU_CUDA_DTYPE_CASE(BF16, T, __VA_ARGS__)                                   \
    BLU_CUDA_DTYPE_CASE(F16, T, __VA_ARGS__)                                    \
    BLU_CUDA_DTYPE_CASE(I32, T, __VA_ARGS__)                                    \
    BLU_CUDA_DTYPE_CASE(I64, T, __VA_ARGS__)                                    \
    BLU_CUDA_DTYPE_CASE(U16, T, __VA_ARGS__)                                    \
    default: BLU_THROW(op, " (CUDA): unsupported dtype ", ::blu::dtype_name(dtype)); \
  }

#define BLU_CUDA_SWITCH_INDEX(dtype, T, op, ...)                                             \
  switch (dtype) {                                                                           \
    BLU_CUDA_DTYPE_CASE(I32, T, __VA_ARGS__)                                                 \
    BLU_CUDA_DTYPE_CASE(I64, T, __VA_ARGS__)                                                 \
    BLU_CUDA_DTYPE_CASE(U16, T, __VA_ARGS__)                                                 \
    default:                                                                                 \
      BLU_THROW(op, " (CUDA): indices must be i32, i64 or u16, got ", ::blu::dtype_name(dtype)); \
  }

// ---- strided offsets -------------------------------------------------------------------------

constexpr int kMaxDims = 12;

// Maps a row-major linear index over `sizes` to an element offset per operand. Built on the host
// by make_offset_calc, which drops size-1 dims and merges dims that are contiguous for every
// operand, so a contiguous tensor has ndim 1 and a transposed matrix ndim 2.
template <int N>
struct OffsetCalc {
  int ndim = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];

  template <typename IndexT>
  __device__ __forceinline__ void get(IndexT linear, int64_t (&off)[N]) const {
#pragma unroll
    for (int a = 0; a < N; ++a) off[a] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      IndexT size = static_cast<IndexT>(sizes[d]);
      IndexT idx = linear % size;
      linear /= size;
#pragma unroll
      for (int a = 0; a < N; ++a) off[a] += static_cast<int64_t>(idx) * strides[a][d];
    }
  }
};

// sizes: the iteration shape; strides[a]: operand a's strides (elements) over that shape.
template <int N>
OffsetCalc<N> make_offset_calc(const Shape& sizes, const std::array<Shape, N>& strides) {
  OffsetCalc<N> oc;
  // Collect non-trivial dims, outermost first.
  int64_t sz[64];
  int64_t st[N][64];
  int nd = 0;
  BLU_CHECK(sizes.size() <= 64, "cuda_ops: tensors of rank ", sizes.size(), " are not supported");
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    sz[nd] = sizes[d];
    for (int a = 0; a < N; ++a) st[a][nd] = strides[a][d];
    ++nd;
  }
  // Merge dim i-1 into dim i (inner) when every operand steps contiguously across them.
  int out = 0;
  for (int d = 0; d < nd; ++d) {
    if (out > 0) {
      bool mergeable = true;
      for (int a = 0; a < N; ++a) {
        if (st[a][out - 1] != st[a][d] * sz[d]) mergeable = false;
      }
      if (mergeable) {
        sz[out - 1] *= sz[d];
        for (int a = 0; a < N; ++a) st[a][out - 1] = st[a][d];
        continue;
      }
    }
    sz[out] = sz[d];
    for (int a = 0; a < N; ++a) st[a][out] = st[a][d];
    ++out;
  }
  BLU_CHECK(out <= kMaxDims, "cuda_ops: a strided operand needs ", out,
            " dims after merging; at most ", kMaxDims, " are supported");
  oc.ndim = out;
  for (int d = 0; d < out; ++d) {
    oc.sizes[d] = sz[d];
    for (int a = 0; a < N; ++a) oc.strides[a][d] = st[a][d];
  }
  return oc;
}

// ---- launch geometry and streams ---------------------------------------------------------------

constexpr int kThreads = 256;

// Streaming multiprocessors of the current device (cached per device).
int sm_count();
// The current device's compute capability major (cached per device).
int sm_major();

// Blocks for a grid-stride loop over `work_items` with kThreads per block.
inline unsigned grid_for(int64_t work_items, int threads = kThreads) {
  int64_t blocks = (work_items + threads - 1) / threads;
  int64_t cap = static_cast<int64_t>(sm_count()) * 32;
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks);
}

inline cudaStream_t stream_of(const Tensor& t) { return cuda::current_stream(t.device().index); }

// Temporary device memory from the caching allocator, on the stream the op runs on. Freed on
// destruction without a sync: a block is reused only by later work on the same stream (Note
// [Stream-ordered reuse]), which runs after the kernels that used it.
class DeviceBuffer {
 public:
  DeviceBuffer(std::size_t bytes, int device, cudaStream_t stream)
      : ptr_(bytes ? cuda::CachingAllocator::get().allocate(bytes, device, stream) : nullptr),
        bytes_(bytes) {}
  ~DeviceBuffer() {
    if (ptr_) cuda::CachingAllocator::get().free(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  template <typename T> T* as() const { return static_cast<T*>(ptr_); }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_;
  std::size_t bytes_;
};

// Whether a blublas launcher took the work (Note [blublas fast paths] in cuda_elementwise.cu).
// A refusal is counted and, when the environment sets BLU_CUDA_OPS_LOG=1, printed to stderr with
// the launcher's message, so a device log shows which layouts fell back to the generic kernels.
bool blublas_ok(const blublas::Status& status, const char* op);
// Number of refusals since the process started (tests and benchmarks read it).
int64_t blublas_fallback_count();

inline bool aligned_to(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

}  // namespace blu::cuda_ops::detail
