// blutensor/error.h: blu::Error and the check macros of blutensor and the layers above it.
// Messages name the op, the shapes and the dtypes involved; only executables catch and exit.
// The CUDA macros (BLU_CUDA_CHECK, BLU_KERNEL_LAUNCH_CHECK, BLU_BLAS_CHECK) exist only where
// BLU_WITH_CUDA is 1: a CPU-only build has neither the CUDA runtime nor blublas.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include "blutensor/cuda_fwd.h"
#if BLU_WITH_CUDA
#include "blublas/status.h"
#endif

namespace blu {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace blu

// BLU_CHECK(cond, "matmul: ", a.shape_str(), " x ", b.shape_str(), " inner sizes differ")
#define BLU_CHECK(cond, ...)                                                   \
  do {                                                                         \
    if (!(cond)) {                                                             \
      ::blu::detail::throw_error(__FILE__, __LINE__,                           \
                                 ::blu::detail::str_cat(__VA_ARGS__));         \
    }                                                                          \
  } while (0)

#define BLU_THROW(...) \
  ::blu::detail::throw_error(__FILE__, __LINE__, ::blu::detail::str_cat(__VA_ARGS__))

#if BLU_WITH_CUDA
#define BLU_CUDA_CHECK(expr)                                                                \
  do {                                                                                      \
    cudaError_t blu_err_ = (expr);                                                          \
    if (blu_err_ != cudaSuccess) {                                                          \
      ::blu::detail::throw_error(__FILE__, __LINE__,                                        \
                                 ::blu::detail::str_cat(#expr, ": ", cudaGetErrorName(blu_err_), \
                                                        " (", cudaGetErrorString(blu_err_), ")")); \
    }                                                                                       \
  } while (0)

// After a <<<>>> launch of a blutensor kernel: throws naming the kernel if the launch failed.
#define BLU_KERNEL_LAUNCH_CHECK(kernel_name)                                                  \
  do {                                                                                        \
    cudaError_t blu_err_ = cudaGetLastError();                                                \
    if (blu_err_ != cudaSuccess) {                                                            \
      ::blu::detail::throw_error(__FILE__, __LINE__,                                          \
                                 ::blu::detail::str_cat("launch of ", kernel_name, ": ",      \
                                                        cudaGetErrorString(blu_err_)));       \
    }                                                                                         \
  } while (0)

// A blublas launcher's Status turned into blu::Error, with the op's context prepended.
#define BLU_BLAS_CHECK(expr, ...)                                                      \
  do {                                                                                 \
    ::blublas::Status blu_st_ = (expr);                                                \
    if (!blu_st_.ok()) {                                                               \
      ::blu::detail::throw_error(__FILE__, __LINE__,                                   \
                                 ::blu::detail::str_cat(__VA_ARGS__, ": blublas ",     \
                                                        blu_st_.to_string()));         \
    }                                                                                  \
  } while (0)
#endif  // BLU_WITH_CUDA
