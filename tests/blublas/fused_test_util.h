// fused_test_util.h: helpers for the memory-bound kernel tests (layernorm, elementwise, softmax,
// cross-entropy, embedding, reduce, adamw): device buffers, seeded random values already rounded
// to the storage dtype, upload/download through f32, NaN poisoning, and an element-wise
// comparison against a float64 reference that reports indices, got/expected and the max error.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "blublas/dtype.h"
#include "blublas/status.h"

// Asserts that a blublas call returned kSuccess, printing the status otherwise.
#define BLU_ASSERT_OK(expr)                                              \
  do {                                                                   \
    const ::blublas::Status blu_st_ = (expr);                            \
    ASSERT_TRUE(blu_st_.ok()) << #expr << ": " << blu_st_.to_string();   \
  } while (0)

namespace blu::test {

class DeviceMem {
 public:
  DeviceMem() = default;
  explicit DeviceMem(std::size_t bytes) : bytes_(bytes) {
    if (bytes > 0 && cudaMalloc(&ptr_, bytes) != cudaSuccess) {
      ptr_ = nullptr;
      ADD_FAILURE() << "cudaMalloc(" << bytes << ") failed";
    }
  }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
  DeviceMem(DeviceMem&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceMem& operator=(DeviceMem&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceMem() {
    if (ptr_) cudaFree(ptr_);
  }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }
  // NaN pattern (0xFF bytes: NaN in f32 and bf16).
  void poison() const { cudaMemset(ptr_, 0xFF, bytes_); }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

inline float round_to(blublas::Dtype dt, float v) {
  if (dt == blublas::Dtype::kBF16) return __bfloat162float(__float2bfloat16_rn(v));
  return v;
}

// n values uniform in [lo, hi), rounded to dt (so the reference sees exactly what the GPU sees).
inline std::vector<float> random_values(std::size_t n, float lo, float hi, uint64_t seed,
                                        blublas::Dtype dt = blublas::Dtype::kF32) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = round_to(dt, dist(rng));
  return v;
}

inline DeviceMem upload(const std::vector<float>& v, blublas::Dtype dt) {
  DeviceMem m(v.size() * blublas::dtype_size(dt) + 16);
  if (dt == blublas::Dtype::kF32) {
    cudaMemcpy(m.get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice);
  } else {
    std::vector<__nv_bfloat16> b(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) b[i] = __float2bfloat16_rn(v[i]);
    cudaMemcpy(m.get(), b.data(), b.size() * 2, cudaMemcpyHostToDevice);
  }
  return m;
}

inline std::vector<float> download(const void* p, std::size_t n, blublas::Dtype dt) {
  std::vector<float> v(n);
  if (dt == blublas::Dtype::kF32) {
    cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost);
  } else {
    std::vector<__nv_bfloat16> b(n);
    cudaMemcpy(b.data(), p, n * 2, cudaMemcpyDeviceToHost);
    for (std::size_t i = 0; i < n; ++i) v[i] = __bfloat162float(b[i]);
  }
  return v;
}

inline std::vector<uint8_t> download_bytes(const void* p, std::size_t bytes) {
  std::vector<uint8_t> v(bytes);
  cudaMemcpy(v.data(), p, bytes, cudaMemcpyDeviceToHost);
  return v;
}

// Relative tolerance of one stored element of dt (f32 results of f32 math: a few ulp of the
// operation count; bf16: one bf16 rounding plus slack).
inline double storage_rtol(blublas::Dtype dt) { return dt == blublas::Dtype::kBF16 ? 8e-3 : 2e-5; }

// Every element: |got - ref| <= atol + rtol * |ref|, NaN never passes. Reports the first few
// failures with their index and the max error.
inline ::testing::AssertionResult all_close(const std::string& what, const std::vector<float>& got,
                                            const std::vector<double>& ref, double atol,
                                            double rtol) {
  if (got.size() != ref.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " != reference size " << ref.size();
  }
  std::ostringstream os;
  std::size_t bad = 0, worst = 0;
  double worst_err = -1;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    const double tol = atol + rtol * std::fabs(ref[i]);
    const bool ok = std::isfinite(got[i]) && err <= tol;
    const double e = std::isfinite(got[i]) ? err : INFINITY;
    if (e > worst_err) {
      worst_err = e;
      worst = i;
    }
    if (!ok) {
      if (bad < 8) {
        os << "\n  [" << i << "] got " << got[i] << " expected " << ref[i] << " err " << err
           << " tol " << tol;
      }
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << got.size() << " elements out of tolerance (atol "
         << atol << ", rtol " << rtol << "); max error " << worst_err << " at [" << worst
         << "]" << os.str();
}

inline const char* dtype_tag(blublas::Dtype dt) { return blublas::dtype_name(dt); }

}  // namespace blu::test
