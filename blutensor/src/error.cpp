// blu::Error construction (kept out of line so that throw sites stay small).
#include "blutensor/error.h"

namespace blu::detail {
void throw_error(const char* file, int line, const std::string& msg) {
  (void)file;
  (void)line;
  throw Error(msg);
}
}  // namespace blu::detail
