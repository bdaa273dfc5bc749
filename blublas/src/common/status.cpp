// Status names and the throwing convenience helper.
#include "blublas/status.h"

#include <stdexcept>

namespace blublas {

const char* status_code_name(StatusCode code) noexcept {
  switch (code) {
    case StatusCode::kSuccess: return "kSuccess";
    case StatusCode::kInvalidArgument: return "kInvalidArgument";
    case StatusCode::kMisaligned: return "kMisaligned";
    case StatusCode::kUnsupportedArch: return "kUnsupportedArch";
    case StatusCode::kWorkspaceTooSmall: return "kWorkspaceTooSmall";
    case StatusCode::kNotSupported: return "kNotSupported";
    case StatusCode::kCudaError: return "kCudaError";
  }
  return "kUnknown";
}

std::string Status::to_string() const {
  if (ok()) return "kSuccess";
  return std::string(status_code_name(code_)) + ": " + message_;
}

void throw_if_error(const Status& status) {
  if (!status.ok()) throw std::runtime_error("blublas " + status.to_string());
}

}  // namespace blublas
