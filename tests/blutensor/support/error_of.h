// error_of: the message of the blu::Error a callable throws, or "(no error)" — the one helper the
// blutensor tests use to assert on error texts (op, shapes, dtypes named).
#pragma once

#include <functional>
#include <string>

#include "blutensor/error.h"

namespace blu::test {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const blu::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace blu::test
