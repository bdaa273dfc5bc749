// blublas/status.h: the status every blublas launcher returns. No exception crosses the blublas
// boundary (callers may be C-like or built without exceptions); throw_if_error is an opt-in helper.
#pragma once

#include <string>
#include <utility>

namespace blublas {

enum class StatusCode : int {
  kSuccess = 0,
  kInvalidArgument,    // a size, leading dimension, pointer or enum the op cannot take
  kMisaligned,         // a pointer or leading dimension misaligned for the requested path
  kUnsupportedArch,    // the device lacks what the requested path needs
  kWorkspaceTooSmall,  // the caller's workspace is smaller than the op's query said
  kNotSupported,       // a valid combination this build does not implement
  kCudaError,          // the CUDA runtime reported an error (launch or query)
};

const char* status_code_name(StatusCode code) noexcept;

// A status: a code and, when not kSuccess, a message naming the op, the sizes and the reason.
class [[nodiscard]] Status {
 public:
  Status() noexcept = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status success() noexcept { return Status(); }

  bool ok() const noexcept { return code_ == StatusCode::kSuccess; }
  explicit operator bool() const noexcept { return ok(); }
  StatusCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  // "kInvalidArgument: gemm: lda=3 < K=17 for a row-major non-transposed A"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kSuccess;
  std::string message_;
};

// Convenience for C++ callers that use exceptions: throws std::runtime_error(status.to_string()).
void throw_if_error(const Status& status);

}  // namespace blublas
