// blublas/check.h: the blublas error macros. Each returns a blublas::Status from the enclosing
// function (launchers return Status; nothing throws). Messages are built only on failure.
#pragma once

#include <cuda_runtime.h>

#include <sstream>
#include <string>

#include "blublas/status.h"

namespace blublas::detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace blublas::detail

// BLUBLAS_CHECK_ARG(cond, code, "op", ": lda=", lda, ...): return Status(code, message) when !cond.
#define BLUBLAS_CHECK(cond, code, ...)                                                \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      return ::blublas::Status((code), ::blublas::detail::concat(__VA_ARGS__));       \
    }                                                                                 \
  } while (0)

#define BLUBLAS_CHECK_ARG(cond, ...) \
  BLUBLAS_CHECK(cond, ::blublas::StatusCode::kInvalidArgument, __VA_ARGS__)

// Returns kCudaError naming the call when a CUDA runtime call fails.
#define BLUBLAS_CUDA_CHECK(expr)                                                                  \
  do {                                                                                            \
    cudaError_t blublas_err_ = (expr);                                                            \
    if (blublas_err_ != cudaSuccess) {                                                            \
      return ::blublas::Status(::blublas::StatusCode::kCudaError,                                 \
                               ::blublas::detail::concat(#expr, ": ",                             \
                                                         cudaGetErrorName(blublas_err_), " (",    \
                                                         cudaGetErrorString(blublas_err_), ") at ", \
                                                         __FILE__, ":", __LINE__));               \
    }                                                                                             \
  } while (0)

// After a <<<>>> launch: returns kCudaError naming the kernel when the launch itself failed.
// Does not synchronise (launchers stay capturable and asynchronous).
#define BLUBLAS_KERNEL_LAUNCH_CHECK(kernel_name) \
  do {                                                                                         \
    cudaError_t blublas_err_ = cudaGetLastError();                                             \
    if (blublas_err_ != cudaSuccess) {                                                         \
      return ::blublas::Status(::blublas::StatusCode::kCudaError,                              \
                               ::blublas::detail::concat("launch of ", kernel_name, ": ",      \
                                                         cudaGetErrorName(blublas_err_), " (", \
                                                         cudaGetErrorString(blublas_err_), ")")); \
    }                                                                                          \
  } while (0)

// Propagates a non-ok Status from a nested call.
#define BLUBLAS_RETURN_IF_ERROR(expr)           \
  do {                                          \
    ::blublas::Status blublas_st_ = (expr);     \
    if (!blublas_st_.ok()) return blublas_st_;  \
  } while (0)
